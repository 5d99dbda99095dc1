// `zerotrain --version`: what this binary is and what it found on this machine, for bug reports
// and for comparing runs across machines (DeepSpeed's `ds_report` plays this part).
#pragma once

#include <string>

namespace zt {

// Several lines, one fact each: the version and the commit built from (marked when the tree had
// uncommitted changes), the build type, compiler and CPU baseline, the SIMD level the CPU
// kernels chose here, the BLAS, the MPI library, and the GPU side (CUDA runtime and driver, the
// GPUs visible and the architectures compiled for, NCCL, cuDNN found at run time or not).
// Never fails: what cannot be read says so in its line.
std::string version_report();

}  // namespace zt
