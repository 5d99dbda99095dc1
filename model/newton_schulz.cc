#include "model/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace zt {

void newton_schulz5(Backend* be, const float* g, int rows, int cols, float* out) {
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  constexpr int kSteps = 5;
  const size_t n = (size_t)rows * cols;
  const int r = std::min(rows, cols);  // the Gram matrix's side
  const bool wide = rows <= cols;
  DeviceBuffer xa(be, n * 4, MemCategory::kWorkspace), xb(be, n * 4, MemCategory::kWorkspace);
  DeviceBuffer ga(be, (size_t)r * r * 4, MemCategory::kWorkspace);
  DeviceBuffer gt(be, (size_t)r * r * 4, MemCategory::kWorkspace);
  DeviceBuffer gb(be, (size_t)r * r * 4, MemCategory::kWorkspace);
  float *x = xa.f32(), *next = xb.f32(), *A = ga.f32(), *T = gt.f32(), *B = gb.f32();
  const double norm = std::sqrt(be->sum_squares(g, DType::kF32, n));
  be->scale_add(x, DType::kF32, g, (float)(1.0 / (norm + 1e-7)), false, n, nullptr);
  for (int step = 0; step < kSteps; ++step) {
    if (wide)  // A = X X^T
      be->gemm_f32(false, true, r, r, cols, x, cols, x, cols, A, r, 0.f);
    else  // A = X^T X
      be->gemm_f32(true, false, r, r, rows, x, cols, x, cols, A, r, 0.f);
    // B = b A + A (c A)
    be->scale_add(T, DType::kF32, A, c, false, (size_t)r * r, nullptr);
    be->scale_add(B, DType::kF32, A, b, false, (size_t)r * r, nullptr);
    be->gemm_f32(false, false, r, r, r, A, r, T, r, B, r, 1.f);
    // X = a X + B X (wide) or a X + X B (tall)
    be->scale_add(next, DType::kF32, x, a, false, n, nullptr);
    if (wide)
      be->gemm_f32(false, false, rows, cols, r, B, r, x, cols, next, cols, 1.f);
    else
      be->gemm_f32(false, false, rows, cols, r, x, cols, B, r, next, cols, 1.f);
    std::swap(x, next);
  }
  const float scale = rows > cols ? (float)std::sqrt((double)rows / cols) : 1.f;
  be->scale_add(out, DType::kF32, x, scale, false, n, nullptr);
}

}  // namespace zt
