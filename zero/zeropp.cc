// ZeRO++'s quantized and hierarchical collectives (see zeropp.h).
#include "zero/zeropp.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/quantize.h"

namespace zt {
namespace {

size_t align4(size_t b) { return (b + 3) / 4 * 4; }

// x (s elements of t) quantized into one piece at dst: integers, then scales.
void quantize_piece(Backend* be, const void* x, DType t, size_t s, int bits, int block,
                    char* dst) {
  be->quantize_blocks(x, t, s, bits, block, dst,
                      reinterpret_cast<float*>(dst + align4(quant_bytes(s, bits))));
}
// The piece at src dequantized into y (s elements of t), or added to fp32 y.
void dequantize_piece(Backend* be, const char* src, size_t s, int bits, int block, void* y,
                      DType t, bool accumulate) {
  be->dequantize_blocks(src, reinterpret_cast<const float*>(src + align4(quant_bytes(s, bits))),
                        s, bits, block, y, t, accumulate);
}

}  // namespace

size_t quantized_piece_bytes(size_t s, int bits, int block) {
  return align4(quant_bytes(s, bits)) + 4 * quant_blocks(s, block);
}

absl::Status zeropp_fits(const ZeroppOptions& o, int ranks, int min_per_node, int max_per_node,
                         bool node_by_node) {
  const int n = ranks, L = max_per_node;
  // Suggest the ranks per node where that is a size the options take.
  const std::string per_node =
      L >= 2 && n % L == 0 ? absl::StrCat("the ranks per node (", L, ")") : "";
  if (o.hpz_partition_size < 1 || n % o.hpz_partition_size != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.zero_hpz_partition_size: ", o.hpz_partition_size,
        " must divide the number of ranks (", n, "); use ", per_node,
        per_node.empty() ? "" : " or ", "1 to turn hpZ off"));
  const bool zeropp = o.quantized_weights || o.hpz_partition_size > 1 || o.quantized_gradients;
  if (o.mics_shard_size != -1 && (o.mics_shard_size < 2 || n % o.mics_shard_size != 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.mics_shard_size: ", o.mics_shard_size,
        " must be at least 2 and divide the number of ranks (", n, "); use ", per_node,
        per_node.empty() ? "" : " for one group per node, or ", "-1 to turn MiCS off"));
  if (o.mics_shard_size != -1 && zeropp)
    return absl::InvalidArgumentError(
        "zero_optimization: MiCS (mics_shard_size) and ZeRO++ (zero_quantized_weights, "
        "zero_hpz_partition_size, zero_quantized_gradients) together are not implemented; "
        "choose one");
  if (o.quantized_gradients && (min_per_node != max_per_node || n % L != 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.zero_quantized_gradients: qgZ's hierarchical all-to-all needs the "
        "same number of ranks on every node (here from ", min_per_node, " to ", max_per_node,
        "); give every node the same slots, or turn qgZ off"));
  if (o.quantized_gradients && !node_by_node)
    return absl::InvalidArgumentError(
        "zero_optimization.zero_quantized_gradients: qgZ's hierarchical all-to-all needs the "
        "ranks placed node by node (ranks 0..L-1 on the first node, ...), but they are not; "
        "launch with mpirun's default --map-by slot (not --map-by node), or turn qgZ off");
  return absl::OkStatus();
}

absl::Status check_zeropp(const ZeroppOptions& o, Communicator& world) {
  const int r = world.rank(), L = world.local_size();
  // One reduction: the smallest and largest ranks-per-node, and whether any rank sits outside
  // the run of consecutive ranks its local rank implies; every rank then judges the same facts.
  double v[3] = {(double)-L, (double)L, world.local_rank() != r % L ? 1.0 : 0.0};
  world.all_reduce_scalars(v, 3, ScalarOp::kMax);
  return zeropp_fits(o, world.world_size(), (int)-v[0], (int)v[1], v[2] == 0);
}

int sharding_group_size(const ZeroppOptions& o, int ranks) {
  const int S = o.mics_shard_size;
  return S > 1 && S < ranks && ranks % S == 0 ? S : ranks;
}

ZeroppGroups make_zeropp_groups(const ZeroppOptions& o, Communicator& world) {
  ZeroppGroups g;
  const int r = world.rank(), L = world.local_size();
  if (o.hpz_partition_size > 1) g.hpz = world.split(r / o.hpz_partition_size, r);
  if (o.quantized_gradients) {
    g.node = world.split(r / L, r);
    g.across = world.split(r % L, r);
  }
  if (const int S = sharding_group_size(o, world.world_size()); S < world.world_size()) {
    g.mics = world.split(r / S, r);
    g.mics_replicas = world.split(r % S, r);
  }
  return g;
}

QuantizedAllGather::QuantizedAllGather(Backend* be, Communicator* comm, const void* shard,
                                       size_t s, DType t)
    : be_(be), world_(comm->world_size()), s_(s), t_(t) {
  const size_t pb = quantized_piece_bytes(s, kQwzBits, kQwzBlock);
  send_ = DeviceBuffer(be, pb, MemCategory::kCommBuffers);
  recv_ = DeviceBuffer(be, pb * world_, MemCategory::kCommBuffers);
  quantize_piece(be, shard, t, s, kQwzBits, kQwzBlock, static_cast<char*>(send_.data()));
  req_ = comm->all_gather_bytes(send_.data(), recv_.data(), pb, (int64_t)s);
}

void QuantizedAllGather::finish(void* out) {
  req_.wait();
  const size_t pb = quantized_piece_bytes(s_, kQwzBits, kQwzBlock);
  for (int k = 0; k < world_; ++k)
    dequantize_piece(be_, static_cast<const char*>(recv_.data()) + k * pb, s_, kQwzBits,
                     kQwzBlock, static_cast<char*>(out) + k * s_ * dtype_size(t_), t_, false);
  send_.reset();
  recv_.reset();
  be_ = nullptr;
}

QuantizedReduce::QuantizedReduce(Backend* be, const ZeroppGroups& g, const float* grads,
                                 size_t s)
    : be_(be),
      across_(g.across.get()),
      L_(g.node->world_size()),
      M_(g.across->world_size()),
      s_(s),
      grads_(grads) {
  if (L_ == 1) return;  // one rank a node: nothing to exchange within it
  // Piece for node-local peer p: the shards of ranks m L + p, m = 0..M-1, each quantized alone.
  const size_t cb = quantized_piece_bytes(s, kQgzBits, kQgzBlock);
  send_ = DeviceBuffer(be, cb * M_ * L_, MemCategory::kCommBuffers);
  recv_ = DeviceBuffer(be, cb * M_ * L_, MemCategory::kCommBuffers);
  char* dst = static_cast<char*>(send_.data());
  for (int p = 0; p < L_; ++p)
    for (int m = 0; m < M_; ++m)
      quantize_piece(be, grads + (size_t)(m * L_ + p) * s, DType::kF32, s, kQgzBits, kQgzBlock,
                     dst + (size_t)(p * M_ + m) * cb);
  req_ = g.node->all_to_all_bytes(send_.data(), recv_.data(), cb * M_, (int64_t)(s * M_));
}

void QuantizedReduce::finish(float* out) {
  const size_t cb = quantized_piece_bytes(s_, kQgzBits, kQgzBlock);
  // sums[m]: this node's sum of the shard of rank m L + (our local rank), m = 0..M-1.
  DeviceBuffer sums_buf;
  const float* sums = grads_;  // L = 1: our own gradient is the node's sum
  if (L_ > 1) {
    req_.wait();
    sums_buf = DeviceBuffer(be_, s_ * M_ * 4, MemCategory::kCommBuffers);
    be_->zero(sums_buf.data(), sums_buf.bytes());
    const char* src = static_cast<const char*>(recv_.data());
    for (int p = 0; p < L_; ++p)  // node-local ranks in order: the same sum on every run
      for (int m = 0; m < M_; ++m)
        dequantize_piece(be_, src + (size_t)(p * M_ + m) * cb, s_, kQgzBits, kQgzBlock,
                         sums_buf.f32() + (size_t)m * s_, DType::kF32, true);
    sums = sums_buf.f32();
    send_.reset();
    recv_.reset();
  }
  if (M_ == 1) {
    if (sums != out) be_->copy(out, sums, s_ * 4);
  } else {
    // Across nodes: node m gets the sum for its rank of our local rank; ours arrive from each.
    DeviceBuffer send(be_, cb * M_, MemCategory::kCommBuffers),
        recv(be_, cb * M_, MemCategory::kCommBuffers);
    for (int m = 0; m < M_; ++m)
      quantize_piece(be_, sums + (size_t)m * s_, DType::kF32, s_, kQgzBits, kQgzBlock,
                     static_cast<char*>(send.data()) + (size_t)m * cb);
    across_->all_to_all_bytes(send.data(), recv.data(), cb, (int64_t)s_).wait();
    be_->zero(out, s_ * 4);
    for (int m = 0; m < M_; ++m)
      dequantize_piece(be_, static_cast<const char*>(recv.data()) + (size_t)m * cb, s_, kQgzBits,
                       kQgzBlock, out, DType::kF32, true);
  }
  be_ = nullptr;
}

}  // namespace zt
