// Where a run's model comes from, shared by `train` and `sample`: a preset (--model) or a
// Hugging Face directory (--init_from: its config.json and safetensors weights), with the
// context set by --max_seq_len, and the weights put into the engine.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/layout.h"
#include "zero/engine.h"

namespace zt {

// The model config: init_from's config.json (a Hugging Face directory) or header (an llm.c
// GPT-2 .bin, model/llmc_weights.h) when init_from is not empty, else the preset `model`; then
// set_max_seq_len(max_seq_len). Errors: unreadable or invalid config.json, an
// unknown preset, a bad --max_seq_len (each naming its source).
// With both `model` (not empty: --model given) and init_from, the preset must describe the
// same shapes as init_from's config (error naming each field that differs); --model alone is
// the preset, --init_from alone its own config.
absl::StatusOr<ModelConfig> resolve_model(const std::string& model, const std::string& init_from,
                                          int64_t max_seq_len);
// The preset `model` (empty: not given, fine) against the config c read from `source` (e.g.
// "--init_from 'DIR'"): error naming each shape that differs.
absl::Status check_same_model(const std::string& model, const ModelConfig& c,
                              const std::string& source);
// The config of init_from when given, else of the preset `model`, without the comparison.
absl::StatusOr<ModelConfig> model_of(const std::string& model, const std::string& init_from,
                                     int64_t max_seq_len);

// Every unit's initial parameters into `engine`: init_from's weights (converted to fp32, as
// model/hf_weights.h maps them), or with init_from empty the model's random initialisation
// from `seed` (model/init.h). Collective in stages 1-3 (Engine::set_unit_params). Errors: a
// missing or mis-shaped tensor, an unreadable file. `report`: a progress line on stderr (the
// caller's rank 0; common/progress.h).
absl::Status load_initial_params(const ModelConfig& c, const ParamLayout& layout,
                                 const std::string& init_from, uint64_t seed, Engine& engine,
                                 bool report = false);

// The sentencepiece model at `path`, which must not have more tokens than the model's
// vocabulary. Errors: unreadable or invalid file; too many tokens (saying both sizes).
absl::StatusOr<Tokenizer> load_tokenizer_for(const std::string& path, const ModelConfig& c);

}  // namespace zt
