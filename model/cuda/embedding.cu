// Token (+ GPT-2 position) embeddings; backward scatters with atomicAdd (repeated tokens).
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void embedding_forward_kernel(float* out, const int* tokens, const void* wte,
                                         const void* wpe, DType t, int BT, int T, int C) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)BT * C) return;
  const int bt = i / C, c = i % C;
  float v = load_as_f32(wte, t, (size_t)tokens[bt] * C + c);
  if (wpe) v = __fadd_rn(v, load_as_f32(wpe, t, (size_t)(bt % T) * C + c));
  out[i] = v;
}

__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const float* dout,
                                          const int* tokens, int BT, int T, int C) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)BT * C) return;
  const int bt = i / C, c = i % C;
  atomicAdd(&dwte[(size_t)tokens[bt] * C + c], dout[i]);
  if (dwpe) atomicAdd(&dwpe[(size_t)(bt % T) * C + c], dout[i]);
}

}  // namespace

void CudaBackend::embedding_forward(float* out, const int* tokens, const void* wte, const void* wpe,
                                    DType t, int B, int T, int C) {
  launch_kernel(embedding_forward_kernel, blocks_for((size_t)B * T * C), kThreads, stream_, out,
                tokens, wte, wpe, t, B * T, T, C);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                                     int B, int T, int C) {
  launch_kernel(embedding_backward_kernel, blocks_for((size_t)B * T * C), kThreads, stream_, dwte,
                dwpe, dout, tokens, B * T, T, C);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt
