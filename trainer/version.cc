// ZT_VERSION, ZT_BUILD_TYPE, ZT_ARCH_FLAGS, ZT_CUDA_ARCHS and ZT_COMPILER come from
// trainer/CMakeLists.txt, ZT_BUILD_COMMIT from the generated build_info.h.
#include "trainer/version.h"

#include <cblas.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "build_info.h"
#include "common/simd.h"
#include "model/cuda/cuda_backend.h"
#include "zero/mpi_comm.h"
#include "zero/nccl_comm.h"

namespace zt {

std::string version_report() {
  const char* lowered = std::getenv("ZT_SIMD");
  const std::string archs = ZT_CUDA_ARCHS;
  return absl::StrCat(
      "zerotrain ", ZT_VERSION, "\n",                                   //
      "commit:   ", ZT_BUILD_COMMIT, "\n",                              //
      "build:    ", ZT_BUILD_TYPE, ", ", ZT_COMPILER, ", ", ZT_ARCH_FLAGS, "\n",
      "simd:     ", std::string(simd_level_name(cpu_simd_level())),
      lowered ? absl::StrCat(" (ZT_SIMD=", lowered, ")") : std::string(" (this CPU's best)"), "\n",
      "blas:     ", openblas_get_config(), "; core ", openblas_get_corename(), "\n",  //
      "mpi:      ", mpi_library_version(), "\n",                                      //
      "cuda:     ", archs.empty() ? std::string() : absl::StrCat("kernels for sm_", archs, "; "),
      cuda_report(), "\n",  //
      "nccl:     ", nccl_report(), "\n");
}

}  // namespace zt
