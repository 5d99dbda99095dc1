// CPU backend: memory and elementwise helpers. Kernels live in one file per family.
#include "model/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "model/cpu/cpu_adam.h"

namespace zt {

CpuBackend::CpuBackend(int threads) : cache_(kCacheLimit, free_streaming) {
  if (threads > 0) omp_set_num_threads(threads);
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

namespace {
// 64-byte alignment for SIMD and cache lines; size rounded up as aligned_alloc requires (and
// the block cache keys on).
size_t block_bytes(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

void* CpuBackend::alloc(size_t bytes, MemCategory c) {
  check_memory_limit(tracker_, memory_limit_, bytes, c);
  const size_t rounded = block_bytes(bytes);
  void* p = cache_.take(rounded);
  if (!p) p = alloc_streaming(rounded);
  if (!p) throw std::bad_alloc();
  tracker_.on_alloc(c, bytes);
  return p;
}

void CpuBackend::free(void* p, size_t bytes, MemCategory c) {
  cache_.put(p, block_bytes(bytes));
  tracker_.on_free(c, bytes);
}

void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::synchronize() {}  // every CPU kernel returns when it is done
void CpuBackend::zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
void CpuBackend::convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  zt::convert(src, st, dst, dt, n);
}

const float* CpuBackend::widen(TensorView v, size_t n, DeviceBuffer& tmp) {
  if (!v || v.dtype == DType::kF32) return static_cast<const float*>(v.data);
  tmp = DeviceBuffer(this, n * sizeof(float), MemCategory::kWorkspace);
  zt::convert(v.data, v.dtype, tmp.data(), DType::kF32, n);
  return tmp.f32();
}

float* CpuBackend::grad_sum(TensorRef g, size_t n, DeviceBuffer& tmp) {
  if (!g || g.dtype == DType::kF32) return static_cast<float*>(g.data);
  tmp = DeviceBuffer(this, n * sizeof(float), MemCategory::kWorkspace);
  std::memset(tmp.data(), 0, n * sizeof(float));
  return tmp.f32();
}

void CpuBackend::finish_grad(TensorRef g, const float* sum, size_t n) {
  if (g && g.dtype != DType::kF32) zt::scale_add(g.data, g.dtype, sum, 1.f, true, n);
}

void CpuBackend::add_inplace(TensorRef y_a, TensorView x_a, size_t n) {
  float* y = f32(y_a);
  const float* x = f32(x_a);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::sum_squares(const void* x, DType t, size_t n, double* out) {
  *out = cpu_sum_squares(x, t, n);  // model/cpu/cpu_adam.h: vectorised, thread-count independent
}

void CpuBackend::scale_add(void* y, DType yt, const float* x, float alpha, bool accumulate,
                           size_t n, double* sum_squares) {
  if (sum_squares)
    *sum_squares = cpu_scale_add_sum_squares(y, yt, x, alpha, accumulate, n);
  else
    zt::scale_add(y, yt, x, alpha, accumulate, n);
}

}  // namespace zt
