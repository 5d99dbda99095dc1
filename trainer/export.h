// `zerotrain export`: a checkpoint (trainer/checkpoint.h) as a Hugging Face model directory,
// the counterpart of DeepSpeed's zero_to_fp32.py from any stage and world size: unpadded
// tensors of the model's own shapes, loadable by transformers' from_pretrained and by
// `zerotrain train --init_from`.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace zt {

struct ExportOptions {
  std::string checkpoint;                   // a save, or a save directory (its latest)
  std::string out;                          // the model directory to write (created if needed)
  std::string dtype = "bf16";               // bf16, fp16 or fp32 (master weights rounded to it)
  std::string tokenizer;                    // sentencepiece model copied as tokenizer.model
  int64_t max_shard_bytes = 2'000'000'000;  // per model-0000k-of-0000n.safetensors
};

// Writes into out: config.json (GPT2LMHeadModel or LlamaForCausalLM), model-0000k-of-0000n
// .safetensors shards with model.safetensors.index.json, generation_config.json, and
// tokenizer.model when given. Every file is written under a temporary name and renamed.
// Errors (exit 2 in main): no checkpoint at `checkpoint`, a corrupt one (checkpoint.h), an
// unknown dtype, an unreadable tokenizer, a failed write (names the file and the reason).
absl::Status run_export(const ExportOptions& o);

}  // namespace zt
