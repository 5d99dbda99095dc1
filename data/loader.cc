#include "data/loader.h"

#include <glob.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/mask.h"

namespace zt {
namespace {

// A permutation of 0..n-1 that depends only on (seed, epoch, shard): Fisher-Yates driven by
// std::mt19937_64 seeded through std::seed_seq (both fully specified by the standard, so the
// order is the same with every standard library; std::shuffle's is not).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch, int64_t shard) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32),
                    static_cast<uint32_t>(shard + 1)};  // shard -1: the shard order itself
  std::mt19937_64 rng(seq);
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    std::swap(p[i], p[rng() % static_cast<uint64_t>(i + 1)]);
  }
  return p;
}

absl::Status check_options(const DataLoaderOptions& o) {
  if (o.B <= 0 || o.T <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader: batch size B and sequence length T must be positive, got B=", o.B,
        " T=", o.T));
  }
  if (o.micro_batches_per_step <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader: micro_batches_per_step must be positive, got ", o.micro_batches_per_step));
  }
  if (o.world_size <= 0 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: rank ", o.rank, " is outside world size ", o.world_size));
  }
  if (o.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: the model's vocab_size must be positive, got ", o.vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> glob_shards(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);  // results sorted by glob
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (paths.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no token shards match '", pattern,
                     "'. Check the path, or create shards with zerotrain prepare."));
  }
  return paths;
}

absl::StatusOr<DataLoader> DataLoader::open(const DataLoaderOptions& options) {
  ZT_RETURN_IF_ERROR(check_options(options));
  std::vector<std::string> paths = options.files;
  if (paths.empty()) {
    ZT_ASSIGN_OR_RETURN(paths, glob_shards(options.pattern));
  }
  std::sort(paths.begin(), paths.end());

  DataLoader loader;
  loader.options_ = options;
  const int64_t T = options.T,
                need = int64_t{options.world_size} * options.B * options.micro_batches_per_step;
  std::string too_small;  // shards shorter than one sequence (a short tail)
  for (const std::string& path : paths) {
    ZT_ASSIGN_OR_RETURN(MappedShard shard, MappedShard::open(path));
    const uint32_t max_token = shard.max_token();
    if (max_token >= static_cast<uint32_t>(options.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token shard '", path, "' holds token id ", max_token,
          " but the model's vocabulary "
          "has ",
          options.vocab_size,
          " tokens: the tokenizer that made the shard has a larger "
          "vocabulary than the model. Use the model's tokenizer (re-run zerotrain prepare) or "
          "a model whose vocab_size covers it."));
    }
    if (shard.num_tokens() < T + 1) {
      absl::StrAppend(&too_small, too_small.empty() ? "" : ", ", "'", path, "' (",
                      shard.num_tokens(), " tokens)");
      continue;
    }
    std::vector<uint8_t> mask;
    if (std::filesystem::exists(mask_path_for(path))) {
      ZT_ASSIGN_OR_RETURN(LossMask m, read_mask(mask_path_for(path)));
      if ((int64_t)m.flags.size() != shard.num_tokens())
        return absl::InvalidArgumentError(absl::StrCat(
            "loss mask '", mask_path_for(path), "' has ", m.flags.size(), " entries for the ",
            shard.num_tokens(), " tokens of '", path, "'; re-run zerotrain prepare"));
      if (m.seq_len != T)
        return absl::InvalidArgumentError(
            absl::StrCat("token shard '", path, "' holds examples in rows of ", m.seq_len,
                         " tokens (its loss mask says); train with --seq_len ", m.seq_len,
                         ", or prepare it again with --seq_len ", T));
      mask = std::move(m.flags);
      loader.masked_ = true;
      loader.packed_ |=
          std::any_of(mask.begin(), mask.end(), [](uint8_t f) { return f & kMaskExampleStart; });
    }
    std::string id = absl::StrCat(shard.num_tokens(), " tokens, CRC-32 ",
                                  absl::Hex(shard.crc32(), absl::kZeroPad8));
    if (!mask.empty())
      absl::StrAppend(&id, ", loss mask CRC-32 ",
                      absl::Hex(::crc32_z(0, mask.data(), mask.size()), absl::kZeroPad8));
    loader.identity_.push_back(std::move(id));
    loader.num_tokens_ += shard.num_tokens();
    loader.sequences_ += (shard.num_tokens() - 1) / T;
    loader.shards_.push_back(std::move(shard));
    loader.masks_.push_back(std::move(mask));
  }
  if (loader.sequences_ < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the token shards '", options.pattern, "' hold ", loader.sequences_,
        " sequence(s) of T+1 = ", T + 1,
        " tokens", too_small.empty() ? "" : absl::StrCat(" (too short: ", too_small, ")"),
        "; one step of ", options.world_size, " rank(s) needs W*B*G = ", need, " (B=",
        options.B, " T=", T, ", G=", options.micro_batches_per_step,
        " gradient accumulation steps), W*B*G*T+1 = ", need * T + 1,
        " tokens. Use a smaller batch or T, or more data."));
  }
  if (!too_small.empty())
    std::fprintf(stderr, "warning: skipping token shard(s) shorter than one sequence: %s\n",
                 too_small.c_str());
  loader.batches_per_epoch_ = loader.sequences_ / need * options.micro_batches_per_step;
  loader.reset();
  return loader;
}

void DataLoader::begin_epoch(int64_t epoch) {
  const auto n = static_cast<int64_t>(shards_.size());
  if (options_.shuffle) {
    shard_order_ = permutation(n, options_.seed, epoch, -1);
  } else {
    shard_order_.resize(n);
    std::iota(shard_order_.begin(), shard_order_.end(), 0);
  }
  first_.assign(n, 0);
  for (int64_t i = 1; i < n; ++i)
    first_[i] = first_[i - 1] + (shards_[shard_order_[i - 1]].num_tokens() - 1) / options_.T;
  perm_shard_ = -1;
  state_ = {epoch, 0};
}

std::pair<const MappedShard*, int64_t> DataLoader::locate(int64_t p) {
  const auto it = std::upper_bound(first_.begin(), first_.end(), p) - 1;
  const int64_t shard = shard_order_[it - first_.begin()];
  int64_t k = p - *it;  // the k-th sequence of that shard in this epoch's order
  if (options_.shuffle) {
    if (perm_shard_ != shard) {
      perm_ = permutation((shards_[shard].num_tokens() - 1) / options_.T, options_.seed,
                          state_.epoch, shard);
      perm_shard_ = shard;
    }
    k = perm_[k];
  }
  return {&shards_[shard], k * options_.T};
}

void DataLoader::reset() { begin_epoch(0); }

absl::Status DataLoader::restore(const DataLoaderState& s) {
  const int64_t step = int64_t{options_.world_size} * options_.B;
  if (s.epoch < 0 || s.position < 0 || s.position % step != 0 ||
      s.position / step > batches_per_epoch_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader state (epoch ", s.epoch, ", position ", s.position,
        ") does not fit these shards: an epoch holds ", batches_per_epoch_ * step,
        " sequences, drawn W*B = ", step,
        " at a time; were the shards, T or the global batch changed?"));
  }
  begin_epoch(s.epoch);
  state_.position = s.position;
  return absl::OkStatus();
}

void DataLoader::read_row(int64_t p, int* inputs, int* targets, int* positions) {
  const int64_t T = options_.T;
  const auto [shard, start] = locate(p);
  shard->read(start, std::span<int>(inputs, T));       // sequence[0 .. T)
  shard->read(start + 1, std::span<int>(targets, T));  // sequence[1 .. T+1)
  const std::vector<uint8_t>& mask = masks_[shard - shards_.data()];
  if (!mask.empty())
    for (int64_t i = 0; i < T; ++i)
      if (!(mask[start + 1 + i] & kMaskTrained)) targets[i] = -1;  // the loss skips it
  if (!positions) return;
  for (int64_t i = 0; i < T; ++i)  // a row starts an example; so does each flagged token
    positions[i] =
        i == 0 || (!mask.empty() && (mask[start + i] & kMaskExampleStart)) ? 0 : positions[i - 1] + 1;
}

void DataLoader::next_batch(int* inputs, int* targets, int* positions) {
  const int64_t W = options_.world_size, B = options_.B, T = options_.T;
  if (state_.position / (W * B) >= batches_per_epoch_) begin_epoch(state_.epoch + 1);
  for (int64_t b = 0; b < B; ++b)
    read_row(state_.position + options_.rank * B + b, inputs + b * T, targets + b * T,
             positions ? positions + b * T : nullptr);
  state_.position += W * B;
}

void DataLoader::read_sequence(int64_t index, int* inputs, int* targets, int* positions) {
  ZT_CHECK(index >= 0 && index < sequences_);
  if (state_.epoch != 0) begin_epoch(0);
  read_row(index, inputs, targets, positions);
}

std::vector<DataLoader::ShardIdentity> DataLoader::identity() const {
  std::vector<ShardIdentity> ids;
  for (size_t i = 0; i < shards_.size(); ++i) ids.push_back({shards_[i].path(), identity_[i]});
  return ids;
}

}  // namespace zt
