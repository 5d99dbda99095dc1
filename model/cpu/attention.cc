// Causal multi-head attention with grouped-query K/V (Ainslie et al., GQA): query head h reads
// kv head h / (NH/KVH). Per (b, h, t):
//   s[t2] = q_t . k_t2 / sqrt(hd) for t2 <= t;  a = softmax(s);  out_t = sum_t2 a[t2] v_t2
// (in packed rows only t2 >= t - pos[t]: the query's own example).
// Backward: da[t2] = dout_t . v_t2;  dv_t2 += a[t2] dout_t;
//   ds[t2] = a[t2] (da[t2] - sum_j a[j] da[j]);  dq_t += ds k / sqrt(hd);  dk_t2 += ds q /
//   sqrt(hd).
// Nothing of size T x T is kept (as FlashAttention, Dao et al. 2022; backward as in
// FlashAttention-2): the forward saves the row's log-sum-exp lse_t = max + log(sum exp(s - max))
// and the backward recomputes a[t2] = exp(s[t2] - lse_t) row by row, in a per-thread row
// buffer of T floats. The exponentials are exp_fast (model/cpu/vec_math.h, 3e-7 relative), in
// passes of their own that the compiler vectorises; outputs and gradients agree with the T x T
// reference (model/cpu/attention_reference.cc, std::exp) to rounding
// (tests/unit/attention_test.cc: within 1e-5).
#include <cmath>
#include <vector>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/vec_math.h"

namespace zt {

namespace {

// Query row t of one sequence and head over keys s0..t (s0 > 0: its example starts there, in a
// packed row): seq points at the sequence's first qkv row (rows of `row` floats), q at the
// query; k_off and v_off locate this head's kv head in a row. Writes out (hd), uses a (t + 1
// floats) for the probabilities, returns the log-sum-exp.
float attend_row(const float* seq, int row, const float* q, size_t k_off, size_t v_off, int s0,
                 int t, int hd, float scale, float* a, float* out) {
  float maxv = -INFINITY;
  for (int t2 = s0; t2 <= t; ++t2) {
    const float* k = seq + (size_t)t2 * row + k_off;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < hd; ++i) s += q[i] * k[i];
    s *= scale;
    a[t2] = s;
    maxv = std::max(maxv, s);
  }
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int t2 = s0; t2 <= t; ++t2) {
    a[t2] = exp_fast(a[t2] - maxv);
    sum += a[t2];
  }
  const float inv = 1.f / sum;
  for (int t2 = s0; t2 <= t; ++t2) a[t2] *= inv;
  for (int i = 0; i < hd; ++i) out[i] = 0.f;
  for (int t2 = s0; t2 <= t; ++t2) {
    const float* v = seq + (size_t)t2 * row + v_off;
#pragma omp simd
    for (int i = 0; i < hd; ++i) out[i] += a[t2] * v[i];
  }
  return maxv + std::log(sum);
}

}  // namespace

void CpuBackend::attention_forward(TensorRef out_a, float* lse, TensorView qkv_a, int B, int T,
                                   int NH, int KVH, int hd, const int* pos) {
  float* out = f32(out_a);
  const float* qkv = f32(qkv_a);
  const int row = (NH + 2 * KVH) * hd;
  const int group = NH / KVH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel
  {
    std::vector<float> a(T);  // this thread's row of probabilities
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          const int kvh = h / group;
          const float* seq = qkv + (size_t)b * T * row;
          lse[((size_t)b * NH + h) * T + t] = attend_row(
              seq, row, seq + (size_t)t * row + (size_t)h * hd, (size_t)(NH + kvh) * hd,
              (size_t)(NH + KVH + kvh) * hd, pos ? std::max(0, t - pos[(size_t)b * T + t]) : 0, t,
              hd, scale, a.data(), out + ((size_t)b * T + t) * NH * hd + (size_t)h * hd);
        }
  }
}

void CpuBackend::attention_backward(TensorRef dqkv_a, TensorView dout_a, TensorView qkv_a,
                                    TensorView /*out: D is recomputed from lse*/, const float* lse,
                                    int B, int T, int NH, int KVH, int hd, const int* pos) {
  float* dqkv = f32(dqkv_a);
  const float *dout = f32(dout_a), *qkv = f32(qkv_a);
  const int row = (NH + 2 * KVH) * hd;
  const int group = NH / KVH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  // One task per (b, kv head): it owns dk, dv of that head and dq of its query heads.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int kvh = 0; kvh < KVH; ++kvh) {
      std::vector<float> a(T), da(T);
      for (int h = kvh * group; h < (kvh + 1) * group; ++h)
        for (int t = 0; t < T; ++t) {
          const float* q = qkv + ((size_t)b * T + t) * row + (size_t)h * hd;
          float* dq = dqkv + ((size_t)b * T + t) * row + (size_t)h * hd;
          const float* dy = dout + ((size_t)b * T + t) * NH * hd + (size_t)h * hd;
          const float l = lse[((size_t)b * NH + h) * T + t];
          const int s0 =
              pos ? std::max(0, t - pos[(size_t)b * T + t]) : 0;  // the example's first key
          for (int t2 = s0; t2 <= t; ++t2) {                      // the probabilities, recomputed
            const float* k = qkv + ((size_t)b * T + t2) * row + (size_t)(NH + kvh) * hd;
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < hd; ++i) s += q[i] * k[i];
            a[t2] = s * scale - l;
          }
#pragma omp simd
          for (int t2 = s0; t2 <= t; ++t2)
            a[t2] = exp_fast(a[t2]);  // a pass the compiler vectorises
          float dot = 0.f;
          for (int t2 = s0; t2 <= t; ++t2) {
            const size_t r2 = ((size_t)b * T + t2) * row;
            const float* v = qkv + r2 + (size_t)(NH + KVH + kvh) * hd;
            float* dv = dqkv + r2 + (size_t)(NH + KVH + kvh) * hd;
            float d = 0.f;
#pragma omp simd reduction(+ : d)
            for (int i = 0; i < hd; ++i) {
              d += dy[i] * v[i];
              dv[i] += a[t2] * dy[i];
            }
            da[t2] = d;
            dot += a[t2] * d;
          }
          for (int t2 = s0; t2 <= t; ++t2) {
            const size_t r2 = ((size_t)b * T + t2) * row;
            const float* k = qkv + r2 + (size_t)(NH + kvh) * hd;
            float* dk = dqkv + r2 + (size_t)(NH + kvh) * hd;
            const float ds = a[t2] * (da[t2] - dot) * scale;
#pragma omp simd
            for (int i = 0; i < hd; ++i) {
              dq[i] += ds * k[i];
              dk[i] += ds * q[i];
            }
          }
        }
    }
}

void CpuBackend::attention_decode(TensorRef out_a, TensorView qkv_a, int T, int NH, int KVH,
                                  int hd) {
  float* out = f32(out_a);
  const float* qkv = f32(qkv_a);
  const int row = (NH + 2 * KVH) * hd;
  const int group = NH / KVH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel
  {
    std::vector<float> a(T);
#pragma omp for schedule(static)
    for (int h = 0; h < NH; ++h)  // the forward's last row, one sequence
      attend_row(qkv, row, qkv + (size_t)(T - 1) * row + (size_t)h * hd,
                 (size_t)(NH + h / group) * hd, (size_t)(NH + KVH + h / group) * hd, 0, T - 1, hd,
                 scale, a.data(), out + (size_t)h * hd);
  }
}

}  // namespace zt
