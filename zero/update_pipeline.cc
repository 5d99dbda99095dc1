#include "zero/update_pipeline.h"

#include <omp.h>

#include "common/status.h"
#include "common/trace.h"

namespace zt {

UpdatePipeline::UpdatePipeline(OptimizerState* state, std::vector<Slice> slices, DType out_t,
                               int threads, Backend* be, bool pin)
    : state_(state),
      slices_(std::move(slices)),
      out_t_(out_t),
      threads_(threads > 0 ? threads : 1),
      units_(slices_.size()),
      be_(be),
      pin_(pin) {
  worker_ = std::thread([this] { run(); });
}

UpdatePipeline::~UpdatePipeline() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    abandon_ = true;  // a worker waiting for a slot nobody will release would wait forever
    cv_.notify_all();
    cv_.wait(lock, [&] { return !job_; });
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  for (Slot& sl : slots_) wait_copy(sl);  // none reads a freed slot
}

void UpdatePipeline::wait_copy(Slot& sl) {
  if (sl.copy) be_->wait_copy(sl.copy);
  sl.copy = 0;
}

void UpdatePipeline::start(const std::function<Source(int)>& source, const OptimizerStep& as,
                           int staging_slots) {
  ZT_CHECK(!running_ && staging_slots >= 1);
  if (staging_slots != slots_used_) {  // slot k holds units k, k + slots, ...: sized anew
    for (Slot& sl : slots_) wait_copy(sl);
    slots_.clear();
    slots_used_ = staging_slots;
  }
  for (Slot& sl : slots_) sl.free = true;  // the previous update's were all taken
  for (int u = 0; u < (int)units_.size(); ++u) {
    Unit& x = units_[u];
    const Source src = source(u);
    x.staged = false;
    x.grad_ptr = src.grad;
    x.out_ptr = src.out;
    if (!src.out) {  // a staging slot, as large as the largest unit it holds
      x.staged = true;
      if ((int)slots_.size() <= u % staging_slots) slots_.resize(u % staging_slots + 1);
      Slot& sl = slot(u);
      const size_t bytes = slices_[u].owned * dtype_size(out_t_);
      if (sl.out.bytes() < bytes) {
        wait_copy(sl);
        sl.out = HostBuffer(bytes, MemCategory::kParams, &host_, pin_ ? be_ : nullptr);
      }
    }
  }
  step_ = as;
  times_at_start_ = state_->times();  // the worker is idle: nothing else adds to them now
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = true;
    done_ = 0;
    error_ = nullptr;
  }
  running_ = true;
  cv_.notify_all();
}

void UpdatePipeline::run() {
  // OpenMP's thread count is per thread: the optimizer's team is this thread's own.
  omp_set_num_threads(threads_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return job_ || stop_; });
    if (stop_) return;
    lock.unlock();
    std::exception_ptr error;
    size_t u = 0;
    {
      TraceSpan span(Track::kOptimizerThread, "optimizer step");
      try {
        for (; u < units_.size(); ++u) {
          Unit& x = units_[u];
          void* out = x.out_ptr;
          if (x.staged) {  // wait for its slot's previous unit to be taken
            std::unique_lock<std::mutex> g(mu_);
            Slot& sl = slot((int)u);
            cv_.wait(g, [&] { return sl.free || abandon_; });
            if (abandon_) break;
            sl.free = false;
            g.unlock();
            wait_copy(sl);  // the copy of the unit it held before has read it
            out = sl.out.data();
          }
          OptimizerState::Io io{.grad = const_cast<void*>(x.grad_ptr),
                                .grad_t = slices_[u].grad_t,
                                .grad_on_host = true,
                                .out = out,
                                .out_t = out_t_,
                                .out_on_host = true};
          state_->update((int)u, io, step_);
          if (u + 1 < units_.size()) {  // the last unit is done once its writes are flushed
            std::lock_guard<std::mutex> g(mu_);
            done_ = u + 1;
            cv_.notify_all();
            if (abandon_) break;
          }
        }
        state_->flush();  // NVMe write-behind: errors surface in this update
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    error_ = error;
    done_ = units_.size();
    job_ = false;
    cv_.notify_all();
  }
}

void UpdatePipeline::wait(int u) {
  if (!running_) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ > (size_t)u; });
  if (error_) std::rethrow_exception(error_);
}

void UpdatePipeline::wait_all() {
  if (!running_) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !job_; });  // the job ends after its flush
  running_ = false;
  if (error_) std::rethrow_exception(error_);
}

std::span<const uint8_t> UpdatePipeline::take(int u) {
  Unit& x = units_[u];
  if (!x.staged) return {};
  x.staged = false;
  return {static_cast<const uint8_t*>(slot(u).out.data()), slices_[u].owned * dtype_size(out_t_)};
}

void UpdatePipeline::release(int u, uint64_t copy) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot(u).free = true;
    slot(u).copy = copy;
  }
  cv_.notify_all();
}

}  // namespace zt
