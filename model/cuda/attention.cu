// Causal attention with grouped-query K/V on the CUDA backend: the choice of kernel family, and
// the fp32 family. Math as model/cpu/attention.cc: per (b, h, t), s_j = q_t . k_j / sqrt(hd)
// for j <= t, a = softmax(s), out_t = sum_j a_j v_j; query head h reads kv head h / (NH / KVH),
// and no K/V is replicated per query head. Nothing of size T x T exists: the forward saves
// lse_t = log sum_j exp(s_j) per row, and the backward recomputes a_j = exp(s_j - lse_t):
//   dp_j = dout_t . v_j;  D_t = dout_t . out_t;  ds_j = a_j (dp_j - D_t);
//   dq_t += sum_j ds_j k_j / sqrt(hd);  dk_j += sum_t ds_j q_t / sqrt(hd);  dv_j += sum_t a_j
//   dout_t
// (t >= j, over the group's query heads). In packed rows (Backend::attention_forward's pos) key
// j is in query t's sum only when j >= first_key(t), its example's start.
//
// bf16 / fp16 activations with hd <= 128 run on tensor cores (attention_mma.cu). The fp32
// family here serves fp32 activations (exact to fp32 rounding: the CPU comparisons' reference
// path) and the decode step (one row, memory-bound): one warp per row, lanes splitting the
// keys of each 32-key tile for the dot products (online softmax over the tile: Milakov &
// Gimelshein 2018) and the head's columns (lane + 32 c) for the sums into the row, so every
// per-thread array has a fixed size and no kernel uses local memory. Every gradient element has
// one writer adding in a fixed order: no atomics, and two runs give the same bits.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "model/cuda/attention.cuh"
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

constexpr int kMaxHd = 128;         // head sizes up to LLaMA's 128
constexpr int kCols = kMaxHd / 32;  // columns per lane: lane, lane + 32, ...

// x[0..hd) . the row at `row` of src (fp32 accumulation, in column order).
__device__ inline float dot_row(const float* x, TensorView src, size_t row, int hd) {
  float d = 0.f;
  for (int i = 0; i < hd; ++i) d += x[i] * load_as_f32(src, row + i);
  return d;
}

// The row at `row` of src into sm[0..hd), by the warp's lanes.
__device__ inline void stage_row(float* sm, TensorView src, size_t row, int hd) {
  for (int i = threadIdx.x; i < hd; i += 32) sm[i] = load_as_f32(src, row + i);
}

// acc[c] += sum_{jj < n} (lane jj's p) src[row(jj) + lane + 32 c], jj in order: the n rows of a
// tile weighted by the lanes' values (probabilities or score gradients), each lane its columns.
template <class Row>
__device__ inline void add_weighted_rows(float (&acc)[kCols], float p, int n, TensorView src,
                                         Row row, int hd) {
  const int lane = threadIdx.x;
  for (int jj = 0; jj < n; ++jj) {
    const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      if (lane + 32 * c < hd) acc[c] += pj * load_as_f32(src, row(jj) + lane + 32 * c);
  }
}

// Query row q_first + blockIdx.x of (b = blockIdx.z, h = blockIdx.y), one warp: out and lse hold
// rows q_first..T-1 of each (b, h) (all of them in training; the last for decoding).
__global__ void flash_forward_kernel(TensorRef out, float* lse, TensorView qkv, AttnShape s,
                                     int q_first) {
  __shared__ float qs[kMaxHd];
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / s.group, t = q_first + blockIdx.x;
  const int lane = threadIdx.x;
  stage_row(qs, qkv, s.q(b, t, h), s.hd);
  __syncwarp();
  float o[kCols] = {}, m = -INFINITY, l = 0.f;
  const int first = s.first_key(b, t);
  for (int j0 = first; j0 <= t; j0 += 32) {
    const int j = j0 + lane;
    const float sc = j <= t ? dot_row(qs, qkv, s.k(b, j, kvh), s.hd) * s.scale : -INFINITY;
    const float mt = fmaxf(m, warp_max(sc));  // finite: key j0 <= t is in every tile
    const float corr = expf(m - mt), p = expf(sc - mt);
    l = l * corr + warp_sum(p);
    m = mt;
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[c] *= corr;
    add_weighted_rows(
        o, p, min(32, t - j0 + 1), qkv, [&](int jj) { return s.v(b, j0 + jj, kvh); }, s.hd);
  }
  const int rows = s.T - q_first, r = t - q_first;
  const size_t y = ((size_t)b * rows + r) * s.NH * s.hd + (size_t)h * s.hd;
#pragma unroll
  for (int c = 0; c < kCols; ++c)
    if (lane + 32 * c < s.hd) store_from_f32(out, y + lane + 32 * c, o[c] / l);
  if (lane == 0) lse[((size_t)b * s.NH + h) * rows + r] = m + logf(l);
}

// dq_t (added into dqkv) for query row t = blockIdx.x of (b, h), one warp.
__global__ void flash_backward_dq_kernel(TensorRef dqkv, const float* d_rows, TensorView dout,
                                         TensorView qkv, const float* lse, AttnShape s) {
  __shared__ float qs[kMaxHd], dys[kMaxHd];
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / s.group, t = blockIdx.x;
  const int lane = threadIdx.x;
  stage_row(qs, qkv, s.q(b, t, h), s.hd);
  stage_row(dys, dout, s.o(b, t, h), s.hd);
  __syncwarp();
  const size_t bht = ((size_t)b * s.NH + h) * s.T + t;
  const float lse_t = lse[bht], D = d_rows[bht];
  float dq[kCols] = {};
  for (int j0 = s.first_key(b, t); j0 <= t; j0 += 32) {
    const int j = j0 + lane;
    float ds = 0.f;
    if (j <= t) {
      const float a = expf(dot_row(qs, qkv, s.k(b, j, kvh), s.hd) * s.scale - lse_t);
      ds = a * (dot_row(dys, qkv, s.v(b, j, kvh), s.hd) - D) * s.scale;
    }
    add_weighted_rows(
        dq, ds, min(32, t - j0 + 1), qkv, [&](int jj) { return s.k(b, j0 + jj, kvh); }, s.hd);
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c)
    if (lane + 32 * c < s.hd) add_from_f32(dqkv, s.q(b, t, h) + lane + 32 * c, dq[c]);
}

// dk_j and dv_j (added into dqkv) for key row j = blockIdx.x of (b, kv head blockIdx.y), one
// warp, over the query rows t >= j of every query head of its group.
__global__ void flash_backward_dkv_kernel(TensorRef dqkv, const float* d_rows, TensorView dout,
                                          TensorView qkv, const float* lse, AttnShape s) {
  __shared__ float ks[kMaxHd], vs[kMaxHd];
  const int b = blockIdx.z, kvh = blockIdx.y, j = blockIdx.x;
  const int lane = threadIdx.x;
  stage_row(ks, qkv, s.k(b, j, kvh), s.hd);
  stage_row(vs, qkv, s.v(b, j, kvh), s.hd);
  __syncwarp();
  float dk[kCols] = {}, dv[kCols] = {};
  for (int h = kvh * s.group; h < (kvh + 1) * s.group; ++h)
    for (int t0 = j; t0 < s.T && s.first_key(b, t0) <= j; t0 += 32) {  // to key j's example's end
      const int t = t0 + lane;
      float a = 0.f, ds = 0.f;
      if (t < s.T && s.first_key(b, t) <= j) {  // query t's example holds key j
        const size_t bht = ((size_t)b * s.NH + h) * s.T + t;
        a = expf(dot_row(ks, qkv, s.q(b, t, h), s.hd) * s.scale - lse[bht]);
        ds = a * (dot_row(vs, dout, s.o(b, t, h), s.hd) - d_rows[bht]) * s.scale;
      }
      const int n = min(32, s.T - t0);
      add_weighted_rows(
          dv, a, n, dout, [&](int tt) { return s.o(b, t0 + tt, h); }, s.hd);
      add_weighted_rows(
          dk, ds, n, qkv, [&](int tt) { return s.q(b, t0 + tt, h); }, s.hd);
    }
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int i = lane + 32 * c;
    if (i >= s.hd) continue;
    add_from_f32(dqkv, s.k(b, j, kvh) + i, dk[c]);
    add_from_f32(dqkv, s.v(b, j, kvh) + i, dv[c]);
  }
}

// D_t = dout_t . out_t in fp32, one warp per (b, t, h) row: into d_rows (B, NH, T).
__global__ void attention_d_rows_kernel(float* d_rows, TensorView dout, TensorView out,
                                        AttnShape s) {
  const size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (b, t, h)
  if (r >= (size_t)s.B * s.T * s.NH) return;
  const int h = (int)(r % s.NH), t = (int)(r / s.NH % s.T), b = (int)(r / s.NH / s.T);
  float d = 0.f;
  for (int c = threadIdx.x % 32; c < s.hd; c += 32)
    d += load_as_f32(dout, s.o(b, t, h) + c) * load_as_f32(out, s.o(b, t, h) + c);
  d = warp_sum(d);
  if (threadIdx.x % 32 == 0) d_rows[((size_t)b * s.NH + h) * s.T + t] = d;
}

AttnShape shape(int B, int T, int NH, int KVH, int hd, const int* pos = nullptr) {
  ZT_CHECK(hd >= 1 && hd <= kMaxHd && NH % KVH == 0);
  return {B, T, NH, KVH, hd, (NH + 2 * KVH) * hd, NH / KVH, 1.f / std::sqrt((float)hd), pos};
}

}  // namespace

absl::Status CudaBackend::prepare_cudnn(const AttentionShape& s) {
  const absl::Status st = cudnn_->prepare(s, cudnn_workspace_limit());
  cudnn_shapes_[s] = st.ok();
  return attention_ == AttentionImpl::kCudnn ? st : absl::OkStatus();
}

bool CudaBackend::cudnn_runs(const AttentionShape& s) {
  if (!cudnn_) return false;
  if (!cudnn_shapes_.count(s))
    if (const absl::Status st = prepare_cudnn(s); !st.ok()) {
      std::fprintf(stderr, "zerotrain: --attention cudnn: %s\n", std::string(st.message()).c_str());
      std::abort();
    }
  return cudnn_shapes_.at(s);
}

absl::StatusOr<std::string> CudaBackend::prepare_attention(DType act, int B, int T, int NH, int KVH,
                                                           int hd) {
  if (cudnn_) {
    const AttentionShape s{act, B, T, NH, KVH, hd};
    ZT_RETURN_IF_ERROR(prepare_cudnn(s));
    if (cudnn_shapes_.at(s)) return cudnn_->version();
  }
  if (hd > kMaxHd)
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim ", hd, " is over our attention kernels' ", kMaxHd,
        cudnn_ ? "; cuDNN has no engine for this shape either"
               : "; --attention cudnn (or auto) runs it with cuDNN where it has an engine"));
  return std::string(mma_attention_supports(act, hd) ? "flash (tensor cores)" : "flash (fp32)");
}

// Packed rows (pos) run on our kernels: cuDNN's SDPA graphs here are plain causal.
void CudaBackend::attention_forward(TensorRef out, float* lse, TensorView qkv, int B, int T, int NH,
                                    int KVH, int hd, const int* pos) {
  if (const AttentionShape c{qkv.dtype, B, T, NH, KVH, hd}; !pos && cudnn_runs(c))
    return cudnn_->forward(out.data, lse, qkv.data, c);
  const AttnShape s = shape(B, T, NH, KVH, hd, pos);
  if (mma_attention_supports(qkv.dtype, hd))
    return mma_attention_forward(stream_, out, lse, qkv, s);
  launch_kernel(flash_forward_kernel, dim3(T, NH, B), 32, stream_, out, lse, qkv, s, 0);
}

void CudaBackend::attention_decode(TensorRef out, TensorView qkv, int T, int NH, int KVH, int hd) {
  // Query row T - 1 of every head (B = 1), over all T keys.
  const AttnShape s = shape(1, T, NH, KVH, hd);
  DeviceBuffer lse(this, (size_t)NH * sizeof(float), MemCategory::kWorkspace);
  launch_kernel(flash_forward_kernel, dim3(1, NH, 1), 32, stream_, out, lse.f32(), qkv, s, T - 1);
}

void CudaBackend::attention_backward(TensorRef dqkv, TensorView dout, TensorView qkv,
                                     TensorView out, const float* lse, int B, int T, int NH,
                                     int KVH, int hd, const int* pos) {
  if (const AttentionShape c{qkv.dtype, B, T, NH, KVH, hd}; !pos && cudnn_runs(c)) {
    // cuDNN writes the gradient; the interface adds it.
    const size_t n = (size_t)B * T * (NH + 2 * KVH) * hd;
    DeviceBuffer grad(this, n * dtype_size(qkv.dtype), MemCategory::kWorkspace);
    cudnn_->backward(grad.data(), dout.data, qkv.data, out.data, lse, c);
    return add_inplace(dqkv, TensorView(grad.data(), qkv.dtype), n);
  }
  const AttnShape s = shape(B, T, NH, KVH, hd, pos);
  DeviceBuffer d_rows(this, (size_t)B * NH * T * sizeof(float), MemCategory::kWorkspace);
  launch_kernel(attention_d_rows_kernel, blocks_for((size_t)B * T * NH, 4), 128, stream_,
                d_rows.f32(), dout, out, s);
  if (mma_attention_supports(qkv.dtype, hd))
    return mma_attention_backward(stream_, dqkv, d_rows.f32(), dout, qkv, lse, s);
  launch_kernel(flash_backward_dq_kernel, dim3(T, NH, B), 32, stream_, dqkv, d_rows.f32(), dout,
                qkv, lse, s);
  launch_kernel(flash_backward_dkv_kernel, dim3(T, KVH, B), 32, stream_, dqkv, d_rows.f32(), dout,
                qkv, lse, s);
}

}  // namespace zt
