// Block-wise quantization on the CPU (model/quantize.h has the formula): one block per
// iteration of an OpenMP loop, in chunks the compiler vectorises: the values widened to fp32
// (convert_serial), max|x| as the maximum of their magnitudes' bits (the same order as the
// floats' for everything but NaN, which makes the block non-finite anyway), then the integers.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/status.h"
#include "model/cpu/cpu_backend.h"
#include "model/quantize.h"

namespace zt {
namespace {

constexpr size_t kChunk = 512;  // elements widened at a time (even: 4-bit pairs stay whole)

void load_chunk(const void* x, DType t, size_t first, size_t n, float* out) {
  convert_serial(static_cast<const char*>(x) + first * dtype_size(t), t, out, DType::kF32, n);
}

}  // namespace

void CpuBackend::quantize_blocks(const void* x, DType t, size_t n, int bits, int block, void* q,
                                 float* scales) {
  ZT_CHECK((bits == 8 || bits == 4) && block > 0 && block % 2 == 0);
  auto* qb = static_cast<uint8_t*>(q);
  const int64_t nb = (int64_t)quant_blocks(n, block);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const size_t lo = (size_t)b * block, hi = std::min(n, lo + (size_t)block);
    float v[kChunk];
    int8_t iq[kChunk];
    uint32_t top = 0, bad = 0;
    for (size_t c = lo; c < hi; c += kChunk) {
      const size_t m = std::min(kChunk, hi - c);
      load_chunk(x, t, c, m, v);
      for (size_t j = 0; j < m; ++j) {
        uint32_t u;
        std::memcpy(&u, &v[j], 4);
        u &= 0x7fffffffu;  // |v|
        top = std::max(top, u);
        bad |= u >= 0x7f800000u;  // an infinity or a NaN
      }
    }
    float absmax;
    std::memcpy(&absmax, &top, 4);
    const float scale = quant_scale(absmax, bad == 0, bits);
    scales[b] = scale;
    for (size_t c = lo; c < hi; c += kChunk) {
      const size_t m = std::min(kChunk, hi - c);
      load_chunk(x, t, c, m, v);
      for (size_t j = 0; j < m; ++j) iq[j] = (int8_t)quant_value(v[j], scale, bits);
      if (bits == 8) {
        std::memcpy(qb + c, iq, m);
      } else {
        for (size_t j = 0; j < m; j += 2)
          quant_store_pair(qb, c + j, iq[j], j + 1 < m ? iq[j + 1] : 0, j + 1 < m, bits);
      }
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
    float v[kChunk];
    for (size_t c = lo; c < hi; c += kChunk) {
      const size_t m = std::min(kChunk, hi - c);
      if (bits == 8) {
        for (size_t j = 0; j < m; ++j) v[j] = (float)(int8_t)qb[c + j] * scale;
      } else {  // two's-complement nibbles, low first (c is even)
        const uint8_t* pairs = qb + c / 2;
        for (size_t p = 0; p < m / 2; ++p) {
          v[2 * p] = (float)((int8_t)(uint8_t)(pairs[p] << 4) >> 4) * scale;
          v[2 * p + 1] = (float)((int8_t)pairs[p] >> 4) * scale;
        }
        if (m % 2) v[m - 1] = (float)quant_load(qb, c + m - 1, bits) * scale;
      }
      if (accumulate) {
        float* out = static_cast<float*>(y) + c;
        for (size_t j = 0; j < m; ++j) out[j] += v[j];
      } else {
        convert_serial(v, DType::kF32, static_cast<char*>(y) + c * dtype_size(yt), yt, m);
      }
    }
  }
}

}  // namespace zt
