// ZeRO++ (Wang et al., "ZeRO++: Extremely Efficient Collective Communication for Giant Model
// Training", arXiv 2306.10209; DeepSpeed's zero_quantized_weights, zero_hpz_partition_size and
// zero_quantized_gradients) at stage 3: the quantized and hierarchical collectives the parameter
// gatherer (zero/param_gatherer.h) and the engine's gradient reduction use in place of the plain
// all-gather and reduce-scatter; and MiCS's sharding groups (stages 1-3), which the engine
// shards over instead of the world. The bytes each moves between nodes are in docs/zero.md.
//
// - qwZ (Section 3.1): a unit's all-gather sends each rank's shard as int8 in blocks of
//   kQwzBlock with an fp32 scale each (model/quantize.h): piece(s) = align4(s) + 4 ceil(s/512)
//   bytes a rank instead of 2s (bf16). Every rank dequantizes every piece, its own too, so all
//   ranks compute with the same weights.
// - hpZ (Section 3.2): the forward's gather also keeps this rank's 1/H of the whole unit (H =
//   zero_hpz_partition_size consecutive ranks, a node when H is the ranks per node); the
//   backward gathers from those secondary shards within the group, not across the world. Cost:
//   padded/H more parameters per rank from a unit's first gather in a step (an evaluation's
//   forward too) to the step's end.
// - qgZ (Section 3.3): the gradient reduce-scatter becomes two all-to-alls of int4 values in
//   blocks of kQgzBlock (128): within the node, each rank sends every node-local peer the shards of
//   the ranks with that peer's local rank (on every node), sums what it receives (fp32); then
//   across nodes, among the ranks of one local rank, each sends node m the sum for node m's
//   rank, and sums the M pieces it receives: its own shard summed over all N ranks. Cross-node
//   bytes: M pieces of s int4 values a rank, 1/L of the unit (L ranks a node) at a quarter of
//   bf16's width (an eighth of the fp32 reduce-scatter's). It replaces the reduce-scatter
//   only: with reduce_scatter false the gradients are all-reduced in fp32 as without it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "model/backend.h"
#include "zero/comm.h"

namespace zt {

struct ZeroppOptions {
  bool quantized_weights = false;   // qwZ
  int hpz_partition_size = 1;       // hpZ: ranks per secondary-partition group (1: off)
  bool quantized_gradients = false;  // qgZ
  // MiCS (Zhang et al., "MiCS: Near-linear Scaling for Training Gigantic Model on Public
  // Cloud", VLDB 2022; DeepSpeed's mics_shard_size): the model states are sharded within
  // groups of this many consecutive ranks and replicated across the groups (-1: off, the
  // world is one group). Gathers stay in the group; gradients are reduce-scattered in the
  // group, then each shard is all-reduced across the groups (MiCS's 2-hop synchronisation).
  int mics_shard_size = -1;
};

// Quantization of each (DeepSpeed quantizes qwZ to int8 in groups near 4-8K elements, qgZ to
// int4 in one group per weight row; ours are fixed blocks, the last of a shard shorter).
// A unit is one flat buffer in which norm weights (near 1) sit beside matrices (near 0.02): a
// block that straddles both quantizes those matrix elements coarsely, so qwZ's blocks are
// short too (512: the first step's loss moved 0.8% with blocks of 2048, under 0.1% with 512,
// ZeroStages.ZeroppStaysWithQuantizationErrorOfPlainStage3).
inline constexpr int kQwzBits = 8, kQwzBlock = 512;
// int4 has 15 levels: blocks of 128 keep an outlier from flattening much of its neighbourhood
// (scales cost 4 bytes per 64 of integers).
inline constexpr int kQgzBits = 4, kQgzBlock = 128;

// Bytes of s quantized elements as one collective carries them: the integers (padded to 4
// bytes), then the fp32 scales.
size_t quantized_piece_bytes(size_t s, int bits, int block);

// Whether the options can run on `world` (stage 3 is the config's check): hpz_partition_size
// and mics_shard_size (>= 2) divide the world size; qgZ needs every node to hold the same number
// L of consecutive ranks (mpirun's default --map-by slot placement); MiCS goes without ZeRO++.
// Collective (every rank gets the same verdict); InvalidArgument saying what to change.
absl::Status check_zeropp(const ZeroppOptions& o, Communicator& world);
// The rule check_zeropp applies, on stated facts (`zerotrain estimate` has no communicator):
// `ranks` in all, min_per_node..max_per_node ranks a node, node_by_node when consecutive ranks
// share a node.
absl::Status zeropp_fits(const ZeroppOptions& o, int ranks, int min_per_node, int max_per_node,
                         bool node_by_node);

// The ranks the model states are sharded over among `ranks`: MiCS's group (mics_shard_size,
// when it is a proper divisor of ranks), else all of them. The engine, the estimator and the
// step-time model all shard by this.
int sharding_group_size(const ZeroppOptions& o, int ranks);

// The groups the options need, split from `world` (collective; after check_zeropp).
struct ZeroppGroups {
  std::unique_ptr<Communicator> hpz;     // hpZ: consecutive groups of hpz_partition_size ranks
  std::unique_ptr<Communicator> node;    // qgZ: the ranks of this node
  std::unique_ptr<Communicator> across;  // qgZ: the ranks of this local rank, one per node
  std::unique_ptr<Communicator> mics;          // MiCS: this rank's shard group
  std::unique_ptr<Communicator> mics_replicas;  // MiCS: the ranks holding the same shard
};
ZeroppGroups make_zeropp_groups(const ZeroppOptions& o, Communicator& world);

// qwZ: one unit's quantized all-gather in flight. The constructor quantizes shard (s elements of
// t, device memory) and issues the all-gather of every rank's piece; finish() waits and writes
// the dequantized whole unit (s * world elements of t) to out.
class QuantizedAllGather {
 public:
  QuantizedAllGather() = default;
  QuantizedAllGather(Backend* be, Communicator* comm, const void* shard, size_t s, DType t);
  void finish(void* out);
  // Waits for the all-gather alone (no allocation, no throw): before the buffers go unfinished.
  void wait() { req_.wait(); }
  bool active() const { return be_ != nullptr; }

 private:
  Backend* be_ = nullptr;
  int world_ = 1;
  size_t s_ = 0;
  DType t_ = DType::kF32;
  DeviceBuffer send_, recv_;
  CommRequest req_;
};

// qgZ: one unit's hierarchical quantized reduction in flight. The constructor takes the whole
// unit's fp32 gradient (s * N elements; node-major ranks: rank = node * L + local) and issues the
// node-local all-to-all; finish() completes both hops and writes this rank's shard (s fp32),
// summed over all ranks (not averaged), to out. Deterministic: sums in a fixed rank order.
class QuantizedReduce {
 public:
  QuantizedReduce() = default;
  QuantizedReduce(Backend* be, const ZeroppGroups& g, const float* grads, size_t s);
  void finish(float* out);
  // Waits for the node-local all-to-all alone (no allocation, no throw): before the buffers go
  // unfinished.
  void wait() { req_.wait(); }
  bool active() const { return be_ != nullptr; }

 private:
  Backend* be_ = nullptr;
  Communicator* across_ = nullptr;
  int L_ = 1, M_ = 1;
  size_t s_ = 0;
  const float* grads_ = nullptr;
  DeviceBuffer send_, recv_;
  CommRequest req_;
};

}  // namespace zt
