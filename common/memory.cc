#include "common/memory.h"

namespace zt {

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams: return "params";
    case MemCategory::kGrads: return "grads";
    case MemCategory::kOptimizer: return "optimizer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kCommBuffers: return "comm_buffers";
    case MemCategory::kWorkspace: return "workspace";
    case MemCategory::kPinnedHost: return "pinned_host";
    case MemCategory::kNvme: return "nvme";
    case MemCategory::kCount: break;
  }
  return "?";
}

static void raise_peak(std::atomic<size_t>& peak, size_t value) {
  size_t old = peak.load();
  while (value > old && !peak.compare_exchange_weak(old, value)) {
  }
}

void MemoryTracker::on_alloc(MemCategory c, size_t bytes) {
  raise_peak(peak_[idx(c)], current_[idx(c)].fetch_add(bytes) + bytes);
  raise_peak(peak_total_, total_.fetch_add(bytes) + bytes);
}

void MemoryTracker::on_free(MemCategory c, size_t bytes) {
  current_[idx(c)].fetch_sub(bytes);
  total_.fetch_sub(bytes);
}

}  // namespace zt
