// Reference: the published parameter counts (GPT-2 124M as in HF's gpt2 checkpoint with its
// 50,257-token vocabulary and tied head; TinyLlama-1.1B and LLaMA-7B model cards).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"

namespace zt {
namespace {

size_t count(const char* name) {
  auto c = preset(name);
  EXPECT_TRUE(c.ok()) << c.status();
  return ParamLayout(*c).total_numel();
}

TEST(Presets, ParameterCountsMatchModelCards) {
  EXPECT_EQ(count("gpt2-124m"), 124'439'808u);
  EXPECT_EQ(count("tinyllama-1.1b"), 1'100'048'384u);
  EXPECT_EQ(count("llama-7b"), 6'738'415'616u);
  EXPECT_EQ(count("llama2-7b"), 6'738'415'616u);
}

TEST(Presets, EveryPresetValidates) {
  for (const auto& name : preset_names()) {
    auto c = preset(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(validate(*c).ok()) << name;
  }
}

TEST(Presets, UnknownNameListsPresets) {
  auto c = preset("gpt3");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tinyllama-1.1b"), std::string::npos);
}

TEST(Layout, UnitsAreEmbeddingBlocksHead) {
  auto c = preset("tinyllama-1.1b");
  ParamLayout l(*c);
  ASSERT_EQ(l.num_units(), 22 + 2);
  EXPECT_EQ(l.units()[0].name, "embedding");
  EXPECT_EQ(l.units()[1].name, "block.0");
  EXPECT_EQ(l.units().back().name, "head");
  // GQA: q 2048 + k 256 + v 256 rows.
  EXPECT_EQ(l.units()[1].find("qkv.w")->shape[0], 2048 + 2 * 256);
}

TEST(HfConfig, ParsesLlamaAndRejectsRopeScaling) {
  auto c = config_from_hf_json(
      R"({"model_type":"llama","vocab_size":32000,"hidden_size":2048,"intermediate_size":5632,
          "num_hidden_layers":22,"num_attention_heads":32,"num_key_value_heads":4,
          "max_position_embeddings":2048,"rms_norm_eps":1e-5,"rope_theta":10000.0})",
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ParamLayout(*c).total_numel(), 1'100'048'384u);
  auto bad = config_from_hf_json(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
      "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
      "rope_scaling":{"type":"linear","factor":2.0}})",
                                 "config.json");
  EXPECT_FALSE(bad.ok());
  auto other = config_from_hf_json(R"({"model_type":"bert"})", "config.json");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("'gpt2' or 'llama'"), std::string::npos);
}

// GPT-2's initialisation: weights ~ N(0, 0.02) (GPT-1's, kept by GPT-2), the residual
// projections (attention output, MLP output) scaled by 1/sqrt(N) for N residual layers
// (Radford et al. 2019, section 2.3), N = 2L as nanoGPT and llm.c read it (two per block):
// 0.02 / sqrt(24) = 0.00408 at L = 12; biases 0, norm weights 1. A block of gpt2-124m holds 590k attention-output weights, so the sample
// standard deviation is within 0.3% of its expectation (3 standard errors, 1/sqrt(2n) each);
// bound 2%.
TEST(Init, Gpt2StandardDeviationsFollowThePaper) {
  auto c = preset("gpt2-124m");
  ASSERT_TRUE(c.ok()) << c.status();
  const ParamLayout layout(*c);
  const Unit& block = layout.units()[layout.block_unit(0)];
  std::vector<float> p(block.numel);
  init_unit(*c, block, layout.block_unit(0), 11, p);
  const double resid = 0.02 / std::sqrt(2.0 * c->n_layer);
  int checked = 0;
  for (const TensorSlot& t : block.tensors) {
    double sum = 0, sq = 0;
    for (size_t i = 0; i < t.numel; ++i) sum += p[t.offset + i], sq += (double)p[t.offset + i] * p[t.offset + i];
    const double mean = sum / t.numel, sd = std::sqrt(sq / t.numel - mean * mean);
    if (t.name.ends_with(".b")) {
      EXPECT_EQ(sq, 0.0) << t.name;
    } else if (t.name.starts_with("ln")) {
      EXPECT_EQ(mean, 1.0) << t.name;
      EXPECT_EQ(sd, 0.0) << t.name;
    } else {
      const double want = (t.name == "attn_out.w" || t.name == "fc_out.w") ? resid : 0.02;
      EXPECT_NEAR(sd, want, 0.02 * want) << t.name;
      EXPECT_NEAR(mean, 0.0, 0.05 * want) << t.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4) << "qkv, attention output, MLP input and output weights";
}

}  // namespace
}  // namespace zt
