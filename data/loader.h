// DataLoader: serves (B, T) batches of next-token pairs from llm.c token shards, as llm.c's
// DataLoader does. Each sample is a window of B*T+1 tokens; the windows of all ranks
// together tile a shard in steps of W*B*T tokens:
//   sample s of a shard, rank r: tokens [s*W*B*T + r*B*T, s*W*B*T + r*B*T + B*T + 1)
//   inputs = window[0 .. B*T), targets = window[1 .. B*T+1)
// Samples run through a shard, then the next shard; after the last shard a new epoch
// starts. With shuffle, each epoch permutes the shard order and each shard's sample order
// with std::mt19937_64 seeded from (seed, epoch, shard). Unlike llm.c (seed 42 + rank),
// every rank uses the same seed, so ranks stay disjoint under shuffling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/shard.h"

namespace zt {

struct DataLoaderOptions {
  std::string pattern;             // glob of shard files, e.g. "data/train_*.bin"
  std::vector<std::string> files;  // or an explicit list (used when non-empty)
  int B = 0;                       // micro-batch size (sequences per rank per step)
  int T = 0;                       // sequence length (tokens)
  int rank = 0;                    // this process, 0 <= rank < world_size
  int world_size = 1;              // number of data-parallel ranks
  uint64_t seed = 42;              // shuffle seed (same on every rank)
  bool shuffle = false;            // permute shards and samples each epoch
  int vocab_size = 0;              // the model's vocabulary; every token must be below it
};

// Where a loader is: the next sample is `sample` of the `shard`-th shard (in this epoch's
// order) of epoch `epoch`. For checkpoints: restore() continues from it.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t sample = 0;
};

class DataLoader {
 public:
  // Matches `pattern` (or takes `files`), sorts the paths, maps and checks every shard
  // (header, size, max token id: one scan of each shard, here at open).
  // Errors (InvalidArgument unless said): B, T, rank or world_size out of range; no file
  // matches the pattern (names it); a shard's header/size errors (see read_shard_header);
  // a shard with fewer than W*B*T+1 tokens (names it, its count and the need); a token id
  // >= vocab_size (names the id, shard and vocab size: tokenizer and model disagree).
  static absl::StatusOr<DataLoader> open(const DataLoaderOptions& options);

  // Fills the next batch: inputs (B, T) int32 token ids, targets (B, T) int32 = inputs
  // shifted left by one token (the next token of each position). Row-major, B*T ints each.
  void next_batch(int* inputs, int* targets);

  // Back to the start of epoch 0 (same order as a fresh loader).
  void reset();

  // Batches this rank draws per epoch (every rank draws the same number):
  // sum over shards of floor((num_tokens - 1) / (W*B*T)).
  int64_t num_batches_per_epoch() const { return batches_per_epoch_; }
  // Completed passes over the data; 0 until the first wrap-around.
  int64_t epoch() const { return state_.epoch; }
  DataLoaderState state() const { return state_; }
  // Continues from `state` (from state() of a loader with the same options).
  // Errors: InvalidArgument when `state` is outside this loader's shards/samples.
  absl::Status restore(const DataLoaderState& state);

  int64_t num_tokens() const { return num_tokens_; }  // all shards together
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const std::vector<MappedShard>& shards() const { return shards_; }

 private:
  DataLoader() = default;
  int64_t samples_in(int shard) const;  // samples of shard index `shard` (file order)
  void begin_epoch(int64_t epoch);      // sets shard_order_ and the first shard
  void begin_shard(int64_t pos);        // sets sample_order_ for shard_order_[pos]

  DataLoaderOptions options_;
  std::vector<MappedShard> shards_;    // sorted by path
  std::vector<int64_t> shard_order_;   // this epoch's order of shard indices
  std::vector<int64_t> sample_order_;  // this shard's sample order (empty: identity)
  DataLoaderState state_;
  int64_t window_stride_ = 0;  // W*B*T
  int64_t batches_per_epoch_ = 0;
  int64_t num_tokens_ = 0;
};

// Paths matching a glob `pattern`, sorted. Errors: NotFound naming the pattern when none.
absl::StatusOr<std::vector<std::string>> glob_shards(const std::string& pattern);

}  // namespace zt
