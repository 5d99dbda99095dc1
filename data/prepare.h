// Text preparation: plain-text files -> llm.c token shards (train_*.bin, val_000000.bin).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zt {

struct PrepareOptions {
  std::string tokenizer_path;              // sentencepiece .model
  std::vector<std::string> inputs;         // UTF-8 text files; each file is one document
  std::string out_dir;                     // created if missing
  double val_fraction = 0.1;               // share of tokens (from the end) for validation
  std::optional<int> model_vocab_size;     // when set, the tokenizer must not exceed it
  int64_t max_shard_tokens = 100'000'000;  // tokens per train shard at most
  // --pack: documents packed into rows of seq_len tokens (data/rows.h), each attending only to
  // itself, longer ones cut into pieces that overlap by one token; a mask beside each shard
  // marks where each starts (and that every token but a piece's first is trained).
  bool pack = false;
  int seq_len = 256;
};

// Tokenizes each input as [BOS] + encode(file contents), concatenates them in order and
// writes the last round(val_fraction * N) tokens to out_dir/val_000000.bin and the rest to
// out_dir/train_000000.bin, train_000001.bin, ... (at most max_shard_tokens each). Shards
// hold uint16 tokens for vocabularies <= 65,536, else uint32. With val_fraction 0 no val
// shard is written. What an earlier prepare left beyond the new shards is removed
// (remove_stale_shards), and so are masks beside the shards written (which have none), so the
// train_*.bin and val_*.bin globs match only this run. Prints one summary line to stdout. With
// pack, rows of seq_len tokens with their masks instead (prepare_packed in prepare.cc: the last
// val_fraction of the pieces for validation). Errors (InvalidArgument unless said): tokenizer unloadable (see
// Tokenizer::load); no inputs; an input missing (NotFound), unreadable or empty; val_fraction
// outside [0, 0.5]; tokenizer vocabulary larger than model_vocab_size; the val part (when
// val_fraction > 0) or the train part under 2 tokens; out_dir not creatable or shards not writable
// (PermissionDenied).
absl::Status prepare_text(const PrepareOptions& options);

// After a prepare (text or instructions) wrote out_dir/train_000000.bin to train_<num_train -
// 1>.bin, and val_000000.bin when val_written: removes what an earlier prepare into out_dir
// left beyond them, each shard with its mask (mask_path_for), and prints a line for each shard
// removed. The loader's globs (train_*.bin) would read a stale shard as this run's data.
void remove_stale_shards(const std::string& out_dir, int64_t num_train, bool val_written);

}  // namespace zt
