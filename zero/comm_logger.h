// DeepSpeed's comms_logger ("comms_logger": {"enabled", "verbose", "prof_all", "prof_ops",
// "debug"}; deepspeed/utils/comms_logging.py): every collective a communicator runs, timed as
// its communication thread runs it, counted by operation and message size; at the end of
// training a summary as DeepSpeed's log_summary prints it (count, total and average latency,
// algorithmic and bus bandwidth), and with verbose one line per collective as it completes.
//
// Message size is the bytes of the whole buffer the collective spans: n for an all-reduce of
// n, n x N_d for a reduce-scatter or all-gather of n a rank. Bandwidths follow nccl-tests'
// PERFORMANCE.md, as DeepSpeed's calc_bw_log does: algbw = size / time; busbw = algbw x
// 2(N_d - 1)/N_d for an all-reduce, x (N_d - 1)/N_d for a reduce-scatter or all-gather, x 1 for
// a broadcast or barrier; in Gbps (10^9 bits per second).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace zt {

struct CommsLoggerOptions {
  bool verbose = false;            // a line per collective as it completes
  bool prof_all = true;            // every operation; else those in prof_ops
  std::set<std::string> prof_ops;  // "all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                   // "barrier" (or DeepSpeed's torch names for them)
};

class CommLogger {
 public:
  CommLogger(CommsLoggerOptions o, int world, int rank, std::FILE* verbose_to)
      : o_(std::move(o)), world_(world), rank_(rank), out_(verbose_to) {}
  // One collective `op` over `bytes`, `ms` long. Thread-safe.
  void record(const char* op, int64_t bytes, double ms);
  // DeepSpeed's log_summary table: per operation, per message size: count, total latency (ms),
  // average latency (ms), average algbw and busbw (Gbps).
  std::string summary() const;
  // algbw and busbw of one `op` over `bytes` in `ms` on `world` ranks, in Gbps.
  static std::pair<double, double> bandwidth_gbps(const std::string& op, int64_t bytes, double ms,
                                                  int world);

 private:
  struct Stat {
    int64_t count = 0;
    double total_ms = 0, algbw_sum = 0, busbw_sum = 0;
  };
  CommsLoggerOptions o_;
  int world_, rank_;
  std::FILE* out_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<int64_t, Stat>> stats_;  // op -> message bytes -> stat
};

}  // namespace zt
