// Metrics: what each optimizer step measured (StepRecord) and the sinks that take it: the
// console's progress lines and metrics.jsonl, one JSON object per line in the run directory
// (docs/architecture.md "Files and formats"), flushed per line so a crashed run keeps what it
// measured. A new monitor (TensorBoard, CSV, ...) is another MetricsSink.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "zero/offload_device.h"

namespace zt {

// What one optimizer step measured (trainer/train.cc train_step), times in milliseconds.
struct StepRecord {
  int64_t step = 0;            // 1-based optimizer step
  int64_t steps = 0;           // the run's last step (--steps)
  double loss = 0;             // mean over micro-batches and ranks
  double lr = 0;               // the learning rate the step used
  double grad_norm = 0;        // global L2 norm before clipping
  double loss_scale = 1;       // the scale this step's gradients carried (fp16)
  double next_loss_scale = 1;  // the scaler's after the step (changed by an overflow)
  bool skipped = false;        // fp16 overflow: no update
  double step_ms = 0, tokens_per_s = 0;
  double eta_s = 0;  // the run's remaining time at its mean step time so far, seconds
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double comm_wait_ms = 0;  // waiting for gathers and reductions
  double recompute_ms = 0;  // activation checkpointing: the backward's recompute (in backward_ms)
  std::optional<OffloadTimes> offload;  // the step's offload phases, when anything is offloaded
  // The metrics.jsonl line: step, loss, lr, grad_norm, step_ms, tokens_per_s, forward_ms,
  // backward_ms, optimizer_ms, comm_wait_ms, loss_scale, skipped (the README's fields).
  nlohmann::json json() const;
};

// Takes each step's record and each validation loss, in order, on rank 0. Errors stop the run
// (a full disk under metrics.jsonl, say).
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual absl::Status step(const StepRecord& s) = 0;
  virtual absl::Status validation(int64_t step, double loss) = 0;
};

// The console: "step k/n | loss | lr | grad norm | ms | tok/s | ETA" per step (and the fp16
// skip), "step k | val loss"; every breakdown_every steps (DeepSpeed's wall_clock_breakdown at
// steps_per_print; 0: never) the phase times, the recompute with show_recompute
// (activation_checkpointing.profile), and the offload phases when anything is offloaded.
std::unique_ptr<MetricsSink> make_console_sink(int64_t breakdown_every, bool show_recompute);

// DeepSpeed's csv_monitor (monitor/csv_monitor.py): one CSV per tag in `dir` (output_path /
// job_name), named as DeepSpeed names them (the tag with '/' and ' ' as '_', ".csv"), a header
// "step,<the tag's last component>", then one row per optimizer step whose x axis is the
// samples seen so far (step x train_batch_size), as DeepSpeed's Train/Samples tags. Tags:
// DeepSpeed's Train/Samples/lr, Train/Samples/loss_scale (fp16) and, with breakdown
// (wall_clock_breakdown), Train/Samples/elapsed_time_ms_{forward,backward,step}; and ours,
// Train/Samples/{train_loss,grad_norm,tokens_per_s,val_loss}. Values are written in their
// shortest round-trip form. A fresh run (resumed_step < 0) starts each file anew; a run
// resumed after step k keeps each file's rows up to k's samples and appends (DeepSpeed appends
// whatever was there). Errors: the directory cannot be made; a write fails (the path and the
// reason), as for metrics.jsonl.
absl::StatusOr<std::unique_ptr<MetricsSink>> make_csv_sink(const std::string& dir,
                                                           int64_t train_batch_size, bool fp16,
                                                           bool breakdown, int64_t resumed_step);

class MetricsWriter final : public MetricsSink {
 public:
  // Opens dir/metrics.jsonl for appending, creating dir if needed, and leaves what is there
  // until begin(). Error names the path.
  static absl::StatusOr<MetricsWriter> open(const std::string& dir);
  // Once the run knows where it starts: a fresh run (resumed_step < 0) starts a new file, the
  // previous one kept as metrics.jsonl.prev; a run resumed after step k continues the file,
  // keeping the lines of steps <= k and dropping later ones (written by the run that was
  // stopped after the save), so one log covers the whole job however often it resumes.
  absl::Status begin(int64_t resumed_step);
  MetricsWriter(MetricsWriter&& o) noexcept : MetricsSink(), f_(o.f_), path_(std::move(o.path_)) {
    o.f_ = nullptr;
  }
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  ~MetricsWriter();
  // Appends `line` and flushes it. A failed write (ENOSPC, EFBIG, EIO) is an error naming the
  // file and the reason (Internal), and the file is cut back to its last complete line.
  absl::Status write(const nlohmann::json& line);
  // MetricsSink: the step's json() line; {"step", "val_loss"}.
  absl::Status step(const StepRecord& s) override { return write(s.json()); }
  absl::Status validation(int64_t step, double loss) override {
    return write({{"step", step}, {"val_loss", loss}});
  }

 private:
  MetricsWriter(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  std::FILE* f_ = nullptr;
  std::string path_;
};

// "1h02m", "3m07s", "42s": a duration in seconds for progress lines.
std::string format_duration(double seconds);

}  // namespace zt
