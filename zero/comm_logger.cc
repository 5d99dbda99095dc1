#include "zero/comm_logger.h"

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

}  // namespace

std::pair<double, double> CommLogger::bandwidth_gbps(const std::string& op, int64_t bytes,
                                                     double ms, int world) {
  if (ms <= 0) return {0, 0};
  const double algbw = (double)bytes * 8 / (ms / 1e3) / 1e9;
  const double n = world;
  const double factor = op.rfind("all_reduce", 0) == 0                 ? 2 * (n - 1) / n
                        : op == "reduce_scatter" || op == "all_gather" ? (n - 1) / n
                                                                       : 1.0;
  return {algbw, algbw * factor};
}

void CommLogger::record(const char* op, int64_t bytes, double ms) {
  const std::string name = op;
  if (!o_.prof_all) {
    bool wanted = false;
    for (const std::string& p : o_.prof_ops) wanted |= canonical(p) == name;
    if (!wanted) return;
  }
  const auto [algbw, busbw] = bandwidth_gbps(name, bytes, ms, world_);
  std::lock_guard<std::mutex> lk(mu_);
  Stat& s = stats_[name][bytes];
  ++s.count;
  s.total_ms += ms;
  s.algbw_sum += algbw;
  s.busbw_sum += busbw;
  if (o_.verbose && out_)
    std::fprintf(out_,
                 "rank=%d | comm op: %s | time (ms): %.3f | msg size: %s | algbw (Gbps): %.2f | "
                 "busbw (Gbps): %.2f\n",
                 rank_, op, ms, format_bytes(bytes).c_str(), algbw, busbw);
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
                                format_bytes(bytes), s.count, s.total_ms, s.total_ms / s.count,
                                s.algbw_sum / s.count, s.busbw_sum / s.count));
  }
  return out;
}

}  // namespace zt
