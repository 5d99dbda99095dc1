// RoPE, HF rotate_half layout (equations in model/cpu/rope.cc); one thread per rotated pair.
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void rope_kernel(TensorRef qkv, int BT, int T, int heads, int row, int hd, float theta,
                            RopeScaling scaling, float sign, int pos0, const int* pos) {
  const int half = hd / 2;
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)BT * heads * half) return;
  const int k = i % half, h = (i / half) % heads, bt = i / ((size_t)half * heads);
  const float inv_freq = rope_scaled(powf(theta, -2.f * k / hd), scaling);
  float s, c;
  sincosf((pos0 + (pos ? pos[bt] : bt % T)) * inv_freq, &s, &c);
  s *= sign;
  const size_t x = (size_t)bt * row + (size_t)h * hd + k;  // the pair (x, x + half)
  const float x1 = load_as_f32(qkv, x), x2 = load_as_f32(qkv, x + half);
  store_from_f32(qkv, x, x1 * c - x2 * s);
  store_from_f32(qkv, x + half, x2 * c + x1 * s);
}

}  // namespace

void CudaBackend::rope(TensorRef qkv, int B, int T, int NH, int KVH, int hd,
                       const RopeParams& rope, bool inverse, int pos0, const int* pos) {
  const size_t n = (size_t)B * T * (NH + KVH) * (hd / 2);
  launch_kernel(rope_kernel, blocks_for(n), kThreads, stream_, qkv, B * T, T, NH + KVH,
                (NH + 2 * KVH) * hd, hd, rope.theta, rope.scaling, inverse ? -1.f : 1.f, pos0,
                pos);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt
