// Transformer configuration: one struct covers GPT-2 and LLaMA (docs/architecture.md
// "Transformer"). Presets from REFERENCES.md "Models"; Hugging Face config.json in.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/rope.h"

namespace zt {

// The family a model is read from and exported as (transformers' model_type). Only the presets,
// the Hugging Face reader and writer and the weight name maps look at it; everything that
// computes reads the features below, which the family sets (ModelConfig::of) and a config.json
// may refine.
enum class Family { kGPT2, kLLaMA, kQwen2, kMistral };
enum class NormKind { kLayerNorm, kRMSNorm };  // LayerNorm with its bias, or RMSNorm (no bias)
enum class MlpKind { kGelu, kSwiGLU };         // fc (I) -> GELU, or fc = [gate | up] (2I) -> SwiGLU

struct ModelConfig {
  Family family = Family::kLLaMA;
  int vocab_size = 0;            // V
  int max_seq_len = 0;           // maximum T (learned positions: their count)
  int n_layer = 0;               // L
  int n_head = 0;                // query heads
  int n_kv_head = 0;             // key/value heads (GQA when < n_head)
  int hidden = 0;                // C
  // config.json's head_dim where it is not hidden / n_head (Mistral-Nemo: 5120 wide, 32 heads
  // of 128); 0 where it is, as in every preset. Read it through head_dim().
  int head_dim_apart = 0;
  int intermediate = 0;          // MLP width I (GPT-2: 4C)
  float norm_eps = 1e-5f;        // LayerNorm / RMSNorm epsilon
  float rope_theta = 1e4f;       // RoPE's base (models without learned positions)
  RopeScaling rope_scaling;      // Llama 3.x's or linear (model/rope.h); none by default
  bool tied_embeddings = false;  // lm_head shares wte (GPT-2)
  // Features (set by `of` from the family).
  NormKind norm = NormKind::kRMSNorm;
  MlpKind mlp = MlpKind::kSwiGLU;
  bool learned_positions = false;  // a learned table wpe (GPT-2); otherwise RoPE on q and k
  bool qkv_bias = false;           // biases on the q|k|v projection
  bool out_bias = false;           // on the attention's output projection
  bool mlp_bias = false;           // on the MLP's projections
  // Mistral's (and Qwen2's, where on) sliding window, in tokens; 0: none. A model with one takes
  // contexts up to it, where the window's attention is the full causal one (set_max_seq_len).
  int sliding_window = 0;

  // A config of `f` with that family's features and nothing else set: GPT-2 has LayerNorm,
  // learned positions, GELU, every bias and tied embeddings; LLaMA RMSNorm, RoPE, SwiGLU and no
  // bias; Qwen2 LLaMA's with biases on q|k|v; Mistral LLaMA's.
  static ModelConfig of(Family f);
  int head_dim() const { return head_dim_apart > 0 ? head_dim_apart : hidden / n_head; }
  // Width of the queries and of the attention's output, the input of its output projection:
  // n_head * head_dim (C unless head_dim is set apart).
  int attn_dim() const { return n_head * head_dim(); }
  // Width of the fused q|k|v projection: (n_head + 2 n_kv_head) * head_dim.
  int qkv_dim() const { return (n_head + 2 * n_kv_head) * head_dim(); }
  // Rows of the MLP's first projection: I (GELU) or 2I ([gate | up], SwiGLU).
  int fc_dim() const { return mlp == MlpKind::kSwiGLU ? 2 * intermediate : intermediate; }
  bool rope() const { return !learned_positions; }
  RopeParams rope_params() const { return {rope_theta, rope_scaling}; }
};

// "gpt2", "llama", "qwen2", "mistral": transformers' model_type.
const char* family_name(Family f);

// "llama3 factor 8 low_freq_factor 1 high_freq_factor 4 original_max_position_embeddings
// 8192", "linear factor 2", or "none": the scaling as the checkpoint identity names it.
std::string rope_scaling_text(const RopeScaling& r);

// Every field of c in declaration order, the one list the trainer's identities and checks read:
// f(name, value, shapes) with the family as family_name, the rest as stored; `shapes` is
// true for the fields that fix the weights' shapes whatever the context length: not
// max_seq_len (a knob, --max_seq_len, though it sizes GPT-2's position table), nor the epsilon
// and theta, which change the numbers only.
template <class F>
void for_each_field(const ModelConfig& c, F&& f) {
  f("arch", family_name(c.family), true);
  f("vocab_size", c.vocab_size, true);
  f("max_seq_len", c.max_seq_len, false);
  f("n_layer", c.n_layer, true);
  f("n_head", c.n_head, true);
  f("n_kv_head", c.n_kv_head, true);
  f("hidden", c.hidden, true);
  f("intermediate", c.intermediate, true);
  f("norm_eps", c.norm_eps, false);
  f("rope_theta", c.rope_theta, false);
  f("tied_embeddings", c.tied_embeddings, true);
  // What a config.json may set beyond its family's features: named only where it differs, so
  // the identities earlier saves recorded stay as they were.
  const ModelConfig d = ModelConfig::of(c.family);
  if (c.qkv_bias != d.qkv_bias) f("qkv_bias", c.qkv_bias, true);
  if (c.out_bias != d.out_bias) f("out_bias", c.out_bias, true);
  if (c.mlp_bias != d.mlp_bias) f("mlp_bias", c.mlp_bias, true);
  if (c.head_dim_apart > 0) f("head_dim", c.head_dim_apart, true);
  if (c.rope_scaling.type != RopeScalingType::kNone)
    f("rope_scaling", rope_scaling_text(c.rope_scaling), false);
}

// Names accepted by --model, in the order `zerotrain info` lists them.
std::vector<std::string> preset_names();
// Preset by name (gpt2-124m/350m/774m/1558m, tinyllama-1.1b, llama-7b, llama2-7b, and the
// small test/demo sizes tiny-gpt2, tiny-llama, shakespeare-llama), or the path of a Hugging
// Face config.json (a name ending ".json": a model of that shape, as transformers'
// from_config; train initialises it randomly). Unknown name -> error listing the presets;
// an unreadable or invalid file -> error naming it.
absl::StatusOr<ModelConfig> preset(std::string_view name);
// Parses a Hugging Face config.json (model_type "gpt2", "llama", "qwen2" or "mistral", with the
// fields transformers defines for each; a field whose variant is not implemented is refused,
// naming it).
absl::StatusOr<ModelConfig> config_from_hf_json(std::string_view json_text, std::string_view where);
// The inverse: the config.json of transformers' model for c (GPT2LMHeadModel, LlamaForCausalLM,
// Qwen2ForCausalLM, MistralForCausalLM), with
// `torch_dtype` (e.g. "bfloat16") and the token ids of a tokenizer (bos/eos; -1 leaves them
// out). config_from_hf_json of it gives c back.
std::string hf_config_json(const ModelConfig& c, const std::string& torch_dtype, int bos_id,
                           int eos_id);
// Checks internal consistency (heads divide hidden unless head_dim is set apart, kv heads
// divide heads, ...).
absl::Status validate(const ModelConfig& c);
// Context length as a knob (--max_seq_len): the longest sequence the model is built for. RoPE
// models (LLaMA family) take any length up to 2^20, as Hugging Face's max_position_embeddings;
// GPT-2 learns one embedding per position, so it may only shrink (a checkpoint's first rows
// are loaded: model/hf_weights.h). n = 0 keeps the model's own. Errors (naming `source`, the
// model's name or config file): n < 0, n above 2^20, or a GPT-2 n above its positions.
absl::Status set_max_seq_len(ModelConfig& c, int64_t n, std::string_view source);
// `flag` (--seq_len) of n tokens within the model's context: InvalidArgument naming the range
// and how to widen it (--max_seq_len for RoPE models, up to a sliding window where there is one).
absl::Status check_seq_len(const ModelConfig& c, int64_t n, std::string_view flag);

}  // namespace zt
