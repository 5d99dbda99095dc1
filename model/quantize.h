// Block-wise symmetric quantization for ZeRO++ (Wang et al., "ZeRO++", arXiv 2306.10209:
// qwZ, Section 3.1, quantizes the weights' all-gather to int8; qgZ, Section 3.3, the gradients'
// all-to-all to int4), shared by the CPU kernels (model/cpu/quantize.cc), the CUDA kernels
// (model/cuda/quantize.cu) and the reference in scripts/make_quant_reference.py, so every
// backend computes the same bits.
//
// x (n elements) is cut into blocks of `block` elements from its start (the last may be
// shorter). Per block, with qmax = 2^(bits-1) - 1 (127 for 8 bits, 7 for 4):
//   scale = max|x| / qmax                (fp32; 0 for an all-zero block, NaN for one
//                                         holding a NaN or an infinity)
//   q     = clamp(rint(x / scale), -qmax, qmax)   (round half to even; 0 where scale is 0)
//   x'    = q * scale                    (the dequantized value)
// so |x - x'| <= scale / 2 = max|x| / (2 qmax) in every block. Symmetric and per block as
// DeepSpeed's CUDAQuantizer (qwZ, int8) and swizzle_quant (qgZ, int4); its block sizes differ
// (qwZ: groups near 8000 elements; qgZ: one group per row), see zero/zeropp.h.
// Storage: 8 bits one int8 per element; 4 bits two per byte, element 2i in the low nibble of
// byte i (two's complement), element 2i+1 in the high one.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define ZT_QUANT_HD __host__ __device__
#else
#define ZT_QUANT_HD
#endif

namespace zt {

ZT_QUANT_HD constexpr int quant_qmax(int bits) { return (1 << (bits - 1)) - 1; }
// Bytes of n quantized values at `bits` (8 or 4).
ZT_QUANT_HD constexpr size_t quant_bytes(size_t n, int bits) {
  return bits == 8 ? n : (n + 1) / 2;
}
// Scales (blocks) of n elements.
ZT_QUANT_HD constexpr size_t quant_blocks(size_t n, int block) {
  return (n + (size_t)block - 1) / (size_t)block;
}
// The scale of a block whose largest magnitude is absmax; NaN when the block holds a NaN or an
// infinity (finite false), so that every value of it dequantizes to NaN and a non-finite
// gradient still reaches the norm (fp16's overflow check) through qgZ's two hops.
ZT_QUANT_HD inline float quant_scale(float absmax, bool finite, int bits) {
  return finite ? absmax / (float)quant_qmax(bits) : __builtin_nanf("");
}
// The integer a value takes under `scale` (0 when scale is 0 or NaN).
ZT_QUANT_HD inline int quant_value(float x, float scale, int bits) {
  if (!(scale > 0.f)) return 0;
  const float q = rintf(x / scale);
  const float m = (float)quant_qmax(bits);
  return (int)(q > m ? m : q < -m ? -m : q);
}
// Stores the values of elements i (even) and i + 1 (q1; ignored past the end, when has1 is
// false), each in [-qmax, qmax]: 8 bits one byte each, 4 bits one whole byte, whose high nibble
// is 0 past an odd length's end (the stored bytes never depend on what the buffer held).
ZT_QUANT_HD inline void quant_store_pair(uint8_t* qbuf, size_t i, int q0, int q1, bool has1,
                                         int bits) {
  if (bits == 8) {
    qbuf[i] = (uint8_t)(int8_t)q0;
    if (has1) qbuf[i + 1] = (uint8_t)(int8_t)q1;
  } else {
    qbuf[i / 2] = (uint8_t)((q0 & 0xF) | ((has1 ? q1 & 0xF : 0) << 4));
  }
}
ZT_QUANT_HD inline int quant_load(const uint8_t* qbuf, size_t i, int bits) {
  if (bits == 8) return (int)(int8_t)qbuf[i];
  const int nib = (i % 2 == 0) ? (qbuf[i / 2] & 0xF) : (qbuf[i / 2] >> 4);
  return nib >= 8 ? nib - 16 : nib;
}

}  // namespace zt
