// Backend's defaults: host memory pinned by mlock (the CPU backend; a GPU backend registers it
// with its driver instead).
#include "model/backend.h"

#include <sys/mman.h>

namespace zt {

bool Backend::pin_host(void* p, size_t bytes) { return mlock(p, bytes) == 0; }
void Backend::unpin_host(void* p, size_t bytes) { munlock(p, bytes); }

}  // namespace zt
