// Metrics: what each optimizer step measured (StepRecord) and the sinks that take it: the
// console's progress lines and metrics.jsonl, one JSON object per line in the run directory
// (docs/architecture.md "Files and formats"), flushed per line so a crashed run keeps what it
// measured. A new monitor (TensorBoard, CSV, ...) is another MetricsSink.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/trace.h"
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
  std::optional<TraceSummary> trace;    // a traced step's exposed times (zerotrain.trace)
  // The metrics.jsonl line: step, loss, lr, grad_norm, step_ms, tokens_per_s, forward_ms,
  // backward_ms, optimizer_ms, comm_wait_ms, loss_scale, skipped (the README's fields); with
  // offload "offload" {grad_out_ms, cpu_step_ms, param_in_ms, nvme_read_ms, nvme_write_ms}, and
  // for a traced step "trace" {exposed_comm_ms, exposed_copy_ms, exposed_optimizer_ms, and each
  // as a share of the step}.
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

// DeepSpeed's monitors (csv_monitor, tensorboard) write the same scalars, as (tag, x, value):
// DeepSpeed's Train/Samples/train_loss, Train/Samples/lr, Train/Samples/loss_scale (fp16) and,
// with breakdown (wall_clock_breakdown), Train/Samples/elapsed_time_ms_{forward,backward,step};
// and ours, Train/Samples/{grad_norm,tokens_per_s,val_loss}. x is the samples seen so far
// (step x train_batch_size), DeepSpeed's x axis for its Train/Samples tags. A monitor is this
// table and one way to write a row (scalar()).
class ScalarMonitor : public MetricsSink {
 public:
  ScalarMonitor(int64_t train_batch_size, bool fp16, bool breakdown)
      : batch_(train_batch_size), fp16_(fp16), breakdown_(breakdown) {}
  absl::Status step(const StepRecord& s) final;
  absl::Status validation(int64_t step, double loss) final;

 protected:
  virtual absl::Status scalar(const std::string& tag, int64_t x, double value) = 0;
  // Called after each step's and each validation's rows (flush, say).
  virtual absl::Status end_of_rows() { return absl::OkStatus(); }
  int64_t batch_;

 private:
  bool fp16_, breakdown_;
};

// DeepSpeed's csv_monitor (monitor/csv_monitor.py): one CSV per tag (ScalarMonitor's) in `dir`
// (output_path / job_name), named as DeepSpeed names them (the tag with '/' and ' ' as '_',
// ".csv"), a header "step,<the tag's last component>", then one row per optimizer step. Values
// are written in their shortest round-trip form. A fresh run (resumed_step < 0) starts each
// file anew; a run resumed after step k keeps each file's rows up to k's samples and appends
// (DeepSpeed appends whatever was there). Errors: the directory cannot be made; a write fails
// (the path and the reason), as for metrics.jsonl.
absl::StatusOr<std::unique_ptr<MetricsSink>> make_csv_sink(const std::string& dir,
                                                           int64_t train_batch_size, bool fp16,
                                                           bool breakdown, int64_t resumed_step);

// DeepSpeed's tensorboard monitor (monitor/tensorboard.py, through PyTorch's SummaryWriter):
// one TensorBoard event file in `dir`, events.out.tfevents.<10-digit start time>.<host>, its
// first event the file version ("brain.Event:2"), then one scalar event per ScalarMonitor row
// (step = x, simple_value = the value as a float), each step's flushed. The records are
// TensorBoard's (TFRecord framing: the length, its masked CRC32C, the event, its masked
// CRC32C). Each run, fresh or resumed, starts a new file, as DeepSpeed's does; TensorBoard
// reads them all. `clock` gives each event's wall time in seconds (null: the system clock).
// Errors: the directory cannot be made; a write fails (the path and the reason).
absl::StatusOr<std::unique_ptr<MetricsSink>> make_tensorboard_sink(
    const std::string& dir, int64_t train_batch_size, bool fp16, bool breakdown,
    std::function<double()> clock = nullptr);

class MetricsWriter final : public MetricsSink {
 public:
  // Opens dir/metrics.jsonl for appending, creating dir if needed, and leaves what is there
  // until begin(). Error names the path.
  static absl::StatusOr<MetricsWriter> open(const std::string& dir);
  // Once the run knows where it starts: a fresh run (resumed_step < 0) starts a new file, the
  // previous one kept as metrics.jsonl.prev; a run resumed after step k continues the file,
  // keeping the lines of steps <= k and dropping later ones (written by the run that was
  // stopped after the save), so one log covers the whole job however often it resumes.
  // at_end: k is the job's last step and the run does the end of training (end_of_training)
  // again, so step k's validation line (the final one, logged after the save) is dropped too.
  absl::Status begin(int64_t resumed_step, bool at_end = false);
  // The end of training at `steps` (the final validation, the reports and the sample) is done:
  // the line {"end_of_training": steps}, the log's last (no "step" key: readers of step lines
  // and validation lines pass it by).
  absl::Status end_of_training(int64_t steps) { return write({{"end_of_training", steps}}); }
  // Whether the file holds end_of_training(steps)'s line: a job relaunched after it has
  // nothing left to do, one killed between its last save and that line has its end to finish.
  bool ended(int64_t steps) const;
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
