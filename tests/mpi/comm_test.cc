// Multi-rank tests of the MPI communicator. Reference: every expected value is computed by hand
// from the rank ids (inputs are small integers, exact in fp32), never by another communicator.
#include "zero/comm.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "zero/mpi_comm.h"

namespace zt {
namespace {

class MpiCommTest : public testing::Test {
 protected:
  void SetUp() override {
    auto c = make_mpi_communicator();
    ASSERT_TRUE(c.ok()) << c.status();
    comm = std::move(c).value();
    r = comm->rank();
    w = comm->world_size();
  }
  std::unique_ptr<Communicator> comm;
  int r = 0, w = 1;
};

// Awkward sizes: 1, primes, one past a power of two, and one over a million.
const std::vector<size_t> kSizes = {1, 7, 13, 4097, 1000003};

TEST_F(MpiCommTest, WorldMatchesLaunchAndIsOneNode) {
  EXPECT_GE(w, 2);
  EXPECT_LT(r, w);
  EXPECT_EQ(comm->local_size(), w);  // mpirun on this one machine
  EXPECT_EQ(comm->local_rank(), r);
}

// map_node_shared: every rank maps the same bytes (each writes its own word, every rank reads
// all of them after a barrier), and the name is gone from /dev/shm once it returns on rank 0. More
// than /dev/shm holds fails on every rank, none hanging: rank 0 with the OS's error, the others
// Aborted; nothing is left behind.
TEST_F(MpiCommTest, NodeSharedMemoryIsOneAndFailsOnEveryRankTogether) {
  absl::StatusOr<SharedMemory> m = map_node_shared(*comm, 4096);
  ASSERT_TRUE(m.ok()) << m.status();
  if (r == 0)  // rank 0 removes it once the others have mapped it, before returning
    EXPECT_NE(::access(("/dev/shm" + m->name()).c_str(), F_OK), 0) << "the name should be gone";
  auto* words = static_cast<int*>(m->data());
  words[r] = 100 + r;
  comm->barrier();
  for (int k = 0; k < w; ++k) EXPECT_EQ(words[k], 100 + k) << "rank " << k << "'s word";
  comm->barrier();  // nobody unmaps before every rank has read

  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  if (fs.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  const size_t too_big = (size_t)fs.f_blocks * fs.f_frsize * 2 + (size_t{1} << 30);
  absl::StatusOr<SharedMemory> big = map_node_shared(*comm, too_big);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(),
            r == 0 ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kAborted)
      << big.status();
  if (r != 0) return;  // rank 0 created it, under its pid
  const std::string prefix = "zerotrain-" + std::to_string(::getpid()) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << e.path() << " left behind";
}

// buf[i] = r + 1 + i/2 on rank r  ->  sum = w(w+1)/2 + w*i/2.
TEST_F(MpiCommTest, AllReduceSumsHandComputedValues) {
  for (size_t n : kSizes) {
    std::vector<float> buf(n);
    for (size_t i = 0; i < n; ++i)
      buf[i] = static_cast<float>(r + 1) + 0.5f * static_cast<float>(i % 64);
    comm->all_reduce(buf.data(), n, DType::kF32).wait();
    for (size_t i = 0; i < n; ++i) {
      const float want = w * (w + 1) / 2.f + w * 0.5f * static_cast<float>(i % 64);
      ASSERT_EQ(buf[i], want) << "n=" << n << " i=" << i;
    }
  }
}

// in[j] = 1000*r + j % 4096 on rank r  ->  out[i] on rank r = 1000*w(w-1)/2 + w*((r*n+i) % 4096).
float rs_input(int rank, size_t j) { return 1000.f * rank + static_cast<float>(j % 4096); }
float rs_expected(int w, int r, size_t n, size_t i) {
  return 1000.f * w * (w - 1) / 2.f + w * static_cast<float>((r * n + i) % 4096);
}

TEST_F(MpiCommTest, ReduceScatterSumsEachRanksBlock) {
  for (size_t n : kSizes) {
    std::vector<float> in(n * w), out(n, -1.f);
    for (size_t j = 0; j < in.size(); ++j) in[j] = rs_input(r, j);
    comm->reduce_scatter(in.data(), out.data(), n, DType::kF32).wait();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], rs_expected(w, r, n, i)) << n << " " << i;
  }
}

TEST_F(MpiCommTest, ReduceScatterInPlaceAndIntoOwnShard) {
  const size_t n = 1001;
  std::vector<float> buf(n * w);
  for (size_t j = 0; j < buf.size(); ++j) buf[j] = rs_input(r, j);
  comm->reduce_scatter(buf.data(), buf.data(), n, DType::kF32).wait();  // out == in
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], rs_expected(w, r, n, i)) << i;

  for (size_t j = 0; j < buf.size(); ++j) buf[j] = rs_input(r, j);
  float* shard = buf.data() + r * n;  // ZeRO's usage: the rank's own shard of the full buffer
  comm->reduce_scatter(buf.data(), shard, n, DType::kF32).wait();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(shard[i], rs_expected(w, r, n, i)) << i;
}

// in[i] = 100*r + i % 97 on rank r  ->  out[s*n + i] = 100*s + i % 97.
TEST_F(MpiCommTest, AllGatherConcatenatesInRankOrder) {
  for (size_t n : kSizes) {
    std::vector<float> in(n), out(n * w, -1.f);
    for (size_t i = 0; i < n; ++i) in[i] = 100.f * r + static_cast<float>(i % 97);
    comm->all_gather(in.data(), out.data(), n, DType::kF32).wait();
    for (int s = 0; s < w; ++s)
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[s * n + i], 100.f * s + static_cast<float>(i % 97)) << n << " " << s;
  }
}

TEST_F(MpiCommTest, AllGatherFromOwnShardInPlace) {
  const size_t n = 333;
  std::vector<float> buf(n * w, -1.f);
  for (size_t i = 0; i < n; ++i) buf[r * n + i] = 100.f * r + static_cast<float>(i);
  comm->all_gather(buf.data() + r * n, buf.data(), n, DType::kF32).wait();
  for (int s = 0; s < w; ++s)
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[s * n + i], 100.f * s + i);
}

// 16-bit dtypes are moved as bytes: every bit pattern (including NaN ones) arrives unchanged.
TEST_F(MpiCommTest, AllGatherMovesBf16AndFp16Bits) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    const size_t n = 515;
    std::vector<uint16_t> in(n), out(n * w, 0);
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint16_t>((r << 12) ^ (i * 131u) ^ 0x7fc1u);
    comm->all_gather(in.data(), out.data(), n, t).wait();
    for (int s = 0; s < w; ++s)
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[s * n + i], static_cast<uint16_t>((s << 12) ^ (i * 131u) ^ 0x7fc1u));
  }
  // A bf16 value gathered from every rank decodes to that rank's number.
  uint16_t mine = f32_to_bf16(static_cast<float>(r) + 0.5f);
  std::vector<uint16_t> all(w);
  comm->all_gather(&mine, all.data(), 1, DType::kBF16).wait();
  for (int s = 0; s < w; ++s) EXPECT_EQ(bf16_to_f32(all[s]), s + 0.5f);
}

// Several requests in flight at once, of different kinds, waited in an arbitrary order.
TEST_F(MpiCommTest, NonBlockingOpsOutstandingTogether) {
  const size_t n = 4099;
  std::vector<float> ar(n, static_cast<float>(r + 1));
  std::vector<float> rs_in(n * w), rs_out(n);
  for (size_t j = 0; j < rs_in.size(); ++j) rs_in[j] = rs_input(r, j);
  std::vector<float> ag_in(n, static_cast<float>(r)), ag_out(n * w);
  CommRequest a = comm->all_reduce(ar.data(), n, DType::kF32);
  CommRequest b = comm->reduce_scatter(rs_in.data(), rs_out.data(), n, DType::kF32);
  CommRequest c = comm->all_gather(ag_in.data(), ag_out.data(), n, DType::kF32);
  c.wait();
  a.wait();
  b.wait();
  b.wait();  // waiting twice is harmless
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(ar[i], w * (w + 1) / 2.f);
    ASSERT_EQ(rs_out[i], rs_expected(w, r, n, i));
  }
  for (int s = 0; s < w; ++s) ASSERT_EQ(ag_out[s * n + n / 2], static_cast<float>(s));
}

// Ops run in issue order on every rank, so waiting in reverse order still gives each buffer
// its own sum: buffer k holds r + k on rank r  ->  w(w-1)/2 + w*k.
TEST_F(MpiCommTest, ManyRequestsWaitedInReverseOrder) {
  const int k_ops = 32;
  const size_t n = 257;
  std::vector<std::vector<float>> bufs(k_ops);
  std::vector<CommRequest> reqs;
  for (int k = 0; k < k_ops; ++k) {
    bufs[k].assign(n + k, static_cast<float>(r + k));
    reqs.push_back(comm->all_reduce(bufs[k].data(), bufs[k].size(), DType::kF32));
  }
  for (int k = k_ops - 1; k >= 0; --k) {
    reqs[k].wait();
    for (float v : bufs[k]) ASSERT_EQ(v, w * (w - 1) / 2.f + w * k) << k;
  }
}

TEST_F(MpiCommTest, BlockingCallsBetweenPendingRequests) {
  std::vector<float> x(100, 1.f);
  CommRequest pending = comm->all_reduce(x.data(), x.size(), DType::kF32);
  double s = r;
  comm->all_reduce_scalars(&s, 1, ScalarOp::kSum);  // queued behind the all-reduce
  comm->barrier();
  EXPECT_EQ(s, w * (w - 1) / 2.0);
  pending.wait();
  EXPECT_EQ(x[99], static_cast<float>(w));
}

TEST_F(MpiCommTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < w; ++root) {
    std::string msg(1237, '?');
    if (r == root) {
      for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>('a' + (i + root) % 26);
    }
    comm->broadcast(msg.data(), msg.size(), root);
    for (size_t i = 0; i < msg.size(); ++i)
      ASSERT_EQ(msg[i], static_cast<char>('a' + (i + root) % 26)) << root << " " << i;
  }
}

TEST_F(MpiCommTest, BarrierReturnsOnEveryRank) {
  for (int i = 0; i < 10; ++i) comm->barrier();
  SUCCEED();
}

TEST_F(MpiCommTest, ScalarsSumMaxMin) {
  double v[3] = {static_cast<double>(r), 0.25 * r, -1.0 * r};
  double sum[3], mx[3], mn[3];
  std::memcpy(sum, v, sizeof v);
  std::memcpy(mx, v, sizeof v);
  std::memcpy(mn, v, sizeof v);
  comm->all_reduce_scalars(sum, 3, ScalarOp::kSum);
  comm->all_reduce_scalars(mx, 3, ScalarOp::kMax);
  comm->all_reduce_scalars(mn, 3, ScalarOp::kMin);
  const double tri = w * (w - 1) / 2.0;
  EXPECT_EQ(sum[0], tri);
  EXPECT_EQ(sum[1], 0.25 * tri);
  EXPECT_EQ(sum[2], -tri);
  EXPECT_EQ(mx[0], w - 1);
  EXPECT_EQ(mx[2], 0.0);
  EXPECT_EQ(mn[0], 0.0);
  EXPECT_EQ(mn[2], -(w - 1.0));
}

// Paper convention (ZeRO section 7): all-reduce of n -> 2n; reduce-scatter and all-gather over
// the full buffer of n*w elements -> n*w; broadcast counts bytes; scalars apart (8 bytes each).
TEST_F(MpiCommTest, CountersFollowPaperConvention) {
  comm->reset_stats();
  std::vector<float> a(10), rs_in(3 * w), rs_out(3);
  std::vector<uint16_t> ag_in(5), ag_out(5 * w);
  comm->all_reduce(a.data(), 10, DType::kF32).wait();
  comm->all_reduce(a.data(), 10, DType::kF32).wait();
  comm->reduce_scatter(rs_in.data(), rs_out.data(), 3, DType::kF32).wait();
  comm->all_gather(ag_in.data(), ag_out.data(), 5, DType::kBF16).wait();
  char b[7] = {};
  comm->broadcast(b, 7, 0);
  double s[2] = {};
  comm->all_reduce_scalars(s, 2, ScalarOp::kMax);
  comm->barrier();  // not a counted kind
  const CommStats& st = comm->stats();
  auto at = [&](CollKind k) { return st[static_cast<size_t>(k)]; };
  EXPECT_EQ(at(CollKind::kAllReduce).calls, 2);
  EXPECT_EQ(at(CollKind::kAllReduce).elements, 40);
  EXPECT_EQ(at(CollKind::kAllReduce).bytes, 160);
  EXPECT_EQ(at(CollKind::kReduceScatter).calls, 1);
  EXPECT_EQ(at(CollKind::kReduceScatter).elements, 3 * w);
  EXPECT_EQ(at(CollKind::kReduceScatter).bytes, 12 * w);
  EXPECT_EQ(at(CollKind::kAllGather).calls, 1);
  EXPECT_EQ(at(CollKind::kAllGather).elements, 5 * w);
  EXPECT_EQ(at(CollKind::kAllGather).bytes, 10 * w);
  EXPECT_EQ(at(CollKind::kBroadcast).calls, 1);
  EXPECT_EQ(at(CollKind::kBroadcast).bytes, 7);
  EXPECT_EQ(at(CollKind::kScalar).calls, 1);
  EXPECT_EQ(at(CollKind::kScalar).elements, 2);
  EXPECT_EQ(at(CollKind::kScalar).bytes, 16);
  comm->reset_stats();
  EXPECT_EQ(comm->stats()[0].calls, 0);
}

// Groups and links: with consecutive pairs of ranks as "nodes" (make_mpi_communicator's
// ranks_per_node), the world spans nodes from 3 ranks on, a node's group never does, and the
// group of each node's k-th rank does when there are two nodes or more. Bytes collectives move
// what each rank wrote, and a group's collectives count into the world's counters, as inter-node
// bytes exactly when the group spans nodes.
TEST_F(MpiCommTest, SplitGroupsMoveBytesAndCountTheirLinks) {
  EXPECT_FALSE(comm->spans_nodes());  // one machine
  auto c = make_mpi_communicator(/*ranks_per_node=*/2);
  ASSERT_TRUE(c.ok()) << c.status();
  Communicator& world = **c;
  EXPECT_EQ(world.spans_nodes(), w > 2);
  EXPECT_EQ(world.local_rank(), r % 2);
  std::unique_ptr<Communicator> node = world.split(r / 2, r);
  std::unique_ptr<Communicator> cross = world.split(r % 2, r);
  EXPECT_FALSE(node->spans_nodes());
  EXPECT_EQ(node->world_size(), std::min(2, w - r / 2 * 2));
  EXPECT_EQ(node->rank(), r % 2);
  EXPECT_EQ(cross->world_size(), (w - r % 2 + 1) / 2);
  EXPECT_EQ(cross->rank(), r / 2);
  EXPECT_EQ(cross->spans_nodes(), cross->world_size() > 1);

  world.reset_stats();
  // all_gather_bytes in the node group: 3 bytes a rank, each the world rank and its position.
  const int nw = node->world_size();
  std::vector<uint8_t> mine = {uint8_t(r), uint8_t(10 + r), uint8_t(20 + r)}, got(3 * nw);
  node->all_gather_bytes(mine.data(), got.data(), 3, 6).wait();
  for (int k = 0; k < nw; ++k) {
    const int from = r / 2 * 2 + k;
    EXPECT_EQ(got[3 * k], from);
    EXPECT_EQ(got[3 * k + 2], 20 + from);
  }
  // all_to_all_bytes over the world: piece p of rank q holds (q, p); rank r receives (q, r).
  std::vector<uint8_t> send(2 * w), recv(2 * w);
  for (int p = 0; p < w; ++p) send[2 * p] = uint8_t(r), send[2 * p + 1] = uint8_t(p);
  world.all_to_all_bytes(send.data(), recv.data(), 2, 4).wait();
  for (int q = 0; q < w; ++q) {
    EXPECT_EQ(recv[2 * q], q);
    EXPECT_EQ(recv[2 * q + 1], r);
  }
  // A float all-gather in the cross-node group.
  const int cw = cross->world_size();
  std::vector<float> f = {float(r)}, fall(cw);
  cross->all_gather(f.data(), fall.data(), 1, DType::kF32).wait();
  for (int k = 0; k < cw; ++k) EXPECT_EQ(fall[k], float(r % 2 + 2 * k));

  const CommStats& st = world.stats();
  EXPECT_EQ(&st, &node->stats()) << "one set of counters for the world and its groups";
  const CollCounters ag = st[(size_t)CollKind::kAllGather], a2a = st[(size_t)CollKind::kAllToAll];
  EXPECT_EQ(ag.calls, 2);
  EXPECT_EQ(ag.elements, 6 * nw + cw);
  EXPECT_EQ(ag.bytes, 3 * nw + 4 * cw);
  EXPECT_EQ(ag.inter_node_bytes, cross->spans_nodes() ? 4 * cw : 0);
  EXPECT_EQ(a2a.calls, 1);
  EXPECT_EQ(a2a.elements, 4 * w);
  EXPECT_EQ(a2a.bytes, 2 * w);
  EXPECT_EQ(a2a.inter_node_bytes, w > 2 ? 2 * w : 0);
}

TEST_F(MpiCommTest, CheckSameAcceptsIdenticalStrings) {
  EXPECT_TRUE(check_same_on_all_ranks(*comm, "ds_config", "{\"stage\": 3}").ok());
  EXPECT_TRUE(check_same_on_all_ranks(*comm, "empty", "").ok());
}

// Each rank passes a different string on purpose: every rank gets the error (no hang), which
// names the label and the ranks that disagree with rank 0.
TEST_F(MpiCommTest, CheckSameFailsOnEveryRankNamingDifferingRanks) {
  absl::Status st = check_same_on_all_ranks(*comm, "model config", "cfg-" + std::to_string(r));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  std::string want = "rank(s) 1";
  for (int s = 2; s < w; ++s) want += ", " + std::to_string(s);
  EXPECT_NE(st.message().find("model config"), std::string::npos) << st;
  EXPECT_NE(st.message().find(want + " of " + std::to_string(w)), std::string::npos) << st;

  // Only the last rank differs, with a string of the same length.
  st = check_same_on_all_ranks(*comm, "unit order", r == w - 1 ? "abd" : "abc");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank(s) " + std::to_string(w - 1) + " of"), std::string::npos) << st;
}

}  // namespace
}  // namespace zt
