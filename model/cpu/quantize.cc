// Block-wise quantization on the CPU (model/quantize.h has the formula): one block per
// iteration of an OpenMP loop, a pair of elements (one 4-bit byte) at a time, as the GPU does.
#include <algorithm>
#include <cmath>

#include "common/dtype.h"
#include "common/status.h"
#include "model/cpu/cpu_backend.h"
#include "model/quantize.h"

namespace zt {

void CpuBackend::quantize_blocks(const void* x, DType t, size_t n, int bits, int block, void* q,
                                 float* scales) {
  ZT_CHECK((bits == 8 || bits == 4) && block > 0 && block % 2 == 0);
  auto* qb = static_cast<uint8_t*>(q);
  const int64_t nb = (int64_t)quant_blocks(n, block);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const size_t lo = (size_t)b * block, hi = std::min(n, lo + (size_t)block);
    float absmax = 0.f;
    bool finite = true;
    for (size_t i = lo; i < hi; ++i) {
      const float v = load_f32(x, t, i);
      finite &= std::isfinite(v);
      absmax = std::max(absmax, std::fabs(v));
    }
    const float scale = quant_scale(absmax, finite, bits);
    scales[b] = scale;
    for (size_t i = lo; i < hi; i += 2) {
      const bool has1 = i + 1 < hi;
      quant_store_pair(qb, i, quant_value(load_f32(x, t, i), scale, bits),
                       has1 ? quant_value(load_f32(x, t, i + 1), scale, bits) : 0, has1, bits);
    }
  }
}

void CpuBackend::dequantize_blocks(const void* q, const float* scales, size_t n, int bits,
                                   int block, void* y, DType yt, bool accumulate) {
  ZT_CHECK((bits == 8 || bits == 4) && block > 0 && block % 2 == 0);
  ZT_CHECK(!accumulate || yt == DType::kF32);
  const auto* qb = static_cast<const uint8_t*>(q);
  const int64_t nb = (int64_t)quant_blocks(n, block);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const size_t lo = (size_t)b * block, hi = std::min(n, lo + (size_t)block);
    const float scale = scales[b];
    for (size_t i = lo; i < hi; ++i) {
      const float v = (float)quant_load(qb, i, bits) * scale;
      if (accumulate)
        static_cast<float*>(y)[i] += v;
      else
        store_f32(y, yt, i, v);
    }
  }
}

}  // namespace zt
