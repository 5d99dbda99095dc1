// Causal attention with grouped-query K/V (equations in model/cpu/attention.cc). One warp per
// (b, h, t) query row: a plain reference kernel, correct on any shape, behind the
// FlashAttention-style interface (only the log-sum-exp is kept between forward and backward):
// it computes its (B,NH,T,T) probabilities in workspace held for the call (so the CUDA
// backend still needs T x T transiently, counted by the tracker), and the backward rebuilds
// them from lse. A tiled (flash) kernel replaces it once the GPU checks run.
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

struct AttnShape {
  int B, T, NH, KVH, hd, row, group;
  float scale;
};

// The query row w = (b, h, t) a warp works on, its kv head, and its q vector.
struct AttnRow {
  int t, h, b, kvh;
  const float* q;
  __device__ AttnRow(size_t w, const float* qkv, const AttnShape& s)
      : t(w % s.T),
        h((w / s.T) % s.NH),
        b(w / ((size_t)s.T * s.NH)),
        kvh(h / s.group),
        q(qkv + ((size_t)b * s.T + t) * s.row + (size_t)h * s.hd) {}
  __device__ const float* k(const float* qkv, int t2, const AttnShape& s) const {
    return qkv + ((size_t)b * s.T + t2) * s.row + (size_t)(s.NH + kvh) * s.hd;
  }
};

// Query row w = (b, h, t) by one warp: probabilities into a (T floats, zero past t), the
// log-sum-exp into *lse_w, the output into o (hd).
__device__ void attend_row(size_t w, float* o, float* a, float* lse_w, const float* qkv,
                           const AttnShape& s, int lane) {
  const AttnRow r(w, qkv, s);
  const int t = r.t, b = r.b, kvh = r.kvh;
  const float* q = r.q;
  float maxv = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const float* k = r.k(qkv, t2, s);
    float d = 0.f;
    for (int i = 0; i < s.hd; ++i) d += q[i] * k[i];
    a[t2] = d * s.scale;
    maxv = fmaxf(maxv, a[t2]);
  }
  maxv = warp_max(maxv);
  float sum = 0.f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    a[t2] = expf(a[t2] - maxv);
    sum += a[t2];
  }
  const float total = warp_sum(sum);
  const float inv = 1.f / total;
  if (lane == 0) *lse_w = maxv + logf(total);
  for (int t2 = lane; t2 < s.T; t2 += 32) a[t2] = t2 <= t ? a[t2] * inv : 0.f;
  __syncwarp();
  for (int i = lane; i < s.hd; i += 32) {
    float acc = 0.f;
    for (int t2 = 0; t2 <= t; ++t2)
      acc += a[t2] * qkv[((size_t)b * s.T + t2) * s.row + (size_t)(s.NH + s.KVH + kvh) * s.hd + i];
    o[i] = acc;
  }
}

__global__ void attention_forward_kernel(float* out, float* att, float* lse, const float* qkv,
                                         AttnShape s) {
  const size_t w = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (w >= (size_t)s.B * s.NH * s.T) return;
  const AttnRow r(w, qkv, s);
  float* o = out + ((size_t)r.b * s.T + r.t) * s.NH * s.hd + (size_t)r.h * s.hd;
  attend_row(w, o, att + w * s.T, lse + w, qkv, s, threadIdx.x % 32);
}

// attention_decode: the forward's row T - 1 of every head h (B = 1), writing out (NH*hd), the
// probabilities att (NH, T) and lse (NH).
__global__ void attention_decode_kernel(float* out, float* att, float* lse, const float* qkv,
                                        AttnShape s) {
  const size_t h = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (h >= (size_t)s.NH) return;
  attend_row(h * s.T + (s.T - 1), out + h * s.hd, att + h * s.T, lse + h, qkv, s, threadIdx.x % 32);
}

// att[w][t2] = exp(q_t . k_t2 * scale - lse[w]) for t2 <= t, else 0: the forward's
// probabilities, from its log-sum-exp.
__global__ void attention_probs_kernel(float* att, const float* lse, const float* qkv,
                                       AttnShape s) {
  const size_t w = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= (size_t)s.B * s.NH * s.T) return;
  const AttnRow r(w, qkv, s);
  const float* q = r.q;
  float* a = att + w * s.T;
  for (int t2 = lane; t2 < s.T; t2 += 32) {
    if (t2 > r.t) {
      a[t2] = 0.f;
      continue;
    }
    const float* k = r.k(qkv, t2, s);
    float d = 0.f;
    for (int i = 0; i < s.hd; ++i) d += q[i] * k[i];
    a[t2] = expf(d * s.scale - lse[w]);
  }
}

__global__ void attention_backward_kernel(float* dqkv, float* da_all, const float* dout,
                                          const float* qkv, const float* att, AttnShape s) {
  const size_t w = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= (size_t)s.B * s.NH * s.T) return;
  const AttnRow r(w, qkv, s);
  const int t = r.t, h = r.h, b = r.b, kvh = r.kvh;
  const float* a = att + w * s.T;
  float* da = da_all + w * s.T;
  const float* q = r.q;
  const float* dy = dout + ((size_t)b * s.T + t) * s.NH * s.hd + (size_t)h * s.hd;
  float dot = 0.f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const size_t r2 = ((size_t)b * s.T + t2) * s.row;
    const float* v = qkv + r2 + (size_t)(s.NH + s.KVH + kvh) * s.hd;
    float* dv = dqkv + r2 + (size_t)(s.NH + s.KVH + kvh) * s.hd;
    float d = 0.f;
    for (int i = 0; i < s.hd; ++i) {
      d += dy[i] * v[i];
      atomicAdd(&dv[i], a[t2] * dy[i]);
    }
    da[t2] = d;
    dot += a[t2] * d;
  }
  dot = warp_sum(dot);
  for (int t2 = lane; t2 <= t; t2 += 32) da[t2] = a[t2] * (da[t2] - dot) * s.scale;  // ds
  __syncwarp();
  float* dq = dqkv + ((size_t)b * s.T + t) * s.row + (size_t)h * s.hd;
  for (int i = lane; i < s.hd; i += 32) {
    float acc = 0.f;
    for (int t2 = 0; t2 <= t; ++t2) {
      const size_t r2 = ((size_t)b * s.T + t2) * s.row + (size_t)(s.NH + kvh) * s.hd;
      acc += da[t2] * qkv[r2 + i];
      atomicAdd(&dqkv[r2 + i], da[t2] * q[i]);
    }
    dq[i] += acc;
  }
}

}  // namespace

void CudaBackend::attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH,
                                    int KVH, int hd) {
  const AttnShape s{B, T, NH, KVH, hd, (NH + 2 * KVH) * hd, NH / KVH, rsqrtf((float)hd)};
  // (B,NH,T,T) scratch for the reference kernel, through the tracked pool (workspace): the
  // device-memory limit sees it.
  DeviceBuffer att(this, (size_t)B * NH * T * T * sizeof(float), MemCategory::kWorkspace);
  launch_kernel(attention_forward_kernel, blocks_for((size_t)B * NH * T * 32), kThreads, stream_,
                out, att.f32(), lse, qkv, s);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::attention_decode(float* out, const float* qkv, int T, int NH, int KVH, int hd) {
  // Rows w = h * T + (T - 1) of the forward kernel (B = 1), one warp each; lse and the
  // (NH, T) probabilities go to workspace.
  const AttnShape s{1, T, NH, KVH, hd, (NH + 2 * KVH) * hd, NH / KVH, rsqrtf((float)hd)};
  DeviceBuffer att(this, (size_t)NH * T * sizeof(float), MemCategory::kWorkspace),
      lse(this, (size_t)NH * sizeof(float), MemCategory::kWorkspace);
  launch_kernel(attention_decode_kernel, blocks_for((size_t)NH * 32), kThreads, stream_, out,
                att.f32(), lse.f32(), qkv, s);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::attention_backward(float* dqkv, const float* dout, const float* qkv,
                                     const float* lse, int B, int T, int NH, int KVH, int hd) {
  const AttnShape s{B, T, NH, KVH, hd, (NH + 2 * KVH) * hd, NH / KVH, rsqrtf((float)hd)};
  const size_t bytes = (size_t)B * NH * T * T * sizeof(float);
  // The probabilities and the ds rows, through the tracked pool (workspace).
  DeviceBuffer att(this, bytes, MemCategory::kWorkspace),
      scratch(this, bytes, MemCategory::kWorkspace);
  const unsigned blocks = blocks_for((size_t)B * NH * T * 32);
  launch_kernel(attention_probs_kernel, blocks, kThreads, stream_, att.f32(), lse, qkv, s);
  ZT_CHECK_CUDA(cudaGetLastError());
  launch_kernel(attention_backward_kernel, blocks, kThreads, stream_, dqkv, scratch.f32(), dout,
                qkv, att.f32(), s);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt
