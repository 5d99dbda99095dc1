// Packed rows (prepare --pack; Backend::embedding_forward's pos): several examples in one row of
// T tokens, each attending only within itself with its positions restarting at 0, compute what
// each example computes alone in a row of its own, padded. The reference is the model itself
// on the unpacked rows, whose numerics tests/unit/reference_test.cc holds to PyTorch: per
// example, the loss of the packed row with only that example's targets equals the example's
// loss alone, and three AdamW steps on packed rows equal three on the padded rows (the same
// trained tokens, so the same mean loss and gradients) within 1e-5 in fp32. GPT-2 (learned
// positions) and LLaMA (RoPE, grouped-query attention), on the CPU backend, and as
// packing_emu_test on the CUDA backend's kernels under the emulation (ZT_TEST_DEVICE=cuda).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "model/config.h"
#include "model/init.h"
#include "model/transformer.h"
#include "trainer/device.h"
#include "zero/engine.h"

namespace zt {
namespace {

std::unique_ptr<Backend> test_backend() {
  const char* device = std::getenv("ZT_TEST_DEVICE");
  if (!device || std::string(device) != "cuda") return make_cpu_backend();
  auto be = make_backend(Device::kCuda, 0, 1, 0);
  return be.ok() ? std::move(*be) : nullptr;
}

// The presets tiny-gpt2 and tiny-llama (GQA: 4 query heads, 2 kv heads).
ModelConfig tiny(Family arch) {
  auto c = preset(arch == Family::kGPT2 ? "tiny-gpt2" : "tiny-llama");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

constexpr int kT = 24;

// An example: its input tokens and their targets (-1 where untrained, as a prompt's).
struct Example {
  std::vector<int> tokens, targets;
};

// Five examples of 7, 5, 9, 12 and 6 tokens (packed: 21 in a first row of 24, 18 in a second);
// all but the third have a prompt.
constexpr int kExamples = 5;
std::vector<Example> examples(int vocab) {
  std::vector<Example> out;
  uint32_t h = 12345;
  const int lengths[] = {7, 5, 9, 12, 6}, prompts[] = {3, 2, 0, 4, 1};
  for (int k = 0; k < kExamples; ++k) {
    Example e;
    for (int i = 0; i < lengths[k]; ++i) {
      h ^= h << 13, h ^= h >> 17, h ^= h << 5;
      e.tokens.push_back((int)(h % vocab));
      e.targets.push_back(i < prompts[k] ? -1 : (int)((h >> 8) % vocab));
    }
    out.push_back(e);
  }
  return out;
}

// Rows of kT tokens: the examples one after another, a new row where the next does not fit
// (packed: positions restart at each), or each alone at the start of its own row; padding
// (token 0, no target, positions of its own) after them. `only` >= 0 keeps the targets of that
// example alone.
struct Rows {
  std::vector<int> tokens, targets, positions;
  int B = 0;
};
Rows make_rows(const std::vector<Example>& ex, bool packed, int only = -1) {
  std::vector<size_t> starts;  // each example's first token
  size_t at = 0;
  for (const Example& e : ex) {
    if (!packed || at % kT + e.tokens.size() > kT) at = (at + kT - 1) / kT * kT;
    starts.push_back(at);
    at += e.tokens.size();
  }
  Rows r;
  r.B = (int)((at + kT - 1) / kT);
  r.tokens.assign((size_t)r.B * kT, 0);
  r.targets.assign((size_t)r.B * kT, -1);
  r.positions.assign((size_t)r.B * kT, 0);
  std::vector<bool> example(r.tokens.size()), start(r.tokens.size());
  for (size_t k = 0; k < ex.size(); ++k)
    for (size_t i = 0; i < ex[k].tokens.size(); ++i) {
      r.tokens[starts[k] + i] = ex[k].tokens[i];
      if (only < 0 || only == (int)k) r.targets[starts[k] + i] = ex[k].targets[i];
      example[starts[k] + i] = true;
      start[starts[k] + i] = i == 0;
    }
  for (size_t i = 0; i < r.positions.size(); ++i) {
    if (!example[i] && (i % kT == 0 || example[i - 1])) start[i] = true;  // padding's own
    r.positions[i] = i % kT == 0 || start[i] ? 0 : r.positions[i - 1] + 1;
  }
  return r;
}

struct Model {
  std::unique_ptr<Backend> be = test_backend();
  std::unique_ptr<Communicator> comm = make_single_process_communicator(be.get());
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Engine> engine;
  explicit Model(const ModelConfig& c) {
    if (!be) return;
    model = std::make_unique<Transformer>(c, be.get(), kExamples, kT);
    engine = std::make_unique<Engine>(model->layout(), be.get(), comm.get(), EngineOptions{});
    const auto& units = model->layout().units();
    for (size_t u = 0; u < units.size(); ++u) {
      std::vector<float> p(units[u].numel);
      init_unit(c, units[u], (int)u, 7, p);
      for (float& v : p) v *= 3.f;  // livelier than the training init
      engine->set_unit_params((int)u, p);
    }
  }
  double loss(const Rows& r, bool packed) {
    return model
        ->forward(*engine, r.tokens.data(), r.targets.data(), r.B, kT, 0.f,
                  packed ? r.positions.data() : nullptr)
        .loss;
  }
};

class Packing : public ::testing::TestWithParam<Family> {};

TEST_P(Packing, EachExampleLossEqualsTheExampleAlone) {
  const ModelConfig c = tiny(GetParam());
  Model m(c);
  if (!m.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device";
  const auto ex = examples(c.vocab_size);
  for (int k = 0; k < kExamples; ++k) {
    const double packed = m.loss(make_rows(ex, true, k), true);
    Rows alone = make_rows({ex[k]}, false);
    const double want = m.loss(alone, false);
    EXPECT_NEAR(packed, want, 1e-5 * std::fabs(want)) << "example " << k;
  }
  // Without positions the same packed row is one long sequence: the later examples see the
  // earlier ones, and their losses differ (the test above would notice positions ignored).
  const Rows second = make_rows(ex, true, 1);
  EXPECT_GT(std::fabs(m.loss(second, false) - m.loss(make_rows({ex[1]}, false), false)), 1e-3);
}

// The losses of three AdamW steps, and the gradient of every parameter at each step (by its
// norm: a softmax ignores the key bias, whose gradient is rounding noise about zero, which
// Adam's update would blow up to +-lr in either run). The two runs' GEMMs have different shapes,
// so the BLAS kernel may sum in a different order: at the first step, from equal weights, the
// gradients differ by rounding only (7e-7 under OpenBLAS's Haswell kernels, 0 under SkylakeX's:
// bound 1e-5); Adam then turns those differences into different updates of the elements whose
// gradient is near zero, so later steps differ more (3.0e-5 at the third step under Haswell's:
// bound 3e-4). Packing that leaked attention across examples or miscounted their tokens would
// move the first step's gradients by percent.
TEST_P(Packing, TrainingOnPackedRowsEqualsTrainingOnPaddedRows) {
  const ModelConfig c = tiny(GetParam());
  Model packed(c), padded(c);
  if (!packed.be) GTEST_SKIP() << "ZT_TEST_DEVICE=cuda and no CUDA device";
  const auto ex = examples(c.vocab_size);
  const Rows p = make_rows(ex, true), q = make_rows(ex, false);
  ASSERT_EQ(p.B, 2);  // positions of more than one row
  ASSERT_EQ(q.B, kExamples);
  const auto& units = packed.model->layout().units();
  for (int step = 0; step < 3; ++step) {
    double losses[2];
    std::vector<std::vector<float>> grads[2];
    int i = 0;
    for (auto [m, r, is_packed] : {std::tuple{&packed, &p, true}, {&padded, &q, false}}) {
      m->engine->begin_pass();
      losses[i] = m->model
                      ->forward(*m->engine, r->tokens.data(), r->targets.data(), r->B, kT, 1.f,
                                is_packed ? r->positions.data() : nullptr)
                      .loss;
      m->model->backward(*m->engine);
      for (size_t u = 0; u < units.size(); ++u) {
        grads[i].emplace_back(units[u].numel);
        m->engine->get_unit_grads((int)u, grads[i].back());
      }
      auto st = m->engine->step(1e-2f);
      ASSERT_TRUE(st.ok()) << st.status();
      ++i;
    }
    EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::fabs(losses[1])) << "step " << step;
    for (size_t u = 0; u < units.size(); ++u) {
      double num = 0, den = 0;
      for (size_t j = 0; j < grads[0][u].size(); ++j)
        num += std::pow((double)grads[0][u][j] - grads[1][u][j], 2),
            den += std::pow((double)grads[1][u][j], 2);
      EXPECT_LT(std::sqrt(num / den), step == 0 ? 1e-5 : 3e-4)
          << "unit " << units[u].name << " step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, Packing, ::testing::Values(Family::kGPT2, Family::kLLaMA),
                         [](const auto& info) {
                           return std::string(info.param == Family::kGPT2 ? "Gpt2" : "Llama");
                         });

}  // namespace
}  // namespace zt
