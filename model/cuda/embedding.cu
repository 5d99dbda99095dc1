// Token (+ GPT-2 position) embeddings. The backward is deterministic: repeated tokens add into
// the same row, so each thread owns one channel and walks the rows in order (the CPU
// backend's order, so the two agree bit for bit); adjacent channels keep a warp's reads and
// writes coalesced.
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void embedding_forward_kernel(TensorRef out, const int* tokens, const void* wte,
                                         const void* wpe, DType t, int BT, int T, int C) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)BT * C) return;
  const int bt = i / C, c = i % C;
  float v = load_as_f32(wte, t, (size_t)tokens[bt] * C + c);
  if (wpe) v = __fadd_rn(v, load_as_f32(wpe, t, (size_t)(bt % T) * C + c));
  store_from_f32(out, i, v);
}

__global__ void embedding_backward_kernel(float* dwte, float* dwpe, TensorView dout,
                                          const int* tokens, int BT, int T, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; ++bt) {
    const float g = load_as_f32(dout, (size_t)bt * C + c);
    float* w = &dwte[(size_t)tokens[bt] * C + c];
    *w = __fadd_rn(*w, g);
    if (dwpe) {
      float* p = &dwpe[(size_t)(bt % T) * C + c];
      *p = __fadd_rn(*p, g);
    }
  }
}

}  // namespace

void CudaBackend::embedding_forward(TensorRef out, const int* tokens, const void* wte,
                                    const void* wpe, DType t, int B, int T, int C) {
  launch_kernel(embedding_forward_kernel, blocks_for((size_t)B * T * C), kThreads, stream_, out,
                tokens, wte, wpe, t, B * T, T, C);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, TensorView dout, const int* tokens,
                                     int B, int T, int C) {
  launch_kernel(embedding_backward_kernel, blocks_for((size_t)C), kThreads, stream_, dwte, dwpe,
                dout, tokens, B * T, T, C);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt
