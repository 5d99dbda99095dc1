// The single-process communicator (world size 1). Reference: with one rank, a sum over ranks is
// the rank's own value, reduce-scatter and all-gather are copies; counters follow the paper's
// convention with world_size = 1 (all-reduce of n -> 2n, RS/AG -> n).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "zero/comm.h"
#include "zero/comm_logger.h"
#include "zero/mpi_comm.h"

namespace zt {
namespace {

TEST(SingleProcessComm, WorldOfOne) {
  auto c = make_single_process_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->world_size(), 1);
  EXPECT_EQ(c->local_rank(), 0);
  EXPECT_EQ(c->local_size(), 1);
}

TEST(SingleProcessComm, CollectivesAreIdentityOrCopy) {
  auto c = make_single_process_communicator();
  std::vector<float> a = {1.5f, -2.f, 3.f};
  c->all_reduce(a.data(), a.size(), DType::kF32).wait();
  EXPECT_EQ(a, (std::vector<float>{1.5f, -2.f, 3.f}));

  std::vector<float> out(3, 0.f);
  c->reduce_scatter(a.data(), out.data(), 3, DType::kF32).wait();
  EXPECT_EQ(out, a);
  c->reduce_scatter(a.data(), a.data(), 3, DType::kF32).wait();  // in place
  EXPECT_EQ(a, (std::vector<float>{1.5f, -2.f, 3.f}));

  std::vector<uint16_t> h = {0x3f80, 0x7fc1, 0x0001}, g(3, 0);
  CommRequest req = c->all_gather(h.data(), g.data(), 3, DType::kBF16);
  req.wait();
  EXPECT_EQ(g, h);

  char msg[] = "hello";
  c->broadcast(msg, sizeof msg, 0);
  EXPECT_STREQ(msg, "hello");
  c->barrier();
  double s[2] = {2.5, -1.0};
  c->all_reduce_scalars(s, 2, ScalarOp::kSum);
  EXPECT_EQ(s[0], 2.5);
  EXPECT_EQ(s[1], -1.0);
}

TEST(SingleProcessComm, CountsInPaperConvention) {
  auto c = make_single_process_communicator();
  std::vector<float> a(10), b(10);
  c->all_reduce(a.data(), 10, DType::kF32);
  c->reduce_scatter(a.data(), b.data(), 10, DType::kF32);
  c->all_gather(a.data(), b.data(), 4, DType::kBF16);
  c->all_gather(a.data(), b.data(), 6, DType::kBF16);
  double s = 0;
  c->all_reduce_scalars(&s, 1, ScalarOp::kMax);
  const CommStats& st = c->stats();
  EXPECT_EQ(st[static_cast<size_t>(CollKind::kAllReduce)].elements, 20);
  EXPECT_EQ(st[static_cast<size_t>(CollKind::kAllReduce)].bytes, 80);
  EXPECT_EQ(st[static_cast<size_t>(CollKind::kReduceScatter)].elements, 10);
  EXPECT_EQ(st[static_cast<size_t>(CollKind::kAllGather)].calls, 2);
  EXPECT_EQ(st[static_cast<size_t>(CollKind::kAllGather)].elements, 10);
  EXPECT_EQ(st[static_cast<size_t>(CollKind::kAllGather)].bytes, 20);
  EXPECT_EQ(st[static_cast<size_t>(CollKind::kScalar)].bytes, 8);
  c->reset_stats();
  EXPECT_EQ(c->stats()[static_cast<size_t>(CollKind::kAllReduce)].calls, 0);
}

TEST(SingleProcessComm, CheckSameAlwaysAgreesWithItself) {
  auto c = make_single_process_communicator();
  EXPECT_TRUE(check_same_on_all_ranks(*c, "config", "anything").ok());
}

TEST(CollKindName, NamesEveryKind) {
  EXPECT_STREQ(coll_kind_name(CollKind::kAllReduce), "all_reduce");
  EXPECT_STREQ(coll_kind_name(CollKind::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(coll_kind_name(CollKind::kAllGather), "all_gather");
  EXPECT_STREQ(coll_kind_name(CollKind::kBroadcast), "broadcast");
  EXPECT_STREQ(coll_kind_name(CollKind::kScalar), "scalar");
}

// Without a launcher (this test binary is not run under mpirun) MPI is never initialised: the
// host communicator is the single-process one and the MPI factory says what is missing.
TEST(MpiRuntime, PlainRunIsWorldOfOne) {
  if (launched_under_mpi()) GTEST_SKIP() << "run under an MPI launcher";
  EXPECT_FALSE(mpi_active());
  auto host = make_host_communicator();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->world_size(), 1);
  auto mpi = make_mpi_communicator();
  EXPECT_EQ(mpi.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(mpi.status().message().find("MpiRuntime"), std::string::npos);
}

TEST(MpiRuntime, DetectsLaunchersByEnvironment) {
  if (launched_under_mpi()) GTEST_SKIP() << "run under an MPI launcher";
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    setenv(v, "2", 1);
    EXPECT_TRUE(launched_under_mpi()) << v;
    unsetenv(v);
  }
  EXPECT_FALSE(launched_under_mpi());
}

// comms_logger's bandwidths as DeepSpeed's calc_bw_log computes them (comms_logging.py):
// tput = bytes / time, twice that for an all-reduce; busbw = bytes / time x 2(n-1)/n for an
// all-reduce, (n-1)/n for a reduce-scatter or all-gather, 1 for a broadcast. 1 GB in one
// second is 8 Gbps.
TEST(CommLogger, BandwidthsFollowDeepSpeedsCalcBwLog) {
  auto [alg, bus] = CommLogger::bandwidth_gbps("all_reduce", 1'000'000'000, 1000, 4);
  EXPECT_DOUBLE_EQ(alg, 16.0);
  EXPECT_DOUBLE_EQ(bus, 12.0);
  std::tie(alg, bus) = CommLogger::bandwidth_gbps("reduce_scatter", 1'000'000'000, 500, 4);
  EXPECT_DOUBLE_EQ(alg, 16.0);
  EXPECT_DOUBLE_EQ(bus, 12.0);
  std::tie(alg, bus) = CommLogger::bandwidth_gbps("all_gather", 1'000'000'000, 1000, 2);
  EXPECT_DOUBLE_EQ(bus, 4.0);
  std::tie(alg, bus) = CommLogger::bandwidth_gbps("broadcast", 1'000'000'000, 1000, 8);
  EXPECT_DOUBLE_EQ(bus, 8.0);
  std::tie(alg, bus) = CommLogger::bandwidth_gbps("all_to_all [between nodes]", 1'000'000'000,
                                                   1000, 4);
  EXPECT_DOUBLE_EQ(alg, 8.0);
  EXPECT_DOUBLE_EQ(bus, 6.0);
}

// A collective whose ranks span nodes has rows of its own, "[between nodes]", with the busbw
// of its group's size (here 2 of a world of 4).
TEST(CommLogger, LinkClassesHaveTheirOwnRows) {
  CommLogger log({}, 4, 0, nullptr);
  log.record("all_gather", 1000, 1.0, 2, false);
  log.record("all_gather", 1000, 1.0, 4, true);
  const std::string table = log.summary();
  EXPECT_NE(table.find("all_gather\n"), std::string::npos) << table;
  EXPECT_NE(table.find("all_gather [between nodes]\n"), std::string::npos) << table;
  CommLogger only({.prof_all = false, .prof_ops = {"all_gather"}}, 4, 0, nullptr);
  only.record("all_gather", 1000, 1.0, 4, true);
  EXPECT_NE(only.summary().find("[between nodes]"), std::string::npos) << "prof_ops keeps it";
}

// The summary groups by operation and message size with counts and latencies; prof_all false
// keeps prof_ops alone (DeepSpeed's torch names are ours); verbose prints each as it completes.
TEST(CommLogger, SummaryCountsWhatProfOpsAsksFor) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* verbose = open_memstream(&buf, &len);
  CommLogger log({.verbose = true, .prof_all = false, .prof_ops = {"reduce_scatter_tensor"}}, 2, 0,
                 verbose);
  log.record("reduce_scatter", 4096, 2.0);
  log.record("reduce_scatter", 4096, 4.0);
  log.record("reduce_scatter", 1024, 1.0);
  log.record("all_gather", 4096, 1.0);  // not asked for
  CommLogger scalars({.prof_all = false, .prof_ops = {"all_reduce"}}, 2, 0, nullptr);
  scalars.record("all_reduce (scalars)", 16, 1.0);
  EXPECT_NE(scalars.summary().find("all_reduce (scalars)"), std::string::npos)
      << "prof_ops all_reduce covers the scalar all-reduces";
  std::fclose(verbose);
  const std::string lines(buf, len), table = log.summary();
  std::free(buf);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3) << lines;
  EXPECT_NE(lines.find("comm op: reduce_scatter | time (ms): 2.000 | msg size: 4.00 KiB"),
            std::string::npos)
      << lines;
  EXPECT_EQ(table.find("all_gather"), std::string::npos) << table;
  EXPECT_NE(table.find("reduce_scatter"), std::string::npos) << table;
  // 4 KiB: 2 calls, 6 ms in all, 3 ms on average.
  const size_t row = table.find("4.00 KiB");
  ASSERT_NE(row, std::string::npos) << table;
  EXPECT_NE(table.find("2         6.00                3.000", row), std::string::npos) << table;
}

// The averages are DeepSpeed's trim_mean(x, 0.1): of ten latencies 1..9 and an outlier of
// 1000 ms, round(0.1 x 10) = 1 is dropped from each end: the mean of 2..9 is 5.5 ms.
TEST(CommLogger, AveragesDropTheOutliersAsDeepSpeedsTrimMean) {
  CommLogger log({}, 2, 0, nullptr);
  for (int i = 1; i <= 9; ++i) log.record("broadcast", 1000, i);
  log.record("broadcast", 1000, 1000);
  const std::string table = log.summary();
  EXPECT_NE(table.find("10        1045.00             5.500"), std::string::npos) << table;
}

}  // namespace
}  // namespace zt
