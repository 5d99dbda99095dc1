#include "zero/comm_logger.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/memory.h"

namespace zt {
namespace {

// DeepSpeed's (torch.distributed's) names for our operations.
std::string canonical(const std::string& op) {
  if (op == "all_gather_into_tensor" || op == "all_gather_base") return "all_gather";
  if (op == "reduce_scatter_tensor" || op == "reduce_scatter_base") return "reduce_scatter";
  return op;
}

// DeepSpeed's trim_mean(data, 0.1) (deepspeed/utils/timer.py): sorted, k = round(0.1 n)
// dropped from each end (Python's round: half to even, as nearbyint), the mean of the rest.
double trim_mean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = (size_t)std::nearbyint(0.1 * (double)v.size());
  if (v.size() <= 2 * k) return 0;
  return std::accumulate(v.begin() + k, v.end() - k, 0.0) / (double)(v.size() - 2 * k);
}

}  // namespace

std::pair<double, double> CommLogger::bandwidth_gbps(const std::string& op, int64_t bytes,
                                                     double ms, int world) {
  if (ms <= 0) return {0, 0};
  const double rate = (double)bytes * 8 / (ms / 1e3) / 1e9;  // size / time, Gbps
  const double n = world;
  const auto is = [&](const char* kind) { return op.rfind(kind, 0) == 0; };
  if (is("all_reduce")) return {2 * rate, rate * 2 * (n - 1) / n};
  if (is("reduce_scatter") || is("all_gather") || is("all_to_all"))
    return {rate, rate * (n - 1) / n};
  return {rate, rate};
}

void CommLogger::record(const char* op, int64_t bytes, double ms, int ranks, bool inter_node) {
  const std::string name = inter_node ? absl::StrCat(op, " [between nodes]") : std::string(op);
  if (!o_.prof_all) {
    const std::string base = op;  // its link class aside
    bool wanted = false;
    for (const std::string& p : o_.prof_ops)  // "all_reduce" covers "all_reduce (scalars)"
      wanted |= base == canonical(p) || base.rfind(canonical(p) + " (", 0) == 0;
    if (!wanted) return;
  }
  const auto [algbw, busbw] = bandwidth_gbps(name, bytes, ms, ranks > 0 ? ranks : world_);
  std::lock_guard<std::mutex> lk(mu_);
  Stat& s = stats_[name][bytes];
  s.ms.push_back(ms);
  s.tput.push_back(algbw);
  s.busbw.push_back(busbw);
  if (o_.verbose && out_)
    std::fprintf(out_,
                 "rank=%d | comm op: %s | time (ms): %.3f | msg size: %s | algbw (Gbps): %.2f | "
                 "busbw (Gbps): %.2f\n",
                 rank_, name.c_str(), ms, format_bytes(bytes).c_str(), algbw, busbw);
}

std::string CommLogger::summary() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string out = absl::StrFormat("%-24s%-16s%-10s%-20s%-18s%-18s%-18s\n", "Comm. Op",
                                    "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
                                    "tput_avg (Gbps)", "busbw_avg (Gbps)");
  for (const auto& [op, sizes] : stats_) {
    absl::StrAppend(&out, op, "\n");
    for (const auto& [bytes, s] : sizes)
      absl::StrAppend(
          &out, absl::StrFormat("%-24s%-16s%-10d%-20.2f%-18.3f%-18.2f%-18.2f\n", "",
                                format_bytes(bytes), s.ms.size(),
                                std::accumulate(s.ms.begin(), s.ms.end(), 0.0), trim_mean(s.ms),
                                trim_mean(s.tput), trim_mean(s.busbw)));
  }
  return out;
}

}  // namespace zt
