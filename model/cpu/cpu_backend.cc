// CPU backend: memory and elementwise helpers. Kernels live in one file per family.
#include "model/cpu/cpu_backend.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace zt {

CpuBackend::CpuBackend(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

void* CpuBackend::alloc(size_t bytes, MemCategory c) {
  // 64-byte alignment for SIMD and cache lines; size rounded up as aligned_alloc requires.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  tracker_.on_alloc(c, bytes);
  return p;
}

void CpuBackend::free(void* p, size_t bytes, MemCategory c) {
  std::free(p);
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

void CpuBackend::add_inplace(float* y, const float* x, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale(float* x, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

double CpuBackend::sum_squares(const float* x, size_t n) {
  double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static)
  for (size_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  return acc;
}

}  // namespace zt
