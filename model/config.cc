#include "model/config.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace zt {
namespace {

ModelConfig gpt2(int C, int L, int H) {
  ModelConfig c;
  c.arch = Arch::kGPT2;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  c.n_layer = L;
  c.n_head = c.n_kv_head = H;
  c.hidden = C;
  c.intermediate = 4 * C;
  c.norm_eps = 1e-5f;
  c.tied_embeddings = true;
  return c;
}

ModelConfig llama(int C, int I, int L, int H, int KV, int V, int T, float eps) {
  ModelConfig c;
  c.arch = Arch::kLLaMA;
  c.vocab_size = V;
  c.max_seq_len = T;
  c.n_layer = L;
  c.n_head = H;
  c.n_kv_head = KV;
  c.hidden = C;
  c.intermediate = I;
  c.norm_eps = eps;
  c.rope_theta = 10000.f;
  c.tied_embeddings = false;
  return c;
}

struct Preset {
  const char* name;
  ModelConfig config;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = [] {
    std::vector<Preset> v = {
        {"gpt2-124m", gpt2(768, 12, 12)},
        {"gpt2-350m", gpt2(1024, 24, 16)},
        {"gpt2-774m", gpt2(1280, 36, 20)},
        {"gpt2-1558m", gpt2(1600, 48, 25)},
        {"tinyllama-1.1b", llama(2048, 5632, 22, 32, 4, 32000, 2048, 1e-5f)},
        {"llama-7b", llama(4096, 11008, 32, 32, 32, 32000, 2048, 1e-6f)},
        {"llama2-7b", llama(4096, 11008, 32, 32, 32, 32000, 4096, 1e-5f)},
        // Small sizes for tests and the CPU demo.
        {"tiny-gpt2", gpt2(64, 2, 4)},
        {"tiny-llama", llama(64, 128, 2, 4, 2, 256, 64, 1e-5f)},
        // The README demo: a LLaMA small enough to learn TinyShakespeare on 2 cores in minutes.
        {"shakespeare-llama", llama(128, 384, 4, 4, 2, 32000, 256, 1e-5f)},
    };
    v[7].config.vocab_size = 256;
    v[7].config.max_seq_len = 64;
    return v;
  }();
  return p;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

absl::StatusOr<ModelConfig> preset(std::string_view name) {
  for (const auto& p : presets())
    if (name == p.name) return p.config;
  return absl::InvalidArgumentError(absl::StrCat("unknown model preset '", std::string(name),
                                                 "'; choose one of: ",
                                                 absl::StrJoin(preset_names(), ", ")));
}

absl::Status validate(const ModelConfig& c) {
  auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("invalid model config: ", std::string(what)));
  };
  if (c.vocab_size <= 0 || c.max_seq_len <= 0 || c.n_layer <= 0 || c.n_head <= 0 ||
      c.hidden <= 0 || c.intermediate <= 0 || c.n_kv_head <= 0)
    return bad("vocab_size, max_seq_len, n_layer, n_head, n_kv_head, hidden and "
               "intermediate must all be positive");
  if (c.hidden % c.n_head != 0) return bad("hidden must be a multiple of n_head");
  if (c.n_head % c.n_kv_head != 0) return bad("n_head must be a multiple of n_kv_head");
  if (!c.is_gpt2() && c.head_dim() % 2 != 0) return bad("RoPE needs an even head_dim");
  if (c.is_gpt2() && c.n_kv_head != c.n_head) return bad("GPT-2 has no grouped-query attention");
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> config_from_hf_json(std::string_view json_text,
                                                std::string_view where) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": not a JSON object"));
  const std::string type = j.value("model_type", "");
  ModelConfig c;
  try {
    if (type == "gpt2") {
      c.arch = Arch::kGPT2;
      c.vocab_size = j.at("vocab_size");
      c.max_seq_len = j.value("n_positions", 1024);
      c.n_layer = j.at("n_layer");
      c.n_head = c.n_kv_head = j.at("n_head");
      c.hidden = j.at("n_embd");
      c.intermediate = j.contains("n_inner") && !j["n_inner"].is_null() ? j["n_inner"].get<int>()
                                                                         : 4 * c.hidden;
      c.norm_eps = j.value("layer_norm_epsilon", 1e-5f);
      c.tied_embeddings = true;
      const std::string act = j.value("activation_function", "gelu_new");
      if (act != "gelu_new")
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(where), ": activation_function '", act, "' is not supported; use gelu_new"));
    } else if (type == "llama") {
      c.arch = Arch::kLLaMA;
      c.vocab_size = j.at("vocab_size");
      c.max_seq_len = j.value("max_position_embeddings", 2048);
      c.n_layer = j.at("num_hidden_layers");
      c.n_head = j.at("num_attention_heads");
      c.n_kv_head = j.value("num_key_value_heads", c.n_head);
      c.hidden = j.at("hidden_size");
      c.intermediate = j.at("intermediate_size");
      c.norm_eps = j.value("rms_norm_eps", 1e-6f);
      c.rope_theta = j.value("rope_theta", 10000.f);
      c.tied_embeddings = j.value("tie_word_embeddings", false);
      // transformers >= 5 writes {"rope_parameters": {"rope_theta", "rope_type"}}.
      if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
        const auto& rp = j["rope_parameters"];
        c.rope_theta = rp.value("rope_theta", c.rope_theta);
        if (rp.value("rope_type", std::string("default")) != "default")
          return absl::InvalidArgumentError(absl::StrCat(
              std::string(where), ": rope_parameters.rope_type '",
              rp.value("rope_type", std::string()), "' is not supported; only 'default' RoPE"));
      }
      if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(where), ": rope_scaling is not supported; remove it or use a model "
                                "without RoPE scaling"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(where), ": model_type '", type, "' is not supported; use 'gpt2' or 'llama'"));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": ", e.what()));
  }
  ZT_RETURN_IF_ERROR(validate(c));
  return c;
}

}  // namespace zt
