// Linear layer: out = inp @ W^T + b (W stored (OC, C), as nn.Linear), GEMM via cuBLASLt with
// fp32 accumulation (CUBLAS_COMPUTE_32F; no TF32, this path is compared against the CPU
// backend). A bf16 or fp16 weight is used as stored and the GEMM runs on tensor cores: the other
// operand (inp, or dout and inp in the backward) is read as stored when it has the weight's
// dtype (activations in the working dtype, Backend::activation_dtype), else rounded to it in
// workspace first (PyTorch autocast's recipe). The output is fp32 or the weight's dtype; the
// weight gradient is fp32. A bias of the output's dtype on a 16-byte boundary is added by
// cuBLASLt's bias epilogue, in fp32 before the output is rounded (no second pass over the
// output); any other by a kernel. Descriptors and the heuristic's algorithm are made once per
// configuration (shape, dtypes, transposes, alignments, epilogue) and reused (llm.c remakes them
// on every call): the heuristic costs tens of microseconds of host time per call.
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common/status.h"
#include "model/cuda/column_sum.cuh"
#include "model/cuda/cuda_backend.cuh"
#include "model/cuda/elementwise.cuh"

namespace zt {
namespace {

// out[n, o] (rows of stride ld) += bias[o].
__global__ void add_bias_kernel(TensorRef out, TensorView bias, int N, int OC, int ld) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < (size_t)N * OC) add_from_f32(out, i / OC * ld + i % OC, load_as_f32(bias, i % OC));
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
  int ld;  // dout's row stride
  __device__ void operator()(int n, int o, float (&v)[1]) const {
    v[0] = load_as_f32(dout, (size_t)n * ld + o);
  }
};

// One GEMM configuration: everything cuBLASLt's descriptors and its heuristic depend on.
// Every field 4 bytes wide, so the struct has no padding and is hashed and compared as bytes.
struct GemmKey {
  int32_t trans_a, trans_b, bias;
  GeluEpilogue::Kind gelu;
  int32_t aux_ld;
  int32_t m, n, k, lda, ldb, ldc;
  DType ab, c;
  uint32_t align[4];  // A, B, C, D as cuBLASLt sees them (our B, our A, C, C), bytes
  bool operator==(const GemmKey& o) const { return std::memcmp(this, &o, sizeof o) == 0; }
};
static_assert(sizeof(GemmKey) == 17 * 4 && sizeof(DType) == 4, "GemmKey must have no padding");
struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {  // FNV-1a over the key's bytes
    const auto* p = reinterpret_cast<const unsigned char*>(&k);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof k; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};

// The descriptors and the algorithm of one GemmKey, made once (found false: the heuristic had
// none for it).
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  ~GemmPlan() {
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// cols columns of rows 16-bit units each (column-major, as cuBLASLt's layouts), from stride
// ld_src to ld_dst.
__global__ void copy_columns_kernel(uint16_t* dst, size_t ld_dst, const uint16_t* src,
                                    size_t ld_src, size_t rows, size_t cols) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < rows * cols) dst[i / rows * ld_dst + i % rows] = src[i / rows * ld_src + i % rows];
}

}  // namespace

struct CudaBackend::GemmPlans {
  std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash> plans;
};

namespace {
GemmPlan* make_plan(cublasLtHandle_t lt, const GemmKey& key, size_t workspace_bytes,
                    void* aux = nullptr) {
  auto p = std::make_unique<GemmPlan>();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const cublasOperation_t ta = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZT_CHECK_CUBLAS(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  ZT_CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  ZT_CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // A bias: column j of row-major C gets bias[j] (a row of cuBLASLt's column-major D).
  cublasLtEpilogue_t epilogue = key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (key.gelu == GeluEpilogue::kForward)
    epilogue = key.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (key.gelu == GeluEpilogue::kBackward) epilogue = CUBLASLT_EPILOGUE_DGELU;
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    ZT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                   &epilogue, sizeof epilogue));
  if (key.gelu != GeluEpilogue::kNone) {  // the heuristic reads the aux pointer's alignment
    const int64_t aux_ld = key.aux_ld;
    ZT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &aux_ld, sizeof aux_ld));
    ZT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  }
  const int m = key.m, n = key.n, k = key.k;
  ZT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->la, cuda_type(key.ab), key.trans_b ? k : n,
                                             key.trans_b ? n : k, key.ldb));
  ZT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->lb, cuda_type(key.ab), key.trans_a ? m : k,
                                             key.trans_a ? k : m, key.lda));
  ZT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->lc, cuda_type(key.c), n, m, key.ldc));
  cublasLtMatmulPreference_t pref;
  ZT_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  ZT_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes));
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    ZT_CHECK_CUBLAS(
        cublasLtMatmulPreferenceSetAttribute(pref, which[i], &key.align[i], sizeof key.align[i]));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  // No algorithm is an answer, not an error: cuBLASLt may say it with NOT_SUPPORTED.
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc,
                                                           pref, 1, &heur, &found);
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) ZT_CHECK_CUBLAS(st);
  cublasLtMatmulPreferenceDestroy(pref);
  p->found = st == CUBLAS_STATUS_SUCCESS && found > 0 && heur.state == CUBLAS_STATUS_SUCCESS;
  if (p->found) p->algo = heur.algo;
  return p.release();
}

// The largest power of two up to 256 that p is aligned to, at least `floor`.
uint32_t alignment(const void* p, size_t floor) {
  uint32_t a = 256;
  while (a > floor && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}
}  // namespace

bool CudaBackend::gemm(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
                       const void* B, int ldb, DType ab_t, TensorRef C, int ldc, float beta,
                       TensorView bias, const GeluEpilogue& gelu) {
  // cuBLASLt's COMPUTE_32F writes fp32 or, from 16-bit operands, their own dtype.
  ZT_CHECK(C.dtype == DType::kF32 || C.dtype == ab_t);
  ZT_CHECK(!bias || bias.dtype == C.dtype);  // cuBLASLt's bias type is D's
  // cuBLASLt's fast kernels move 16 bytes along the contiguous dimensions. GPT-2's vocabulary
  // (50257) leaves n (the logits' columns) and k (the classifier's dX reduction) off a multiple
  // of 8, and the heuristic then takes align1 kernels: 6.7 and 4.9 ms of GPT-2's step at B 8 on
  // an H200 (docs/gpu_results.md), several times their roofline. The aligned part runs as one
  // GEMM and the few columns left as a second, small one (k: accumulated into C, so a 16-bit C
  // is rounded once more).
  // Only on rows of whole 16 bytes (else gemm_padded copies each part), and k only where it is
  // an operand's contiguous dimension (not in dW = dout^T inp).
  const int vec = 16 / (int)dtype_size(ab_t);
  const char* a8 = static_cast<const char*>(A);
  const char* b8 = static_cast<const char*>(B);
  const size_t ab_bytes = dtype_size(ab_t);
  const bool split = gelu.kind == GeluEpilogue::kNone && lda % vec == 0 && ldb % vec == 0 &&
                     ldc * dtype_size(C.dtype) % 16 == 0;
  if (split && n % vec != 0 && n > 8 * vec) {
    const int n0 = n - n % vec;  // op(B) columns n0.. and C's columns n0..
    const void* b_rest = b8 + (trans_b ? (size_t)n0 * ldb : (size_t)n0) * ab_bytes;
    return gemm(trans_a, trans_b, m, n0, k, A, lda, B, ldb, ab_t, C, ldc, beta, bias) &&
           gemm(trans_a, trans_b, m, n - n0, k, A, lda, b_rest, ldb, ab_t, C + n0, ldc, beta,
                bias ? bias + n0 : TensorView());
  }
  if (split && (!trans_a || trans_b) && k % vec != 0 && k > 8 * vec) {
    const int k0 = k - k % vec;  // op(A) columns k0.. and op(B) rows k0..
    const void* a_rest = a8 + (trans_a ? (size_t)k0 * lda : (size_t)k0) * ab_bytes;
    const void* b_rest = b8 + (trans_b ? (size_t)k0 : (size_t)k0 * ldb) * ab_bytes;
    return gemm(trans_a, trans_b, m, n, k0, A, lda, B, ldb, ab_t, C, ldc, beta, bias) &&
           gemm(trans_a, trans_b, m, n, k - k0, a_rest, lda, b_rest, ldb, ab_t, C, ldc, 1.f);
  }
  // Operands are often interior pointers (a tensor inside a unit, a row chunk): the heuristic
  // is told their real alignment, or it may pick a kernel that assumes 256 bytes.
  const size_t ab = dtype_size(ab_t), cb = dtype_size(C.dtype);
  GemmKey key{};  // zeroed padding: the key is hashed and compared as bytes
  key.trans_a = trans_a, key.trans_b = trans_b, key.bias = static_cast<bool>(bias);
  key.gelu = gelu.kind, key.aux_ld = gelu.aux_ld;
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.ab = ab_t, key.c = C.dtype;
  key.align[0] = alignment(B, ab), key.align[1] = alignment(A, ab);
  key.align[2] = key.align[3] = alignment(C.data, cb);
  if (!gemm_plans_) gemm_plans_ = std::make_shared<GemmPlans>();
  std::unique_ptr<GemmPlan>& slot = gemm_plans_->plans[key];
  if (!slot) slot.reset(make_plan(lt_, key, workspace_bytes_, gelu.aux));
  const GemmPlan& p = *slot;
  if (!p.found && gelu.kind != GeluEpilogue::kNone) return false;  // the caller's two passes
  if (!p.found) {
    // Aligned copies are the remedy; operands that are aligned already have none.
    const bool aligned = key.align[0] == 256 && key.align[1] == 256 && key.align[2] == 256 &&
                         lda * ab % 16 == 0 && ldb * ab % 16 == 0 && ldc * cb % 16 == 0;
    if (aligned) {
      std::fprintf(stderr,
                   "zerotrain: cuBLASLt found no algorithm for a %dx%dx%d GEMM, even on aligned "
                   "operands\n",
                   m, n, k);
      std::abort();
    }
    gemm_padded(trans_a, trans_b, m, n, k, A, lda, B, ldb, ab_t, C, ldc, beta, bias);
    return true;
  }
  // Per call: the descriptor is shared by every GEMM of this configuration.
  if (bias)
    ZT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias.data, sizeof bias.data));
  if (gelu.kind != GeluEpilogue::kNone)
    ZT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu.aux, sizeof gelu.aux));
  const float alpha = 1.f;
  ZT_CHECK_CUBLAS(cublasLtMatmul(lt_, p.desc, &alpha, B, p.la, A, p.lb, &beta, C.data, p.lc, C.data,
                                 p.lc, &p.algo, workspace_, workspace_bytes_, stream_));
  return true;
}

void CudaBackend::gemm_padded(bool trans_a, bool trans_b, int m, int n, int k, const void* A,
                              int lda, const void* B, int ldb, DType ab_t, TensorRef C, int ldc,
                              float beta, TensorView bias) {
  // Each operand as a column-major matrix of `rows` contiguous elements (cuBLASLt's layouts),
  // copied to a fresh (256-byte aligned) buffer whose columns start on 16-byte boundaries.
  auto pad = [&](const void* src, int rows, int cols, int ld, DType t, DeviceBuffer& buf,
                 bool copy = true) {
    const int units = (int)dtype_size(t) / 2, ld16 = (rows * units + 7) / 8 * 8;
    buf = DeviceBuffer(this, (size_t)ld16 * cols * 2, MemCategory::kWorkspace);
    if (copy)
      launch_kernel(copy_columns_kernel, blocks_for((size_t)rows * units * cols), kThreads, stream_,
                    static_cast<uint16_t*>(buf.data()), (size_t)ld16,
                    static_cast<const uint16_t*>(src), (size_t)ld * units, (size_t)rows * units,
                    (size_t)cols);
    return ld16 / units;
  };
  DeviceBuffer a, b, c;
  const int lda2 = pad(A, trans_a ? m : k, trans_a ? k : m, lda, ab_t, a);
  const int ldb2 = pad(B, trans_b ? k : n, trans_b ? n : k, ldb, ab_t, b);
  const int ldc2 = pad(C.data, n, m, ldc, C.dtype, c, beta != 0.f);  // C's values, for beta 1
  // The copies are aligned (fresh blocks, rows of whole 16 bytes): gemm() does not come back.
  gemm(trans_a, trans_b, m, n, k, a.data(), lda2, b.data(), ldb2, ab_t, {c.data(), C.dtype}, ldc2,
       beta, bias);
  const int units = (int)dtype_size(C.dtype) / 2;
  launch_kernel(copy_columns_kernel, blocks_for((size_t)n * units * m), kThreads, stream_,
                static_cast<uint16_t*>(C.data), (size_t)ldc * units,
                static_cast<const uint16_t*>(c.data()), (size_t)ldc2 * units, (size_t)n * units,
                (size_t)m);
}

const void* CudaBackend::rounded(TensorView x, size_t n, DType t, DeviceBuffer& buf) {
  if (x.dtype == t) return x.data;
  buf = DeviceBuffer(this, n * dtype_size(t), MemCategory::kWorkspace);
  convert(x.data, x.dtype, buf.data(), t, n);
  return buf.data();
}

void CudaBackend::matmul_forward(TensorRef out, TensorView inp, TensorView weight, TensorView bias,
                                 int N, int C, int OC, int ld) {
  if (ld == 0) ld = OC;
  DeviceBuffer inp16;
  const void* a = rounded(inp, (size_t)N * C, weight.dtype, inp16);
  // (N,C)(OC,C)^T, with the bias in the epilogue when it has the output's dtype.
  // The epilogue reads the bias as D's type; cuBLASLt has no alignment hint for it and may pick
  // a kernel that assumes 16 bytes, which a bias inside a unit need not have.
  const bool fused =
      bias && bias.dtype == out.dtype && reinterpret_cast<uintptr_t>(bias.data) % 16 == 0;
  gemm(false, true, N, OC, C, a, C, weight.data, C, weight.dtype, out, ld, 0.f,
       fused ? bias : TensorView());
  if (bias && !fused)
    launch_kernel(add_bias_kernel, blocks_for((size_t)N * OC), kThreads, stream_, out, bias, N, OC,
                  ld);
}

void CudaBackend::gemm_f32(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                           const float* b, int ldb, float* c, int ldc, float beta) {
  gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, DType::kF32, {c, DType::kF32}, ldc, beta);
}

float* CudaBackend::grad_f32(TensorRef g) {
  ZT_CHECK(!g || g.dtype == DType::kF32);
  return static_cast<float*>(g.data);
}

void CudaBackend::matmul_backward(TensorRef dinp, TensorRef dweight_g, TensorRef dbias_g,
                                  TensorView dout, TensorView inp, TensorView weight, int N, int C,
                                  int OC, int ld) {
  if (ld == 0) ld = OC;  // dout's row stride
  float* dweight = grad_f32(dweight_g);
  float* dbias = grad_f32(dbias_g);
  DeviceBuffer dout16, inp16;
  const DType t = weight.dtype;
  const void* dy = rounded(dout, N == 0 ? 0 : (size_t)(N - 1) * ld + OC, t, dout16);
  if (dinp) gemm(false, false, N, C, OC, dy, ld, weight.data, C, t, dinp, C, 1.f);  // += dout W
  gemm(true, false, OC, C, N, dy, ld, rounded(inp, (size_t)N * C, t, inp16), C, t, dweight, C,
       1.f);  // += dout^T inp
  if (dbias) column_sums<1>(this, stream_, {{dbias}}, BiasGradOp{dout, ld}, N, OC);
}

// One GEMM when the operands are as cuBLASLt's GELU epilogue wants them: 16-bit, of the weight's
// dtype (the mixed-precision run; fp32 keeps the two exact passes), 16-byte aligned, rows of a
// multiple of 8; else, or when cuBLASLt has no algorithm for it, the two passes.
void CudaBackend::matmul_gelu_forward(TensorRef out, TensorRef pre, TensorView inp,
                                      TensorView weight, TensorView bias, int N, int C, int OC) {
  const DType t = weight.dtype;
  const bool fusable = t != DType::kF32 && out.dtype == t && pre.dtype == t && inp.dtype == t &&
                       (!bias || bias.dtype == t) && OC % 8 == 0 &&
                       aligned16({out.data, pre.data, inp.data, weight.data, bias.data});
  if (fusable && gemm(false, true, N, OC, C, inp.data, C, weight.data, C, t, out, OC, 0.f, bias,
                      {GeluEpilogue::kForward, pre.data, OC}))
    return;
  Backend::matmul_gelu_forward(out, pre, inp, weight, bias, N, C, OC);
}

void CudaBackend::matmul_dgelu_backward(TensorRef dpre, TensorRef scratch, TensorRef dweight,
                                        TensorRef dbias, TensorView dout, TensorView act,
                                        TensorView weight, TensorView pre, int N, int C, int OC) {
  const DType t = weight.dtype;
  const bool fusable = t != DType::kF32 && dpre.dtype == t && pre.dtype == t && dout.dtype == t &&
                       C % 8 == 0 && aligned16({dpre.data, pre.data, dout.data, weight.data});
  // dpre = (dout W) gelu'(pre), written (beta 0); then dweight and dbias as matmul_backward's.
  if (fusable && gemm(false, false, N, C, OC, dout.data, OC, weight.data, C, t, dpre, C, 0.f, {},
                      {GeluEpilogue::kBackward, const_cast<void*>(pre.data), C})) {
    matmul_backward(TensorRef(), dweight, dbias, dout, act, weight, N, C, OC);
    return;
  }
  Backend::matmul_dgelu_backward(dpre, scratch, dweight, dbias, dout, act, weight, pre, N, C, OC);
}

}  // namespace zt
