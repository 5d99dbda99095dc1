// The partition plan (zero/partition.h) against rows worked out by hand from ZeRO's rules
// (Rajbhandari et al. 2020, §5: each of N_d ranks owns ceil(Ψ_u / N_d) elements of a unit,
// padded to N_d shards) and DeepSpeed's: stage3_param_persistence_threshold keeps small units
// whole, offload_param "nvme" keeps max_in_cpu elements of shards in host memory in unit order.
#include "zero/partition.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "zero/zeropp.h"

namespace zt {
namespace {

TEST(Partition, StageThreeShardsPadsKeepsSmallUnitsWholeAndPlacesShards) {
  const std::vector<int64_t> units = {10, 1000, 7, 13};
  const auto plan = plan_partition(units, {.stage = 3,
                                           .world = 4,
                                           .persistence_threshold = 8,
                                           .host_grads = true,
                                           .offload_param = true,
                                           .param_host_elems = 260});
  ASSERT_EQ(plan.size(), 4u);
  // 10 over 4 ranks: shards of 3, padded to 12; first in host memory (3 <= 260).
  EXPECT_EQ(plan[0].shard, 3);
  EXPECT_EQ(plan[0].padded, 12);
  EXPECT_TRUE(plan[0].sharded_params && plan[0].host_grads && !plan[0].whole_grads);
  EXPECT_EQ(plan[0].params, ParamHome::kHost);
  // 1000: 250 each; 3 + 250 <= 260 stays in host memory.
  EXPECT_EQ(plan[1].shard, 250);
  EXPECT_EQ(plan[1].params, ParamHome::kHost);
  // 7 <= the threshold: whole on every rank, as at stage 0, gradients whole on the device.
  EXPECT_TRUE(plan[2].replicated && plan[2].whole_grads && !plan[2].host_grads);
  EXPECT_EQ(plan[2].stage, 0);
  EXPECT_EQ(plan[2].shard, 7);
  EXPECT_EQ(plan[2].padded, 7);
  EXPECT_EQ(plan[2].params, ParamHome::kDevice);
  // 13: shards of 4 (padded 16); 3 + 250 + 4 = 257 <= 260: host memory.
  EXPECT_EQ(plan[3].shard, 4);
  EXPECT_EQ(plan[3].padded, 16);
  EXPECT_EQ(plan[3].params, ParamHome::kHost);
  // With room for 255 elements: 3 + 250 fit, 253 + 4 do not, so the last shard goes to the drive.
  const auto tight = plan_partition(units, {.stage = 3,
                                            .world = 4,
                                            .persistence_threshold = 8,
                                            .offload_param = true,
                                            .param_host_elems = 255});
  EXPECT_EQ(tight[1].params, ParamHome::kHost);
  EXPECT_EQ(tight[3].params, ParamHome::kDrive);
}

TEST(Partition, StagesOneAndTwoShardOptimizerStateThenGradients) {
  const std::vector<int64_t> units = {10};
  const auto s1 = plan_partition(units, {.stage = 1, .world = 3});
  EXPECT_EQ(s1[0].shard, 4);
  EXPECT_EQ(s1[0].padded, 12);
  EXPECT_EQ(s1[0].owned(), 4);
  EXPECT_TRUE(s1[0].whole_grads && !s1[0].sharded_params);  // stage 1: whole gradients
  EXPECT_EQ(s1[0].grad_numel(), 12);
  const auto s2 = plan_partition(units, {.stage = 2, .world = 3});
  EXPECT_FALSE(s2[0].whole_grads);
  EXPECT_EQ(s2[0].grad_numel(), 4);
  EXPECT_FALSE(s2[0].host_grads);  // no offloaded optimizer state
}

TEST(Partition, OneRankShardsOnlyWhenSomethingIsOffloaded) {
  const std::vector<int64_t> units = {10};
  const auto plain = plan_partition(units, {.stage = 2, .world = 1});
  EXPECT_TRUE(plain[0].replicated && plain[0].whole_grads);
  const auto offloaded = plan_partition(units, {.stage = 2, .world = 1, .host_grads = true});
  EXPECT_FALSE(offloaded[0].replicated);
  EXPECT_EQ(offloaded[0].shard, 10);
  EXPECT_TRUE(offloaded[0].host_grads);
  // Stage 0 never shards, whatever else is asked.
  const auto s0 = plan_partition(units, {.stage = 0, .world = 4});
  EXPECT_TRUE(s0[0].replicated);
  EXPECT_EQ(s0[0].owned(), 10);
}

// hpZ's secondary groups are consecutive runs of zero_hpz_partition_size ranks, so the size
// must divide the ranks (DeepSpeed's assert world_size % hpz_partition_size == 0): 3 of 4 ranks
// is refused, naming the key; 2 and 4 (and 1, off) are taken.
TEST(Zeropp, HpzPartitionSizeMustDivideTheRanks) {
  ZeroppOptions o;
  for (int h : {1, 2, 4}) {
    o.hpz_partition_size = h;
    EXPECT_TRUE(zeropp_fits(o, 4, 4, 4, true).ok()) << h;
  }
  for (int h : {3, 0}) {
    o.hpz_partition_size = h;
    const absl::Status s = zeropp_fits(o, 4, 4, 4, true);
    EXPECT_FALSE(s.ok()) << h;
    EXPECT_NE(std::string(s.message()).find("zero_hpz_partition_size"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace zt
