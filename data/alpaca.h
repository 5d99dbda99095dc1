// Instruction data (Alpaca format) -> token shards with a loss mask, so that fine-tuning trains
// only on responses (Taori et al. 2023, Stanford Alpaca; the template is theirs).
//
// Each example becomes [BOS] + prompt + output + [EOS]. Padded (the default), each example is
// one sequence of exactly T tokens, padded with EOS, at a multiple of T in the shard, so the
// loader's sequence i (tokens [iT, iT + T + 1), data/loader.h) is example i: no example attends
// to another. Packed (--pack), each sequence of T tokens holds as many whole examples as fit
// (best-fit decreasing: the longest first, each into the fullest row with room), then EOS
// padding; the mask marks where each example starts, the loader gives every token its
// position within its example, and attention stays within each example (Backend's packed
// rows), so each trains as it would alone while most of the row is examples, not padding.
// An example longer than T is skipped, truncated to T or split into pieces of T (--overlong),
// and counted. Beside each shard X.bin a mask file X.mask marks the tokens trained as targets:
// the output and its EOS; never BOS, the prompt or the padding (so the target after an
// example's last token, the next example's BOS, is masked too). The loader turns masked targets
// into -1, which the loss ignores.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/rows.h"

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
// {"prompt_input": "...", "prompt_no_input": "..."}. Errors (InvalidArgument) name the file and
// the key: a key missing or not a string; a "{name}" that is not {instruction} or {input} (the
// message names it, the known ones and the closest); no {instruction} in either, or no {input}
// in prompt_input (what it would place would be dropped from every prompt).
absl::StatusOr<PromptTemplate> load_template(const std::string& path);
std::string format_prompt(const PromptTemplate& t, const InstructionExample& e);

struct InstructionPrepareOptions {
  std::string tokenizer_path;
  std::string input;  // the Alpaca JSON file
  std::string out_dir;
  std::string template_path;  // empty: alpaca_template()
  int seq_len = 256;          // T: the sequence length the rows are laid out for
  double val_fraction = 0.1;  // share of examples (from the end) for val_000000
  bool pack = false;          // several whole examples a row (else one, padded)
  Overlong overlong = Overlong::kSkip;
};

// What prepare_instructions made (also printed as one summary line).
struct InstructionPrepareReport {
  int64_t examples = 0;  // kept (train and val)
  int64_t overlong = 0;  // longer than T: skipped, truncated or split, as asked
  int64_t rows = 0;      // sequences of T tokens written (train and val)
  int64_t tokens = 0;    // example tokens in them (the rest is padding)
  int64_t trained = 0;   // response tokens trained as targets
  double fill() const { return rows ? (double)tokens / ((double)rows * seq_len) : 0; }
  int seq_len = 0;
};

// Writes out_dir/train_000000.bin + .mask and val_000000.bin + .mask (unless val_fraction is 0
// or leaves no example); the val examples are the last ones, before any packing. What an
// earlier prepare left in out_dir beyond these is removed (remove_stale_shards). Prints one
// summary line (examples, overlong ones, rows, fill rate, trained tokens). Errors: unreadable
// or invalid input (parse_alpaca), tokenizer or template errors, seq_len < 2, no example that
// fits T, failed writes (naming the file).
absl::StatusOr<InstructionPrepareReport> prepare_instructions(const InstructionPrepareOptions& o);

}  // namespace zt
