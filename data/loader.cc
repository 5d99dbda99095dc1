#include "data/loader.h"

#include <glob.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

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
  loader.window_stride_ = int64_t{options.world_size} * options.B * options.T;
  std::string too_small;  // shards skipped for being shorter than one batch (a short tail)
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
    if (shard.num_tokens() < loader.window_stride_ + 1) {
      absl::StrAppend(&too_small, too_small.empty() ? "" : ", ", "'", path, "' (",
                      shard.num_tokens(), " tokens)");
      continue;
    }
    loader.num_tokens_ += shard.num_tokens();
    loader.batches_per_epoch_ += (shard.num_tokens() - 1) / loader.window_stride_;
    loader.shards_.push_back(std::move(shard));
  }
  if (loader.shards_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "every token shard is too small for one batch: ", too_small,
        "; one batch needs B*T+1 = ", int64_t{options.B} * options.T + 1,
        " tokens per rank, W*B*T+1 = ", loader.window_stride_ + 1, " for ", options.world_size,
        " rank(s) (B=", options.B, " T=", options.T, "). Use a smaller B or T, or more data."));
  }
  if (!too_small.empty())
    std::fprintf(stderr, "warning: skipping token shard(s) shorter than one batch: %s\n",
                 too_small.c_str());
  loader.reset();
  return loader;
}

int64_t DataLoader::samples_in(int shard) const {
  return (shards_[shard].num_tokens() - 1) / window_stride_;
}

void DataLoader::begin_epoch(int64_t epoch) {
  const auto n = static_cast<int64_t>(shards_.size());
  if (options_.shuffle) {
    shard_order_ = permutation(n, options_.seed, epoch, -1);
  } else {
    shard_order_.resize(n);
    std::iota(shard_order_.begin(), shard_order_.end(), 0);
  }
  state_.epoch = epoch;
  begin_shard(0);
}

void DataLoader::begin_shard(int64_t pos) {
  const int64_t shard = shard_order_[pos];
  sample_order_.clear();
  if (options_.shuffle) {
    sample_order_ = permutation(samples_in(shard), options_.seed, state_.epoch, shard);
  }
  state_.shard = pos;
  state_.sample = 0;
}

void DataLoader::reset() { begin_epoch(0); }

absl::Status DataLoader::restore(const DataLoaderState& s) {
  if (s.epoch < 0 || s.shard < 0 || s.shard >= num_shards() || s.sample < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader state (epoch ", s.epoch, ", shard ", s.shard, ", sample ", s.sample,
        ") does not fit ", num_shards(), " shard(s); were the shards or B, T, W changed?"));
  }
  begin_epoch(s.epoch);
  begin_shard(s.shard);
  if (s.sample > samples_in(shard_order_[s.shard])) {
    reset();
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader state: sample ", s.sample, " is past the end of shard '",
        shards_[shard_order_[s.shard]].path(), "'; were the shards or B, T, W changed?"));
  }
  state_.sample = s.sample;
  return absl::OkStatus();
}

void DataLoader::next_batch(int* inputs, int* targets) {
  while (state_.sample >= samples_in(shard_order_[state_.shard])) {
    if (state_.shard + 1 == num_shards()) {
      begin_epoch(state_.epoch + 1);
    } else {
      begin_shard(state_.shard + 1);
    }
  }
  const int64_t sample = sample_order_.empty() ? state_.sample : sample_order_[state_.sample];
  const int64_t bt = int64_t{options_.B} * options_.T;
  const int64_t start = sample * window_stride_ + options_.rank * bt;
  const MappedShard& shard = shards_[shard_order_[state_.shard]];
  shard.read(start, std::span<int>(inputs, bt));       // window[0 .. B*T)
  shard.read(start + 1, std::span<int>(targets, bt));  // window[1 .. B*T+1)
  ++state_.sample;
}

}  // namespace zt
