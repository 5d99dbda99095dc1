// The flops profiler (model/profiling_backend.h) against the rule every training-cost estimate
// uses: a step's matrix products cost 6 N Ψ_linear FLOPs for N tokens and Ψ_linear weights in
// linear layers (2 N Ψ forward, 4 N Ψ backward: the input and the weight gradient; Kaplan et
// al. 2020, "Scaling Laws", Section 2.1). And it changes nothing: the same losses, bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "model/init.h"
#include "model/profiling_backend.h"
#include "model/transformer.h"
#include "zero/engine.h"

namespace zt {
namespace {

// Weights in linear layers: per block q|k|v, the attention output, the MLP's (GPT-2: C -> I ->
// C; LLaMA: C -> 2I gate|up, I -> C), and the head (V x C, tied or not).
double linear_params(const ModelConfig& c) {
  const double C = c.hidden, I = c.intermediate;
  const double mlp = c.mlp == MlpKind::kGelu ? 2 * C * I : 3 * C * I;
  return c.n_layer * (C * c.qkv_dim() + C * C + mlp) + (double)c.vocab_size * C;
}

// Two steps of `model` at B x T on `be`; the losses.
std::vector<double> train(const ModelConfig& c, Backend* be, int B, int T) {
  auto comm = make_single_process_communicator();
  Transformer model(c, be, B, T);
  Engine engine(model.layout(), be, comm.get(), EngineOptions{});
  for (int u = 0; u < model.layout().num_units(); ++u) {
    std::vector<float> p(model.layout().units()[u].numel);
    init_unit(c, model.layout().units()[u], u, 3, p);
    engine.set_unit_params(u, p);
  }
  std::vector<int> x(B * T), y(B * T);
  std::vector<double> losses;
  for (int step = 0; step < 2; ++step) {
    for (int i = 0; i < B * T; ++i)
      x[i] = (i * 7 + step) % c.vocab_size, y[i] = (i * 5 + 1) % c.vocab_size;
    engine.begin_pass();
    losses.push_back(model.forward(engine, x.data(), y.data(), B, T, 1.f).loss);
    model.backward(engine);
    EXPECT_TRUE(engine.step(1e-3f).ok());
  }
  return losses;
}

TEST(Profiler, MatmulFlopsAreSixTimesTokensTimesLinearWeights) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    auto c = preset(name);
    ASSERT_TRUE(c.ok());
    const int B = 2, T = 12;
    ProfilingBackend prof(make_cpu_backend(1));
    prof.set_recording(true);
    const std::vector<double> profiled = train(*c, &prof, B, T);
    prof.set_recording(false);
    double matmul = 0, forward_calls = 0;
    for (const auto& [key, row] : prof.table()) {
      if (key.first.rfind("matmul_", 0) == 0) matmul += row.flops;
      if (key.first == "matmul_forward") forward_calls += row.calls;
    }
    EXPECT_DOUBLE_EQ(matmul, 2 * 6.0 * B * T * linear_params(*c)) << name << ": two steps";
    // Per step: 4 products per block (q|k|v, output, two MLP) and the head.
    EXPECT_EQ(forward_calls, 2 * (4 * c->n_layer + 1)) << name;
    auto plain = make_cpu_backend(1);
    EXPECT_EQ(train(*c, plain.get(), B, T), profiled) << name << ": profiling changed a loss";
    EXPECT_NE(prof.format(1000.0).find("all ops"), std::string::npos);
    // The memory limit is the inner backend's, over everything it allocates.
    prof.set_memory_limit(prof.tracker().current_total() + 500);
    EXPECT_THROW(DeviceBuffer(&prof, 1000, MemCategory::kWorkspace), DeviceMemoryLimitExceeded);
    prof.set_memory_limit(0);
  }
}

}  // namespace
}  // namespace zt
