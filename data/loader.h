// DataLoader: serves (B, T) batches of next-token pairs from llm.c token shards. The unit is a
// sequence: sequence i of a shard is its tokens [i*T, i*T + T + 1) (inputs the first T,
// targets the last T). Each epoch is one global stream of every shard's sequences: the shards
// in order and each shard's sequences in order, or, with shuffle, both permuted by
// std::mt19937_64 seeded from (seed, epoch, shard) alone. Micro-batch m of rank r (of W) takes
// the B sequences at stream positions [(m*W + r)*B, (m*W + r + 1)*B), so
//   - without shuffle the layout within a shard is llm.c's (rank r reads tokens
//     [m*W*B*T + r*B*T, ... + B*T + 1)); unlike llm.c, a shard's tail sequences are used and a
//     micro-batch may continue into the next shard;
//   - the stream does not depend on W, B or gradient accumulation: W ranks draw together what
//     one rank draws in W micro-batches, and one rank at B = W*b what W ranks draw at b. So a
//     run sees the same data on any cluster size, and a resume at another world size goes on
//     with the same stream. (PyTorch's DistributedSampler also splits one permutation of the
//     epoch across ranks, interleaved; here each rank takes a block of B.) With shuffle the
//     permutation is of the shard order and of each shard's sequences, so a batch draws from
//     one shard, or two at a boundary.
// An epoch ends when fewer than a global batch (W*B*micro_batches_per_step sequences) remain;
// they are skipped, as a drop_last sampler does, so epochs end on the same step at any W.
// Every rank uses the same seed (unlike llm.c's 42 + rank), so ranks stay disjoint.
// A shard X.bin with a loss mask X.mask beside it (instruction data, data/mask.h) gives -1
// (ignored by the loss) as the target of every untrained token; a mask of packed rows also
// gives each token its position within its example (packed()), for the model's packed rows.
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
  int micro_batches_per_step = 1;  // gradient accumulation: an epoch ends on a whole step
  uint64_t seed = 42;              // shuffle seed (same on every rank)
  bool shuffle = false;            // permute shards and samples each epoch
  int vocab_size = 0;              // the model's vocabulary; every token must be below it
};

// Where the global stream is: `position` sequences of epoch `epoch` have been drawn by all
// ranks together (a multiple of W*B). It does not depend on W or B, so a checkpoint's state
// restores at another world size with the same global batch. restore() continues from it.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t position = 0;
};

class DataLoader {
 public:
  // Matches `pattern` (or takes `files`), sorts the paths, maps and checks every shard
  // (header, size, max token id: one scan of each shard, here at open). A shard shorter than
  // one sequence (T+1 tokens) is skipped with a warning.
  // Errors (InvalidArgument unless said): B, T, rank or world_size out of range; no file
  // matches the pattern (names it); a shard's header/size errors (see read_shard_header);
  // fewer than W*B sequences in all (names the shards, the count and the need); a token id
  // >= vocab_size (names the id, shard and vocab size: tokenizer and model disagree); a mask
  // that is unreadable, of another length, or laid out for another T (names both).
  static absl::StatusOr<DataLoader> open(const DataLoaderOptions& options);

  // Fills the next batch: inputs (B, T) int32 token ids, targets (B, T) int32 = inputs
  // shifted left by one token (the next token of each position). Row-major, B*T ints each.
  // positions (B, T), when not null: each token's position within its example (0 at a row's
  // start and at every example start of a packed mask, +1 after; t where nothing is packed).
  void next_batch(int* inputs, int* targets, int* positions = nullptr);
  // Sequence `index` of epoch 0's stream (0 <= index < num_sequences(), checked) into inputs,
  // targets and positions (T ints each; positions may be null), as next_batch fills a row. For
  // a set defined by the data alone (validation), whatever the batch and the ranks. A loader
  // past epoch 0 goes back to its start: use one loader either this way or with next_batch.
  void read_sequence(int64_t index, int* inputs, int* targets, int* positions = nullptr);
  // Sequences of T+1 tokens in all shards (an epoch's, before dropping the last partial step).
  int64_t num_sequences() const { return sequences_; }
  // Whether some shard's mask packs several examples a row (prepare --pack): the trainer then
  // passes positions to the model (Transformer::forward).
  bool packed() const { return packed_; }
  // Whether some shard has a loss mask: targets may then be -1, and the count of trained
  // targets differs from batch to batch.
  bool masked() const { return masked_; }
  // One line per shard, in path order: its path, token count and CRC-32s (of the file and of
  // its mask). What ranks compare to know they read the same data.
  struct ShardIdentity {
    std::string path;
    std::string what;  // "N tokens, CRC-32 X" (and the mask's): the path left out
  };
  std::vector<ShardIdentity> identity() const;

  // Back to the start of epoch 0 (same order as a fresh loader).
  void reset();

  // Batches this rank draws per epoch (every rank draws the same number): with G = gradient
  // accumulation, G * floor(sum over shards of floor((num_tokens - 1) / T) / (W*B*G)).
  int64_t num_batches_per_epoch() const { return batches_per_epoch_; }
  // Completed passes over the data; 0 until the first wrap-around.
  int64_t epoch() const { return state_.epoch; }
  DataLoaderState state() const { return state_; }
  // Continues from `state` (from state() of a loader over the same shards and T; W and B may
  // differ when W*B divides the position). Errors: InvalidArgument when the position is past
  // the epoch's end or not a multiple of W*B.
  absl::Status restore(const DataLoaderState& state);

  int64_t num_tokens() const { return num_tokens_; }  // all shards together
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const std::vector<MappedShard>& shards() const { return shards_; }

 private:
  DataLoader() = default;
  void begin_epoch(int64_t epoch);  // sets shard_order_ and first_ for `epoch`
  // The shard and the first token of stream position p in this epoch.
  std::pair<const MappedShard*, int64_t> locate(int64_t p);
  // Stream position p of this epoch into one row (T ints each; positions may be null).
  void read_row(int64_t p, int* inputs, int* targets, int* positions);

  DataLoaderOptions options_;
  std::vector<MappedShard> shards_;   // sorted by path, each at least one sequence long
  std::vector<std::vector<uint8_t>> masks_;  // per shard: its loss mask (data/mask.h) or empty
  std::vector<std::string> identity_;        // per shard: ShardIdentity::what
  std::vector<int64_t> shard_order_;  // this epoch's order of shard indices
  std::vector<int64_t> first_;        // stream position of shard_order_[i]'s first sequence
  int64_t perm_shard_ = -1;           // the shard whose sequence order perm_ holds (shuffle)
  std::vector<int64_t> perm_;
  DataLoaderState state_;
  int64_t sequences_ = 0;  // per epoch, all shards
  int64_t batches_per_epoch_ = 0;
  int64_t num_tokens_ = 0;
  bool packed_ = false;
  bool masked_ = false;
};

// Paths matching a glob `pattern`, sorted. Errors: NotFound naming the pattern when none.
absl::StatusOr<std::vector<std::string>> glob_shards(const std::string& pattern);

}  // namespace zt
