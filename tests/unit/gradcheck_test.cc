// Reference: central finite differences of the loss. For a few elements of every parameter
// tensor (so every op's backward: embedding, positions, LayerNorm, RMSNorm, RoPE, GQA attention,
// GELU, SwiGLU, linear with/without bias, tied head, cross-entropy with ignore index), the
// analytic gradient from backward() must match (L(p+h) - L(p-h)) / 2h.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/init.h"
#include "model/transformer.h"
#include "zero/engine.h"

namespace zt {
namespace {

ModelConfig small(Family arch) {
  ModelConfig c = ModelConfig::of(arch);
  c.vocab_size = 23;
  c.max_seq_len = 8;
  c.n_layer = 2;
  c.hidden = 16;
  c.n_head = 4;
  c.n_kv_head = arch == Family::kGPT2 ? 4 : 2;
  c.intermediate = arch == Family::kGPT2 ? 64 : 24;
  return c;
}

// chunk_rows > 0: the classifier in chunks of that many rows (a real vocabulary's 32 MiB chunk
// holds 262 rows of a 32k vocabulary; these tiny ones fit one chunk otherwise).
void check(Family arch, int chunk_rows = 0) {
  const ModelConfig c = small(arch);
  auto be = make_cpu_backend(1);
  const int B = 2, T = 5;
  Transformer model(c, be.get(), B, T);
  if (chunk_rows > 0) {
    model.set_classifier_chunk_rows(chunk_rows);
    ASSERT_EQ(model.classifier_chunk_rows(), chunk_rows);
  }
  auto comm = make_single_process_communicator();
  Engine engine(model.layout(), be.get(), comm.get(), EngineOptions{});
  const auto& units = model.layout().units();
  std::vector<std::vector<float>> params(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    params[u].resize(units[u].numel);
    init_unit(c, units[u], (int)u, 7, params[u]);
    // Larger than the training init so every op is far from linear.
    std::mt19937 rng(u);
    std::normal_distribution<float> n(0.f, 0.3f);
    for (float& p : params[u]) p += n(rng);
    engine.set_unit_params((int)u, params[u]);
  }
  std::vector<int> tokens = {1, 5, 22, 3, 3, 0, 7, 9, 11, 2};
  std::vector<int> targets = {5, 22, -100, 3, 0, 7, 9, -100, 2, 4};
  model.forward(engine, tokens.data(), targets.data(), B, T, 1.f);
  model.backward(engine);
  std::mt19937 pick(42);
  int checked = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float> grad(units[u].numel);
    engine.get_unit_grads((int)u, grad);
    for (const TensorSlot& t : units[u].tensors) {
      for (int k = 0; k < 3; ++k) {
        const size_t i = t.offset + pick() % t.numel;
        auto loss_at = [&](float delta) {
          std::vector<float> p = params[u];
          p[i] += delta;
          engine.set_unit_params((int)u, p);
          const double l = model.forward(engine, tokens.data(), targets.data(), B, T, 0.f).loss;
          engine.set_unit_params((int)u, params[u]);
          return l;
        };
        // Central differences at h and h/2, extrapolated (Richardson): their h^2 errors
        // cancel, which these far-from-linear weights need (a plain central difference at
        // h = 1e-2 was 3% off on some initialisations).
        auto central = [&](float h) { return (loss_at(h) - loss_at(-h)) / (2 * h); };
        const double fd = (4 * central(5e-3f) - central(1e-2f)) / 3;
        EXPECT_NEAR(grad[i], fd, 2e-4 + 2e-3 * std::fabs(fd))
            << units[u].name << "." << t.name << "[" << i - t.offset << "]";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(GradCheck, Gpt2MatchesFiniteDifferences) { check(Family::kGPT2); }
TEST(GradCheck, LlamaGqaMatchesFiniteDifferences) { check(Family::kLLaMA); }
// The 10 rows of the micro-batch in classifier chunks of 3, 3, 3 and 1 rows: each chunk's
// logits, losses and gradients at its own row offset (every real LLaMA run with more than 262
// tokens per micro-batch runs the head in several chunks).
TEST(GradCheck, LlamaWithTheClassifierInChunksMatchesFiniteDifferences) {
  check(Family::kLLaMA, 3);
}
TEST(GradCheck, Gpt2WithTheClassifierInChunksMatchesFiniteDifferences) {
  check(Family::kGPT2, 3);
}

}  // namespace
}  // namespace zt
