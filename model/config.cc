#include "model/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/json.h"
#include "common/status.h"

namespace zt {

ModelConfig ModelConfig::of(Family f) {
  ModelConfig c;
  c.family = f;
  const bool gpt2 = f == Family::kGPT2;
  c.norm = gpt2 ? NormKind::kLayerNorm : NormKind::kRMSNorm;
  c.mlp = gpt2 ? MlpKind::kGelu : MlpKind::kSwiGLU;
  c.learned_positions = c.out_bias = c.mlp_bias = c.tied_embeddings = gpt2;
  c.qkv_bias = gpt2 || f == Family::kQwen2;
  return c;
}

std::string rope_scaling_text(const RopeScaling& r) {
  switch (r.type) {
    case RopeScalingType::kNone: return "none";
    case RopeScalingType::kLinear: return absl::StrCat("linear factor ", r.factor);
    case RopeScalingType::kLlama3:
      return absl::StrCat("llama3 factor ", r.factor, " low_freq_factor ", r.low_freq_factor,
                          " high_freq_factor ", r.high_freq_factor,
                          " original_max_position_embeddings ", r.original_max_position);
  }
  return "?";
}

namespace {
// Each family's names in transformers, in Family's order: the one table the reader and the
// writer of config.json read.
struct FamilyNames {
  Family family;
  const char* model_type;
  const char* architecture;  // the *ForCausalLM class save_pretrained names
};
constexpr FamilyNames kFamilies[] = {
    {Family::kGPT2, "gpt2", "GPT2LMHeadModel"},
    {Family::kLLaMA, "llama", "LlamaForCausalLM"},
    {Family::kQwen2, "qwen2", "Qwen2ForCausalLM"},
    {Family::kMistral, "mistral", "MistralForCausalLM"},
};
constexpr bool in_family_order() {
  for (size_t i = 0; i < std::size(kFamilies); ++i)
    if ((size_t)kFamilies[i].family != i) return false;
  return true;
}
static_assert(in_family_order(), "kFamilies is indexed by Family");
}  // namespace

const char* family_name(Family f) { return kFamilies[(int)f].model_type; }

namespace {

ModelConfig gpt2(int C, int L, int H, int V = 50257, int T = 1024) {
  ModelConfig c = ModelConfig::of(Family::kGPT2);
  c.vocab_size = V;
  c.max_seq_len = T;
  c.n_layer = L;
  c.n_head = c.n_kv_head = H;
  c.hidden = C;
  c.intermediate = 4 * C;
  c.norm_eps = 1e-5f;
  return c;
}

ModelConfig llama(int C, int I, int L, int H, int KV, int V, int T, float eps) {
  ModelConfig c = ModelConfig::of(Family::kLLaMA);
  c.vocab_size = V;
  c.max_seq_len = T;
  c.n_layer = L;
  c.n_head = H;
  c.n_kv_head = KV;
  c.hidden = C;
  c.intermediate = I;
  c.norm_eps = eps;
  c.rope_theta = 10000.f;
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
        {"tiny-gpt2", gpt2(64, 2, 4, 256, 64)},
        {"tiny-llama", llama(64, 128, 2, 4, 2, 256, 64, 1e-5f)},
        // The README demo: a LLaMA small enough to learn TinyShakespeare on 2 cores in minutes.
        {"shakespeare-llama", llama(128, 384, 4, 4, 2, 32000, 256, 1e-5f)},
    };
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
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {  // transformers' from_config
    ZT_ASSIGN_OR_RETURN(const std::string text,
                        read_file(std::string(name), "--model (a Hugging Face config.json)"));
    ZT_ASSIGN_OR_RETURN(ModelConfig c, config_from_hf_json(text, name));
    ZT_RETURN_IF_ERROR(validate(c));
    return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model preset '", std::string(name), "'; choose one of: ",
                   absl::StrJoin(preset_names(), ", "),
                   ", or give a Hugging Face config.json (a model of its shape)"));
}

absl::Status set_max_seq_len(ModelConfig& c, int64_t n, std::string_view source) {
  constexpr int64_t kMax = int64_t{1} << 20;
  if (n == 0) return absl::OkStatus();
  if (n < 0 || n > kMax)
    return absl::InvalidArgumentError(absl::StrCat("--max_seq_len ", n, " must be in [1, ", kMax,
                                                   "] (0: the model's own, ", c.max_seq_len, ")"));
  if (c.learned_positions && n > c.max_seq_len)
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_seq_len ", n, " is longer than the ", c.max_seq_len, " positions that ",
        std::string(source), " has learned; GPT-2 can only shrink its context (RoPE models such "
        "as the LLaMA family take any length)"));
  if (c.sliding_window > 0 && n > c.sliding_window)
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_seq_len ", n, ": ", std::string(source), " attends within a sliding window of ",
        c.sliding_window, " tokens, which zerotrain does not implement; up to ", c.sliding_window,
        " the window's attention is the full causal one, so give at most that"));
  c.max_seq_len = (int)n;
  return absl::OkStatus();
}

absl::Status check_seq_len(const ModelConfig& c, int64_t n, std::string_view flag) {
  if (n >= 1 && n <= c.max_seq_len) return absl::OkStatus();
  const std::string how =
      c.learned_positions ? "its learned positions cannot grow"
      : c.sliding_window > 0
          ? absl::StrCat("its sliding window of ", c.sliding_window,
                         " tokens caps it: zerotrain does not implement the window")
          : "RoPE models take a longer --max_seq_len";
  return absl::InvalidArgumentError(absl::StrCat(std::string(flag), " ", n, " must be in [1, ",
                                                 c.max_seq_len,
                                                 "] for this model (its max_seq_len; ", how, ")"));
}

absl::Status validate(const ModelConfig& c) {
  auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("invalid model config: ", std::string(what)));
  };
  if (c.vocab_size <= 0 || c.max_seq_len <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.hidden <= 0 ||
      c.intermediate <= 0 || c.n_kv_head <= 0)
    return bad(
        "vocab_size, max_seq_len, n_layer, n_head, n_kv_head, hidden and "
        "intermediate must all be positive");
  if (c.head_dim_apart < 0) return bad("head_dim must be positive");
  // The fused q|k|v width and the attention's are int element counts (kernels, GEMMs).
  if (((int64_t)c.n_head + 2 * (int64_t)c.n_kv_head) * c.head_dim() > INT32_MAX)
    return bad(absl::StrCat("(", c.n_head, " heads + 2 x ", c.n_kv_head, " kv heads) x head_dim ",
                            c.head_dim(), " is too large: the q|k|v width must stay under 2^31"));
  if (c.head_dim_apart == 0 && c.hidden % c.n_head != 0)
    return bad("hidden must be a multiple of n_head (or head_dim given apart)");
  if (c.n_head % c.n_kv_head != 0) return bad("n_head must be a multiple of n_kv_head");
  if (c.rope() && c.head_dim() % 2 != 0) return bad("RoPE needs an even head_dim");
  if (c.family == Family::kGPT2 && c.n_kv_head != c.n_head)
    return bad("GPT-2 has no grouped-query attention");
  return absl::OkStatus();
}

namespace {

// Typed access to config.json fields: wrong type, fraction or range -> an error naming the key.
class HfFields {
 public:
  HfFields(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  // A positive integer below 2^30; `def` when absent (required when def < 0).
  absl::StatusOr<int> integer(const char* key, int def = -1) const {
    if (!has(key)) {
      if (def >= 0) return def;
      return error(key, "is missing; this model_type needs it");
    }
    const auto& v = j_[key];
    if (!v.is_number_integer() &&
        !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))
      return error(key, absl::StrCat("must be a whole number, got ", v.dump()));
    const double d = v.get<double>();
    if (d < 1 || d > (1 << 30))
      return error(key, absl::StrCat("must be in [1, 2^30], got ", v.dump()));
    return static_cast<int>(d);
  }
  // A finite number > 0.
  absl::StatusOr<float> positive(const nlohmann::json& obj, const char* key, float def) const {
    if (!obj.contains(key) || obj[key].is_null()) return def;
    const auto& v = obj[key];
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      return error(key, absl::StrCat("must be a finite number > 0, got ", v.dump()));
    return static_cast<float>(v.get<double>());
  }
  absl::StatusOr<float> positive(const char* key, float def) const {
    return positive(j_, key, def);
  }
  absl::StatusOr<std::string> text(const char* key, const char* def) const {
    if (!has(key)) return std::string(def);
    if (!j_[key].is_string()) return error(key, "must be a string");
    return j_[key].get<std::string>();
  }
  absl::StatusOr<bool> flag(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j_[key].is_boolean()) return error(key, "must be true or false");
    return j_[key].get<bool>();
  }
  absl::Status error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", key, " ", what));
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace

namespace {

// The fields LLaMA, Qwen2 and Mistral share (transformers' LlamaConfig, Qwen2Config,
// MistralConfig), into c of that family.
absl::Status read_llama_family(const HfFields& f, const nlohmann::json& j, ModelConfig& c) {
  ZT_ASSIGN_OR_RETURN(c.vocab_size, f.integer("vocab_size"));
  ZT_ASSIGN_OR_RETURN(c.max_seq_len, f.integer("max_position_embeddings", 2048));
  ZT_ASSIGN_OR_RETURN(c.n_layer, f.integer("num_hidden_layers"));
  ZT_ASSIGN_OR_RETURN(c.n_head, f.integer("num_attention_heads"));
  ZT_ASSIGN_OR_RETURN(c.n_kv_head, f.integer("num_key_value_heads", c.n_head));
  ZT_ASSIGN_OR_RETURN(c.hidden, f.integer("hidden_size"));
  ZT_ASSIGN_OR_RETURN(c.intermediate, f.integer("intermediate_size"));
  ZT_ASSIGN_OR_RETURN(c.norm_eps, f.positive("rms_norm_eps", 1e-6f));
  ZT_ASSIGN_OR_RETURN(c.rope_theta, f.positive("rope_theta", 10000.f));
  ZT_ASSIGN_OR_RETURN(c.tied_embeddings, f.flag("tie_word_embeddings", false));
  // transformers >= 5 writes {"rope_parameters": {"rope_theta", "rope_type", ...}}, earlier
  // versions "rope_scaling": {"rope_type" (or "type"), "factor", ...} beside rope_theta; where
  // both are given transformers takes rope_scaling's type, and so does the later pass here.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!f.has(key)) continue;
    const auto& rp = j[key];
    if (!rp.is_object()) return f.error(key, "must be an object");
    ZT_ASSIGN_OR_RETURN(c.rope_theta, f.positive(rp, "rope_theta", c.rope_theta));
    const char* type_key = rp.contains("rope_type") ? "rope_type" : "type";
    if (rp.contains(type_key) && !rp[type_key].is_string())
      return f.error(absl::StrCat(key, ".", type_key),
                     absl::StrCat("must be a string such as \"llama3\", got ", rp[type_key].dump()));
    const std::string type = rp.contains(type_key) ? rp[type_key].get<std::string>() : "default";
    RopeScaling& r = c.rope_scaling;
    r = RopeScaling{};  // each key's object says all of the scaling
    if (type == "linear" || type == "llama3") {
      r.type = type == "linear" ? RopeScalingType::kLinear : RopeScalingType::kLlama3;
      ZT_ASSIGN_OR_RETURN(r.factor, f.positive(rp, "factor", 0.f));
      if (r.factor == 0.f) return f.error(absl::StrCat(key, ".factor"), "is missing");
    }
    if (type == "llama3") {  // transformers requires both factors
      for (const char* k : {"low_freq_factor", "high_freq_factor"})
        if (!rp.contains(k) || rp[k].is_null())
          return f.error(absl::StrCat(key, ".", k), "is missing; llama3 scaling needs it");
      ZT_ASSIGN_OR_RETURN(r.low_freq_factor, f.positive(rp, "low_freq_factor", 1.f));
      ZT_ASSIGN_OR_RETURN(r.high_freq_factor, f.positive(rp, "high_freq_factor", 4.f));
      // Absent there: the config's own key, then max_position_embeddings, as transformers.
      ZT_ASSIGN_OR_RETURN(const float top, f.positive("original_max_position_embeddings",
                                                      (float)c.max_seq_len));
      ZT_ASSIGN_OR_RETURN(r.original_max_position,
                          f.positive(rp, "original_max_position_embeddings", top));
      if (!(r.high_freq_factor > r.low_freq_factor))
        return f.error(absl::StrCat(key, ".high_freq_factor"), "must be above low_freq_factor");
    } else if (type != "linear" && type != "default") {
      return f.error(absl::StrCat(key, ".", type_key),
                     absl::StrCat("\"", type, "\" is not supported; \"default\", \"linear\" and "
                                  "\"llama3\" are"));
    }
  }
  // Variants this transformer does not implement would load with wrong results.
  ZT_ASSIGN_OR_RETURN(const std::string act, f.text("hidden_act", "silu"));
  if (act != "silu")
    return f.error("hidden_act", absl::StrCat("'", act,
                                              "' is not supported; LLaMA-family models here "
                                              "use silu (SwiGLU)"));
  if (c.family == Family::kLLaMA) {  // LlamaConfig's switches: q, k, v and o; gate, up, down
    ZT_ASSIGN_OR_RETURN(const bool attention_bias, f.flag("attention_bias", false));
    ZT_ASSIGN_OR_RETURN(c.mlp_bias, f.flag("mlp_bias", false));
    c.qkv_bias = c.out_bias = attention_bias;
  }
  // head_dim apart from hidden_size / heads (Mistral-Nemo's 128 at 5120 / 32): the queries and
  // the attention's output are n_head * head_dim wide, o_proj maps them back to hidden_size.
  if (f.has("head_dim")) {
    ZT_ASSIGN_OR_RETURN(const int head_dim, f.integer("head_dim"));
    if ((int64_t)head_dim * c.n_head != c.hidden) c.head_dim_apart = head_dim;
  }
  // Mistral attends within sliding_window tokens (null: everywhere); Qwen2 only where
  // use_sliding_window is true. Up to the window that is the full causal attention.
  bool windowed = c.family == Family::kMistral;
  if (c.family == Family::kQwen2) {
    ZT_ASSIGN_OR_RETURN(windowed, f.flag("use_sliding_window", false));
  }
  if (windowed && f.has("sliding_window")) {
    ZT_ASSIGN_OR_RETURN(c.sliding_window, f.integer("sliding_window"));
    c.max_seq_len = std::min(c.max_seq_len, c.sliding_window);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> config_from_hf_json(std::string_view json_text,
                                                std::string_view where_sv) {
  const std::string where(where_sv);
  ZT_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json(json_text, where));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  const HfFields f(j, where);
  ZT_ASSIGN_OR_RETURN(const std::string type, f.text("model_type", ""));
  ModelConfig c;
  if (type == "gpt2") {
    c = ModelConfig::of(Family::kGPT2);
    ZT_ASSIGN_OR_RETURN(c.vocab_size, f.integer("vocab_size"));
    ZT_ASSIGN_OR_RETURN(c.max_seq_len, f.integer("n_positions", 1024));
    ZT_ASSIGN_OR_RETURN(c.n_layer, f.integer("n_layer"));
    ZT_ASSIGN_OR_RETURN(c.n_head, f.integer("n_head"));
    c.n_kv_head = c.n_head;
    ZT_ASSIGN_OR_RETURN(c.hidden, f.integer("n_embd"));
    ZT_ASSIGN_OR_RETURN(c.intermediate, f.integer("n_inner", 4 * c.hidden));
    ZT_ASSIGN_OR_RETURN(c.norm_eps, f.positive("layer_norm_epsilon", 1e-5f));
    ZT_ASSIGN_OR_RETURN(const std::string act, f.text("activation_function", "gelu_new"));
    if (act != "gelu_new")
      return f.error("activation_function",
                     absl::StrCat("'", act, "' is not supported; use gelu_new"));
  } else if (const auto* it =
                 std::find_if(std::begin(kFamilies), std::end(kFamilies),
                              [&](const FamilyNames& n) { return n.model_type == type; });
             it != std::end(kFamilies)) {  // the LLaMA family
    c = ModelConfig::of(it->family);
    ZT_RETURN_IF_ERROR(read_llama_family(f, j, c));
  } else {
    return f.error("model_type", absl::StrCat("'", type,
                                              "' is not supported; use 'gpt2', 'llama', 'qwen2' "
                                              "or 'mistral'"));
  }
  ZT_RETURN_IF_ERROR(validate(c));
  return c;
}

namespace {
// The double a float prints as at its shortest (1e-05f -> 1e-05, not 9.999999747378752e-06), so
// a config.json holds the value the model was configured with.
double shortest(float x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}
}  // namespace

std::string hf_config_json(const ModelConfig& c, const std::string& torch_dtype, int bos_id,
                           int eos_id) {
  nlohmann::json j;
  if (c.family == Family::kGPT2) {
    j = {{"architectures", {kFamilies[(int)c.family].architecture}},
         {"model_type", "gpt2"},
         {"vocab_size", c.vocab_size},
         {"n_positions", c.max_seq_len},
         {"n_ctx", c.max_seq_len},
         {"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_embd", c.hidden},
         {"n_inner", c.intermediate},
         {"layer_norm_epsilon", shortest(c.norm_eps)},
         {"activation_function", "gelu_new"},
         {"tie_word_embeddings", true}};
  } else {
    j = {{"architectures", {kFamilies[(int)c.family].architecture}},
         {"model_type", family_name(c.family)},
         {"vocab_size", c.vocab_size},
         {"max_position_embeddings", c.max_seq_len},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_kv_head},
         {"hidden_size", c.hidden},
         {"intermediate_size", c.intermediate},
         {"rms_norm_eps", shortest(c.norm_eps)},
         {"rope_theta", c.rope_theta},
         {"head_dim", c.head_dim()},
         {"hidden_act", "silu"},
         {"tie_word_embeddings", c.tied_embeddings}};
    const RopeScaling& r = c.rope_scaling;
    if (r.type != RopeScalingType::kNone)
      j["rope_scaling"] = {{"rope_type", r.type == RopeScalingType::kLinear ? "linear" : "llama3"},
                           {"factor", shortest(r.factor)}};
    if (r.type == RopeScalingType::kLlama3) {
      j["rope_scaling"]["low_freq_factor"] = shortest(r.low_freq_factor);
      j["rope_scaling"]["high_freq_factor"] = shortest(r.high_freq_factor);
      j["rope_scaling"]["original_max_position_embeddings"] = (int)r.original_max_position;
    }
    if (c.family == Family::kLLaMA) {
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
    }
    if (c.family == Family::kMistral)
      j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
    if (c.family == Family::kQwen2) {
      j["use_sliding_window"] = c.sliding_window > 0;
      if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
    }
  }
  j["torch_dtype"] = torch_dtype;
  if (bos_id >= 0) j["bos_token_id"] = bos_id;
  if (eos_id >= 0) j["eos_token_id"] = eos_id;
  return j.dump(2) + "\n";
}

}  // namespace zt
