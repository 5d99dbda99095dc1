// Block-wise quantization on the GPU (model/quantize.h has the formula, shared with the CPU):
// one thread block per quantization block; its threads find max|x| (a fixed max tree, so the
// order cannot matter), then each quantizes a pair of elements, so a 4-bit byte has one writer.
#include "common/status.h"
#include "model/cuda/cuda_backend.cuh"
#include "model/quantize.h"

namespace zt {
namespace {

__global__ void quantize_kernel(const void* x, DType t, size_t n, int bits, int block, uint8_t* q,
                                float* scales) {
  __shared__ float warps[kThreads / 32];
  __shared__ int warps_bad[kThreads / 32];
  const size_t lo = (size_t)blockIdx.x * block;
  const size_t hi = lo + (size_t)block < n ? lo + (size_t)block : n;
  float m = 0.f;
  int bad = 0;  // a NaN or an infinity (fmaxf would drop a NaN)
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const float v = load_as_f32(x, t, i);
    bad |= !isfinite(v);
    m = fmaxf(m, fabsf(v));
  }
  for (int o = 16; o > 0; o >>= 1) {
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    bad |= __shfl_xor_sync(0xffffffffu, bad, o);
  }
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = m, warps_bad[threadIdx.x / 32] = bad;
  __syncthreads();
  float absmax = 0.f;
  for (int w = 0; w < (int)(blockDim.x / 32); ++w)
    absmax = fmaxf(absmax, warps[w]), bad |= warps_bad[w];
  const float scale = quant_scale(absmax, bad == 0, bits);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  for (size_t i = lo + 2 * (size_t)threadIdx.x; i < hi; i += 2 * (size_t)blockDim.x) {
    const bool has1 = i + 1 < hi;
    quant_store_pair(q, i, quant_value(load_as_f32(x, t, i), scale, bits),
                     has1 ? quant_value(load_as_f32(x, t, i + 1), scale, bits) : 0, has1, bits);
  }
}

__global__ void dequantize_kernel(const uint8_t* q, const float* scales, size_t n, int bits,
                                  int block, void* y, DType yt, bool accumulate) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  // Rounded as the CPU: the product, then the sum (no fused multiply-add).
  const float v = __fmul_rn((float)quant_load(q, i, bits), scales[i / (size_t)block]);
  if (accumulate)
    static_cast<float*>(y)[i] = __fadd_rn(static_cast<float*>(y)[i], v);
  else
    store_from_f32(y, yt, i, v);
}

}  // namespace

void CudaBackend::quantize_blocks(const void* x, DType t, size_t n, int bits, int block, void* q,
                                  float* scales) {
  ZT_CHECK((bits == 8 || bits == 4) && block > 0 && block % 2 == 0);
  if (n == 0) return;
  launch_kernel(quantize_kernel, (unsigned)quant_blocks(n, block), kThreads, stream_, x, t, n,
                bits, block, static_cast<uint8_t*>(q), scales);
  ZT_CHECK_CUDA(cudaGetLastError());
}

void CudaBackend::dequantize_blocks(const void* q, const float* scales, size_t n, int bits,
                                    int block, void* y, DType yt, bool accumulate) {
  ZT_CHECK((bits == 8 || bits == 4) && block > 0 && block % 2 == 0);
  ZT_CHECK(!accumulate || yt == DType::kF32);
  if (n == 0) return;
  launch_kernel(dequantize_kernel, blocks_for(n), kThreads, stream_,
                static_cast<const uint8_t*>(q), scales, n, bits, block, y, yt, accumulate);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt
