// Backend's defaults: host memory pinned by mlock (the CPU backend; a GPU backend registers it
// with its driver instead).
#include "model/backend.h"

#include <sys/mman.h>

namespace zt {

bool Backend::pin_host(void* p, size_t bytes) { return mlock(p, bytes) == 0; }
void Backend::unpin_host(void* p, size_t bytes) { munlock(p, bytes); }

double Backend::sum_squares(const void* x, DType t, size_t n) {
  DeviceBuffer d(this, sizeof(double), MemCategory::kWorkspace);
  sum_squares(x, t, n, static_cast<double*>(d.data()));
  double out = 0;
  copy_to_host(&out, d.data(), sizeof out);
  return out;
}

}  // namespace zt
