// GELU (tanh form) and SwiGLU, forward and backward (equations in model/cpu/activations.cc), on
// activations of any dtype: fp32 math, one rounding per stored value. GELU runs as a 128-bit
// element-wise map (elementwise.cuh) when its operands share a dtype and are 16-byte aligned.
#include "model/cuda/cuda_backend.cuh"
#include "model/cuda/elementwise.cuh"
#include "model/cuda/gelu.cuh"

namespace zt {
namespace {

struct Gelu {  // gelu(x); the second operand unused
  __device__ float operator()(float x, float) const { return gelu_tanh(x); }
};
struct GeluGrad {  // dy * gelu'(x)
  __device__ float operator()(float x, float dy) const { return dy * gelu_tanh_grad(x); }
};

__global__ void gelu_forward_kernel(TensorRef out, TensorView inp, size_t n) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) store_from_f32(out, i, Gelu{}(load_as_f32(inp, i), 0.f));
}

__global__ void gelu_backward_kernel(TensorRef dinp, TensorView inp, TensorView dout, size_t n) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) store_from_f32(dinp, i, GeluGrad{}(load_as_f32(inp, i), load_as_f32(dout, i)));
}

__global__ void swiglu_forward_kernel(TensorRef out, TensorView inp, int N, int I) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)N * I) return;
  const size_t n = i / I, j = i % I;
  const float g = load_as_f32(inp, n * 2 * I + j), u = load_as_f32(inp, n * 2 * I + I + j);
  store_from_f32(out, i, g / (1.f + expf(-g)) * u);
}

__global__ void swiglu_backward_kernel(TensorRef dinp, TensorView dout, TensorView inp, int N,
                                       int I) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)N * I) return;
  const size_t n = i / I, j = i % I;
  const float g = load_as_f32(inp, n * 2 * I + j), u = load_as_f32(inp, n * 2 * I + I + j);
  const float sig = 1.f / (1.f + expf(-g)), dy = load_as_f32(dout, i);
  store_from_f32(dinp, n * 2 * I + j, dy * u * sig * (1.f + g * (1.f - sig)));
  store_from_f32(dinp, n * 2 * I + I + j, dy * g * sig);
}

}  // namespace

void CudaBackend::gelu_forward(TensorRef out, TensorView inp, size_t n) {
  if (out.dtype == inp.dtype && map2(stream_, out.dtype, out.data, inp.data, nullptr, n, Gelu{}))
    return;
  launch_kernel(gelu_forward_kernel, blocks_for(n), kThreads, stream_, out, inp, n);
}
void CudaBackend::gelu_backward(TensorRef dinp, TensorView inp, TensorView dout, size_t n) {
  if (dinp.dtype == inp.dtype && inp.dtype == dout.dtype &&
      map2(stream_, dinp.dtype, dinp.data, inp.data, dout.data, n, GeluGrad{}))
    return;
  launch_kernel(gelu_backward_kernel, blocks_for(n), kThreads, stream_, dinp, inp, dout, n);
}
void CudaBackend::swiglu_forward(TensorRef out, TensorView inp, int N, int I) {
  launch_kernel(swiglu_forward_kernel, blocks_for((size_t)N * I), kThreads, stream_, out, inp, N,
                I);
  ZT_CHECK_CUDA(cudaGetLastError());
}
void CudaBackend::swiglu_backward(TensorRef dinp, TensorView dout, TensorView inp, int N, int I) {
  launch_kernel(swiglu_backward_kernel, blocks_for((size_t)N * I), kThreads, stream_, dinp, dout,
                inp, N, I);
  ZT_CHECK_CUDA(cudaGetLastError());
}

}  // namespace zt
