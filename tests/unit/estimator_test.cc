// Memory estimator. References: the ZeRO paper's Table 1 and Figure 1 as printed (typed from
// REFERENCES.md "ZeRO memory"), DeepSpeed 0.19's own estimator functions
// (tests/fixtures/deepspeed_estimates.json, written by scripts/make_estimator_reference.py),
// hand-computed padding arithmetic, and the bytes the engine and the Transformer really
// allocate on the CPU backend (MemoryTracker).
#include "zero/estimator.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "common/checked.h"
#include "gtest/gtest.h"
#include "model/backend.h"
#include "model/layout.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"
#include "tests/unit/json_fixture.h"
#include "trainer/estimate.h"
#include "zero/engine.h"

namespace zt {
namespace {

using json = nlohmann::json;
using M = MemCategory;

// Table 1 of Rajbhandari et al. (SC20), GB per device, os / os+g / os+g+p, as printed.
struct PaperRow {
  int nd;
  const char* cells[3][3];  // [7.5B, 128B, 1T][os, os+g, os+g+p]
};
constexpr PaperRow kTable1[] = {
    {1, {{"120", "120", "120"}, {"2048", "2048", "2048"}, {"16000", "16000", "16000"}}},
    {4, {{"52.5", "41.3", "30"}, {"896", "704", "512"}, {"7000", "5500", "4000"}}},
    {16, {{"35.6", "21.6", "7.5"}, {"608", "368", "128"}, {"4750", "2875", "1000"}}},
    {64, {{"31.4", "16.6", "1.88"}, {"536", "284", "32"}, {"4187", "2218", "250"}}},
    {256, {{"30.4", "15.4", "0.47"}, {"518", "263", "8"}, {"4046", "2054", "62.5"}}},
    {1024, {{"30.1", "15.1", "0.12"}, {"513", "257", "2"}, {"4011", "2013", "15.6"}}},
};

TEST(ZeroPaper, Table1AllFiftyFourCellsEqualThePaper) {
  const double psis[] = {7.5e9, 128e9, 1e12};
  int checked = 0;
  for (const PaperRow& row : kTable1)
    for (int p = 0; p < 3; ++p)
      for (int s = 0; s < 3; ++s) {
        EXPECT_EQ(format_paper_gb(zero_paper_bytes(psis[p], row.nd, s + 1) / 1e9), row.cells[p][s])
            << "psi " << psis[p] << " N_d " << row.nd << " stage " << s + 1;
        ++checked;
      }
  EXPECT_EQ(checked, 54);
}

TEST(ZeroPaper, PrintedTableHoldsEveryRowAsThePaper) {
  const std::string t = zero_paper_table();
  for (const PaperRow& row : kTable1) {
    bool found = false;
    std::istringstream in(t);
    for (std::string l; std::getline(in, l);) {
      std::istringstream first(l);
      int nd = 0;
      if (!(first >> nd) || nd != row.nd) continue;
      size_t pos = 0;
      found = true;
      for (int p = 0; p < 3; ++p) {
        const std::string cell = std::string("| ") + row.cells[p][0] + " / " + row.cells[p][1] +
                                 " / " + row.cells[p][2] + " ";
        pos = (l + " ").find(cell, pos);
        if (pos == std::string::npos) found = false;
        if (!found) break;
      }
    }
    EXPECT_TRUE(found) << "row N_d=" << row.nd << " in\n" << t;
  }
}

TEST(ZeroPaper, Figure1Example) {
  const auto f = zero_paper_figure1();
  EXPECT_EQ(f[0], "120");
  EXPECT_EQ(f[1], "31.4");
  EXPECT_EQ(f[2], "16.6");
  EXPECT_EQ(f[3], "1.9");
  const std::string t = zero_paper_table();
  for (const char* v : {"120", "31.4", "16.6", "1.9"}) EXPECT_NE(t.find(v), std::string::npos);
}

TEST(ZeroPaper, FormatRule) {
  EXPECT_EQ(format_paper_gb(4187.5), "4187");  // truncated, as REFERENCES.md notes
  EXPECT_EQ(format_paper_gb(513.5), "513");
  EXPECT_EQ(format_paper_gb(41.25), "41.3");  // half-up, not half-even
  EXPECT_EQ(format_paper_gb(7.5), "7.5");
  EXPECT_EQ(format_paper_gb(30.0), "30");
}

json load_fixture() {
  return load_json_fixture("deepspeed_estimates.json", "make_estimator_reference.py");
}

void expect_rel(int64_t ours, int64_t theirs, const std::string& what) {
  const double d = std::abs(static_cast<double>(ours) - static_cast<double>(theirs));
  EXPECT_LE(d, 1e-9 * std::max<double>(1, std::abs(static_cast<double>(theirs))))
      << what << ": ours " << ours << " DeepSpeed " << theirs;
}

TEST(DeepSpeedEstimator, MatchesDeepSpeedZero2AndZero3Functions) {
  const json fx = load_fixture();
  ASSERT_GE(fx["cases"].size(), 5u);
  for (const json& c : fx["cases"]) {
    DeepSpeedSetup s;
    s.total_params = c["total_params"];
    s.largest_layer_params = c["largest_layer_params"];
    s.gpus_per_node = c["gpus_per_node"];
    s.nodes = c["nodes"];
    SCOPED_TRACE(c.dump().substr(0, 120));
    const auto z2 = deepspeed_zero2_estimates(s);
    ASSERT_EQ(z2.size(), c["zero2"].size());
    for (size_t i = 0; i < z2.size(); ++i) {
      expect_rel(z2[i].cpu_bytes, c["zero2"][i]["cpu_bytes"], "zero2 cpu " + std::to_string(i));
      expect_rel(z2[i].gpu_bytes, c["zero2"][i]["gpu_bytes"], "zero2 gpu " + std::to_string(i));
    }
    const auto z3 = deepspeed_zero3_estimates(s);
    ASSERT_EQ(z3.size(), c["zero3"].size());
    for (size_t i = 0; i < z3.size(); ++i) {
      expect_rel(z3[i].cpu_bytes, c["zero3"][i]["cpu_bytes"], "zero3 cpu " + std::to_string(i));
      expect_rel(z3[i].gpu_bytes, c["zero3"][i]["gpu_bytes"], "zero3 gpu " + std::to_string(i));
    }
    // The printout equals DeepSpeed's, with its Python-version-dependent enum spelling
    // ("OffloadDeviceEnum.cpu" on the fixture's Python 3.11) read as the intended "cpu ".
    for (int stage : {2, 3}) {
      const std::string theirs = absl::StrReplaceAll(
          c[stage == 2 ? "zero2_printout" : "zero3_printout"].get<std::string>(),
          {{"OffloadDeviceEnum.cpu", "cpu "}});
      EXPECT_EQ(deepspeed_report(stage, s), theirs);
    }
  }
}

TEST(DeepSpeedEstimator, LiveModelParamsMatchModelToParams) {
  const json fx = load_fixture();
  ASSERT_GE(fx["live"].size(), 3u);
  for (const json& l : fx["live"]) {
    const std::string name = l["preset"];
    SCOPED_TRACE(name);
    auto c = preset(name);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(deepspeed_total_params(*c), l["total_params"].get<int64_t>());
    EXPECT_EQ(deepspeed_largest_layer_params(*c), l["largest_layer_params"].get<int64_t>());
    DeepSpeedSetup s{deepspeed_total_params(*c), deepspeed_largest_layer_params(*c), 2, 1};
    EXPECT_EQ(deepspeed_report(3, s),
              absl::StrReplaceAll(l["zero3_live_printout"].get<std::string>(),
                                  {{"OffloadDeviceEnum.cpu", "cpu "}}));
  }
}

// Hand-computed: units of 10, 7, 1 elements on N_d = 4 -> shards 3, 2, 1; padded 12, 8, 4
// (Σ 24, Ψ = 18); shards Σ 6. bf16 params and grads, K = 12.
EstimateInput small(int stage) {
  EstimateInput in;
  in.unit_numel = {10, 7, 1};
  in.stage = stage;
  in.dp = 4;
  in.live_units = 1;
  return in;
}

TEST(Estimator, PerCategoryBytesWithPaddingHandComputed) {
  struct Want {
    int64_t params, grads, optim, ws;
  };
  // Workspace: largest padded unit 12 (stage 0: 10 unpadded): fp32 view 4*12 + fp32 grad
  // accumulator 4*12, stage 3 also the gathered bf16 unit 2*12.
  const Want want[4] = {{2 * 18, 2 * 18, 12 * 18, 40 + 40},
                        {2 * 24, 2 * 24, 12 * 6, 48 + 48},
                        {2 * 24, 2 * 6, 12 * 6, 48 + 48},
                        {2 * 6, 2 * 6, 12 * 6, 24 + 48 + 48}};
  for (int stage = 0; stage < 4; ++stage) {
    SCOPED_TRACE(stage);
    auto e = estimate_memory(small(stage));
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->psi, 18);
    EXPECT_EQ(e->padded_psi, stage == 0 ? 18 : 24);
    EXPECT_EQ(e->dev(M::kParams), want[stage].params);
    EXPECT_EQ(e->dev(M::kGrads), want[stage].grads);
    EXPECT_EQ(e->dev(M::kOptimizer), want[stage].optim);
    EXPECT_EQ(e->dev(M::kWorkspace), want[stage].ws);
    EXPECT_EQ(e->host_total(), 0);
    EXPECT_EQ(e->nvme(), 0);
  }
  // A GPU's kernels read the 16-bit units as stored (Backend::weight_dtype): no fp32 view,
  // only the fp32 gradient accumulator 4*10 (stage 0).
  EstimateInput gpu = small(0);
  gpu.weight_dtype = gpu.param_dtype;
  EXPECT_EQ(estimate_memory(gpu)->dev(M::kWorkspace), 40);
  // fp32 params: K = 8, no fp32 views.
  EstimateInput in = small(1);
  in.param_dtype = in.grad_dtype = DType::kF32;
  auto e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->optimizer_k, 8);
  EXPECT_EQ(e->dev(M::kParams), 4 * 24);
  EXPECT_EQ(e->dev(M::kOptimizer), 8 * 6);
  EXPECT_EQ(e->dev(M::kWorkspace), 4 * 12);  // parameters load through an fp32 unit copy
  // Communication buffers at N_d = 4: stage 1 sends an fp32 copy of the largest unit (12) and
  // keeps every reduced fp32 shard (6 elements) until the step; stage 2 receives the largest
  // shard (3); overlap_comm doubles what is in flight.
  EXPECT_EQ(e->dev(M::kCommBuffers), 4 * 12 + 4 * 6);
  in = small(2);
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 4 * 3);
  in.overlap_comm = true;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 2 * 4 * 3);
  // ZeRO++'s hpZ over groups of 2: each sharded unit's secondary partition, padded / 2 (6, 4,
  // 2 elements of bf16), on top of stage 3's shards.
  in = small(3);
  in.hpz_partition_size = 2;
  EXPECT_EQ(estimate_memory(in)->dev(M::kParams), 2 * 6 + 2 * (6 + 4 + 2));
  // ZeRO++'s quantized buffers for the largest shard (3 elements). A piece of it: int4, 2 bytes
  // padded to 4, plus one fp32 scale = 8 bytes; int8, 3 bytes padded to 4, plus a scale = 8.
  // Stage 3 without overlap: one reduction pending, its fp32 shard 4 * 3 = 12.
  in = small(3);
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 12);
  // qgZ, 2 ranks a node (L = 2, M = 2): the node-local all-to-all's send and receive, N = 4
  // pieces each, and the oldest reduction's M = 2 fp32 node sums of 3.
  in.quantized_gradients = true;
  in.ranks_per_node = 2;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 12 + 2 * 4 * 8 + 2 * 4 * 3);
  // With overlap_comm two reductions are pending: two fp32 shards and two node-local pairs.
  in.overlap_comm = true;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 2 * 12 + 2 * 2 * 4 * 8 + 2 * 4 * 3);
  in.overlap_comm = false;
  // One rank a node: only the cross-node hop, M = 4 pieces each way.
  in.ranks_per_node = 1;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 12 + 2 * 4 * 8);
  // qwZ: two gathers in flight (live_units 2), each this rank's piece and all 4 received; in
  // the forward, where no reduction is pending, so the larger of the two phases.
  in = small(3);
  in.quantized_weights = true;
  in.live_units = 2;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 2 * (1 + 4) * 8);
  // With overlap_comm and without hpZ the backward gathers again through qwZ beside the two
  // pending reductions: 2 * 12 + 80. (The forward's gathers beside one pending reduction, 12 +
  // 80, are less.)
  in.overlap_comm = true;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 2 * 12 + 2 * (1 + 4) * 8);
  // hpZ: the backward gathers within the group, unquantized; the forward's phase is the peak.
  in.hpz_partition_size = 2;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 12 + 2 * (1 + 4) * 8);
  in.hpz_partition_size = 1;
  in.overlap_comm = false;
  // Stages 1-2 have neither (ZeRO++ is stage 3's).
  in.stage = 2;
  in.quantized_gradients = true;
  EXPECT_EQ(estimate_memory(in)->dev(M::kCommBuffers), 12);
}

TEST(Estimator, PaperFormulasWhenNothingNeedsPadding) {
  const int64_t psi = 1 << 20;
  const int64_t want[4] = {16 * psi, 4 * psi + 12 * psi / 8, 2 * psi + 14 * psi / 8, 16 * psi / 8};
  for (int stage = 0; stage < 4; ++stage) {
    EstimateInput in;
    in.psi = psi;
    in.stage = stage;
    in.dp = 8;
    auto e = estimate_memory(in);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->device_model_states(), want[stage]) << stage;
  }
}

// Units {10, 7, 1} over N_d = 4: owned shards 3 + 2 + 1 = 6 elements, padded Ψ 24; the largest
// owned shard (3) sizes the two fp32 staging buffers of offload/cpu_optimizer.cc, each two tiles
// of half a sub-group (2 + 2 elements): 2 x 4 x 4, and the fp32 tile a host gradient
// accumulates through (zero/gradients.h): the largest host shard, 4 x 3.
TEST(Estimator, OffloadMovesBytesToHostAndNvme) {
  EstimateInput in = small(2);
  in.offload_optimizer = OffloadDevice::kCpu;
  auto e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->dev(M::kParams), 2 * 24);
  EXPECT_EQ(e->dev(M::kGrads), 0);  // the bf16 gradient shard goes to the host (ZeRO-Offload)
  EXPECT_EQ(e->hst(M::kGrads), 2 * 6);
  EXPECT_EQ(e->dev(M::kOptimizer), 0);
  EXPECT_EQ(e->hst(M::kOptimizer), 12 * 6);
  const int64_t tile = 4 * 3;
  EXPECT_EQ(e->hst(M::kPinnedHost), 2 * 4 * 4 + tile);
  EXPECT_EQ(e->nvme(), 0);
  in.sub_group_size = 2;  // staging shrinks to one sub-group
  e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->hst(M::kPinnedHost), 2 * 4 * 2 + tile);

  // NVMe sub-groups are whole multiples of 1024 elements (4 KiB per fp32 region), so each of
  // these three tiny units takes one padded sub-group of master, m and v on the drive, and the
  // staging buffers and the host window hold 1024 elements each.
  const int64_t group = 3 * 4 * 1024, staging = 2 * 4 * 1024, window = 3 * 4 * 1024;
  in = small(2);
  in.offload_optimizer = OffloadDevice::kNvme;
  e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->hst(M::kPinnedHost), staging + window + tile);
  EXPECT_EQ(e->nvme(), 3 * group);

  // Stage 3 with both on NVMe: no model state on the device. Under the default max_in_cpu
  // (1e9 elements) the bf16 parameter shards stay in host memory; with max_in_cpu 0 each goes
  // to its own 4 KiB-rounded file, read through buffer_count buffers of the largest file.
  in = small(3);
  in.offload_optimizer = OffloadDevice::kNvme;
  in.offload_param = OffloadDevice::kNvme;
  e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->device_model_states(), 0);
  EXPECT_EQ(e->hst(M::kParams), 2 * 6);
  EXPECT_EQ(e->hst(M::kGrads), 2 * 6);
  EXPECT_EQ(e->hst(M::kPinnedHost), staging + window + tile);
  EXPECT_EQ(e->nvme(), 3 * group);
  in.param_max_in_cpu = 0;
  e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->hst(M::kParams), 0);
  EXPECT_EQ(e->hst(M::kPinnedHost), staging + window + tile + 5 * 4096);
  EXPECT_EQ(e->nvme(), 3 * group + 3 * 4096);

  in.param_max_in_cpu = 1'000'000'000;
  in.offload_param = OffloadDevice::kCpu;
  in.offload_optimizer = OffloadDevice::kNone;
  e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->dev(M::kParams), 0);
  EXPECT_EQ(e->hst(M::kParams), 2 * 6);
  EXPECT_EQ(e->dev(M::kGrads), 2 * 6);  // the device optimizer keeps the gradients on the device
  EXPECT_EQ(e->dev(M::kOptimizer), 12 * 6);

  in = small(2);
  in.offload_param = OffloadDevice::kCpu;
  EXPECT_FALSE(estimate_memory(in).ok());  // stage 3 only
}

// K follows the optimizer (ZeRO paper, Section 3.1: K is the optimizer's bytes per parameter):
// Lion and Adagrad keep the fp32 master and one state, K = 8 (4 with fp32 params, which are the
// master), so stage 1 holds 4Ψ + 8Ψ/N_d; offloaded, the host holds 8 bytes per owned element
// and the NVMe file and window two fp32 regions per sub-group, not AdamW's three.
TEST(Estimator, OneStateOptimizersHaveKEight) {
  const int64_t psi = 1 << 20;
  for (OptimizerKind k : {OptimizerKind::kLion, OptimizerKind::kAdagrad}) {
    EstimateInput in;
    in.psi = psi;
    in.stage = 1;
    in.dp = 8;
    in.optimizer = k;
    auto e = estimate_memory(in);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->optimizer_k, 8);
    EXPECT_EQ(e->device_model_states(), 4 * psi + 8 * psi / 8);
    in.param_dtype = in.grad_dtype = DType::kF32;
    e = estimate_memory(in);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->optimizer_k, 4);
    in = small(2);
    in.optimizer = k;
    in.offload_optimizer = OffloadDevice::kCpu;
    e = estimate_memory(in);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->hst(M::kOptimizer), 8 * 6);
    in.offload_optimizer = OffloadDevice::kNvme;
    e = estimate_memory(in);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->nvme(), 3 * 2 * 4 * 1024);  // three units, a sub-group each
    // staging, window, the largest host shard's accumulation tile
    EXPECT_EQ(e->hst(M::kPinnedHost), 2 * 4 * 1024 + 2 * 4 * 1024 + 4 * 3);
  }
}

// Muon keeps the fp32 master, its momentum and its AdamW's second moment (unused on the
// matrices, as DeepSpeed allocates it per parameter group): K = 12, as AdamW, 8 with fp32
// params; the u it gathers for the orthogonalisation is a step's workspace, not a model state.
TEST(Estimator, MuonHasAdamWsK) {
  const int64_t psi = 1 << 20;
  EstimateInput in;
  in.psi = psi;
  in.stage = 2;
  in.dp = 4;
  in.optimizer = OptimizerKind::kMuon;
  auto e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->optimizer_k, 12);
  EXPECT_EQ(e->device_model_states(), 2 * psi + (2 + 12) * psi / 4);
  in.param_dtype = in.grad_dtype = DType::kF32;
  e = estimate_memory(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->optimizer_k, 8);
}

TEST(Estimator, RejectsBadInput) {
  EstimateInput in = small(4);
  EXPECT_FALSE(estimate_memory(in).ok());
  in = small(1);
  in.dp = 0;
  EXPECT_FALSE(estimate_memory(in).ok());
  EXPECT_FALSE(parse_offload_device("gpu").ok());
}

// The engine on one rank (stage 0) allocates exactly the predicted model states.
TEST(Estimator, MatchesEngineAllocationStage0) {
  auto c = preset("tiny-llama");
  ASSERT_TRUE(c.ok());
  const ParamLayout layout(*c);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    auto be = make_cpu_backend(1);
    EngineOptions eo;
    eo.param_dtype = eo.grad_dtype = dt;
    auto comm = make_single_process_communicator();
    Engine engine(layout, be.get(), comm.get(), eo);
    EstimateInput in;
    in.unit_numel = unit_numels(*c);
    in.stage = 0;
    in.param_dtype = in.grad_dtype = dt;
    auto e = estimate_memory(in);
    ASSERT_TRUE(e.ok());
    for (M m : {M::kParams, M::kGrads, M::kOptimizer})
      EXPECT_EQ(static_cast<int64_t>(be->tracker().current(m)), e->dev(m))
          << mem_category_name(m) << " " << dtype_name(dt);
  }
}

// Muon's step holds u, the update and Newton-Schulz's matrices in fp32 (zero/muon_rule.h): the
// estimator's workspace is what the engine's step allocates on top of what it held before, at
// stage 0 in fp32 (where nothing else needs workspace), for LLaMA and GPT-2 shapes.
TEST(Estimator, MuonStepWorkspaceIsWhatTheEngineAllocates) {
  for (const char* name : {"tiny-llama", "tiny-gpt2"}) {
    auto c = preset(name);
    ASSERT_TRUE(c.ok());
    const ParamLayout layout(*c);
    auto be = make_cpu_backend(1);
    EngineOptions eo;
    eo.param_dtype = eo.grad_dtype = DType::kF32;
    eo.optimizer = MuonParams{};
    auto comm = make_single_process_communicator();
    Engine engine(layout, be.get(), comm.get(), eo);
    const size_t before = be->tracker().current(M::kWorkspace);
    ASSERT_EQ(be->tracker().peak(M::kWorkspace), before);
    ASSERT_TRUE(engine.step(1e-3f).ok());
    EXPECT_EQ(be->tracker().current(M::kWorkspace), before) << name << ": freed at the step's end";
    EstimateInput in;
    in.unit_numel = unit_numels(*c);
    in.model = *c;
    in.stage = 0;
    in.param_dtype = in.grad_dtype = DType::kF32;
    in.optimizer = OptimizerKind::kMuon;
    auto e = estimate_memory(in);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(static_cast<int64_t>(be->tracker().peak(M::kWorkspace) - before),
              e->dev(M::kWorkspace))
        << name;
  }
}

// transformer_activation_bytes equals what the Transformer allocates as activations, with and
// without activation checkpointing, in fp32 (the CPU backend's) and bf16 (a GPU's).
TEST(Estimator, ActivationBytesMatchTransformerAllocation) {
  // "wide heads": tiny-llama with head_dim set apart, its queries wider than the width.
  for (const char* name : {"tiny-gpt2", "tiny-llama", "wide heads"}) {
    auto c = preset(name[0] == 'w' ? "tiny-llama" : name);
    ASSERT_TRUE(c.ok());
    c->n_layer = 5;
    if (name[0] == 'w') c->head_dim_apart = 3 * c->head_dim() / 2;
    for (auto [B, T] : {std::pair{2, 16}, std::pair{3, 64}}) {
      for (int k : {0, 1, 2, 3, 5}) {  // 3: two checkpoints (both on the device with cpu)
        for (bool cpu : {false, true}) {
          for (DType a : {DType::kF32, DType::kBF16}) {
            auto be = make_cpu_backend(1);  // allocation only: no kernel runs
            Transformer tr(*c, be.get(), B, T, k, cpu, a);
            const std::string what = std::string(name) + " B=" + std::to_string(B) +
                                     " T=" + std::to_string(T) + " every " + std::to_string(k) +
                                     " cpu " + std::to_string(cpu) + " " +
                                     std::string(dtype_name(a));
            EXPECT_EQ(static_cast<int64_t>(be->tracker().current(M::kActivations)),
                      transformer_activation_bytes(*c, B, T, k, cpu, a))
                << what;
            EXPECT_EQ(static_cast<int64_t>(tr.host_tracker().current(M::kActivations)),
                      transformer_host_activation_bytes(*c, B, T, k, cpu, a))
                << what;
          }
        }
      }
    }
  }
  // 16-bit activations are half the bytes, but for the fp32 statistics, logits and int32 tokens.
  auto c = preset("gpt2-124m");
  ASSERT_TRUE(c.ok());
  const int64_t f32 = transformer_activation_bytes(*c, 4, 1024),
                bf16 = transformer_activation_bytes(*c, 4, 1024, 0, false, DType::kBF16);
  EXPECT_LT(bf16, f32 * 0.55);
  EXPECT_GT(bf16, f32 * 0.5);
}

// Checkpointing every block keeps L + 1 block inputs and one block's intermediates: against no
// checkpointing it saves L - 1 per-block sets, each (for LLaMA, N = B T rows, fp32): ln1, atty,
// resid_mid, ln2 (N,C) x4; norm statistics (N) x4; qkv (N, qkv_dim); the attention's
// log-sum-exp (B,NH,T); fc (N,2I); act (N,I).
TEST(Estimator, CheckpointingEveryBlockSavesLMinusOneBlockSets) {
  auto c = preset("tiny-llama");
  ASSERT_TRUE(c.ok());
  c->n_layer = 5;
  const int64_t B = 2, T = 16, N = B * T, C = c->hidden, I = c->intermediate;
  const int64_t per_block = 4 * N * C + 4 * N + N * c->qkv_dim() + B * c->n_head * T +
                            N * 2 * I + N * I;
  EXPECT_EQ(transformer_activation_bytes(*c, B, T, 0) - transformer_activation_bytes(*c, B, T, 1),
            (c->n_layer - 1) * per_block * 4);
  // cpu_checkpointing moves the L checkpoints (N,C) to the host, leaving two on the device.
  EXPECT_EQ(transformer_activation_bytes(*c, B, T, 1) -
                transformer_activation_bytes(*c, B, T, 1, true),
            (c->n_layer - 2) * N * C * 4);
  EXPECT_EQ(transformer_host_activation_bytes(*c, B, T, 1, true), c->n_layer * N * C * 4);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// --gradient_checkpointing in estimate: the activations of every block's intermediates give
// way to one block's and the block inputs (transformer_activation_bytes with k = 1, or as the
// ds_config's number_checkpoints says, which must not exceed the layers).
TEST(EstimateCommand, GradientCheckpointing) {
  auto c = preset("tinyllama-1.1b");
  ASSERT_TRUE(c.ok());
  EstimateOptions o;
  o.model = "tinyllama-1.1b";
  o.stage = 2;
  o.micro_batch = 1;
  o.seq_len = 2048;
  o.gradient_checkpointing = true;
  auto t = estimate_text(o);
  ASSERT_TRUE(t.ok()) << t.status();
  // The expected line is what a Transformer built so allocates (allocation only: no kernel
  // runs, the pages are never touched), not the estimator's own formula.
  auto be = make_cpu_backend(1);
  Transformer tr(*c, be.get(), 1, 2048, /*checkpoint_every=*/1, false, DType::kF32);
  char want[64];
  std::snprintf(want, sizeof want, "%-22s %12.3f", "device activations",
                be->tracker().current(M::kActivations) / 1073741824.0);
  EXPECT_NE(t->find(want), std::string::npos) << want << "\n" << *t;
  const std::string cfg = ::testing::TempDir() + "/est_ckpt.json";
  std::ofstream(cfg) << R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
    "activation_checkpointing": {"number_checkpoints": 23}})";
  EstimateOptions d;
  d.deepspeed = cfg;
  d.model = "tinyllama-1.1b";
  d.seq_len = 512;
  d.gradient_checkpointing = true;
  auto bad = estimate_text(d);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("number_checkpoints 23"), std::string::npos)
      << bad.status();
}

// `zerotrain estimate --deepspeed cfg --model M`: the run's own estimate (what `train` writes
// into memory_report predicted_bytes), and whether it fits the memory given or the config's
// zerotrain.device_memory_limit. The numbers follow from the formulas above: TinyLlama in bf16
// at stage 2 with the optimizer on the CPU keeps 2Ψ of model states on the device and 14Ψ on
// the host (12Ψ optimizer state, 2Ψ gradients): the ZeRO-Offload paper's split.
// --device cuda counts activations as a GPU keeps them, in the working dtype (bf16 here).
TEST(EstimateCommand, DeviceCudaCountsSixteenBitActivations) {
  auto c = preset("gpt2-124m");
  ASSERT_TRUE(c.ok());
  EstimateOptions o;
  o.model = "gpt2-124m";
  o.stage = 0;
  o.micro_batch = 4;
  o.seq_len = 1024;
  for (const char* device : {"cpu", "cuda"}) {
    o.device = device;
    const DType a = o.device == "cuda" ? DType::kBF16 : DType::kF32;
    auto t = estimate_text(o);
    ASSERT_TRUE(t.ok()) << t.status();
    auto be = make_cpu_backend(1);  // what the model allocates (no kernel runs)
    Transformer tr(*c, be.get(), 4, 1024, 0, false, a);
    int64_t bytes = be->tracker().current(M::kActivations);
    if (o.device == "cuda") {  // the GPU's logits: rows of 50304, all 4096 rows in one chunk
      const int V = c->vocab_size, N = 4 * 1024;
      bytes +=
          ((int64_t)N * 50304 - (int64_t)logits_chunk_rows(V, kCpuClassifierChunkBytes, a, N) * V) *
          (int64_t)dtype_size(a);
    }
    char want[64];
    std::snprintf(want, sizeof want, "%-22s %12.3f", "device activations", bytes / 1073741824.0);
    EXPECT_NE(t->find(want), std::string::npos) << want << "\n" << *t;
    EXPECT_NE(t->find(std::string("seq 1024, ") + std::string(dtype_name(a))), std::string::npos)
        << *t;
  }
  o.device = "gpu";
  auto bad = estimate_text(o);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not one of auto, cpu, cuda"), std::string::npos)
      << bad.status();
}

TEST(EstimateCommand, ReadsADsConfig) {
  const std::string cfg = ::testing::TempDir() + "/est_ds.json";
  std::ofstream(cfg) << R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
    "bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
    "offload_optimizer": {"device": "cpu"}}, "zerotrain": {"device_memory_limit": "4GiB"}})";
  EstimateOptions o;
  o.deepspeed = cfg;
  o.model = "tinyllama-1.1b";
  o.seq_len = 512;
  o.host_memory = int64_t{16} << 30;
  auto t = estimate_text(o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->find("offload_optimizer cpu"), std::string::npos) << *t;
  EXPECT_NE(t->find("stage 2"), std::string::npos) << *t;
  EXPECT_NE(t->find("device model states           2.049"), std::string::npos) << *t;
  EXPECT_NE(t->find("host optimizer               12.294"), std::string::npos) << *t;
  EXPECT_NE(t->find("host grads                    2.049"), std::string::npos) << *t;
  // The offload pipeline (on by default) stages the new 16-bit weights for the device in two
  // slots, the even and the odd units': the largest are the embedding (32000 x 2048) and the
  // final norm with the head (2048 + 32000 x 2048), (65,536,000 + 65,538,048) x 2 bytes.
  EXPECT_NE(t->find("host params                   0.244"), std::string::npos) << *t;
  EXPECT_NE(t->find("of 4.00 GiB -> does NOT fit"), std::string::npos) << *t;
  EXPECT_NE(t->find("of 16.00 GiB -> fits"), std::string::npos) << *t;
  o.stage = 3;  // the config decides the stage
  EXPECT_FALSE(estimate_text(o).ok());
  o.stage = -1;
  o.model = "";
  o.params = 1000;
  EXPECT_FALSE(estimate_text(o).ok());  // a ds_config estimate needs the model's shapes
}

// `zerotrain estimate` text: each mode, and the errors a user can cause.
TEST(EstimateCommand, ModesAndErrors) {
  EstimateOptions o;
  o.table = "zero-paper";
  auto t = estimate_text(o);
  ASSERT_TRUE(t.ok());
  EXPECT_NE(t->find("4187 / 2218 / 250"), std::string::npos);
  for (const char* table : {"zero-offload", "zero-infinity"}) {  // zero/paper_tables.h
    o.table = table;
    t = estimate_text(o);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_NE(t->find("[paper: "), std::string::npos) << *t;
  }

  o = {};
  o.formula = "deepspeed";
  o.model = "tinyllama-1.1b";
  o.gpus_per_node = 4;
  o.nodes = 2;
  t = estimate_text(o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->find("1.46GB |   2.55GB | offload_param=none, offload_optimizer=none, zero_init=1"),
            std::string::npos)
      << *t;

  o = {};
  o.params = 7'500'000'000;
  o.stage = 3;
  o.dp = 64;
  t = estimate_text(o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->find("device model states"), std::string::npos);

  for (auto bad : std::vector<std::function<void(EstimateOptions&)>>{
           [](EstimateOptions& x) { x.table = "zero-infinity-2"; },
           [](EstimateOptions& x) { x.formula = "megatron"; },
           [](EstimateOptions& x) { x.stage = 4; },
           [](EstimateOptions& x) { x.offload_optimizer = "gpu"; },
           [](EstimateOptions& x) { x.param_dtype = "fp8"; },
           [](EstimateOptions& x) { x.params = 0; },
           [](EstimateOptions& x) { x.nodes = 0; },
           [](EstimateOptions& x) { x.offload_param = "cpu", x.stage = 2; },
           [](EstimateOptions& x) { x.params = 0, x.model = "gpt5"; },
           [](EstimateOptions& x) { x.formula = "deepspeed", x.stage = 3; },
       }) {
    EstimateOptions x;
    x.params = 1000;
    bad(x);
    EXPECT_FALSE(estimate_text(x).ok());
  }
}

// common/checked.h against exact products: a 128-bit product is the reference; 3037000499 is
// floor(sqrt(2^63 - 1)), so its square is the largest square int64 holds.
TEST(CheckedSize, SaturatesExactlyWhereInt64Ends) {
  for (const auto& [a, b] : std::vector<std::pair<int64_t, int64_t>>{{3037000499, 3037000499},
                                                                     {3037000500, 3037000500},
                                                                     {int64_t{1} << 62, 2},
                                                                     {(int64_t{1} << 62) - 1, 2},
                                                                     {0, kSizeOverflow - 1},
                                                                     {-1, INT64_MIN},
                                                                     {7, 11}}) {
    const __int128 exact = (__int128)a * b;
    const bool fits = exact <= INT64_MAX && exact >= INT64_MIN;
    EXPECT_EQ(checked_mul(a, b), fits ? (int64_t)exact : kSizeOverflow) << a << " x " << b;
  }
  EXPECT_EQ(checked_mul(3037000499, 3037000499), 9223372030926249001);
  EXPECT_EQ(checked_add(kSizeOverflow - 5, 5), kSizeOverflow);
  EXPECT_EQ(checked_add(kSizeOverflow - 5, 4), kSizeOverflow - 1);
  // Once over, every later step keeps the result over (a wrapped value would be small again).
  const Size over = Size(int64_t{1} << 62) * 4;
  EXPECT_TRUE(over.overflowed());
  EXPECT_TRUE((over / 1024).overflowed());
  EXPECT_TRUE((over - 1).overflowed());
  EXPECT_TRUE((over * 0 + 1).overflowed());  // not 1: the true value is unknown, only too large
  EXPECT_EQ((Size(6) * 7 + 3 - 1) / 4, 11);
}

// LLaMA-7B at micro-batch 2^20 x sequence 2^20: 2^40 tokens, each keeping at least
// 32 x (5 x 4096 + 12288 + 3 x 11008) = 2,105,344 fp32 elements in its layers (ln1, atty,
// resid_mid, ln2, dln: C each; qkv; fc 2I and act I), so at least 2^40 x 2,105,344 x 4 =
// 9.26e18 bytes, past int64's 9.22e18: wrapped, it came out negative and "fit" any device.
// It is an error naming the activations and what to reduce.
TEST(Estimator, ActivationsPastInt64AreAnError) {
  EstimateInput in;
  in.model = *preset("llama-7b");
  in.unit_numel = unit_numels(*in.model);
  in.micro_batch = 1 << 20;
  in.seq_len = 1 << 20;
  EXPECT_EQ(transformer_activation_bytes(*in.model, in.micro_batch, in.seq_len), kSizeOverflow);
  const auto e = estimate_memory(in);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* phrase : {"device activations", "passes 2^63 bytes", "micro-batch x sequence",
                             "1048576 x 1048576", "checkpoint"})
    EXPECT_NE(e.status().message().find(phrase), std::string::npos) << e.status();
  in.micro_batch = 1 << 10;  // 2^30 tokens: counted, at least the layers' share
  const auto ok = estimate_memory(in);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_GT(ok->dev(M::kActivations), (int64_t{1} << 30) * 2'105'344 * 4);
}

// Sizes past int64 in the other terms: Psi past 2^53 (the model states of such a unit pass
// any machine) and DeepSpeed's formulas on 4e18 parameters (P x 16 passes int64; Python's ints
// would not wrap, ours must not either).
TEST(Estimator, ModelStatesAndDeepSpeedFormulasPastInt64AreErrors) {
  EstimateInput in;
  in.psi = (int64_t{1} << 53) + 1;
  EXPECT_FALSE(estimate_memory(in).ok());
  EstimateOptions o;
  o.params = 4'000'000'000'000'000'000;
  o.formula = "deepspeed";
  o.stage = 2;
  const auto t = estimate_text(o);
  ASSERT_FALSE(t.ok()) << *t;
  EXPECT_NE(t.status().message().find("passes 2^63 bytes"), std::string::npos) << t.status();
  o.gpus_per_node = o.nodes = 65536;  // 2^32 ranks: more than an int counts
  o.formula = "";
  o.params = 1000;
  EXPECT_FALSE(estimate_text(o).ok());
}

}  // namespace
}  // namespace zt
