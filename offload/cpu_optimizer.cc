#include "offload/cpu_optimizer.h"

#include <algorithm>
#include <vector>

#include "offload/cpu_adam.h"
#include "offload/host_buffer.h"

namespace zt {
namespace {

class CpuOptimizerState final : public OptimizerState {
 public:
  CpuOptimizerState(Backend* be, const CpuOffloadOptions& o) : be_(be), opt_(o) {
    if (opt_.sub_group_size <= 0) opt_.sub_group_size = 1'000'000'000;
  }

  void add_unit(size_t owned, float* /*fp32_working: the master lives on the host*/) override {
    Unit u;
    u.owned = owned;
    for (HostBuffer* b : {&u.master, &u.m, &u.v})
      *b = HostBuffer(owned * 4, MemCategory::kOptimizer, &host_, opt_.pin_memory);
    units_.push_back(std::move(u));
    granule_ = std::max(granule_, std::min<size_t>(owned, (size_t)opt_.sub_group_size));
  }
  void set_master(int u, const float* host) override {
    std::copy(host, host + units_[u].owned, units_[u].master.f32());
  }
  void get_master(int u, float* host) override {
    const float* m = units_[u].master.f32();
    std::copy(m, m + units_[u].owned, host);
  }
  bool master_is_working_copy(int) const override { return false; }

  void update(int u, void* grad, DType grad_t, void* out, DType out_t,
              const AdamStep& s) override {
    Unit& x = units_[u];
    const size_t gb = dtype_size(grad_t), ob = dtype_size(out_t);
    if (!grad_stage_.data()) {  // one sub-group of gradient and of working copy, fp32 at most
      grad_stage_ = HostBuffer(granule_ * 4, MemCategory::kPinnedHost, &host_, opt_.pin_memory);
      out_stage_ = HostBuffer(granule_ * 4, MemCategory::kPinnedHost, &host_, opt_.pin_memory);
    }
    AdamStep host_step = s;
    host_step.zero_grad = false;  // the host copy is scratch; the device gradient is zeroed below
    for (size_t begin = 0; begin < x.owned; begin += (size_t)opt_.sub_group_size) {
      const size_t n = std::min(x.owned - begin, (size_t)opt_.sub_group_size);
      void* g = static_cast<char*>(grad) + begin * gb;
      be_->copy_to_host(grad_stage_.data(), g, n * gb);
      to_host_ += (int64_t)(n * gb);
      if (s.zero_grad) be_->zero(g, n * gb);
      cpu_adam_step(x.master.f32() + begin, grad_stage_.data(), grad_t, x.m.f32() + begin,
                    x.v.f32() + begin, out ? out_stage_.data() : nullptr, out_t, n, host_step);
      if (out) {
        be_->copy_to_device(static_cast<char*>(out) + begin * ob, out_stage_.data(), n * ob);
        to_device_ += (int64_t)(n * ob);
      }
    }
  }

  const MemoryTracker* host_tracker() const override { return &host_; }
  int64_t bytes_to_host() const override { return to_host_; }
  int64_t bytes_to_device() const override { return to_device_; }

 private:
  struct Unit {
    size_t owned = 0;
    HostBuffer master, m, v;
  };
  Backend* be_;
  CpuOffloadOptions opt_;
  MemoryTracker host_;  // declared before the buffers it accounts
  std::vector<Unit> units_;
  size_t granule_ = 0;  // elements per staging buffer: the largest sub-group of any unit
  HostBuffer grad_stage_, out_stage_;
  int64_t to_host_ = 0, to_device_ = 0;
};

}  // namespace

std::unique_ptr<OptimizerState> make_cpu_optimizer_state(Backend* be, const CpuOffloadOptions& o) {
  return std::make_unique<CpuOptimizerState>(be, o);
}

}  // namespace zt
