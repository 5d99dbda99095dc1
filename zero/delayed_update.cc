#include "zero/delayed_update.h"

#include <omp.h>

#include "common/status.h"
#include "common/trace.h"

namespace zt {

void DelayedUpdate::start(const std::function<const void*(int)>& device_grad,
                          const OptimizerStep& as) {
  ZT_CHECK(!running());
  if (units_.empty()) {
    units_.resize(slices_.size());
    for (size_t u = 0; u < slices_.size(); ++u) {
      units_[u].grad.resize(slices_[u].owned * dtype_size(slices_[u].grad_t));
      units_[u].out.resize(slices_[u].owned * dtype_size(out_t_));
      host_.on_alloc(MemCategory::kGrads, units_[u].grad.size());
      host_.on_alloc(MemCategory::kParams, units_[u].out.size());
    }
  }
  for (int u = 0; u < (int)units_.size(); ++u) {
    Unit& x = units_[u];
    x.active = true;
    if (const void* g = device_grad(u)) {
      be_->copy_to_host(x.grad.data(), g, x.grad.size());
      to_host_ += (int64_t)x.grad.size();
    } else {
      state_->copy_gradient(u, x.grad.data());
    }
  }
  error_ = nullptr;
  // OpenMP's thread count is per thread: the worker takes this one's (--threads).
  const int threads = omp_get_max_threads();
  worker_ = std::thread([this, as, threads] {
    omp_set_num_threads(threads);
    TraceSpan span(Track::kDelayedUpdate, "delayed update");
    try {
      for (int u = 0; u < (int)units_.size(); ++u) {
        Unit& x = units_[u];
        if (!x.active) continue;
        OptimizerState::Io io{.grad = x.grad.data(),
                              .grad_t = slices_[u].grad_t,
                              .grad_on_host = true,
                              .out = x.out.data(),
                              .out_t = out_t_,
                              .out_on_host = true};
        state_->update(u, io, as);
      }
      state_->flush();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

void DelayedUpdate::wait() {
  if (!running()) return;
  worker_.join();
  if (error_) std::rethrow_exception(error_);
}

void DelayedUpdate::for_each_result(const std::function<void(int, const void*, size_t)>& publish) {
  ZT_CHECK(!running());
  for (int u = 0; u < (int)units_.size(); ++u) {
    Unit& x = units_[u];
    if (!x.active) continue;
    x.active = false;
    publish(u, x.out.data(), x.out.size());
  }
}

}  // namespace zt
