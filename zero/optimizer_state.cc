#include "zero/optimizer_state.h"

#include <vector>

#include "common/status.h"

namespace zt {
namespace {

class DeviceOptimizerState final : public OptimizerState {
 public:
  DeviceOptimizerState(Backend* be, OptimizerKind kind)
      : be_(be), kind_(kind), states_(optimizer_info(kind).num_states) {}

  void add_unit(size_t owned, float* fp32_working) override {
    Unit u;
    u.owned = owned;
    u.alias = fp32_working;
    if (!u.alias) u.master = DeviceBuffer(be_, owned * 4, MemCategory::kOptimizer);
    for (int i = 0; i < states_; ++i) {
      u.state[i] = DeviceBuffer(be_, owned * 4, MemCategory::kOptimizer);
      u.ptr[i] = u.state[i].f32();
      be_->zero(u.state[i].data(), u.state[i].bytes());
    }
    units_.push_back(std::move(u));
  }
  void set_master(int u, const float* host) override {
    be_->copy_to_device(master(u), host, units_[u].owned * 4);
  }
  void get_master(int u, float* host) override {
    be_->copy_to_host(host, master(u), units_[u].owned * 4);
  }
  void set_states(int u, const float* const* host) override {
    for (int i = 0; i < states_; ++i)
      be_->copy_to_device(units_[u].ptr[i], host[i], units_[u].owned * 4);
  }
  void get_states(int u, float* const* host) override {
    for (int i = 0; i < states_; ++i)
      be_->copy_to_host(host[i], units_[u].ptr[i], units_[u].owned * 4);
  }
  OptimizerKind kind() const override { return kind_; }
  bool master_is_working_copy(int u) const override { return units_[u].alias != nullptr; }
  void update(int u, const Io& io, const OptimizerStep& s) override {
    Unit& x = units_[u];
    ZT_CHECK(io.grad && !io.grad_on_host && s.kind == kind_);  // device gradients only
    if (!io.out_on_host || !io.out) {
      be_->optimizer_update(master(u), io.grad, io.grad_t, x.ptr, io.out, io.out_t, x.owned, s);
      return;
    }
    // Parameters offloaded, optimizer on the device: round on the device, then copy out.
    const size_t bytes = x.owned * dtype_size(io.out_t);
    DeviceBuffer tmp(be_, bytes, MemCategory::kWorkspace);
    be_->optimizer_update(master(u), io.grad, io.grad_t, x.ptr, tmp.data(), io.out_t, x.owned, s);
    be_->copy_to_host(io.out, tmp.data(), bytes);
    to_host_ += (int64_t)bytes;
  }
  int64_t bytes_to_host() const override { return to_host_; }

 private:
  struct Unit {
    size_t owned = 0;
    float* alias = nullptr;  // the fp32 working copy serving as master
    DeviceBuffer master, state[kMaxOptimizerStates];
    float* ptr[kMaxOptimizerStates] = {};  // state[i]'s data
  };
  float* master(int u) { return units_[u].alias ? units_[u].alias : units_[u].master.f32(); }

  Backend* be_;
  OptimizerKind kind_;
  int states_;
  std::vector<Unit> units_;
  int64_t to_host_ = 0;
};

}  // namespace

std::unique_ptr<OptimizerState> make_device_optimizer_state(Backend* be, OptimizerKind kind) {
  return std::make_unique<DeviceOptimizerState>(be, kind);
}

}  // namespace zt
