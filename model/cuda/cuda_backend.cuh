// CudaBackend: declaration shared by the kernel files (one family per file, as model/cpu/).
// All kernels run on one stream owned by the backend; synchronize() waits for it.
#pragma once

#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_common.cuh"

namespace zt {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  std::string_view name() const override { return "cuda"; }

  void* alloc(size_t bytes, MemCategory c) override;
  void free(void* p, size_t bytes, MemCategory c) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n) override;
  void synchronize() override;

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC) override;
  void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B,
                         int T, int C) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                          int T, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int N, int C, float eps) override;
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int N,
                          int C) override;
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                       float eps) override;
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp,
                        const float* w, const float* rstd, int N, int C) override;
  void rope(float* qkv, int B, int T, int NH, int KVH, int hd, float theta, bool inverse) override;
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KVH,
                         int hd) override;
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int NH, int KVH, int hd) override;
  void gelu_forward(float* out, const float* inp, size_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void swiglu_forward(float* out, const float* inp, int N, int I) override;
  void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int I) override;
  void add_inplace(float* y, const float* x, size_t n) override;
  void crossentropy_forward_backward(float* logits, float* losses, const int* targets, int N,
                                     int V, float dlogits_scale) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int t,
                    float grad_scale, bool adam_w_mode, bool bias_correction) override;
  double sum_squares(const float* x, size_t n) override;
  void scale(float* x, float s, size_t n) override;

  cudaStream_t stream() const { return stream_; }

 private:
  // C (rows m, cols n; row-major) = op(A) op(B) with fp32 accumulation, beta 0 or 1.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* A, int lda,
            const float* B, int ldb, float* C, int ldc, float beta);
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;
  double* reduce_ = nullptr;  // device scalar for sum_squares
};

}  // namespace zt
