// Reference: the published parameter counts (GPT-2 124M as in HF's gpt2 checkpoint with its
// 50,257-token vocabulary and tied head; TinyLlama-1.1B and LLaMA-7B model cards).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/file.h"
#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "tests/unit/json_fixture.h"
#include "trainer/export.h"

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

TEST(HfConfig, ParsesLlamaAndItsRopeScaling) {
  auto c = config_from_hf_json(
      R"({"model_type":"llama","vocab_size":32000,"hidden_size":2048,"intermediate_size":5632,
          "num_hidden_layers":22,"num_attention_heads":32,"num_key_value_heads":4,
          "max_position_embeddings":2048,"rms_norm_eps":1e-5,"rope_theta":10000.0})",
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ParamLayout(*c).total_numel(), 1'100'048'384u);
  auto linear = config_from_hf_json(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
      "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
      "rope_scaling":{"type":"linear","factor":2.0}})",
                                    "config.json");
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(linear->rope_scaling.factor, 2.f);
  auto bad = config_from_hf_json(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
      "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
      "rope_scaling":{"rope_type":"dynamic","factor":2.0}})",
                                 "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"dynamic\" is not supported"), std::string::npos)
      << bad.status();
  // llama3's original_max_position_embeddings: its own, else the config's top-level key, else
  // max_position_embeddings (transformers' fallbacks); both factors required, as transformers
  // does; with rope_parameters and rope_scaling both given, rope_scaling's type (transformers 5).
  auto llama3 = [](const std::string& rope, const std::string& extra = "") {
    return config_from_hf_json(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
        "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
        "max_position_embeddings":128,)" + extra + rope + "}",
                               "config.json");
  };
  const std::string no_omp = R"("rope_scaling":{"rope_type":"llama3","factor":8,
      "low_freq_factor":1,"high_freq_factor":4})";
  auto own = llama3(no_omp);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->rope_scaling.original_max_position, 128.f);
  auto top = llama3(no_omp, R"("original_max_position_embeddings":64,)");
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->rope_scaling.original_max_position, 64.f);
  auto no_high = llama3(R"("rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1})");
  ASSERT_FALSE(no_high.ok());
  EXPECT_NE(no_high.status().message().find("rope_scaling.high_freq_factor is missing"),
            std::string::npos)
      << no_high.status();
  auto both = llama3(R"("rope_scaling":{"rope_type":"linear","factor":2})",
                     R"("rope_parameters":{"rope_type":"llama3","factor":8,"low_freq_factor":1,
                         "high_freq_factor":4,"rope_theta":500000},)");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(both->rope_scaling.factor, 2.f);
  EXPECT_EQ(both->rope_theta, 500000.f);
  // A type that is not a string is refused, not read as "default" (no scaling).
  auto typo = config_from_hf_json(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,
      "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,
      "rope_scaling":{"rope_type":8,"factor":2.0}})",
                                  "config.json");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("rope_scaling.rope_type must be a string"),
            std::string::npos)
      << typo.status();
  auto other = config_from_hf_json(R"({"model_type":"bert"})", "config.json");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("'qwen2' or 'mistral'"), std::string::npos);
}

// Qwen2-0.5B's and Mistral-7B-v0.1's config.json fields (their published values): Qwen2's q, k
// and v biases count in its 494,032,768 parameters (the model card's 0.49B); Mistral's 4096-token
// sliding window caps its context (up to it the window is the full causal attention) and a
// longer --max_seq_len is refused, naming the window; its 7,241,732,096 parameters.
TEST(HfConfig, Qwen2AndMistralFromTheirConfigJson) {
  auto qwen = config_from_hf_json(
      R"({"model_type":"qwen2","vocab_size":151936,"hidden_size":896,"intermediate_size":4864,
          "num_hidden_layers":24,"num_attention_heads":14,"num_key_value_heads":2,
          "max_position_embeddings":32768,"rms_norm_eps":1e-6,"rope_theta":1000000.0,
          "tie_word_embeddings":true,"use_sliding_window":false,"sliding_window":32768,
          "max_window_layers":21,"hidden_act":"silu"})",
      "qwen2/config.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_TRUE(qwen->qkv_bias && !qwen->out_bias && !qwen->mlp_bias && qwen->tied_embeddings);
  EXPECT_EQ(qwen->sliding_window, 0);
  EXPECT_EQ(qwen->max_seq_len, 32768);
  EXPECT_EQ(ParamLayout(*qwen).total_numel(), 494'032'768u);
  auto mistral = config_from_hf_json(
      R"({"model_type":"mistral","vocab_size":32000,"hidden_size":4096,"intermediate_size":14336,
          "num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,
          "max_position_embeddings":32768,"rms_norm_eps":1e-5,"rope_theta":10000.0,
          "sliding_window":4096,"tie_word_embeddings":false,"hidden_act":"silu"})",
      "mistral/config.json");
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->sliding_window, 4096);
  EXPECT_EQ(mistral->max_seq_len, 4096);
  EXPECT_EQ(ParamLayout(*mistral).total_numel(), 7'241'732'096u);
  ModelConfig m = *mistral;
  EXPECT_TRUE(set_max_seq_len(m, 2048, "mistral").ok());
  const absl::Status longer = set_max_seq_len(m, 8192, "mistral");
  EXPECT_NE(longer.message().find("sliding window of 4096 tokens"), std::string::npos) << longer;
  // --seq_len past it names the window, not --max_seq_len, as the way it is capped.
  const absl::Status seq = check_seq_len(m, 4097, "--seq_len");
  EXPECT_NE(seq.message().find("[1, 2048]"), std::string::npos) << seq;
  EXPECT_EQ(check_seq_len(*mistral, 4097, "--seq_len").message().find("take a longer"),
            std::string::npos);
  EXPECT_NE(check_seq_len(*mistral, 4097, "--seq_len").message().find("sliding window of 4096"),
            std::string::npos);
  EXPECT_TRUE(check_seq_len(*mistral, 4096, "--seq_len").ok());
  // LLaMA's attention_bias puts biases on q, k, v and o; mlp_bias on gate, up and down.
  auto biased = config_from_hf_json(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":8,
          "num_hidden_layers":1,"num_attention_heads":2,"attention_bias":true,"mlp_bias":true})",
      "config.json");
  ASSERT_TRUE(biased.ok()) << biased.status();
  EXPECT_TRUE(biased->qkv_bias && biased->out_bias && biased->mlp_bias);
}

// Mistral-Nemo-Base-2407's config.json (its published values): head_dim 128 at hidden_size 5120
// and 32 heads, so its queries and o_proj's input are 4096 wide, not 5120; 12,247,782,400
// parameters (the hub's 12.2B). A head_dim equal to hidden_size / heads is no feature (the
// identities of earlier saves stay as they were), and the export writes head_dim back.
TEST(HfConfig, HeadDimApartFromTheWidth) {
  auto nemo = config_from_hf_json(
      R"({"model_type":"mistral","vocab_size":131072,"hidden_size":5120,"intermediate_size":14336,
          "num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,
          "max_position_embeddings":1024000,"rms_norm_eps":1e-5,"rope_theta":1000000.0,
          "sliding_window":null,"tie_word_embeddings":false,"hidden_act":"silu"})",
      "nemo/config.json");
  ASSERT_TRUE(nemo.ok()) << nemo.status();
  EXPECT_EQ(nemo->head_dim(), 128);
  EXPECT_EQ(nemo->attn_dim(), 4096);
  EXPECT_EQ(nemo->qkv_dim(), 4096 + 2 * 8 * 128);
  const ParamLayout layout(*nemo);
  EXPECT_EQ(layout.total_numel(), 12'247'782'400u);
  const TensorSlot* o = layout.units()[layout.block_unit(0)].find("attn_out.w");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->shape, (std::vector<int64_t>{5120, 4096}));
  bool named = false;
  for_each_field(*nemo, [&](const char* k, const auto&, bool shapes) {
    if (std::string(k) == "head_dim") named = shapes;
  });
  EXPECT_TRUE(named) << "head_dim fixes the weights' shapes";
  auto back = config_from_hf_json(hf_config_json(*nemo, "bfloat16", 1, 2), "export");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->head_dim_apart, 128);
  EXPECT_EQ(ParamLayout(*back).total_numel(), 12'247'782'400u);

  auto same = config_from_hf_json(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":8,
          "num_hidden_layers":1,"num_attention_heads":2,"head_dim":4})",
      "config.json");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->head_dim_apart, 0);
  // Heads that do not divide the width need head_dim; an odd one cannot rotate.
  auto odd = config_from_hf_json(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":10,"intermediate_size":8,
          "num_hidden_layers":1,"num_attention_heads":4,"head_dim":3})",
      "config.json");
  EXPECT_NE(odd.status().message().find("even head_dim"), std::string::npos) << odd.status();
  // A head_dim whose q|k|v width overflows an int is refused, not wrapped (2^29 x 4 heads).
  auto huge = config_from_hf_json(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":8,
          "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":4,
          "head_dim":536870912})",
      "config.json");
  EXPECT_NE(huge.status().message().find("under 2^31"), std::string::npos) << huge.status();
  auto undivided = config_from_hf_json(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":10,"intermediate_size":8,
          "num_hidden_layers":1,"num_attention_heads":4})",
      "config.json");
  EXPECT_NE(undivided.status().message().find("multiple of n_head"), std::string::npos)
      << undivided.status();
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

// The exported config.json against transformers' own config classes
// (tests/fixtures/hf_config_reference.json, scripts/make_hf_config_reference.py): every key the
// export writes holds the value GPT2Config / LlamaConfig hold for the same model, and every key
// it leaves out is one whose transformers default is the model's (or one transformers derives
// from the others, such as LLaMA's head_dim). Runs without Python: a config that misstates the
// model (tied embeddings, GQA's KV heads, the MLP width) fails here, not only in the round trip
// through transformers that needs torch.
using nlohmann::json;

ModelConfig model_of(const json& m) {
  ModelConfig c = ModelConfig::of(m["arch"] == "gpt2" ? Family::kGPT2 : Family::kLLaMA);
  c.vocab_size = m["vocab_size"], c.max_seq_len = m["max_seq_len"], c.n_layer = m["n_layer"];
  c.n_head = m["n_head"], c.n_kv_head = m["n_kv_head"], c.hidden = m["hidden"];
  c.intermediate = m["intermediate"], c.norm_eps = m["norm_eps"].get<float>();
  c.rope_theta = m["rope_theta"].get<float>(), c.tied_embeddings = m["tied_embeddings"];
  return c;
}

// JSON values equal, numbers as doubles (1e-05 written from a float's shortest form).
bool same(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// transformers 5 reads config.json's torch_dtype as dtype and a top-level rope_theta into
// rope_parameters; GPT-2's n_ctx (older configs' copy of n_positions) it keeps unread; any
// other key must be one the class knows.
void expect_config_is_transformers(const json& ours, const json& c, const std::string& what) {
  const json& want = c["expected"];
  const json& defaults = c["defaults"];
  std::set<std::string> covered;
  for (const auto& [key, value] : ours.items()) {
    if (key == "torch_dtype" && !want.contains(key)) {
      EXPECT_TRUE(same(value, want["dtype"])) << what << ": torch_dtype " << value;
      covered.insert("dtype");
    } else if (key == "rope_theta" && !want.contains(key)) {
      const json& rp = want["rope_parameters"];
      for (const auto& [k, v] : rp.items())
        EXPECT_TRUE(k == "rope_theta" ? same(value, v) : same(v, defaults["rope_parameters"][k]))
            << what << ": rope_parameters." << k << " " << v << ", ours rope_theta " << value;
      covered.insert("rope_parameters");
    } else if (key == "n_ctx" && !defaults.contains(key)) {
      EXPECT_TRUE(same(value, want["n_positions"])) << what << ": n_ctx " << value;
    } else {
      ASSERT_TRUE(want.contains(key)) << what << ": '" << key << "' is no "
                                      << c["expected"]["model_type"] << " config key";
      EXPECT_TRUE(same(value, want[key]))
          << what << ": " << key << " is " << value << ", transformers' " << want[key];
      covered.insert(key);
    }
  }
  const std::vector<std::string> derived = c["derived"];
  for (const auto& [key, value] : want.items()) {
    if (covered.count(key) || key == "transformers_version" ||
        std::find(derived.begin(), derived.end(), key) != derived.end())
      continue;
    EXPECT_TRUE(defaults.contains(key) && same(value, defaults[key]))
        << what << ": '" << key << "' left out, so transformers takes its default "
        << defaults.value(key, json()) << ", not the model's " << value;
  }
}

TEST(ExportedConfig, EveryFieldIsWhatTransformersHoldsForTheModel) {
  const json ref = load_json_fixture("hf_config_reference.json", "make_hf_config_reference.py");
  ASSERT_GE(ref["cases"].size(), 5u);
  for (const json& c : ref["cases"]) {
    const std::string name = c["name"];
    const ModelConfig m = model_of(c["model"]);
    ASSERT_TRUE(validate(m).ok()) << name;
    const json ours = json::parse(hf_config_json(m, c["dtype"], c["bos"], c["eos"]));
    expect_config_is_transformers(ours, c, name);
  }
}

// The file `zerotrain export` writes, from the stored save of the tiny LLaMA (untied, GQA):
// the fixture's case for that model, as fp32.
TEST(ExportedConfig, ExportOfAStoredCheckpointWritesTransformersConfig) {
  const json ref = load_json_fixture("hf_config_reference.json", "make_hf_config_reference.py");
  const json* c = nullptr;
  for (const json& x : ref["cases"])
    if (x["name"] == "tiny_llama_untied_gqa") c = &x;
  ASSERT_TRUE(c);
  const std::filesystem::path out = std::filesystem::temp_directory_path() /
                                    ("zt_export_config_" + std::to_string(::getpid()));
  ExportOptions o;
  o.checkpoint = std::string(ZT_SOURCE_DIR) + "/tests/fixtures/tiny_llama_checkpoint";
  o.out = out.string();
  o.dtype = "fp32";
  const absl::Status st = run_export(o);
  ASSERT_TRUE(st.ok()) << st;
  auto text = read_file((out / "config.json").string(), "config.json");
  ASSERT_TRUE(text.ok()) << text.status();
  expect_config_is_transformers(json::parse(*text), *c, "export of tiny_llama_checkpoint");
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace zt
