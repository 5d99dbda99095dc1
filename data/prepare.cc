#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/progress.h"
#include "common/status.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> read_text(const std::string& path) {
  ZT_ASSIGN_OR_RETURN(std::string text, read_file(path, "input"));
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", path, "' is empty; give files that contain text"));
  }
  return text;
}

std::string shard_name(const char* split, int64_t index) {
  return absl::StrFormat("%s_%06d.bin", split, index);
}

// Removes out_dir/train_NNNNNN.bin for NNNNNN >= first (left over from a bigger earlier run).
void remove_stale_train_shards(const fs::path& out_dir, int64_t first) {
  std::error_code ec;
  for (int64_t i = first;; ++i) {
    if (!fs::remove(out_dir / shard_name("train", i), ec)) break;
    std::printf("prepare: removed stale %s\n", shard_name("train", i).c_str());
  }
}

}  // namespace

absl::Status prepare_text(const PrepareOptions& o) {
  if (!(o.val_fraction >= 0.0 && o.val_fraction <= 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat("val_fraction must be in [0, 0.5], got ",
                                                   o.val_fraction, " (e.g. 0.1 for 10%)"));
  }
  if (o.inputs.empty()) {
    return absl::InvalidArgumentError("prepare: no input files given (--input FILE[,FILE])");
  }
  if (o.max_shard_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare: max_shard_tokens must be >= 2, got ", o.max_shard_tokens));
  }
  ZT_ASSIGN_OR_RETURN(const Tokenizer tok, Tokenizer::load(o.tokenizer_path));
  if (o.model_vocab_size && tok.vocab_size() > *o.model_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", o.tokenizer_path, "' has ", tok.vocab_size(),
                     " tokens but the model's "
                     "vocabulary has ",
                     *o.model_vocab_size, "; use the model's own tokenizer"));
  }

  std::vector<uint32_t> tokens;  // (N,) all documents, each [BOS] + its tokens
  int64_t input_bytes = 0;
  for (const std::string& path : o.inputs) {
    std::error_code ec;
    input_bytes += (int64_t)std::filesystem::file_size(path, ec);
  }
  Progress progress("tokenizing", input_bytes);  // file by file
  for (const std::string& path : o.inputs) {
    ZT_ASSIGN_OR_RETURN(const std::string text, read_text(path));
    if (tok.bos_id() >= 0) tokens.push_back(static_cast<uint32_t>(tok.bos_id()));
    for (int id : tok.encode(text)) tokens.push_back(static_cast<uint32_t>(id));
    progress.add((int64_t)text.size());
  }
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_val = static_cast<int64_t>(std::llround(o.val_fraction * n));
  const int64_t n_train = n - n_val;
  if (n_train < 2 || (o.val_fraction > 0 && n_val < 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prepare: ", n, " tokens split into ", n_train, " train and ", n_val,
                     " val tokens "
                     "(val_fraction ",
                     o.val_fraction,
                     "); each part needs at least 2 tokens. Give more "
                     "text or change --val-fraction."));
  }

  const fs::path out_dir(o.out_dir);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir)) {
    return absl::PermissionDeniedError(
        absl::StrCat("prepare: cannot create output directory '", o.out_dir,
                     "': ", ec ? ec.message() : std::string("a file of that name exists")));
  }
  const std::span<const uint32_t> all(tokens);
  int64_t num_train_shards = 0;
  for (int64_t at = 0; at < n_train; at += o.max_shard_tokens, ++num_train_shards) {
    const int64_t count = std::min(o.max_shard_tokens, n_train - at);
    ZT_RETURN_IF_ERROR(write_shard((out_dir / shard_name("train", num_train_shards)).string(),
                                   all.subspan(at, count), tok.vocab_size()));
  }
  remove_stale_train_shards(out_dir, num_train_shards);
  const std::string val_path = (out_dir / shard_name("val", 0)).string();
  if (n_val > 0) {
    ZT_RETURN_IF_ERROR(write_shard(val_path, all.subspan(n_train), tok.vocab_size()));
  } else {
    fs::remove(val_path, ec);
  }
  std::printf(
      "prepare: %lld tokens from %zu file(s): train %lld tokens in %lld shard(s), "
      "val %lld tokens, %s tokens, in %s\n",
      static_cast<long long>(n), o.inputs.size(), static_cast<long long>(n_train),
      static_cast<long long>(num_train_shards), static_cast<long long>(n_val),
      tok.vocab_size() <= 65536 ? "uint16" : "uint32", o.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace zt
