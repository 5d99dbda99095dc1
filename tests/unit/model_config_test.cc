// Reference: the published parameter counts (GPT-2 124M as in HF's gpt2 checkpoint with its
// 50,257-token vocabulary and tied head; TinyLlama-1.1B and LLaMA-7B model cards).
#include <gtest/gtest.h>

#include "model/config.h"
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

}  // namespace
}  // namespace zt
