// The engine's checkpoint and test access: whole units' parameters, saved state, gradients.
#include <algorithm>
#include <vector>

#include "common/status.h"
#include "zero/engine_unit.h"

namespace zt {

void Engine::set_unit_params(int u, std::span<const float> host) {
  finish_update();
  UnitState& s = unit(u);
  ZT_CHECK(host.size() == s.numel);
  // This rank's owned slice (zero past the end of the unit: padding).
  std::vector<float> owned(s.owned(), 0.f);
  const size_t begin = s.replicated ? 0 : (size_t)rank_ * s.shard;
  for (size_t i = 0; i < owned.size() && begin + i < s.numel; ++i) owned[i] = host[begin + i];
  optimizer_->set_master(u, owned.data());
  if (s.store >= 0) {
    convert(owned.data(), DType::kF32, params_->begin_write(s.store), opt_.param_dtype, s.owned());
    params_->end_write(s.store);
    return;
  }
  if (s.sharded_params || s.replicated) {
    if (!optimizer_->master_is_working_copy(u)) {
      std::vector<uint8_t> working(s.owned() * dtype_size(opt_.param_dtype));
      convert(owned.data(), DType::kF32, working.data(), opt_.param_dtype, s.owned());
      be_->copy_to_device(s.params.data(), working.data(), working.size());
    }
    return;
  }
  // Stages 1-2: the whole working unit on every rank.
  std::vector<float> whole(s.padded, 0.f);
  std::copy(host.begin(), host.end(), whole.begin());
  DeviceBuffer tmp(be_, s.padded * 4, MemCategory::kWorkspace);
  be_->copy_to_device(tmp.data(), whole.data(), s.padded * 4);
  // Node-shared: every rank writes the same values, so a rank reading after its own write
  // reads them whatever the others are doing (engine.h says what callers must order).
  be_->convert(tmp.data(), DType::kF32, s.working(), opt_.param_dtype, s.padded);
}

std::pair<size_t, size_t> Engine::saved_range(int u) const {
  const UnitState& s = units_[u];
  // MiCS: the first group saves; the others hold the same shards.
  if (zeropp_.mics_replicas && zeropp_.mics_replicas->rank() != 0) return {0, 0};
  if (s.replicated) return {0, rank_ == 0 ? s.numel : 0};
  const size_t begin = std::min(s.numel, (size_t)rank_ * s.shard);
  return {begin, std::min(s.numel, begin + s.shard)};
}

void Engine::get_saved_state(int u, float* master, float* const* states) {
  finish_update();
  const auto [begin, end] = saved_range(u);
  if (begin == end) return;
  UnitState& s = unit(u);
  const int k = optimizer_info(rule_->kind()).num_states;
  std::vector<float> a(s.owned());
  std::vector<std::vector<float>> st(k, std::vector<float>(s.owned()));
  float* ptr[kMaxOptimizerStates] = {};
  for (int i = 0; i < k; ++i) ptr[i] = st[i].data();
  optimizer_->get_master(u, a.data());
  optimizer_->get_states(u, ptr);
  const size_t n = end - begin;  // the owned slice starts at `begin`: drop its padding
  std::copy_n(a.begin(), n, master);
  for (int i = 0; i < k; ++i) std::copy_n(st[i].begin(), n, states[i]);
}

void Engine::set_unit_state(int u, std::span<const float> master,
                            std::span<const std::span<const float>> states) {
  set_unit_params(u, master);
  UnitState& s = unit(u);
  const int k = optimizer_info(rule_->kind()).num_states;
  ZT_CHECK((int)states.size() == k);
  std::vector<std::vector<float>> owned(k, std::vector<float>(s.owned(), 0.f));
  const float* ptr[kMaxOptimizerStates] = {};
  const size_t begin = s.replicated ? 0 : (size_t)rank_ * s.shard;
  for (int j = 0; j < k; ++j) {
    ZT_CHECK(states[j].size() == s.numel);
    for (size_t i = 0; i < s.owned() && begin + i < s.numel; ++i)
      owned[j][i] = states[j][begin + i];
    ptr[j] = owned[j].data();
  }
  optimizer_->set_states(u, ptr);
}

void Engine::get_unit_params(int u, std::span<float> host) {
  finish_update();
  UnitState& s = unit(u);
  ZT_CHECK(host.size() == s.numel);
  if (s.replicated) {
    optimizer_->get_master(u, host.data());
    return;
  }
  std::vector<float> owned(s.shard);
  optimizer_->get_master(u, owned.data());
  DeviceBuffer shard(be_, s.shard * 4, MemCategory::kWorkspace);
  be_->copy_to_device(shard.data(), owned.data(), s.shard * 4);
  gather_to_host(s, shard.data(), host);
}

// Every rank's fp32 shard of unit s (this rank's is `shard`, on the device) into host (numel).
void Engine::gather_to_host(UnitState& s, const void* shard, std::span<float> host) {
  DeviceBuffer whole(be_, s.padded * 4, MemCategory::kWorkspace);
  comm_->all_gather(shard, whole.data(), s.shard, DType::kF32).wait();
  be_->copy_to_host(host.data(), whole.data(), s.numel * 4);
}

void Engine::get_unit_grads(int u, std::span<float> host) {
  finish_update();
  grads_->drain(0);
  UnitState& s = unit(u);
  ZT_CHECK(host.size() == s.numel);
  DeviceBuffer owned(be_, s.owned() * 4, MemCategory::kWorkspace);
  grads_->owned_f32(u, owned.f32());
  if (s.replicated)
    be_->copy_to_host(host.data(), owned.data(), s.numel * 4);
  else
    gather_to_host(s, owned.data(), host);
}

}  // namespace zt
