// KV-cache decoding against full recomputation: after each token, Transformer::decode's
// logits equal last_logits over the whole sequence so far (the reference: the training
// forward), for GPT-2 (learned positions, tied head) and LLaMA (RoPE, GQA), through the ZeRO
// engine; and greedy generation picks the same tokens both ways.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "model/config.h"
#include "model/init.h"
#include "model/transformer.h"
#include "tests/unit/nan_max.h"
#include "trainer/sampler.h"
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
      worst = nan_max(worst, std::sqrt(num / den));
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

// Nucleus sampling: with logits 0..3 (probabilities 0.032, 0.087, 0.237, 0.644 at temperature 1)
// top_p 0.5 keeps only the most likely id, top_p 0.85 the two most likely (0.644 + 0.237 is the
// first sum to reach it), drawn in proportion 0.644 : 0.237; top_p 1 keeps all four.
TEST(Sampling, TopPKeepsTheSmallestNucleus) {
  const std::vector<float> logits = {0.f, 1.f, 2.f, 3.f};
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sample_token(logits, 1.f, 0, 0.5f, rng), 3);
  int count[4] = {0, 0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[sample_token(logits, 1.f, 0, 0.85f, rng)];
  EXPECT_EQ(count[0] + count[1], 0);
  EXPECT_NEAR((double)count[3] / n, 0.6439 / (0.6439 + 0.2369), 0.01);
  int all[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i) ++all[sample_token(logits, 1.f, 0, 1.f, rng)];
  EXPECT_NEAR((double)all[0] / n, 0.0321, 0.005);
  // With top_k first: top_k 3 and top_p 0.7 keep ids 3 and 2 (0.665 of the top 3's mass alone
  // falls short of 0.7).
  int both[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i) ++both[sample_token(logits, 1.f, 3, 0.7f, rng)];
  EXPECT_EQ(both[0] + both[1], 0);
  EXPECT_GT(both[2], 0);
}

// Top-k alone against the counted distribution: with logits 0..3, top_k 2 keeps ids 3 and 2
// only, drawn as e^3 : e^2 (0.731 : 0.269) at temperature 1 and as e^6 : e^4 (0.881 : 0.119) at
// temperature 0.5 (the logits divided by it first). Keeping one id too many would draw id 1
// about 9% of the time.
TEST(Sampling, TopKKeepsExactlyKAndScalesByTemperature) {
  const std::vector<float> logits = {0.f, 1.f, 2.f, 3.f};
  std::mt19937_64 rng(7);
  const int n = 20000;
  for (const auto& [temperature, p3] : {std::pair{1.f, 0.7311}, std::pair{0.5f, 0.8808}}) {
    int count[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; ++i) ++count[sample_token(logits, temperature, 2, 1.f, rng)];
    EXPECT_EQ(count[0] + count[1], 0) << "temperature " << temperature;
    // 4.5 standard deviations of a binomial proportion at n = 20000: about 0.014.
    EXPECT_NEAR((double)count[3] / n, p3, 0.014) << "temperature " << temperature;
  }
}

}  // namespace
}  // namespace zt
