// Backend's defaults: host memory pinned by mlock (the CPU backend; a GPU backend registers it
// with its driver instead), the fused GEMM + GELU ops as their two passes, and --attention's
// names.
#include "model/backend.h"

#include <sys/mman.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace zt {

absl::StatusOr<AttentionImpl> parse_attention(std::string_view name) {
  if (name == "auto") return AttentionImpl::kAuto;
  if (name == "flash") return AttentionImpl::kFlash;
  if (name == "cudnn") return AttentionImpl::kCudnn;
  return absl::InvalidArgumentError(
      absl::StrCat("attention '", std::string(name), "' is not one of auto, flash, cudnn"));
}

bool Backend::pin_host(void* p, size_t bytes) { return mlock(p, bytes) == 0; }
void Backend::unpin_host(void* p, size_t bytes) { munlock(p, bytes); }

void Backend::matmul_gelu_forward(TensorRef out, TensorRef pre, TensorView inp, TensorView weight,
                                  TensorView bias, int N, int C, int OC) {
  matmul_forward(pre, inp, weight, bias, N, C, OC);
  gelu_forward(out, pre, (size_t)N * OC);
}

void Backend::matmul_dgelu_backward(TensorRef dpre, TensorRef scratch, TensorRef dweight,
                                    TensorRef dbias, TensorView dout, TensorView act,
                                    TensorView weight, TensorView pre, int N, int C, int OC) {
  zero(scratch.data, scratch.bytes((size_t)N * C));
  matmul_backward(scratch, dweight, dbias, dout, act, weight, N, C, OC);
  gelu_backward(dpre, pre, scratch, (size_t)N * C);
}

double Backend::sum_squares(const void* x, DType t, size_t n) {
  DeviceBuffer d(this, sizeof(double), MemCategory::kWorkspace);
  sum_squares(x, t, n, static_cast<double*>(d.data()));
  double out = 0;
  copy_to_host(&out, d.data(), sizeof out);
  return out;
}

}  // namespace zt
