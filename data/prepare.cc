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
#include "data/mask.h"
#include "data/rows.h"
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

// --pack: each document ([BOS] + its tokens, all trained but BOS) cut into pieces of T that
// overlap by one token, packed into rows of T (data/rows.h) with a mask of example starts;
// the last val_fraction of the pieces (the corpus's end) for validation.
absl::Status prepare_packed(const PrepareOptions& o, const std::vector<Piece>& docs,
                            const Tokenizer& tok) {
  const size_t T = (size_t)o.seq_len;
  std::vector<Piece> pieces;
  int64_t tokens = 0;
  for (const Piece& d : docs) {
    for (Piece& p : cut(d, T, Overlong::kSplit, /*pack=*/true)) {
      tokens += (int64_t)p.tokens.size();
      pieces.push_back(std::move(p));
    }
  }
  const size_t n_val = (size_t)std::llround(o.val_fraction * (double)pieces.size());
  if (pieces.size() - n_val < 1 || (o.val_fraction > 0 && n_val < 1))
    return absl::InvalidArgumentError(absl::StrCat(
        "prepare --pack: ", pieces.size(), " pieces of up to ", T, " tokens split into ",
        pieces.size() - n_val, " train and ", n_val, " val (val_fraction ", o.val_fraction,
        "); each part needs at least one. Give more text or change --val-fraction."));
  const std::vector<Piece> train(pieces.begin(), pieces.end() - (ptrdiff_t)n_val),
      val(pieces.end() - (ptrdiff_t)n_val, pieces.end());
  const uint32_t pad = tok.eos_id() >= 0 ? tok.eos_id() : 0;
  int64_t rows = 0, trained = 0, shards = 0;
  const std::vector<Piece> train_rows = lay_out(train, T, true, pad);
  const size_t per_shard = std::max<size_t>(1, (size_t)o.max_shard_tokens / T);
  const fs::path out_dir(o.out_dir);
  for (size_t at = 0; at < train_rows.size(); at += per_shard, ++shards) {
    const size_t n = std::min(per_shard, train_rows.size() - at);
    ZT_RETURN_IF_ERROR(write_rows((out_dir / shard_name("train", shards)).string(),
                                  {train_rows.begin() + at, train_rows.begin() + at + n}, o.seq_len,
                                  pad, tok.vocab_size(), &rows, &trained));
  }
  const std::string val_path = (out_dir / shard_name("val", 0)).string();
  if (n_val > 0)
    ZT_RETURN_IF_ERROR(write_rows(val_path, lay_out(val, T, true, pad), o.seq_len, pad,
                                  tok.vocab_size(), &rows, &trained));
  remove_stale_shards(o.out_dir, shards, n_val > 0);
  std::printf(
      "prepare: %lld tokens from %zu file(s) in %zu pieces, packed into %lld rows of T = %zu "
      "(%.1f%% of them document tokens; %zu val pieces), train in %lld shard(s), in %s\n",
      (long long)tokens, o.inputs.size(), pieces.size(), (long long)rows, T,
      100.0 * (double)tokens / ((double)rows * T), n_val, (long long)shards, o.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace

void remove_stale_shards(const std::string& out_dir, int64_t num_train, bool val_written) {
  std::error_code ec;
  for (int64_t i = num_train;; ++i) {
    const fs::path train = fs::path(out_dir) / shard_name("train", i);
    fs::remove(mask_path_for(train.string()), ec);
    if (!fs::remove(train, ec)) break;
    std::printf("prepare: removed stale %s\n", shard_name("train", i).c_str());
  }
  const std::string val = (fs::path(out_dir) / shard_name("val", 0)).string();
  if (!val_written && fs::remove(val, ec)) std::printf("prepare: removed stale val_000000.bin\n");
  if (!val_written) fs::remove(mask_path_for(val), ec);
}

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
  ZT_RETURN_IF_ERROR(tok.check_encodes("zerotrain prepare"));
  if (o.model_vocab_size && tok.vocab_size() > *o.model_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", o.tokenizer_path, "' has ", tok.vocab_size(),
                     " tokens but the model's "
                     "vocabulary has ",
                     *o.model_vocab_size, "; use the model's own tokenizer"));
  }

  if (o.pack && o.seq_len < 2)
    return absl::InvalidArgumentError(
        absl::StrCat("--seq_len ", o.seq_len, " must be at least 2 to pack"));
  std::vector<uint32_t> tokens;  // (N,) all documents, each [BOS] + its tokens
  std::vector<Piece> docs;       // --pack: each document on its own
  int64_t input_bytes = 0;
  for (const std::string& path : o.inputs) {
    std::error_code ec;
    input_bytes += (int64_t)std::filesystem::file_size(path, ec);
  }
  Progress progress("tokenizing", input_bytes);  // file by file
  for (const std::string& path : o.inputs) {
    ZT_ASSIGN_OR_RETURN(const std::string text, read_text(path));
    const size_t first = tokens.size();
    if (tok.bos_id() >= 0) tokens.push_back(static_cast<uint32_t>(tok.bos_id()));
    for (int id : tok.encode(text)) tokens.push_back(static_cast<uint32_t>(id));
    progress.add((int64_t)text.size());
    if (o.pack) {
      docs.push_back({{tokens.begin() + first, tokens.end()}, {}});
      docs.back().flags.assign(docs.back().tokens.size(), kMaskTrained);
    }
  }
  if (o.pack) {
    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    if (ec || !fs::is_directory(o.out_dir))
      return absl::PermissionDeniedError(
          absl::StrCat("prepare: cannot create output directory '", o.out_dir,
                       "': ", ec ? ec.message() : std::string("a file of that name exists")));
    return prepare_packed(o, docs, tok);
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
    const std::string path = (out_dir / shard_name("train", num_train_shards)).string();
    ZT_RETURN_IF_ERROR(write_shard(path, all.subspan(at, count), tok.vocab_size()));
    fs::remove(mask_path_for(path), ec);  // a packed run's mask would misread this shard
  }
  const std::string val_path = (out_dir / shard_name("val", 0)).string();
  if (n_val > 0) ZT_RETURN_IF_ERROR(write_shard(val_path, all.subspan(n_train), tok.vocab_size()));
  fs::remove(mask_path_for(val_path), ec);  // this val shard has no mask
  remove_stale_shards(o.out_dir, num_train_shards, n_val > 0);
  std::printf(
      "prepare: %lld tokens from %zu file(s): train %lld tokens in %lld shard(s), "
      "val %lld tokens, %s tokens, in %s\n",
      static_cast<long long>(n), o.inputs.size(), static_cast<long long>(n_train),
      static_cast<long long>(num_train_shards), static_cast<long long>(n_val),
      tok.vocab_size() <= 65536 ? "uint16" : "uint32", o.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace zt
