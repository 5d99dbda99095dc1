// CPU Adam kernels. The scalar path is adamw_element (model/optimizer_math.h); the vector paths
// repeat its operations in the same order without fused multiply-adds, and this file is
// compiled with -ffp-contract=off, so all paths round identically. (The sums of squares use
// explicit fused multiply-adds: their order is per SIMD level anyway.)
#include "model/cpu/cpu_adam.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/parallel.h"
#include "common/simd_kernels.h"

namespace zt {
namespace {

constexpr size_t kTile = 8192;  // elements: 8K x 28 B = 224 KiB of streams, within L2

// ---- scalar ----

void adam_scalar(float* p, void* g, DType gt, float* m, float* v, void* out, DType ot, size_t begin,
                 size_t end, const AdamCoefs& c) {
  for (size_t i = begin; i < end; ++i) {
    p[i] = adamw_element(p[i], load_f32(g, gt, i), m[i], v[i], c);
    if (c.zero_grad) store_f32(g, gt, i, 0.f);
    if (out) store_f32(out, ot, i, p[i]);
  }
}

double sum_squares_scalar(const void* x, DType t, size_t begin, size_t end) {
  double acc = 0;
  for (size_t i = begin; i < end; ++i) {
    const double d = load_f32(x, t, i);
    acc += d * d;
  }
  return acc;
}

// ---- AVX2: 8 lanes ----

template <DType G>
ZT_TARGET_AVX2 void avx2_zero(void* p, size_t i) {
  if constexpr (G == DType::kF32)
    _mm256_storeu_ps(static_cast<float*>(p) + i, _mm256_setzero_ps());
  else
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i),
                     _mm_setzero_si128());
}

// kOut: the working-copy dtype, or kF32 for "no working copy".
template <DType G, DType kOut>
ZT_TARGET_AVX2 void adam_avx2(float* p, void* g, float* m, float* v, void* out, size_t begin,
                              size_t end, const AdamCoefs& c) {
  const __m256 gs = _mm256_set1_ps(c.grad_scale), wd = _mm256_set1_ps(c.wd);
  const __m256 b1 = _mm256_set1_ps(c.beta1), omb1 = _mm256_set1_ps(c.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(c.beta2), omb2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 decay = _mm256_set1_ps(c.decay), step = _mm256_set1_ps(c.step);
  const __m256 bc2 = _mm256_set1_ps(c.bc2_sqrt), eps = _mm256_set1_ps(c.eps);
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 gr = _mm256_mul_ps(simd::avx2_load<G>(g, i), gs);
    if (c.zero_grad) avx2_zero<G>(g, i);
    __m256 pp = _mm256_loadu_ps(p + i);
    if (!c.adam_w_mode) gr = _mm256_add_ps(gr, _mm256_mul_ps(wd, pp));
    const __m256 mm =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(omb1, gr));
    const __m256 vv = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                    _mm256_mul_ps(_mm256_mul_ps(omb2, gr), gr));
    if (c.adam_w_mode) pp = _mm256_mul_ps(pp, decay);
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bc2), eps);
    pp = _mm256_sub_ps(pp, _mm256_div_ps(_mm256_mul_ps(step, mm), denom));
    _mm256_storeu_ps(m + i, mm);
    _mm256_storeu_ps(v + i, vv);
    _mm256_storeu_ps(p + i, pp);
    if constexpr (kOut != DType::kF32) simd::avx2_store<kOut>(out, i, pp);
  }
  adam_scalar(p, g, G, m, v, kOut == DType::kF32 ? nullptr : out, kOut, i, end, c);
}

// Sums of squares: four fp32 accumulators take 16 squares each per lane (fused multiply-adds),
// then their sum, 64 squares per lane, is widened and added in double. Summing in fp32 is what
// torch's norm of an fp32 tensor does too, over far longer runs: 64-term runs bound the
// relative error by about 4e-6 (typically 1e-7), and a square overflows to inf above 1.8e19,
// as in torch. The arithmetic is cheap enough that the norm can ride along the pass that
// writes the gradient at little cost beyond the stores.
template <DType G>
ZT_TARGET_AVX2 double sum_squares_avx2(const void* x, size_t begin, size_t end) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  size_t i = begin;
  while (i + 32 <= end) {
    // Named accumulators, not an array: GCC keeps an indexed array on the stack.
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const size_t stop = std::min(end, i + 16 * 32);  // 16 squares per accumulator lane
    for (; i + 32 <= stop; i += 32) {
      const __m256 f0 = simd::avx2_load<G>(x, i), f1 = simd::avx2_load<G>(x, i + 8);
      const __m256 f2 = simd::avx2_load<G>(x, i + 16), f3 = simd::avx2_load<G>(x, i + 24);
      s0 = _mm256_fmadd_ps(f0, f0, s0);
      s1 = _mm256_fmadd_ps(f1, f1, s1);
      s2 = _mm256_fmadd_ps(f2, f2, s2);
      s3 = _mm256_fmadd_ps(f3, f3, s3);
    }
    const __m256 t = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + sum_squares_scalar(x, G, i, end);
}

// ---- AVX-512: 16 lanes ----

template <DType G>
ZT_TARGET_AVX512 void avx512_zero(void* p, size_t i) {
  if constexpr (G == DType::kF32)
    _mm512_storeu_ps(static_cast<float*>(p) + i, _mm512_setzero_ps());
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i),
                        _mm256_setzero_si256());
}

template <DType G, DType kOut, bool kBf16Instr>
ZT_TARGET_AVX512BF16 void adam_avx512(float* p, void* g, float* m, float* v, void* out,
                                      size_t begin, size_t end, const AdamCoefs& c) {
  const __m512 gs = _mm512_set1_ps(c.grad_scale), wd = _mm512_set1_ps(c.wd);
  const __m512 b1 = _mm512_set1_ps(c.beta1), omb1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(c.beta2), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 decay = _mm512_set1_ps(c.decay), step = _mm512_set1_ps(c.step);
  const __m512 bc2 = _mm512_set1_ps(c.bc2_sqrt), eps = _mm512_set1_ps(c.eps);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 gr = _mm512_mul_ps(simd::avx512_load<G>(g, i), gs);
    if (c.zero_grad) avx512_zero<G>(g, i);
    __m512 pp = _mm512_loadu_ps(p + i);
    if (!c.adam_w_mode) gr = _mm512_add_ps(gr, _mm512_mul_ps(wd, pp));
    const __m512 mm =
        _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(omb1, gr));
    const __m512 vv = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)),
                                    _mm512_mul_ps(_mm512_mul_ps(omb2, gr), gr));
    if (c.adam_w_mode) pp = _mm512_mul_ps(pp, decay);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), bc2), eps);
    pp = _mm512_sub_ps(pp, _mm512_div_ps(_mm512_mul_ps(step, mm), denom));
    _mm512_storeu_ps(m + i, mm);
    _mm512_storeu_ps(v + i, vv);
    _mm512_storeu_ps(p + i, pp);
    if constexpr (kOut == DType::kBF16 && kBf16Instr)
      simd::avx512bf16_store_bf16(static_cast<uint16_t*>(out) + i, pp);
    else if constexpr (kOut != DType::kF32)
      simd::avx512_store<kOut>(out, i, pp);
  }
  adam_scalar(p, g, G, m, v, kOut == DType::kF32 ? nullptr : out, kOut, i, end, c);
}

template <DType G>
ZT_TARGET_AVX512 double sum_squares_avx512(const void* x, size_t begin, size_t end) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  size_t i = begin;
  while (i + 64 <= end) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const size_t stop = std::min(end, i + 16 * 64);  // 16 squares per accumulator lane
    for (; i + 64 <= stop; i += 64) {
      const __m512 f0 = simd::avx512_load<G>(x, i), f1 = simd::avx512_load<G>(x, i + 16);
      const __m512 f2 = simd::avx512_load<G>(x, i + 32), f3 = simd::avx512_load<G>(x, i + 48);
      s0 = _mm512_fmadd_ps(f0, f0, s0);
      s1 = _mm512_fmadd_ps(f1, f1, s1);
      s2 = _mm512_fmadd_ps(f2, f2, s2);
      s3 = _mm512_fmadd_ps(f3, f3, s3);
    }
    const __m512 t = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(t)));
    a1 = _mm512_add_pd(
        a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1))));
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(a0, a1));
  double s = 0;
  for (double l : lanes) s += l;
  return s + sum_squares_scalar(x, G, i, end);
}

// ---- dispatch: one function pointer per (level, grad dtype, out dtype) ----

using AdamFn = void (*)(float*, void*, float*, float*, void*, size_t, size_t, const AdamCoefs&);

template <DType G, DType O>
AdamFn adam_fn(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: break;
    case SimdLevel::kAvx2: return adam_avx2<G, O>;
    case SimdLevel::kAvx512: return adam_avx512<G, O, false>;
    case SimdLevel::kAvx512Bf16: return adam_avx512<G, O, true>;
  }
  return [](float* p, void* g, float* m, float* v, void* out, size_t b, size_t e,
            const AdamCoefs& c) { adam_scalar(p, g, G, m, v, out, O, b, e, c); };
}

template <DType G>
AdamFn adam_fn(SimdLevel level, const void* out, DType ot) {
  if (!out || ot == DType::kF32) return adam_fn<G, DType::kF32>(level);
  return ot == DType::kBF16 ? adam_fn<G, DType::kBF16>(level) : adam_fn<G, DType::kF16>(level);
}

}  // namespace

void cpu_adam_step(float* master, void* grad, DType grad_t, float* m, float* v, void* out,
                   DType out_t, size_t n, const OptimizerStep& s, SimdLevel level) {
  const AdamCoefs c = adam_coefs(s);
  AdamFn fn = grad_t == DType::kF32    ? adam_fn<DType::kF32>(level, out, out_t)
              : grad_t == DType::kBF16 ? adam_fn<DType::kBF16>(level, out, out_t)
                                       : adam_fn<DType::kF16>(level, out, out_t);
  // An fp32 "working copy" is a plain copy of the master weights.
  const bool copy_out = out && out_t == DType::kF32;
  for_each_chunk(n, kTile, [&](size_t, size_t begin, size_t end) {
    fn(master, grad, m, v, out, begin, end, c);
    if (copy_out) std::copy(master + begin, master + end, static_cast<float*>(out) + begin);
  });
}

void cpu_adam_step(float* master, void* grad, DType grad_t, float* m, float* v, void* out,
                   DType out_t, size_t n, const OptimizerStep& s) {
  cpu_adam_step(master, grad, grad_t, m, v, out, out_t, n, s, cpu_simd_level());
}

namespace {

using SumSquaresFn = double (*)(const void*, size_t, size_t);

SumSquaresFn sum_squares_fn(DType t, SimdLevel level) {
  auto pick = [&]<DType G>() -> SumSquaresFn {
    switch (level) {
      case SimdLevel::kScalar: break;
      case SimdLevel::kAvx2: return sum_squares_avx2<G>;
      case SimdLevel::kAvx512:
      case SimdLevel::kAvx512Bf16: return sum_squares_avx512<G>;
    }
    return [](const void* x, size_t b, size_t e) { return sum_squares_scalar(x, G, b, e); };
  };
  return t == DType::kF32    ? pick.template operator()<DType::kF32>()
         : t == DType::kBF16 ? pick.template operator()<DType::kBF16>()
                             : pick.template operator()<DType::kF16>();
}

// Per-tile partial sums added in tile order: the total does not depend on the threads.
double add_in_order(const std::vector<double>& partial) {
  double acc = 0;
  for (double p : partial) acc += p;
  return acc;
}

}  // namespace

double cpu_sum_squares(const void* x, DType t, size_t n, SimdLevel level) {
  const SumSquaresFn fn = sum_squares_fn(t, level);
  std::vector<double> partial((n + kTile - 1) / kTile);
  for_each_chunk(n, kTile,
                 [&](size_t k, size_t begin, size_t end) { partial[k] = fn(x, begin, end); });
  return add_in_order(partial);
}

double cpu_scale_add_sum_squares(void* y, DType yt, const float* x, float alpha, bool accumulate,
                                 size_t n) {
  const SimdLevel level = cpu_simd_level();
  const SumSquaresFn fn = sum_squares_fn(yt, level);
  const size_t es = dtype_size(yt);
  std::vector<double> partial((n + kTile - 1) / kTile);
  for_each_chunk(n, kTile, [&](size_t k, size_t begin, size_t end) {
    void* tile = static_cast<char*>(y) + begin * es;
    scale_add(tile, yt, x + begin, alpha, accumulate, end - begin, level);  // one piece: serial
    partial[k] = fn(tile, 0, end - begin);  // from L1: the tile was just written
  });
  return add_in_order(partial);
}

double cpu_sum_squares(const void* x, DType t, size_t n) {
  return cpu_sum_squares(x, t, n, cpu_simd_level());
}

}  // namespace zt
