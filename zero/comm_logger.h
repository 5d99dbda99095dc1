// DeepSpeed's comms_logger ("comms_logger": {"enabled", "verbose", "prof_all", "prof_ops",
// "debug"}; deepspeed/utils/comms_logging.py): every collective a communicator runs, timed as
// its communication thread runs it, counted by operation and message size; at the end of
// training a summary as DeepSpeed's log_summary prints it (count, total and average latency,
// algorithmic and bus bandwidth), and with verbose one line per collective as it completes.
//
// Message size is the bytes of the whole buffer the collective spans: n for an all-reduce of
// n, n x N_d for a reduce-scatter or all-gather of n a rank. Bandwidths as DeepSpeed's
// calc_bw_log computes them (from nccl-tests' PERFORMANCE.md, with one difference): tput
// (algbw) = size / time, except an all-reduce's, which DeepSpeed counts as 2 x size / time;
// busbw = size / time x 2(N_d - 1)/N_d for an all-reduce, x (N_d - 1)/N_d for a reduce-scatter
// or all-gather, (N_d - 1)/N_d for an all-to-all (nccl-tests' alltoall), x 1 for a broadcast
// or barrier; in Gbps (10^9 bits per second); N_d the ranks of the collective's group. The summary's
// averages are DeepSpeed's trim_mean(x, 0.1): the mean after dropping round(0.1 n) of the
// smallest and of the largest values.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

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
  // One collective `op` over `bytes`, `ms` long, among `ranks` ranks (0: the world's); with
  // inter_node (its ranks span nodes, zero/comm.h "Links") it is logged and summarised as
  // "op [between nodes]", so each link class has its rows. Thread-safe.
  void record(const char* op, int64_t bytes, double ms, int ranks = 0, bool inter_node = false);
  // DeepSpeed's log_summary table: per operation, per message size: count, total latency (ms),
  // trimmed mean latency (ms), trimmed mean tput and busbw (Gbps).
  std::string summary() const;
  // tput and busbw of one `op` over `bytes` in `ms` on `world` ranks, in Gbps (calc_bw_log).
  static std::pair<double, double> bandwidth_gbps(const std::string& op, int64_t bytes, double ms,
                                                  int world);

 private:
  struct Stat {  // every sample, as DeepSpeed keeps them, for the trimmed means
    std::vector<double> ms, tput, busbw;
  };
  CommsLoggerOptions o_;
  int world_, rank_;
  std::FILE* out_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<int64_t, Stat>> stats_;  // op -> message bytes -> stat
};

}  // namespace zt
