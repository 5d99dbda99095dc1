// The plain causal attention that keeps its (B,NH,T,T) probabilities: the equations of
// model/cpu/attention.cc computed the obvious way. Not used for training; the reference the
// memory-lean kernels are tested against (tests/unit/attention_test.cc) and compared with
// (benchmarks/attention_bench.cc).
#include "model/cpu/attention_reference.h"

#include <cmath>
#include <vector>

namespace zt {

void reference_attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH,
                                 int KVH, int hd) {
  const int row = (NH + 2 * KVH) * hd;
  const int group = NH / KVH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int kvh = h / group;
        const float* q = qkv + ((size_t)b * T + t) * row + (size_t)h * hd;
        float* a = att + (((size_t)b * NH + h) * T + t) * T;
        float maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* k = qkv + ((size_t)b * T + t2) * row + (size_t)(NH + kvh) * hd;
          float s = 0.f;
#pragma omp simd reduction(+ : s)
          for (int i = 0; i < hd; ++i) s += q[i] * k[i];
          s *= scale;
          a[t2] = s;
          maxv = std::max(maxv, s);
        }
        float sum = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          a[t2] = std::exp(a[t2] - maxv);
          sum += a[t2];
        }
        const float inv = 1.f / sum;
        for (int t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
        for (int t2 = t + 1; t2 < T; ++t2) a[t2] = 0.f;  // masked: keeps att fully defined
        float* o = out + ((size_t)b * T + t) * NH * hd + (size_t)h * hd;
        for (int i = 0; i < hd; ++i) o[i] = 0.f;
        for (int t2 = 0; t2 <= t; ++t2) {
          const float* v = qkv + ((size_t)b * T + t2) * row + (size_t)(NH + KVH + kvh) * hd;
          for (int i = 0; i < hd; ++i) o[i] += a[t2] * v[i];
        }
      }
}

void reference_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* att, int B, int T, int NH, int KVH, int hd) {
  const int row = (NH + 2 * KVH) * hd;
  const int group = NH / KVH;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  // One task per (b, kv head): it owns dk, dv of that head and dq of its query heads.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int kvh = 0; kvh < KVH; ++kvh) {
      std::vector<float> da(T);
      for (int h = kvh * group; h < (kvh + 1) * group; ++h)
        for (int t = 0; t < T; ++t) {
          const float* a = att + (((size_t)b * NH + h) * T + t) * T;
          const float* q = qkv + ((size_t)b * T + t) * row + (size_t)h * hd;
          float* dq = dqkv + ((size_t)b * T + t) * row + (size_t)h * hd;
          const float* dy = dout + ((size_t)b * T + t) * NH * hd + (size_t)h * hd;
          float dot = 0.f;
          for (int t2 = 0; t2 <= t; ++t2) {
            const size_t r2 = ((size_t)b * T + t2) * row;
            const float* v = qkv + r2 + (size_t)(NH + KVH + kvh) * hd;
            float* dv = dqkv + r2 + (size_t)(NH + KVH + kvh) * hd;
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < hd; ++i) {
              s += dy[i] * v[i];
              dv[i] += a[t2] * dy[i];
            }
            da[t2] = s;
            dot += a[t2] * s;
          }
          for (int t2 = 0; t2 <= t; ++t2) {
            const size_t r2 = ((size_t)b * T + t2) * row;
            const float* k = qkv + r2 + (size_t)(NH + kvh) * hd;
            float* dk = dqkv + r2 + (size_t)(NH + kvh) * hd;
            const float ds = a[t2] * (da[t2] - dot) * scale;
            for (int i = 0; i < hd; ++i) {
              dq[i] += ds * k[i];
              dk[i] += ds * q[i];
            }
          }
        }
    }
}

}  // namespace zt
