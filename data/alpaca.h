// Instruction data (Alpaca format) -> token shards with a loss mask, so that fine-tuning trains
// only on responses (Taori et al. 2023, Stanford Alpaca; the template is theirs).
//
// Each example becomes one sequence of exactly T tokens: [BOS] + prompt + output + [EOS],
// padded with EOS (a sequence longer than T is skipped and counted). Sequences sit at multiples
// of T in the shard, so the loader's sequence i (tokens [iT, iT + T + 1), data/loader.h) is
// example i: no example attends to another (padding, not packing). Beside each shard X.bin a
// mask file X.mask marks the tokens trained as targets: the output and its EOS; never BOS, the
// prompt or the padding (so the target after the last position, the next example's BOS, is
// masked too). The loader turns masked targets into -1, which the loss ignores.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zt {

struct InstructionExample {
  std::string instruction, input, output;
};

// A JSON list of objects with string "instruction" and "output" and an optional string "input"
// (other keys ignored). Errors (InvalidArgument, naming `where` and the record index): not a
// list, a record that is not an object, a missing or non-string field, an empty list.
absl::StatusOr<std::vector<InstructionExample>> parse_alpaca(std::string_view json_text,
                                                             const std::string& where);

// The prompt before the response: "{instruction}" and "{input}" are replaced.
struct PromptTemplate {
  std::string prompt_input;     // for examples with a non-empty input
  std::string prompt_no_input;  // for the others
};
// Stanford Alpaca's template (its train.py PROMPT_DICT).
PromptTemplate alpaca_template();
// A template file in the same JSON form as tatsu-lab/stanford_alpaca's templates:
// {"prompt_input": "...", "prompt_no_input": "..."}. Errors name the file and the key.
absl::StatusOr<PromptTemplate> load_template(const std::string& path);
std::string format_prompt(const PromptTemplate& t, const InstructionExample& e);

struct InstructionPrepareOptions {
  std::string tokenizer_path;
  std::string input;  // the Alpaca JSON file
  std::string out_dir;
  std::string template_path;  // empty: alpaca_template()
  int seq_len = 256;          // T: every example is one sequence of T tokens
  double val_fraction = 0.1;  // share of examples (from the end) for val_000000
};

// Writes out_dir/train_000000.bin + .mask and val_000000.bin + .mask (unless val_fraction is 0
// or leaves no example). Prints one summary line (examples, skipped as longer than T, trained
// tokens). Errors: unreadable or invalid input (parse_alpaca), tokenizer or template errors,
// seq_len < 2, no example that fits T, failed writes (naming the file).
absl::Status prepare_instructions(const InstructionPrepareOptions& o);

// The mask beside a shard: `shard_path` with its ".bin" replaced by ".mask" (or ".mask"
// appended). Format: 256 int32 header (magic 20241201, version 1, token count, the seq_len T
// its sequences were laid out for), then one byte per token (1: trained as a target).
std::string mask_path_for(const std::string& shard_path);
struct LossMask {
  std::vector<uint8_t> trained;  // per token
  int seq_len = 0;               // T the examples were padded to
};
absl::Status write_mask(const std::string& path, const LossMask& mask);
// Reads a mask file written by write_mask. Errors name the file (magic, count, size).
absl::StatusOr<LossMask> read_mask(const std::string& path);

}  // namespace zt
