// Linear layer: out = inp @ W^T + b (W stored (OC, C), as nn.Linear), GEMM via cuBLASLt with
// fp32 accumulation (CUBLAS_COMPUTE_32F; no TF32, this path is compared against the CPU
// backend). A bf16 or fp16 weight is used as stored and the GEMM runs on tensor cores: the other
// operand (inp, or dout and inp in the backward) is read as stored when it has the weight's
// dtype (activations in the working dtype, Backend::activation_dtype), else rounded to it in
// workspace first (PyTorch autocast's recipe). The output is fp32 or the weight's dtype; the
// weight gradient is fp32. A bias of the output's dtype on a 16-byte boundary is added by
// cuBLASLt's bias epilogue, in fp32 before the output is rounded (no second pass over the
// output); any other by a kernel.
#include "common/status.h"
#include "model/cuda/column_sum.cuh"
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void add_bias_kernel(TensorRef out, TensorView bias, int N, int OC) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < (size_t)N * OC) add_from_f32(out, i, load_as_f32(bias, i % OC));
}

cudaDataType cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

// Row n, column o of dout: the bias gradient's summand.
struct BiasGradOp {
  TensorView dout;
  int OC;
  __device__ void operator()(int n, int o, float (&v)[1]) const {
    v[0] = load_as_f32(dout, (size_t)n * OC + o);
  }
};

}  // namespace

void CudaBackend::gemm(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
                       const void* B, int ldb, DType ab_t, TensorRef C, int ldc, float beta,
                       TensorView bias) {
  // cuBLASLt's COMPUTE_32F writes fp32 or, from 16-bit operands, their own dtype.
  ZT_CHECK(C.dtype == DType::kF32 || C.dtype == ab_t);
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDesc_t desc;
  ZT_CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  ZT_CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  ZT_CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (bias) {  // column j of row-major C gets bias[j] (a row of cuBLASLt's column-major D)
    ZT_CHECK(bias.dtype == C.dtype);  // cuBLASLt's bias type is D's
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    ZT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof epilogue));
    ZT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias.data, sizeof bias.data));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  ZT_CHECK_CUBLAS(
      cublasLtMatrixLayoutCreate(&la, cuda_type(ab_t), trans_b ? k : n, trans_b ? n : k, ldb));
  ZT_CHECK_CUBLAS(
      cublasLtMatrixLayoutCreate(&lb, cuda_type(ab_t), trans_a ? m : k, trans_a ? k : m, lda));
  ZT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lc, cuda_type(C.dtype), n, m, ldc));
  cublasLtMatmulPreference_t pref;
  ZT_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  ZT_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof workspace_bytes_));
  // Operands are often interior pointers (a tensor inside a unit, a row chunk): tell the
  // heuristic their real alignment, or it may pick a kernel that assumes 256 bytes.
  auto alignment = [](const void* p, size_t floor) {
    uint32_t a = 256;
    while (a > floor && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
    return a;
  };
  const size_t ab = dtype_size(ab_t);  // a 16-bit operand may sit 2 bytes off a 4-byte boundary
  const size_t cb = dtype_size(C.dtype);
  const uint32_t al[4] = {alignment(B, ab), alignment(A, ab), alignment(C.data, cb),
                          alignment(C.data, cb)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    ZT_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  ZT_CHECK_CUBLAS(
      cublasLtMatmulAlgoGetHeuristic(lt_, desc, la, lb, lc, lc, pref, 1, &heur, &found));
  if (found == 0) {
    std::fprintf(stderr, "zerotrain: cuBLASLt found no algorithm for a %dx%dx%d GEMM\n", m, n, k);
    std::abort();
  }
  const float alpha = 1.f;
  ZT_CHECK_CUBLAS(cublasLtMatmul(lt_, desc, &alpha, B, la, A, lb, &beta, C.data, lc, C.data, lc,
                                 &heur.algo, workspace_, workspace_bytes_, stream_));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

const void* CudaBackend::rounded(TensorView x, size_t n, DType t, DeviceBuffer& buf) {
  if (x.dtype == t) return x.data;
  buf = DeviceBuffer(this, n * dtype_size(t), MemCategory::kWorkspace);
  convert(x.data, x.dtype, buf.data(), t, n);
  return buf.data();
}

void CudaBackend::matmul_forward(TensorRef out, TensorView inp, TensorView weight, TensorView bias,
                                 int N, int C, int OC) {
  DeviceBuffer inp16;
  const void* a = rounded(inp, (size_t)N * C, weight.dtype, inp16);
  // (N,C)(OC,C)^T, with the bias in the epilogue when it has the output's dtype.
  // The epilogue reads the bias as D's type; cuBLASLt has no alignment hint for it and may pick
  // a kernel that assumes 16 bytes, which a bias inside a unit need not have.
  const bool fused =
      bias && bias.dtype == out.dtype && reinterpret_cast<uintptr_t>(bias.data) % 16 == 0;
  gemm(false, true, N, OC, C, a, C, weight.data, C, weight.dtype, out, OC, 0.f,
       fused ? bias : TensorView());
  if (bias && !fused) {
    launch_kernel(add_bias_kernel, blocks_for((size_t)N * OC), kThreads, stream_, out, bias, N, OC);
    ZT_CHECK_CUDA(cudaGetLastError());
  }
}

float* CudaBackend::grad_f32(TensorRef g) {
  ZT_CHECK(!g || g.dtype == DType::kF32);
  return static_cast<float*>(g.data);
}

void CudaBackend::matmul_backward(TensorRef dinp, TensorRef dweight_g, TensorRef dbias_g,
                                  TensorView dout, TensorView inp, TensorView weight, int N, int C,
                                  int OC) {
  float* dweight = grad_f32(dweight_g);
  float* dbias = grad_f32(dbias_g);
  DeviceBuffer dout16, inp16;
  const DType t = weight.dtype;
  const void* dy = rounded(dout, (size_t)N * OC, t, dout16);
  if (dinp) gemm(false, false, N, C, OC, dy, OC, weight.data, C, t, dinp, C, 1.f);  // += dout W
  gemm(true, false, OC, C, N, dy, OC, rounded(inp, (size_t)N * C, t, inp16), C, t, dweight, C,
       1.f);  // += dout^T inp
  if (dbias) column_sums<1>(this, stream_, {{dbias}}, BiasGradOp{dout, OC}, N, OC);
}

}  // namespace zt
