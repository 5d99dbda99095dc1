// A timeline of a few training steps (zerotrain.trace, --trace_steps) in the Chrome trace-event
// format that Perfetto (ui.perfetto.dev) and chrome://tracing open: one process per rank, one
// track per kind of work (and per thread: work of one kind done by two threads gets a second
// track, "nvme read (2)", so each track's events nest). Events are complete events ("ph": "X",
// microseconds since configure()) recorded by the threads that do the work:
//   compute        each unit's forward and backward, the step itself, and the training
//                  thread's waits for communication ("wait for communication": collectives,
//                  the loss and gradient-norm all-reduces, barriers);
//   communication  each collective as the communication thread runs it, with its bytes;
//   device->host, host->device   gradient and parameter copies of offload;
//   optimizer      CPU Adam, per tile of a sub-group, and the training thread's wait for the
//                  delayed update ("wait for delayed update");
//   nvme read / nvme write   the time a caller waited for the swapper's reads and writes
//                  (the I/O itself runs in the kernel's io_uring, behind these waits);
//   delayed update the ZeRO-Offload delayed parameter update's background step.
// Recording runs from the step before the first traced one to the end of the last, so work a
// background thread began earlier is drawn; write() keeps what falls inside traced steps and
// splits an event that crosses a step boundary (the delayed update runs into the next step's
// forward) into one piece per step, each cut at the step's edges.
// Times are the host's: on the CPU backend they are the work itself; on a GPU a kernel's span
// is its launch, and the waits (communication, copies) are what the host spent blocked.
//
// Exposed time is what the training thread spent in a kind of work: it is not hidden behind
// compute. Each traced step's summary (end_step) sums the training thread's communication
// waits, its copy spans, and its optimizer, delayed-update-wait and NVMe spans.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace zt {

enum class Track : int {
  kCompute,
  kCommunication,
  kDeviceToHost,
  kHostToDevice,
  kOptimizer,
  kNvmeRead,
  kNvmeWrite,
  kOptimizerThread,
  kCount
};
const char* track_name(Track t);  // "compute", "communication", "device->host", ...

// One traced step's exposed time (ms) on the training thread, and the step's length.
struct TraceSummary {
  int64_t step = 0;
  double step_ms = 0, exposed_comm_ms = 0, exposed_copy_ms = 0, exposed_optimizer_ms = 0;
};

class Tracer {
 public:
  // The process's tracer (every rank is a process).
  static Tracer& instance();
  // Traces steps [first, last] of this rank; before it, nothing is recorded.
  void configure(int rank, int64_t first, int64_t last);
  bool configured() const { return last_ >= first_ && first_ > 0; }
  // Recording now: a traced step runs. Cheap (one atomic load): every probe asks it first.
  bool recording() const { return recording_.load(std::memory_order_relaxed); }
  // On the training thread, around each optimizer step (its micro-batches and the update):
  // records when `step` is traced; end_step returns its summary (step 0 when not traced, or
  // when `step` did not begin). TracedStep pairs them.
  void begin_step(int64_t step);
  TraceSummary end_step(int64_t step);
  // Microseconds on the trace's clock (steady, since configure()).
  double now_us() const;
  // A complete event on track t, [start_us, start_us + dur_us), by the calling thread. `index`
  // >= 0 is appended to the name ("forward block 3"); bytes >= 0 goes into its args.
  void add(Track t, const char* name, int index, double start_us, double dur_us,
           int64_t bytes = -1);
  // Writes dir/trace_rank<r>.json ({"traceEvents": [...]}, named tracks); nothing when no traced
  // step ran. Error names the file.
  absl::Status write(const std::string& dir) const;

 private:
  struct Event {
    Track track;
    const char* name;
    int index;
    double start_us, dur_us;
    int64_t bytes;
    std::thread::id thread;
  };
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<double, double>> windows_;  // traced steps [begin, end), microseconds
  std::atomic<bool> recording_{false};
  std::thread::id training_thread_;
  int rank_ = 0;
  int64_t first_ = 0, last_ = -1;
  bool in_step_ = false;
  int64_t step_ = 0;
  double step_start_us_ = 0;
  size_t step_first_event_ = 0;
  int64_t origin_ns_ = 0;
};

// One optimizer step on the tracer: begins it; end() returns its summary; a step left early (an
// error returned) is ended by the destructor, so recording never outlives it.
class TracedStep {
 public:
  explicit TracedStep(int64_t step) : step_(step) { Tracer::instance().begin_step(step); }
  ~TracedStep() {
    if (!ended_) Tracer::instance().end_step(step_);
  }
  TraceSummary end() {
    ended_ = true;
    return Tracer::instance().end_step(step_);
  }
  TracedStep(const TracedStep&) = delete;
  TracedStep& operator=(const TracedStep&) = delete;

 private:
  int64_t step_;
  bool ended_ = false;
};

// Records the span of its lifetime on track t when a traced step runs.
class TraceSpan {
 public:
  TraceSpan(Track t, const char* name, int index = -1, int64_t bytes = -1)
      : on_(Tracer::instance().recording()),
        t_(t),
        name_(name),
        index_(index),
        bytes_(bytes),
        start_(on_ ? Tracer::instance().now_us() : 0) {}
  ~TraceSpan() {
    if (on_)
      Tracer::instance().add(t_, name_, index_, start_, Tracer::instance().now_us() - start_,
                             bytes_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  bool on_;
  Track t_;
  const char* name_;
  int index_;
  int64_t bytes_;
  double start_;
};

// A span that ends now and lasted `ms` (where a Timer already measured the work).
inline void trace_elapsed(Track t, const char* name, double ms) {
  Tracer& tr = Tracer::instance();
  if (tr.recording()) tr.add(t, name, -1, tr.now_us() - ms * 1e3, ms * 1e3);
}

}  // namespace zt
