// cuBLASLt as the CUDA emulation provides it: the calls model/cuda/matmul.cu makes, with a
// reference GEMM that interprets the same descriptors (column-major layouts, op(A) and op(B)
// from TRANSA / TRANSB, D = alpha op(A) op(B) + beta C (+ a bias vector with
// CUBLASLT_EPILOGUE_BIAS), accumulated in double; the GELU epilogues apply the tanh form to that
// fp32 value, as model/cpu/activations.cc: GELU_AUX(_BIAS) writes it to aux and its GELU to D,
// DGELU multiplies it by gelu'(aux) read as stored; aux_ld a multiple of 8, as cuBLASLt asks).
// fp32, bf16 and fp16 matrices. The heuristic finds its one algorithm unless an operand's minimum
// alignment (the MIN_ALIGNMENT preferences) is under 4 bytes: then it finds none, as a GPU's may
// for 16-bit rows of an odd length, so the caller's fallback runs here too.
// zt::emu::cublaslt_heuristic_calls() counts its calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_runtime.h"

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };  // CUDA's values
enum cublasLtMatmulDescAttributes_t {                                    // cuBLASLt's values
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtEpilogue_t {  // cuBLASLt's values
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX = 160,       // D = gelu(x), aux = x
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,  // x + bias first
  CUBLASLT_EPILOGUE_DGELU = 192,          // D = x gelu'(aux)
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

struct cublasLtContext;
using cublasLtHandle_t = cublasLtContext*;
struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // D-rows elements of D's type (the only bias type we use)
  int32_t bias_type = -1;      // -1: D's type
  void* aux = nullptr;         // the GELU's input (D's type, D's shape), leading dimension aux_ld
  int64_t aux_ld = 0;
};
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
struct cublasLtMatrixLayoutOpaque_t {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  cudaDataType type = CUDA_R_32F;
};
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D (bytes)
};
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType scale);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* found);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);

namespace zt::emu {
long long cublaslt_heuristic_calls();
// Products run with a GELU epilogue (GELU_AUX, GELU_AUX_BIAS or DGELU), so far.
long long cublaslt_gelu_epilogues();
}  // namespace zt::emu
