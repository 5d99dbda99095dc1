#include "model/profiling_backend.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/timer.h"

namespace zt {
namespace {

std::string rows_by_cols(int64_t n, int64_t c) { return absl::StrCat("N ", n, ", C ", c); }
std::string gemm_shape(int N, int C, int OC, DType w) {
  return absl::StrCat("N ", N, ", C ", C, " -> ", OC,
                      w == DType::kF32 ? "" : " " + std::string(dtype_name(w)));
}
std::string attention_shape(int B, int T, int NH, int KVH, int hd) {
  return absl::StrCat("B ", B, ", T ", T, ", heads ", NH, "/", KVH, ", hd ", hd);
}
// Causal attention: QK^T and PV each take T(T+1)/2 x hd multiply-adds per head (whole rows;
// packed rows, whose examples attend only within themselves, take fewer).
double causal_flops(int B, int T, int NH, int hd) {
  return 2.0 * B * NH * (T * (T + 1.0) / 2) * hd;
}

}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

template <class F>
void ProfilingBackend::timed(const char* op, std::string shape, double flops, F&& f) {
  if (!recording_) return f();
  inner_->synchronize();  // the work queued before is not this op's
  Timer t;
  f();
  inner_->synchronize();
  Row& r = table_[{op, std::move(shape)}];
  r.calls += 1;
  r.ms += t.ms();
  r.flops += flops;
}

std::string ProfilingBackend::format(double step_ms) const {
  std::vector<std::pair<std::pair<std::string, std::string>, Row>> rows(table_.begin(),
                                                                        table_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::string s = absl::StrFormat("%-30s %-36s %6s %10s %6s %9s %9s\n", "op", "shape", "calls",
                                  "ms", "share", "GFLOP", "GFLOP/s");
  double ms = 0, flops = 0;
  for (const auto& [key, r] : rows) {
    ms += r.ms, flops += r.flops;
    s += absl::StrFormat("%-30s %-36s %6d %10.1f %5.1f%% %9.2f %9s\n", key.first, key.second,
                         r.calls, r.ms, 100 * r.ms / step_ms, r.flops / 1e9,
                         r.flops > 0 && r.ms > 0 ? absl::StrFormat("%.1f", r.flops / 1e6 / r.ms)
                                                 : "");
  }
  s += absl::StrFormat("%-30s %-36s %6s %10.1f %5.1f%% %9.2f %9.1f\n", "all ops", "", "", ms,
                       100 * ms / step_ms, flops / 1e9, flops / 1e6 / std::max(ms, 1e-9));
  s += absl::StrFormat("%-30s %-36s %6s %10.1f %5.1f%%\n", "outside the ops", "(engine, comm)", "",
                       step_ms - ms, 100 * (step_ms - ms) / step_ms);
  return s;
}

// ---- memory ----
void* ProfilingBackend::alloc(size_t bytes, MemCategory c) { return inner_->alloc(bytes, c); }
void ProfilingBackend::free(void* p, size_t bytes, MemCategory c) { inner_->free(p, bytes, c); }
void ProfilingBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  timed("copy_to_host", "", 0, [&] { inner_->copy_to_host(dst, src, bytes); });
}
void ProfilingBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  timed("copy_to_device", "", 0, [&] { inner_->copy_to_device(dst, src, bytes); });
}
void ProfilingBackend::copy(void* dst, const void* src, size_t bytes) {
  timed("copy", "", 0, [&] { inner_->copy(dst, src, bytes); });
}
void ProfilingBackend::zero(void* p, size_t bytes) {
  timed("zero", "", 0, [&] { inner_->zero(p, bytes); });
}
void ProfilingBackend::convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  timed("convert", absl::StrCat(std::string(dtype_name(st)), " -> ", std::string(dtype_name(dt))),
        0, [&] { inner_->convert(src, st, dst, dt, n); });
}
void ProfilingBackend::synchronize() { inner_->synchronize(); }

// ---- kernels ----
void ProfilingBackend::matmul_forward(TensorRef out, TensorView inp, TensorView w, TensorView b,
                                      int N, int C, int OC, int ld) {
  timed("matmul_forward", gemm_shape(N, C, OC, w.dtype), 2.0 * N * C * OC,
        [&] { inner_->matmul_forward(out, inp, w, b, N, C, OC, ld); });
}
void ProfilingBackend::matmul_backward(TensorRef dinp, TensorRef dw, TensorRef db, TensorView dout,
                                       TensorView inp, TensorView w, int N, int C, int OC, int ld) {
  timed("matmul_backward", gemm_shape(N, C, OC, w.dtype), (dinp ? 4.0 : 2.0) * N * C * OC,
        [&] { inner_->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC, ld); });
}
// The fused ops under the plain ops' names (their FLOPs: the GEMMs'), so the table compares.
void ProfilingBackend::matmul_gelu_forward(TensorRef out, TensorRef pre, TensorView inp,
                                           TensorView w, TensorView b, int N, int C, int OC) {
  timed("matmul_forward", gemm_shape(N, C, OC, w.dtype) + ", +gelu", 2.0 * N * C * OC,
        [&] { inner_->matmul_gelu_forward(out, pre, inp, w, b, N, C, OC); });
}
void ProfilingBackend::matmul_dgelu_backward(TensorRef dpre, TensorRef scratch, TensorRef dw,
                                             TensorRef db, TensorView dout, TensorView act,
                                             TensorView w, TensorView pre, int N, int C, int OC) {
  timed("matmul_backward", gemm_shape(N, C, OC, w.dtype) + ", +dgelu", 4.0 * N * C * OC,
        [&] { inner_->matmul_dgelu_backward(dpre, scratch, dw, db, dout, act, w, pre, N, C, OC); });
}
void ProfilingBackend::embedding_forward(TensorRef out, const int* tokens, const void* wte,
                                         const void* wpe, DType t, int B, int T, int C,
                                         const int* pos) {
  timed("embedding_forward", rows_by_cols((int64_t)B * T, C), 0,
        [&] { inner_->embedding_forward(out, tokens, wte, wpe, t, B, T, C, pos); });
}
void ProfilingBackend::embedding_backward(float* dwte, float* dwpe, TensorView dout,
                                          const int* tokens, int B, int T, int C, const int* pos) {
  timed("embedding_backward", rows_by_cols((int64_t)B * T, C), 0,
        [&] { inner_->embedding_backward(dwte, dwpe, dout, tokens, B, T, C, pos); });
}
void ProfilingBackend::layernorm_forward(TensorRef out, float* mean, float* rstd, TensorView inp,
                                         TensorView w, TensorView b, int N, int C, float eps) {
  timed("layernorm_forward", rows_by_cols(N, C), 0,
        [&] { inner_->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps); });
}
void ProfilingBackend::layernorm_backward(TensorRef dinp, TensorRef dw, TensorRef db,
                                          TensorView dout, TensorView inp, TensorView w,
                                          const float* mean, const float* rstd, int N, int C) {
  timed("layernorm_backward", rows_by_cols(N, C), 0,
        [&] { inner_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
}
void ProfilingBackend::rmsnorm_forward(TensorRef out, float* rstd, TensorView inp, TensorView w,
                                       int N, int C, float eps) {
  timed("rmsnorm_forward", rows_by_cols(N, C), 0,
        [&] { inner_->rmsnorm_forward(out, rstd, inp, w, N, C, eps); });
}
void ProfilingBackend::rmsnorm_backward(TensorRef dinp, TensorRef dw, TensorView dout,
                                        TensorView inp, TensorView w, const float* rstd, int N,
                                        int C) {
  timed("rmsnorm_backward", rows_by_cols(N, C), 0,
        [&] { inner_->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C); });
}
void ProfilingBackend::residual_layernorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                                  float* mean, float* rstd, TensorView w,
                                                  TensorView b, int N, int C, float eps) {
  timed("residual_layernorm_forward", rows_by_cols(N, C), 0,
        [&] { inner_->residual_layernorm_forward(x, residual, out, mean, rstd, w, b, N, C, eps); });
}
void ProfilingBackend::residual_rmsnorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                                float* rstd, TensorView w, int N, int C,
                                                float eps) {
  timed("residual_rmsnorm_forward", rows_by_cols(N, C), 0,
        [&] { inner_->residual_rmsnorm_forward(x, residual, out, rstd, w, N, C, eps); });
}
void ProfilingBackend::rope(TensorRef qkv, int B, int T, int NH, int KVH, int hd,
                            const RopeParams& rope,
                            bool inverse, int pos0, const int* pos) {
  timed(inverse ? "rope_backward" : "rope_forward", attention_shape(B, T, NH, KVH, hd), 0,
        [&] { inner_->rope(qkv, B, T, NH, KVH, hd, rope, inverse, pos0, pos); });
}
void ProfilingBackend::attention_forward(TensorRef out, float* lse, TensorView qkv, int B, int T,
                                         int NH, int KVH, int hd, const int* pos) {
  timed("attention_forward", attention_shape(B, T, NH, KVH, hd), 2 * causal_flops(B, T, NH, hd),
        [&] { inner_->attention_forward(out, lse, qkv, B, T, NH, KVH, hd, pos); });
}
// The backward recomputes QK^T, then dV, dP, dQ and dK: five products of the forward's two.
void ProfilingBackend::attention_backward(TensorRef dqkv, TensorView dout, TensorView qkv,
                                          TensorView out, const float* lse, int B, int T, int NH,
                                          int KVH, int hd, const int* pos) {
  timed("attention_backward", attention_shape(B, T, NH, KVH, hd), 5 * causal_flops(B, T, NH, hd),
        [&] { inner_->attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, KVH, hd, pos); });
}
void ProfilingBackend::attention_decode(TensorRef out, TensorView qkv, int T, int NH, int KVH,
                                        int hd) {
  timed("attention_decode", attention_shape(1, T, NH, KVH, hd), 4.0 * NH * T * hd,
        [&] { inner_->attention_decode(out, qkv, T, NH, KVH, hd); });
}
void ProfilingBackend::gelu_forward(TensorRef out, TensorView inp, size_t n) {
  timed("gelu_forward", absl::StrCat("n ", n), 0, [&] { inner_->gelu_forward(out, inp, n); });
}
void ProfilingBackend::gelu_backward(TensorRef dinp, TensorView inp, TensorView dout, size_t n) {
  timed("gelu_backward", absl::StrCat("n ", n), 0,
        [&] { inner_->gelu_backward(dinp, inp, dout, n); });
}
void ProfilingBackend::swiglu_forward(TensorRef out, TensorView inp, int N, int I) {
  timed("swiglu_forward", rows_by_cols(N, I), 0, [&] { inner_->swiglu_forward(out, inp, N, I); });
}
void ProfilingBackend::swiglu_backward(TensorRef dinp, TensorView dout, TensorView inp, int N,
                                       int I) {
  timed("swiglu_backward", rows_by_cols(N, I), 0,
        [&] { inner_->swiglu_backward(dinp, dout, inp, N, I); });
}
void ProfilingBackend::add_inplace(TensorRef y, TensorView x, size_t n) {
  timed("add_inplace", absl::StrCat("n ", n), 0, [&] { inner_->add_inplace(y, x, n); });
}
void ProfilingBackend::crossentropy_forward_backward(TensorRef logits, int ld, float* losses,
                                                     const int* targets, int N, int V,
                                                     float dlogits_scale) {
  timed("crossentropy", rows_by_cols(N, V), 0, [&] {
    inner_->crossentropy_forward_backward(logits, ld, losses, targets, N, V, dlogits_scale);
  });
}
void ProfilingBackend::optimizer_update(float* master, void* grad, DType grad_t,
                                        float* const* states, void* out, DType out_t, size_t n,
                                        const OptimizerStep& s) {
  timed("optimizer_update",
        absl::StrCat(optimizer_info(s.kind).name, ", ", std::string(dtype_name(grad_t)),
                     " gradients"),
        0, [&] { inner_->optimizer_update(master, grad, grad_t, states, out, out_t, n, s); });
}
void ProfilingBackend::gemm_f32(bool ta, bool tb, int m, int n, int k, const float* a, int lda,
                                const float* b, int ldb, float* c, int ldc, float beta) {
  timed("gemm_f32", "", 2.0 * m * n * k,
        [&] { inner_->gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta); });
}
void ProfilingBackend::sum_squares(const void* x, DType t, size_t n, double* out) {
  timed("sum_squares", "", 0, [&] { inner_->sum_squares(x, t, n, out); });
}
void ProfilingBackend::scale_add(void* y, DType yt, const float* x, float alpha, bool accumulate,
                                 size_t n, double* ss) {
  timed("scale_add", absl::StrCat("into ", std::string(dtype_name(yt))), 0,
        [&] { inner_->scale_add(y, yt, x, alpha, accumulate, n, ss); });
}

void ProfilingBackend::quantize_blocks(const void* x, DType t, size_t n, int bits, int block,
                                       void* q, float* scales) {
  timed("quantize_blocks", absl::StrCat(std::string(dtype_name(t)), " -> int", bits), 0,
        [&] { inner_->quantize_blocks(x, t, n, bits, block, q, scales); });
}
void ProfilingBackend::dequantize_blocks(const void* q, const float* scales, size_t n, int bits,
                                         int block, void* y, DType yt, bool accumulate) {
  timed("dequantize_blocks", absl::StrCat("int", bits, " -> ", std::string(dtype_name(yt))), 0,
        [&] { inner_->dequantize_blocks(q, scales, n, bits, block, y, yt, accumulate); });
}

}  // namespace zt
