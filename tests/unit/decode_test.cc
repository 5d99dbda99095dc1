// KV-cache decoding against full recomputation: after each token, Transformer::decode's
// logits equal last_logits over the whole sequence so far (the reference: the training
// forward), for GPT-2 (learned positions, tied head) and LLaMA (RoPE, GQA), through the ZeRO
// engine; and greedy generation picks the same tokens both ways.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/init.h"
#include "model/transformer.h"
#include "zero/comm.h"
#include "zero/engine.h"

namespace zt {
namespace {

struct Model {
  std::unique_ptr<Backend> be;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Transformer> tr;
  std::unique_ptr<Engine> engine;
};

Model make(const char* name, int max_T) {
  Model m;
  auto c = preset(name);
  EXPECT_TRUE(c.ok());
  m.be = make_cpu_backend(2);
  m.comm = make_single_process_communicator();
  m.tr = std::make_unique<Transformer>(*c, m.be.get(), 1, max_T);
  m.engine = std::make_unique<Engine>(m.tr->layout(), m.be.get(), m.comm.get(), EngineOptions{});
  const auto& units = m.tr->layout().units();
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float> p(units[u].numel);
    init_unit(*c, units[u], (int)u, 3, p);
    for (float& v : p) v *= 4.f;  // sharper distributions than the training init
    m.engine->set_unit_params((int)u, p);
  }
  return m;
}

TEST(Decode, MatchesFullRecomputationAtEveryPosition) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    Model m = make(name, 40);
    const int V = m.tr->config().vocab_size;
    std::vector<int> seq;
    for (int t = 0; t < 40; ++t) seq.push_back((t * 37 + 11) % V);
    std::vector<float> full(V), step(V);
    double worst = 0;
    for (int t = 0; t < (int)seq.size(); ++t) {
      m.tr->last_logits(*m.engine, seq.data(), t + 1, full.data());
      m.tr->decode(*m.engine, seq[t], t, step.data());
      double num = 0, den = 0;
      for (int v = 0; v < V; ++v) {
        num += std::pow((double)step[v] - full[v], 2);
        den += std::pow((double)full[v], 2);
      }
      worst = std::max(worst, std::sqrt(num / den));
    }
    EXPECT_LE(worst, 1e-5) << name;
  }
}

TEST(Decode, GreedyGenerationPicksTheSameTokens) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    Model m = make(name, 48);
    const int V = m.tr->config().vocab_size;
    std::vector<float> logits(V);
    auto argmax = [&] { return (int)(std::max_element(logits.begin(), logits.end()) - logits.begin()); };
    std::vector<int> full = {1}, cached = {1};
    for (int i = 0; i < 47; ++i) {
      m.tr->last_logits(*m.engine, full.data(), (int)full.size(), logits.data());
      full.push_back(argmax());
    }
    for (int i = 0; i < 47; ++i) {
      m.tr->decode(*m.engine, cached.back(), i, logits.data());
      cached.push_back(argmax());
    }
    EXPECT_EQ(cached, full) << name;
  }
}

}  // namespace
}  // namespace zt
