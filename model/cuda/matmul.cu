// Linear layer: out = inp @ W^T + b (W stored (OC, C), as nn.Linear), GEMM via cuBLASLt in
// strict fp32 (CUBLAS_COMPUTE_32F, no TF32: this path is compared against the CPU backend).
#include "model/cuda/cuda_backend.cuh"

namespace zt {
namespace {

__global__ void add_bias_kernel(float* out, const float* bias, int N, int OC) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < (size_t)N * OC) out[i] += bias[i % OC];
}

// dbias[o] += sum_n dout[n, o]; one thread per column, coalesced across the warp.
__global__ void bias_grad_kernel(float* dbias, const float* dout, int N, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float s = 0.f;
  for (int n = 0; n < N; ++n) s += dout[(size_t)n * OC + o];
  dbias[o] += s;
}

}  // namespace

void CudaBackend::gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* A, int lda,
                       const float* B, int ldb, float* C, int ldc, float beta) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDesc_t desc;
  ZT_CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  ZT_CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  ZT_CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtMatrixLayout_t la, lb, lc;
  ZT_CHECK_CUBLAS(
      cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, trans_b ? k : n, trans_b ? n : k, ldb));
  ZT_CHECK_CUBLAS(
      cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, trans_a ? m : k, trans_a ? k : m, lda));
  ZT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, ldc));
  cublasLtMatmulPreference_t pref;
  ZT_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  ZT_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof workspace_bytes_));
  // Operands are often interior pointers (a tensor inside a unit, a row chunk): tell the
  // heuristic their real alignment, or it may pick a kernel that assumes 256 bytes.
  auto alignment = [](const void* p) {
    uint32_t a = 256;
    while (a > 4 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
    return a;
  };
  const uint32_t al[4] = {alignment(B), alignment(A), alignment(C), alignment(C)};
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
  ZT_CHECK_CUBLAS(cublasLtMatmul(lt_, desc, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &heur.algo,
                                 workspace_, workspace_bytes_, stream_));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
}

void CudaBackend::matmul_forward(float* out, const float* inp, const float* weight,
                                 const float* bias, int N, int C, int OC) {
  gemm(false, true, N, OC, C, inp, C, weight, C, out, OC, 0.f);  // (N,C) @ (OC,C)^T
  if (bias) {
    launch_kernel(add_bias_kernel, blocks_for((size_t)N * OC), kThreads, stream_, out, bias, N, OC);
    ZT_CHECK_CUDA(cudaGetLastError());
  }
}

void CudaBackend::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, int N, int C, int OC) {
  if (dinp) gemm(false, false, N, C, OC, dout, OC, weight, C, dinp, C, 1.f);  // += dout @ W
  gemm(true, false, OC, C, N, dout, OC, inp, C, dweight, C, 1.f);             // += dout^T @ inp
  if (dbias) {
    launch_kernel(bias_grad_kernel, blocks_for(OC), kThreads, stream_, dbias, dout, N, OC);
    ZT_CHECK_CUDA(cudaGetLastError());
  }
}

}  // namespace zt
