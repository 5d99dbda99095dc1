#include "trainer/reports.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file.h"

namespace zt {

nlohmann::json memory_report(const MemorySnapshot& m, const EstimateInput& in,
                             const MemoryEstimate& predicted, int rank) {
  // One pool's categories: measured persistent and peak bytes beside the prediction.
  using Bytes = std::array<int64_t, kNumMemCategories>;
  auto pool = [](const Bytes& persistent, const Bytes& peak, const Bytes& prediction) {
    nlohmann::json cats = nlohmann::json::object();
    for (size_t c = 0; c < kNumMemCategories; ++c)
      cats[std::string(mem_category_name(static_cast<MemCategory>(c)))] = {
          {"persistent_bytes", persistent[c]},
          {"peak_bytes", peak[c]},
          {"predicted_bytes", prediction[c]}};
    return cats;
  };
  const nlohmann::json cats = pool(m.persistent, m.peak, predicted.device);
  const nlohmann::json host = pool(m.host_persistent, m.host_peak, predicted.host);
  int64_t device = 0, on_host = 0;
  for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer}) {
    device += m.persistent[(size_t)c];
    on_host += m.host_persistent[(size_t)c];
  }
  on_host += m.host_persistent[(size_t)MemCategory::kNvme];  // offloaded to NVMe
  const int64_t measured = device + on_host;
  // The paper's formula for these dtypes, without padding: per element P + G + K, of which
  // the stage shards the optimizer (1), also the gradients (2), also the parameters (3).
  const double P = dtype_size(in.param_dtype), G = dtype_size(in.grad_dtype);
  const double K = predicted.optimizer_k, N = in.dp, psi = (double)predicted.psi;
  const double paper[4] = {(P + G + K) * psi, (P + G) * psi + K * psi / N,
                           P * psi + (G + K) * psi / N, (P + G + K) * psi / N};
  return {{"rank", rank},
          {"stage", in.stage},
          {"world_size", in.dp},
          {"psi", predicted.psi},
          {"padded_psi", predicted.padded_psi},
          {"optimizer_bytes_per_param", predicted.optimizer_k},
          {"device_peak_bytes", m.device_peak},
          {"device_predicted_bytes", predicted.device_total()},
          {"categories", cats},
          {"host_categories", host},
          {"model_states",
           {{"measured_bytes", measured},
            {"measured_device_bytes", device},
            {"measured_host_bytes", on_host},
            {"predicted_bytes_with_padding",
             predicted.device_model_states() + predicted.hst(MemCategory::kParams) +
                 predicted.hst(MemCategory::kGrads) + predicted.hst(MemCategory::kOptimizer) +
                 predicted.nvme()},
            {"paper_formula_bytes", paper[in.stage]},
            {"measured_over_paper", measured / paper[in.stage]}}}};
}

CommStats comm_delta(const CommStats& after, const CommStats& before) {
  CommStats d{};
  for (size_t k = 0; k < kNumCollKinds; ++k) {
    d[k].calls = after[k].calls - before[k].calls;
    d[k].elements = after[k].elements - before[k].elements;
    d[k].bytes = after[k].bytes - before[k].bytes;
    d[k].inter_node_bytes = after[k].inter_node_bytes - before[k].inter_node_bytes;
  }
  return d;
}

int64_t comm_volume(const CommStats& step) {
  return step[(size_t)CollKind::kAllReduce].elements +
         step[(size_t)CollKind::kReduceScatter].elements +
         step[(size_t)CollKind::kAllGather].elements + step[(size_t)CollKind::kAllToAll].elements;
}

nlohmann::json comm_report(const std::vector<CommStats>& steps,
                           const std::vector<OffloadTraffic>& offload, int64_t psi, int stage,
                           int world, int rank) {
  nlohmann::json rows = nlohmann::json::array();
  double sum = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    nlohmann::json kinds = nlohmann::json::object();
    int64_t inter = 0, intra = 0;
    for (size_t k = 0; k < kNumCollKinds; ++k) {
      const CollCounters& c = steps[i][k];
      if (c.calls == 0) continue;
      kinds[coll_kind_name(static_cast<CollKind>(k))] = {{"calls", c.calls},
                                                         {"elements", c.elements},
                                                         {"bytes", c.bytes},
                                                         {"inter_node_bytes", c.inter_node_bytes}};
      if (k == (size_t)CollKind::kScalar) continue;
      inter += c.inter_node_bytes;
      intra += c.bytes - c.inter_node_bytes;
    }
    const double v = (double)comm_volume(steps[i]) / (double)psi;
    sum += v;
    rows.push_back({{"step", i + 1},
                    {"collectives", kinds},
                    {"volume_over_psi", v},
                    {"inter_node_bytes", inter},
                    {"intra_node_bytes", intra}});
    if (i < offload.size())
      rows.back()["offload"] = {{"device_to_host_bytes", offload[i].to_host},
                                {"host_to_device_bytes", offload[i].to_device}};
  }
  return {{"rank", rank},
          {"stage", stage},
          {"world_size", world},
          {"psi", psi},
          {"convention",
           "reduce-scatter/all-gather over n elements count n, all-reduce 2n, all-to-all its "
           "send buffer; scalar reductions excluded from the volume and the link bytes; a "
           "collective whose ranks span nodes counts all its bytes as inter-node"},
          {"mean_volume_over_psi", steps.empty() ? 0.0 : sum / steps.size()},
          {"steps", rows}};
}

absl::Status write_json(const std::string& dir, const std::string& name, const nlohmann::json& j) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // Under a temporary name, fsynced and renamed: a failure names the reason and never leaves a
  // torn report where a good one was.
  return write_file_atomic(dir + "/" + name, j.dump(2) + "\n");
}

}  // namespace zt
