// --memory-report and --comm-report: what a run measured, per rank, next to the formulas
// (ZeRO paper, Rajbhandari et al. 2020: model states per device and communication volume).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/memory.h"
#include "zero/comm.h"
#include "zero/estimator.h"

namespace zt {

// Bytes per category: persistent (after the first optimizer step, when every model state is
// allocated and transient buffers are freed) and peak (whole run).
struct MemorySnapshot {
  std::array<int64_t, kNumMemCategories> persistent{}, peak{};
  // Host memory of an offloaded optimizer state (zero when nothing is offloaded).
  std::array<int64_t, kNumMemCategories> host_persistent{}, host_peak{};
  int64_t device_peak = 0;  // the most device bytes in use at once, all categories together
};

// The memory_report.json object: measured bytes per category on the device and on the host
// (host_categories.nvme: bytes on NVMe),
// the estimator's prediction for the same run, and model states (params + grads + optimizer,
// device and host together) measured vs the paper's formula (unpadded) and vs the padded
// accounting.
nlohmann::json memory_report(const MemorySnapshot& m, const EstimateInput& in,
                             const MemoryEstimate& predicted, int rank);

// Collective counts of one optimizer step (difference of two stats() snapshots).
CommStats comm_delta(const CommStats& after, const CommStats& before);
// Volume in the paper's convention, scalar reductions excluded (elements).
int64_t comm_volume(const CommStats& step);
// The comm_report.json object: per step and collective kind, calls / elements / bytes /
// inter_node_bytes, the step's bytes between nodes and within a node (zero/comm.h "Links"),
// and the volume divided by Ψ.
// offload: per step, bytes copied device -> host and host -> device by an offloaded optimizer
// (empty, or one pair per step).
struct OffloadTraffic {
  int64_t to_host = 0, to_device = 0;
};
nlohmann::json comm_report(const std::vector<CommStats>& steps,
                           const std::vector<OffloadTraffic>& offload, int64_t psi, int stage,
                           int world, int rank);

// Writes `j` to dir/<name> (via a temporary file and a rename).
absl::Status write_json(const std::string& dir, const std::string& name, const nlohmann::json& j);

}  // namespace zt
