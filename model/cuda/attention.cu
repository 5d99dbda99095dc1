// Causal attention with grouped-query K/V, tiled as FlashAttention-2 (Dao 2023), computed in fp32
// on activations of any dtype (each stored value rounded once).
// Math as model/cpu/attention.cc: per (b, h, t), s_j = q_t . k_j / sqrt(hd) for j <= t,
// a = softmax(s), out_t = sum_j a_j v_j; query head h reads kv head h / (NH / KVH), and no K/V
// is replicated per query head.
//
// Forward: a block is a tile of kTile query rows of one (b, h), one thread per row. It walks
// the key tiles up to its last row, staging K and V in shared memory, and keeps per row the
// running max m, the running sum l and the unnormalised output (online softmax: Milakov &
// Gimelshein 2018). It saves lse_t = m + log l, so nothing of size T x T exists, in the forward
// or the backward.
// Backward, from lse alone (the interface has no saved output):
//   a_j = exp(s_j - lse_t);  dp_j = dout_t . v_j;  D_t = sum_j a_j dp_j;
//   ds_j = a_j (dp_j - D_t);  dq_t += ds_j k_j / sqrt(hd);
//   dk_j += sum_t ds_j q_t / sqrt(hd);  dv_j += sum_t a_j dout_t  (t >= j, over the group's heads)
// Two kernels: one thread per query row computes D_t (a first pass over the keys) and dq_t; one
// thread per key row computes dk_j and dv_j over every query row of every head of its group.
// Every gradient element has one writer adding in a fixed order: no atomics, and two runs give
// the same bits.
#include "common/status.h"
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

constexpr int kTile = 32;     // rows per block (one warp) and per staged tile
constexpr int kMaxHd = 128;   // head sizes up to LLaMA's 128

struct AttnShape {
  int B, T, NH, KVH, hd, row, group;
  float scale;
  __host__ __device__ size_t q(int b, int t, int h) const { return ((size_t)b * T + t) * row + (size_t)h * hd; }
  __host__ __device__ size_t k(int b, int t, int kvh) const { return q(b, t, NH + kvh); }
  __host__ __device__ size_t v(int b, int t, int kvh) const { return q(b, t, NH + KVH + kvh); }
  __host__ __device__ size_t o(int b, int t, int h) const { return ((size_t)b * T + t) * NH * hd + (size_t)h * hd; }
};

__device__ inline float dot(const float* x, const float* y, int n) {
  float d = 0.f;
  for (int i = 0; i < n; ++i) d += x[i] * y[i];
  return d;
}

// Rows [r0, r0 + kTile) of head `head`'s part of src (row-major rows of s.row floats; rows past
// T left alone) into tile, cooperatively and coalesced.
__device__ void stage(float (*tile)[kMaxHd], TensorView src, int b, int r0, int head,
                      const AttnShape& s, size_t row_stride, size_t seq_stride) {
  for (int e = threadIdx.x; e < kTile * s.hd; e += blockDim.x) {
    const int r = e / s.hd, i = e % s.hd;
    if (r0 + r < s.T)
      tile[r][i] = load_as_f32(
          src, (size_t)b * seq_stride + (size_t)(r0 + r) * row_stride + (size_t)head * s.hd + i);
  }
}

// Query rows q_first + tile * kTile + threadIdx.x of (b = blockIdx.z, h = blockIdx.y): out and
// lse hold rows q_first..T-1 of each (b, h) (all of them in training; the last for decoding).
__global__ void flash_forward_kernel(TensorRef out, float* lse, TensorView qkv, AttnShape s,
                                     int q_first) {
  __shared__ float ks[kTile][kMaxHd], vs[kTile][kMaxHd];
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int t = q_first + blockIdx.x * kTile + threadIdx.x;
  const int last = min(s.T - 1, q_first + (int)(blockIdx.x + 1) * kTile - 1);
  const bool live = t < s.T;
  float q[kMaxHd], o[kMaxHd];
  for (int i = 0; i < s.hd; ++i) {
    q[i] = live ? load_as_f32(qkv, s.q(b, t, h) + i) : 0.f;
    o[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    stage(ks, qkv, b, j0, s.NH + kvh, s, s.row, (size_t)s.T * s.row);
    stage(vs, qkv, b, j0, s.NH + s.KVH + kvh, s, s.row, (size_t)s.T * s.row);
    __syncthreads();
    const int n = live ? min(kTile, t - j0 + 1) : 0;
    if (n <= 0) continue;
    float sc[kTile], mt = m;
    for (int c = 0; c < n; ++c) {
      sc[c] = dot(q, ks[c], s.hd) * s.scale;
      mt = fmaxf(mt, sc[c]);
    }
    const float corr = expf(m - mt);  // 0 on the first tile (m = -inf)
    l *= corr;
    for (int i = 0; i < s.hd; ++i) o[i] *= corr;
    for (int c = 0; c < n; ++c) {
      const float p = expf(sc[c] - mt);
      l += p;
      for (int i = 0; i < s.hd; ++i) o[i] += p * vs[c][i];
    }
    m = mt;
  }
  if (!live) return;
  const int rows = s.T - q_first, r = t - q_first;
  const size_t y = ((size_t)b * rows + r) * s.NH * s.hd + (size_t)h * s.hd;
  const float inv = 1.f / l;
  for (int i = 0; i < s.hd; ++i) store_from_f32(out, y + i, o[i] * inv);
  lse[((size_t)b * s.NH + h) * rows + r] = m + logf(l);
}

// dq_t (added into dqkv) and D_t (into d_rows, (B, NH, T)) for query row t of (b, h).
__global__ void flash_backward_dq_kernel(TensorRef dqkv, float* d_rows, TensorView dout,
                                         TensorView qkv, const float* lse, AttnShape s) {
  __shared__ float ks[kTile][kMaxHd], vs[kTile][kMaxHd];
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / s.group;
  const int t = blockIdx.x * kTile + threadIdx.x;
  const int last = min(s.T - 1, (int)(blockIdx.x + 1) * kTile - 1);
  const bool live = t < s.T;
  float q[kMaxHd], dy[kMaxHd], dq[kMaxHd];
  for (int i = 0; i < s.hd; ++i) {
    q[i] = live ? load_as_f32(qkv, s.q(b, t, h) + i) : 0.f;
    dy[i] = live ? load_as_f32(dout, s.o(b, t, h) + i) : 0.f;
    dq[i] = 0.f;
  }
  const float lse_t = live ? lse[((size_t)b * s.NH + h) * s.T + t] : 0.f;
  float D = 0.f;
  for (int pass = 0; pass < 2; ++pass)  // 0: D_t; 1: dq_t
    for (int j0 = 0; j0 <= last; j0 += kTile) {
      __syncthreads();
      stage(ks, qkv, b, j0, s.NH + kvh, s, s.row, (size_t)s.T * s.row);
      stage(vs, qkv, b, j0, s.NH + s.KVH + kvh, s, s.row, (size_t)s.T * s.row);
      __syncthreads();
      const int n = live ? min(kTile, t - j0 + 1) : 0;
      for (int c = 0; c < n; ++c) {
        const float a = expf(dot(q, ks[c], s.hd) * s.scale - lse_t);
        const float dp = dot(dy, vs[c], s.hd);
        if (pass == 0) {
          D += a * dp;
        } else {
          const float ds = a * (dp - D) * s.scale;
          for (int i = 0; i < s.hd; ++i) dq[i] += ds * ks[c][i];
        }
      }
    }
  if (!live) return;
  for (int i = 0; i < s.hd; ++i) add_from_f32(dqkv, s.q(b, t, h) + i, dq[i]);
  d_rows[((size_t)b * s.NH + h) * s.T + t] = D;
}

// dk_j and dv_j (added into dqkv) for key row j of (b, kv head blockIdx.y), over the query rows
// t >= j of every query head of its group.
__global__ void flash_backward_dkv_kernel(TensorRef dqkv, const float* d_rows, TensorView dout,
                                          TensorView qkv, const float* lse, AttnShape s) {
  __shared__ float qs[kTile][kMaxHd], dys[kTile][kMaxHd];
  __shared__ float lses[kTile], ds_rows[kTile];
  const int b = blockIdx.z, kvh = blockIdx.y;
  const int j0 = blockIdx.x * kTile, j = j0 + threadIdx.x;
  const bool live = j < s.T;
  float k[kMaxHd], v[kMaxHd], dk[kMaxHd], dv[kMaxHd];
  for (int i = 0; i < s.hd; ++i) {
    k[i] = live ? load_as_f32(qkv, s.k(b, j, kvh) + i) : 0.f;
    v[i] = live ? load_as_f32(qkv, s.v(b, j, kvh) + i) : 0.f;
    dk[i] = dv[i] = 0.f;
  }
  for (int h = kvh * s.group; h < (kvh + 1) * s.group; ++h)
    for (int t0 = j0; t0 < s.T; t0 += kTile) {
      __syncthreads();
      stage(qs, qkv, b, t0, h, s, s.row, (size_t)s.T * s.row);
      stage(dys, dout, b, t0, h, s, (size_t)s.NH * s.hd, (size_t)s.T * s.NH * s.hd);
      const size_t bh = ((size_t)b * s.NH + h) * s.T;
      if (t0 + (int)threadIdx.x < s.T) {
        lses[threadIdx.x] = lse[bh + t0 + threadIdx.x];
        ds_rows[threadIdx.x] = d_rows[bh + t0 + threadIdx.x];
      }
      __syncthreads();
      if (!live) continue;
      for (int r = max(0, j - t0); r < kTile && t0 + r < s.T; ++r) {
        const float a = expf(dot(qs[r], k, s.hd) * s.scale - lses[r]);
        const float dp = dot(dys[r], v, s.hd);
        const float ds = a * (dp - ds_rows[r]) * s.scale;
        for (int i = 0; i < s.hd; ++i) {
          dv[i] += a * dys[r][i];
          dk[i] += ds * qs[r][i];
        }
      }
    }
  if (!live) return;
  for (int i = 0; i < s.hd; ++i) {
    add_from_f32(dqkv, s.k(b, j, kvh) + i, dk[i]);
    add_from_f32(dqkv, s.v(b, j, kvh) + i, dv[i]);
  }
}

AttnShape shape(int B, int T, int NH, int KVH, int hd) {
  ZT_CHECK(hd >= 1 && hd <= kMaxHd && NH % KVH == 0);
  return {B, T, NH, KVH, hd, (NH + 2 * KVH) * hd, NH / KVH, 1.f / std::sqrt((float)hd)};
}

}  // namespace

void CudaBackend::attention_forward(TensorRef out, float* lse, TensorView qkv, int B, int T, int NH,
                                    int KVH, int hd) {
  const AttnShape s = shape(B, T, NH, KVH, hd);
  const dim3 grid((T + kTile - 1) / kTile, NH, B);
  launch_kernel(flash_forward_kernel, grid, kTile, stream_, out, lse, qkv, s, 0);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::attention_decode(TensorRef out, TensorView qkv, int T, int NH, int KVH, int hd) {
  // Query row T - 1 of every head (B = 1): one live thread per head, over all T keys.
  const AttnShape s = shape(1, T, NH, KVH, hd);
  DeviceBuffer lse(this, (size_t)NH * sizeof(float), MemCategory::kWorkspace);
  launch_kernel(flash_forward_kernel, dim3(1, NH, 1), kTile, stream_, out, lse.f32(), qkv, s,
                T - 1);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::attention_backward(TensorRef dqkv, TensorView dout, TensorView qkv,
                                     const float* lse, int B, int T, int NH, int KVH, int hd) {
  const AttnShape s = shape(B, T, NH, KVH, hd);
  DeviceBuffer d_rows(this, (size_t)B * NH * T * sizeof(float), MemCategory::kWorkspace);
  const unsigned tiles = (T + kTile - 1) / kTile;
  launch_kernel(flash_backward_dq_kernel, dim3(tiles, NH, B), kTile, stream_, dqkv, d_rows.f32(),
                dout, qkv, lse, s);
  ZT_CHECK_CUDA(cudaGetLastError());
  launch_kernel(flash_backward_dkv_kernel, dim3(tiles, KVH, B), kTile, stream_, dqkv,
                d_rows.f32(), dout, qkv, lse, s);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt
