#include "zero/optimizer_state.h"

#include <vector>

#include "common/status.h"

namespace zt {
namespace {

class DeviceOptimizerState final : public OptimizerState {
 public:
  explicit DeviceOptimizerState(Backend* be) : be_(be) {}

  void add_unit(size_t owned, float* fp32_working) override {
    Unit u;
    u.owned = owned;
    u.alias = fp32_working;
    if (!u.alias) u.master = DeviceBuffer(be_, owned * 4, MemCategory::kOptimizer);
    u.m = DeviceBuffer(be_, owned * 4, MemCategory::kOptimizer);
    u.v = DeviceBuffer(be_, owned * 4, MemCategory::kOptimizer);
    be_->zero(u.m.data(), u.m.bytes());
    be_->zero(u.v.data(), u.v.bytes());
    units_.push_back(std::move(u));
  }
  void set_master(int u, const float* host) override {
    be_->copy_to_device(master(u), host, units_[u].owned * 4);
  }
  void get_master(int u, float* host) override {
    be_->copy_to_host(host, master(u), units_[u].owned * 4);
  }
  void set_moments(int u, const float* m, const float* v) override {
    be_->copy_to_device(units_[u].m.data(), m, units_[u].owned * 4);
    be_->copy_to_device(units_[u].v.data(), v, units_[u].owned * 4);
  }
  void get_moments(int u, float* m, float* v) override {
    be_->copy_to_host(m, units_[u].m.data(), units_[u].owned * 4);
    be_->copy_to_host(v, units_[u].v.data(), units_[u].owned * 4);
  }
  bool master_is_working_copy(int u) const override { return units_[u].alias != nullptr; }
  void update(int u, const Io& io, const AdamStep& s) override {
    Unit& x = units_[u];
    ZT_CHECK(io.grad && !io.grad_on_host);  // device gradients only
    if (!io.out_on_host || !io.out) {
      be_->adamw_update(master(u), io.grad, io.grad_t, x.m.f32(), x.v.f32(), io.out, io.out_t,
                        x.owned, s);
      return;
    }
    // Parameters offloaded, optimizer on the device: round on the device, then copy out.
    const size_t bytes = x.owned * dtype_size(io.out_t);
    DeviceBuffer tmp(be_, bytes, MemCategory::kWorkspace);
    be_->adamw_update(master(u), io.grad, io.grad_t, x.m.f32(), x.v.f32(), tmp.data(), io.out_t,
                      x.owned, s);
    be_->copy_to_host(io.out, tmp.data(), bytes);
    to_host_ += (int64_t)bytes;
  }
  int64_t bytes_to_host() const override { return to_host_; }

 private:
  struct Unit {
    size_t owned = 0;
    float* alias = nullptr;  // the fp32 working copy serving as master
    DeviceBuffer master, m, v;
  };
  float* master(int u) { return units_[u].alias ? units_[u].alias : units_[u].master.f32(); }

  Backend* be_;
  std::vector<Unit> units_;
  int64_t to_host_ = 0;
};

}  // namespace

std::unique_ptr<OptimizerState> make_device_optimizer_state(Backend* be) {
  return std::make_unique<DeviceOptimizerState>(be);
}

}  // namespace zt
