// Token (+ GPT-2 position) embeddings. The backward is deterministic and adds in the CPU
// backend's order (rows in order), so the two agree bit for bit, without atomics or a sort:
// - dwpe: one thread per (position t, channel c) adds row b T + t for b = 0, 1, ...; in packed
//   rows (positions pos) dwpe is dwte's scatter with pos for tokens, rows in order as well;
// - dwte: thread (channel c, bucket k) owns the rows whose token is k modulo kBuckets and adds
//   them in order, scanning the tokens a tile at a time from shared memory; each token has one
//   bucket, so each dwte element has one writer. A warp is 32 channels of one bucket: its
//   branch is uniform and its reads and writes coalesced.
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void embedding_forward_kernel(TensorRef out, const int* tokens, const void* wte,
                                         const void* wpe, DType t, int BT, int T, int C,
                                         const int* pos) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)BT * C) return;
  const int bt = i / C, c = i % C;
  float v = load_as_f32(wte, t, (size_t)tokens[bt] * C + c);
  if (wpe) v = __fadd_rn(v, load_as_f32(wpe, t, (size_t)(pos ? pos[bt] : bt % T) * C + c));
  store_from_f32(out, i, v);
}

constexpr int kBuckets = 64, kBucketsPerBlock = 8, kTokenTile = 1024;

// Block (32 channels, kBucketsPerBlock buckets): dwte rows of the tokens in its buckets (or
// dwpe rows of the positions, in packed rows).
__global__ void wte_backward_kernel(float* dwte, TensorView dout, const int* tokens, int BT,
                                    int C) {
  __shared__ int tile[kTokenTile];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int bucket = blockIdx.y * kBucketsPerBlock + threadIdx.y;
  const int tid = threadIdx.y * 32 + threadIdx.x;
  for (int t0 = 0; t0 < BT; t0 += kTokenTile) {
    __syncthreads();  // the previous tile is no longer read
    for (int i = tid; i < kTokenTile && t0 + i < BT; i += 32 * kBucketsPerBlock)
      tile[i] = tokens[t0 + i];
    __syncthreads();
    if (c >= C) continue;
    const int n = min(kTokenTile, BT - t0);
    for (int i = 0; i < n; ++i) {
      const int tok = tile[i];
      if (tok % kBuckets != bucket) continue;
      float* w = &dwte[(size_t)tok * C + c];
      *w = __fadd_rn(*w, load_as_f32(dout, (size_t)(t0 + i) * C + c));
    }
  }
}

// dwpe[t, c] += dout[b T + t, c] for b = 0, 1, ..., B - 1.
__global__ void wpe_backward_kernel(float* dwpe, TensorView dout, int B, int T, int C) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;  // t C + c
  if (i >= (size_t)T * C) return;
  float p = dwpe[i];
  for (int b = 0; b < B; ++b) p = __fadd_rn(p, load_as_f32(dout, (size_t)b * T * C + i));
  dwpe[i] = p;
}

}  // namespace

void CudaBackend::embedding_forward(TensorRef out, const int* tokens, const void* wte,
                                    const void* wpe, DType t, int B, int T, int C, const int* pos) {
  launch_kernel(embedding_forward_kernel, blocks_for((size_t)B * T * C), kThreads, stream_, out,
                tokens, wte, wpe, t, B * T, T, C, pos);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, TensorView dout, const int* tokens,
                                     int B, int T, int C, const int* pos) {
  const dim3 grid((C + 31) / 32, kBuckets / kBucketsPerBlock), block(32, kBucketsPerBlock);
  launch_kernel(wte_backward_kernel, grid, block, stream_, dwte, dout, tokens, B * T, C);
  if (dwpe && pos)
    launch_kernel(wte_backward_kernel, grid, block, stream_, dwpe, dout, pos, B * T, C);
  else if (dwpe)
    launch_kernel(wpe_backward_kernel, blocks_for((size_t)T * C), kThreads, stream_, dwpe, dout, B,
                  T, C);
}

}  // namespace zt
