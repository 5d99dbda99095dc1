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

// SwiGLU of gate g and up u, and its gradient (dg, du) from dy.
__device__ inline float swiglu(float g, float u) { return g / (1.f + expf(-g)) * u; }
__device__ inline void swiglu_grad(float g, float u, float dy, float& dg, float& du) {
  const float sig = 1.f / (1.f + expf(-g));
  dg = dy * u * sig * (1.f + g * (1.f - sig));
  du = dy * g * sig;
}

__global__ void swiglu_forward_kernel(TensorRef out, TensorView inp, int N, int I) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)N * I) return;
  const size_t n = i / I, j = i % I;
  store_from_f32(out, i,
                 swiglu(load_as_f32(inp, n * 2 * I + j), load_as_f32(inp, n * 2 * I + I + j)));
}

__global__ void swiglu_backward_kernel(TensorRef dinp, TensorView dout, TensorView inp, int N,
                                       int I) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)N * I) return;
  const size_t n = i / I, j = i % I;
  float dg, du;
  swiglu_grad(load_as_f32(inp, n * 2 * I + j), load_as_f32(inp, n * 2 * I + I + j),
              load_as_f32(dout, i), dg, du);
  store_from_f32(dinp, n * 2 * I + j, dg);
  store_from_f32(dinp, n * 2 * I + I + j, du);
}

// The same on 16-byte packs of T (elementwise.cuh), when I is a multiple of a pack and every
// operand 16-byte aligned: thread k takes columns [k kN, (k + 1) kN) of row k / (I / kN).
// SwiGLUPack is that thread's place (row n, first column j) and its packs of gate and up.
template <class T>
struct SwiGLUPack {
  size_t n, j;
  Pack16<T> g, u;
  // False for a thread past the last pack.
  __device__ bool load(const T* inp, int N, int I) {
    const size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x, per_row = I / Pack16<T>::kN;
    if (k >= (size_t)N * per_row) return false;
    n = k / per_row, j = k % per_row * Pack16<T>::kN;
    g = *reinterpret_cast<const Pack16<T>*>(inp + n * 2 * I + j);
    u = *reinterpret_cast<const Pack16<T>*>(inp + n * 2 * I + I + j);
    return true;
  }
};

template <class T>
__global__ void swiglu_forward_packed(T* out, const T* inp, int N, int I) {
  constexpr int kN = Pack16<T>::kN;
  SwiGLUPack<T> p;
  if (!p.load(inp, N, I)) return;
  const size_t n = p.n, j = p.j;
  const Pack16<T>&g = p.g, &u = p.u;
  Pack16<T> o;
#pragma unroll
  for (int e = 0; e < kN; ++e) o.v[e] = from_f32<T>(swiglu(to_f32(g.v[e]), to_f32(u.v[e])));
  *reinterpret_cast<Pack16<T>*>(out + n * I + j) = o;
}

template <class T>
__global__ void swiglu_backward_packed(T* dinp, const T* dout, const T* inp, int N, int I) {
  constexpr int kN = Pack16<T>::kN;
  SwiGLUPack<T> p;
  if (!p.load(inp, N, I)) return;
  const size_t n = p.n, j = p.j;
  const Pack16<T>&g = p.g, &u = p.u;
  const Pack16<T> dy = *reinterpret_cast<const Pack16<T>*>(dout + n * I + j);
  Pack16<T> dg, du;
#pragma unroll
  for (int e = 0; e < kN; ++e) {
    float a, b;
    swiglu_grad(to_f32(g.v[e]), to_f32(u.v[e]), to_f32(dy.v[e]), a, b);
    dg.v[e] = from_f32<T>(a), du.v[e] = from_f32<T>(b);
  }
  *reinterpret_cast<Pack16<T>*>(dinp + n * 2 * I + j) = dg;
  *reinterpret_cast<Pack16<T>*>(dinp + n * 2 * I + I + j) = du;
}

// Whether SwiGLU's rows of I split into whole 16-byte packs of dtype t at these pointers.
bool swiglu_packs(DType t, int I, std::initializer_list<const void*> ps) {
  return I % (16 / (int)dtype_size(t)) == 0 && aligned16(ps);
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
  if (out.dtype == inp.dtype && swiglu_packs(out.dtype, I, {out.data, inp.data})) {
    return with_dtype(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      launch_kernel(swiglu_forward_packed<T>, blocks_for((size_t)N * I / Pack16<T>::kN), kThreads,
                    stream_, static_cast<T*>(out.data), static_cast<const T*>(inp.data), N, I);
    });
  }
  launch_kernel(swiglu_forward_kernel, blocks_for((size_t)N * I), kThreads, stream_, out, inp, N,
                I);
}
void CudaBackend::swiglu_backward(TensorRef dinp, TensorView dout, TensorView inp, int N, int I) {
  if (dinp.dtype == dout.dtype && dout.dtype == inp.dtype &&
      swiglu_packs(dinp.dtype, I, {dinp.data, dout.data, inp.data})) {
    return with_dtype(dinp.dtype, [&](auto tag) {
      using T = decltype(tag);
      launch_kernel(swiglu_backward_packed<T>, blocks_for((size_t)N * I / Pack16<T>::kN), kThreads,
                    stream_, static_cast<T*>(dinp.data), static_cast<const T*>(dout.data),
                    static_cast<const T*>(inp.data), N, I);
    });
  }
  launch_kernel(swiglu_backward_kernel, blocks_for((size_t)N * I), kThreads, stream_, dinp, dout,
                inp, N, I);
}

}  // namespace zt
