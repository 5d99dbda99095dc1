// The backend interface: memory on one device (host or a CUDA GPU) and the kernels the
// transformer needs. Model, ZeRO and offload code never dereference a device pointer on the
// host; they call these operations (docs/architecture.md "Backend"). Every kernel accumulates in
// fp32. Tensor arguments are device pointers to row-major arrays, shapes in the comments:
// - parameters (TensorView) in fp32, or bf16 / fp16 as stored (weight_dtype(), and
//   UnitEngine::fetch_stored): a GPU's GEMM on a 16-bit weight takes its other operand in that
//   dtype (its activations are 16-bit), as PyTorch's autocast does; the CPU widens the weight
//   exactly and keeps its fp32 activations;
// - activations and their gradients (TensorRef written, TensorView read) in the dtype
//   activation_dtype() gives: fp32 on the CPU, the 16-bit working dtype on a GPU (llm.c's
//   floatX), every value computed in fp32 and rounded once where it is stored;
// - parameter gradients (TensorRef) in fp32, or in the 16-bit dtype they are stored in where
//   grad_dtype() says the backend adds into it; norm and softmax statistics (mean, rstd, lse),
//   losses and logits are fp32 (float*) everywhere.
// Backward kernels ACCUMULATE into parameter gradients (+=) and, unless stated, into input
// gradients too, so gradient accumulation and tied weights need no extra pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/memory.h"
#include "model/optimizer_math.h"
#include "model/rope.h"

namespace zt {

// The CPU backend's classifier chunk: 32 MiB of logits, about its last-level cache.
constexpr size_t kCpuClassifierChunkBytes = size_t{32} << 20;
// A GPU's logits row stride for a vocabulary of V: the next multiple of 128 (llm.c's padding).
constexpr int gpu_logits_row_stride(int V) { return (V + 127) / 128 * 128; }

// Which attention a GPU backend runs (--attention, zerotrain.attention): kFlash, its own kernels
// (model/cuda/attention*.cu); kCudnn, cuDNN's fused SDPA (an error where cuDNN cannot load);
// kAuto, cuDNN where it loads and supports the shape, else flash. The CPU has one attention.
enum class AttentionImpl { kAuto, kFlash, kCudnn };
// "auto", "flash" or "cudnn"; else InvalidArgument naming the three.
absl::StatusOr<AttentionImpl> parse_attention(std::string_view name);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // ---- memory (bytes; every allocation is accounted under a category) ----
  virtual void* alloc(size_t bytes, MemCategory c) = 0;
  virtual void free(void* p, size_t bytes, MemCategory c) = 0;
  virtual void copy_to_host(void* host_dst, const void* dev_src, size_t bytes) = 0;
  virtual void copy_to_device(void* dev_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy(void* dev_dst, const void* dev_src, size_t bytes) = 0;
  virtual void zero(void* dev, size_t bytes) = 0;
  // Converts n elements between storage dtypes, both on the device.
  virtual void convert(const void* src, DType src_t, void* dst, DType dst_t, size_t n) = 0;
  virtual void synchronize() = 0;
  // True when device pointers are host pointers (the CPU backend, the CUDA emulation), so host
  // code such as MPI may read and write them; false on a real GPU, whose collectives need NCCL.
  virtual bool host_addressable() const { return true; }
  // The stream the kernels run on, as a cudaStream_t (null on the CPU): NCCL orders its
  // collectives after it.
  virtual void* stream_handle() const { return nullptr; }
  // The dtype UnitEngine::fetch() gives parameters stored in `working` in: fp32 on the CPU (the
  // engine widens a 16-bit unit once per fetch, for the decoding step's head, whose
  // matrix-vector product reads the whole weight; its kernels are fp32), the working dtype
  // itself on a GPU (no fp32 copy; bf16/fp16 GEMMs on tensor cores with fp32 accumulation).
  // Every backend's kernels also take the stored dtype (fetch_stored: the blocks' and, in
  // training, the head's weights), the CPU's GEMMs widening a block of the weight's rows at a
  // time in cache, its norms one tensor at a time.
  virtual DType weight_dtype(DType /*working*/) const { return DType::kF32; }
  // The dtype this backend keeps activations and their gradients in when parameters work in
  // `working`: fp32 on the CPU (its kernels are fp32); on a GPU the 16-bit working dtype itself
  // (half the activation memory and bandwidth; GEMMs read and write it on tensor cores). The
  // Transformer allocates its activations in it (zero/estimator.h counts them so).
  virtual DType activation_dtype(DType /*working*/) const { return DType::kF32; }
  // The dtype the backward kernels that write weight gradients (matmul_backward's dweight and
  // dbias, the norms' dw and db) can add into when gradients are stored in `stored`: the
  // stored dtype itself on the CPU, where each call computes its contribution in fp32 (a cache-
  // sized piece at a time) and adds it rounded once, as the engine's fold of an fp32
  // accumulator does (UnitEngine::grads_stored; the same values up to the GEMM's summation
  // order); fp32 on a GPU (the engine's accumulator).
  virtual DType grad_dtype(DType /*stored*/) const { return DType::kF32; }
  // ---- host memory and copies that overlap the kernels (offload's pipeline) ----
  // Page-locks [p, p + bytes) of host memory (whole pages, not yet pinned) so copies to and
  // from it run by DMA and asynchronously: cudaHostRegister on a GPU, mlock on the CPU. False
  // when the OS refuses (RLIMIT_MEMLOCK, `ulimit -l`); the memory then stays pageable.
  virtual bool pin_host(void* p, size_t bytes);
  virtual void unpin_host(void* p, size_t bytes);
  // Queues a copy on its direction's copy stream and returns at once with a ticket. A device ->
  // host copy starts after the kernels queued so far (it reads what they wrote); a host ->
  // device copy starts after them too (they may still read its destination) and every kernel
  // queued after the call sees its data. Copies in one direction complete in the order queued
  // (copy_to_device_unjoined's among themselves); the directions run side by side (a GPU has a
  // copy engine for each), so a host -> device copy must not write device memory that a device
  // -> host copy still in flight reads. Until
  // wait_copy(ticket) has returned, the host memory stays untouched, the device memory
  // allocated, and a device source unwritten by later kernels; pinned host memory (pin_host)
  // lets the copy overlap the kernels. The CPU backend copies at once and returns ticket 0.
  virtual uint64_t copy_to_host_async(void* host_dst, const void* dev_src, size_t bytes) {
    copy_to_host(host_dst, dev_src, bytes);
    return 0;
  }
  virtual uint64_t copy_to_device_async(void* dev_dst, const void* host_src, size_t bytes) {
    copy_to_device(dev_dst, host_src, bytes);
    return 0;
  }
  // As copy_to_device_async, except that the kernels queued after the call do not wait for the
  // copy: they see its data once join_copy(ticket) has been called, and until then must not read
  // its destination. So weights needed late (the delayed update's, each unit's by its own
  // forward) come in on the copy engine beside the kernels queued before their join. Unjoined
  // copies complete in the order queued among themselves, on a queue of their own, so a copy
  // queued later with copy_to_device_async (and joined at once) does not wait behind them. The
  // CPU backend copies at once and returns ticket 0.
  virtual uint64_t copy_to_device_unjoined(void* dev_dst, const void* host_src, size_t bytes) {
    copy_to_device(dev_dst, host_src, bytes);
    return 0;
  }
  // The kernels queued after this call see the data of host -> device copy `ticket` and of every
  // one queued before it; no host wait. No-op for a copy waited for already.
  virtual void join_copy(uint64_t /*ticket*/) {}
  // Blocks until the copy with this ticket, and every copy queued before it in either direction,
  // is done. Any host thread may wait (an optimizer thread reusing the host memory a copy read).
  virtual void wait_copy(uint64_t /*ticket*/) {}
  // (Virtual so that a decorator, model/profiling_backend.h, reports its inner backend's.)
  virtual MemoryTracker& tracker() { return tracker_; }
  // Caps the bytes allocated on this device (live, every category; 0: no cap, the default).
  // An allocation past it throws DeviceMemoryLimitExceeded (common/memory.h). This is how a
  // big machine proves a run fits a small GPU ("zerotrain": {"device_memory_limit": "8GiB"}).
  virtual void set_memory_limit(size_t bytes) { memory_limit_ = bytes; }
  virtual size_t memory_limit() const { return memory_limit_; }

  // ---- kernels ----
  // out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC) (bias may be null). ld: out's row
  // stride in elements (0: OC), >= OC: the classifier's padded logits (logits_row_stride).
  virtual void matmul_forward(TensorRef out, TensorView inp, TensorView weight, TensorView bias,
                              int N, int C, int OC, int ld = 0) = 0;
  // dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += sum_n dout.
  // dinp and dbias may be null. ld: dout's row stride in elements (0: OC).
  virtual void matmul_backward(TensorRef dinp, TensorRef dweight, TensorRef dbias, TensorView dout,
                               TensorView inp, TensorView weight, int N, int C, int OC,
                               int ld = 0) = 0;
  // Packed rows (prepare --pack, docs/data.md): several examples share a row of T tokens, and
  // `pos` (B,T) int32 on device gives each token's position within its example: 0 at an
  // example's first token, then +1 a token (so pos[t] <= t, and example starts are where pos
  // is 0). Null pos means one example a row: pos[t] = t. Every position-dependent kernel reads
  // it: the embedding's wpe row, RoPE's angle, and attention, where query t attends only keys
  // t - pos[t] .. t (its own example: block-diagonal causal attention), so a packed row
  // computes what each of its examples alone would (tests/unit/packing_test.cc).
  //
  // out (B,T,C) = wte[tokens] (+ wpe[pos[t]] when wpe is not null). tokens (B,T) int32 on
  // device. wte (V,C) and wpe (T,C) are in table_t (fp32, bf16 or fp16: the working copy as
  // stored), so a lookup widens only the rows it reads.
  virtual void embedding_forward(TensorRef out, const int* tokens, const void* wte, const void* wpe,
                                 DType table_t, int B, int T, int C, const int* pos = nullptr) = 0;
  // dwte[tokens] += dout; dwpe[pos[t]] += dout (when dwpe is not null).
  virtual void embedding_backward(float* dwte, float* dwpe, TensorView dout, const int* tokens,
                                  int B, int T, int C, const int* pos = nullptr) = 0;
  // LayerNorm (Ba et al.): y = (x - mean) * rstd * w + b per row; saves mean, rstd (N).
  virtual void layernorm_forward(TensorRef out, float* mean, float* rstd, TensorView inp,
                                 TensorView w, TensorView b, int N, int C, float eps) = 0;
  virtual void layernorm_backward(TensorRef dinp, TensorRef dw, TensorRef db, TensorView dout,
                                  TensorView inp, TensorView w, const float* mean,
                                  const float* rstd, int N, int C) = 0;
  // RMSNorm (Zhang & Sennrich): y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); saves rstd (N).
  virtual void rmsnorm_forward(TensorRef out, float* rstd, TensorView inp, TensorView w, int N,
                               int C, float eps) = 0;
  virtual void rmsnorm_backward(TensorRef dinp, TensorRef dw, TensorView dout, TensorView inp,
                                TensorView w, const float* rstd, int N, int C) = 0;
  // The residual add fused into the norm that follows it (llm.c's fused residual forward):
  // x (N,C) += residual (N,C) in place, then out = the norm of the sum, as layernorm_forward /
  // rmsnorm_forward (same statistics saved, same bits as add_inplace then the norm). One pass
  // over the residual stream where the two ops take two.
  virtual void residual_layernorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                          float* mean, float* rstd, TensorView w, TensorView b,
                                          int N, int C, float eps) = 0;
  virtual void residual_rmsnorm_forward(TensorRef x, TensorView residual, TensorRef out,
                                        float* rstd, TensorView w, int N, int C, float eps) = 0;
  // RoPE (Su et al.) on the q and k parts of qkv (B,T,(NH+2*KVH)*hd) in place, HF's
  // rotate_half pairing (i, i+hd/2), angle (pos0 + t) * f_i, f_i = theta^(-2i/hd) rescaled as
  // rope.scaling says (model/rope.h): row t sits at
  // position pos0 + t (0 for a whole sequence; the decode step's position for one row), or
  // pos0 + pos[t] for packed rows. inverse=true rotates by -angle, which is the backward (a
  // rotation's transpose is its inverse).
  virtual void rope(TensorRef qkv, int B, int T, int NH, int KVH, int hd, const RopeParams& rope,
                    bool inverse, int pos0, const int* pos = nullptr) = 0;
  // Causal self-attention with grouped-query K/V (query head h uses kv head h / (NH/KVH)).
  // qkv (B,T,(NH+2*KVH)*hd) laid out [q heads | k heads | v heads]; out (B,T,NH*hd);
  // lse (B,NH,T) saves each row's softmax log-sum-exp for the backward, which recomputes the
  // probabilities from it (FlashAttention's interface: nothing of size T x T is kept). With
  // pos (packed rows, above) query t attends keys t - pos[t] .. t only.
  virtual void attention_forward(TensorRef out, float* lse, TensorView qkv, int B, int T, int NH,
                                 int KVH, int hd, const int* pos = nullptr) = 0;
  // dqkv (B,T,...) += gradient, from dout (B,T,NH*hd), qkv and the forward's out and lse. out
  // gives D_t = dout_t . out_t (FlashAttention-2's backward, and cuDNN's, take it); a backend
  // may instead recompute D from lse. pos as the forward's.
  virtual void attention_backward(TensorRef dqkv, TensorView dout, TensorView qkv, TensorView out,
                                  const float* lse, int B, int T, int NH, int KVH, int hd,
                                  const int* pos = nullptr) = 0;
  // One decoding step with a KV cache: out (NH*hd) = the attention of the last row's queries
  // over rows 0..T-1 of qkv (T,(NH+2*KVH)*hd), one sequence: row T-1 of attention_forward,
  // in O(T) instead of O(T^2).
  virtual void attention_decode(TensorRef out, TensorView qkv, int T, int NH, int KVH, int hd) = 0;
  // Readies attention_forward / attention_backward for activations of dtype act at these
  // shapes before the first step (cuDNN's graphs are built here, not inside a step) and names
  // what will run them: "cpu", "flash (tensor cores)", "flash (fp32)", "cuDNN 9.x.y". Error
  // (FailedPrecondition) when the attention asked for cannot run them (kCudnn on fp32
  // activations, or a shape cuDNN has no engine for).
  virtual absl::StatusOr<std::string> prepare_attention(DType /*act*/, int /*B*/, int /*T*/,
                                                        int /*NH*/, int /*KVH*/, int /*hd*/) {
    return std::string(name());
  }
  // GELU, tanh approximation (GPT-2's gelu_new). out/inp (n).
  virtual void gelu_forward(TensorRef out, TensorView inp, size_t n) = 0;
  // GPT-2's MLP up-projection and its GELU: pre (N,OC) = inp @ weight^T + bias, out (N,OC) =
  // gelu(pre). By default matmul_forward then gelu_forward; the CUDA backend makes them one
  // GEMM (cuBLASLt's GELU_AUX_BIAS epilogue: out, and pre as its auxiliary output; the GELU of
  // the fp32 sum, so out may differ from the two passes' by a 16-bit rounding of pre).
  virtual void matmul_gelu_forward(TensorRef out, TensorRef pre, TensorView inp, TensorView weight,
                                   TensorView bias, int N, int C, int OC);
  // The down-projection's backward with the GELU's: dpre (N,C) = (dout @ weight) * gelu'(pre)
  // (overwritten), dweight (OC,C) += dout^T @ act, dbias (OC, or null) += sum_n dout. scratch
  // (N,C, dpre's dtype): by default dout @ weight goes there (matmul_backward, then
  // gelu_backward); the CUDA backend applies the GELU's gradient in the GEMM (cuBLASLt's DGELU
  // epilogue, pre its auxiliary input) and leaves scratch alone.
  virtual void matmul_dgelu_backward(TensorRef dpre, TensorRef scratch, TensorRef dweight,
                                     TensorRef dbias, TensorView dout, TensorView act,
                                     TensorView weight, TensorView pre, int N, int C, int OC);
  // dinp (n) = (overwrites) dout * gelu'(inp).
  virtual void gelu_backward(TensorRef dinp, TensorView inp, TensorView dout, size_t n) = 0;
  // SwiGLU: out (N,I) = silu(inp[:, :I]) * inp[:, I:], inp (N,2I) = [gate | up].
  virtual void swiglu_forward(TensorRef out, TensorView inp, int N, int I) = 0;
  // dinp (N,2I) = (overwrites) the gradient w.r.t. [gate | up].
  virtual void swiglu_backward(TensorRef dinp, TensorView dout, TensorView inp, int N, int I) = 0;
  // y (n) += x (n).
  virtual void add_inplace(TensorRef y, TensorView x, size_t n) = 0;
  // Fused softmax cross-entropy over logits (N,V) with targets (N) (ignore_index < 0 counts no
  // loss and no gradient). losses (N) gets -log p[target] (0 for ignored). When dlogits_scale
  // != 0, logits are overwritten by their gradient: (softmax - onehot) * dlogits_scale.
  // logits: rows of stride ld >= V, in the activation dtype (the columns past V unread).
  virtual void crossentropy_forward_backward(TensorRef logits, int ld, float* losses,
                                             const int* targets, int N, int V,
                                             float dlogits_scale) = 0;
  // The classifier's logits as this backend keeps them: the row stride for a vocabulary of V
  // (a multiple of 128 on a GPU, 50257 -> 50304 as llm.c pads, so 16-bit rows start on 256-byte
  // boundaries and cuBLASLt's tiles divide them; the parameters stay V rows), and the bytes of
  // logits one chunk of rows may take (a CPU's cache; a GPU's memory budget).
  virtual int logits_row_stride(int V) const { return V; }
  virtual size_t classifier_chunk_bytes() const { return kCpuClassifierChunkBytes; }
  // One fused optimizer step (model/optimizer_math.h: AdamW, Lion, Adagrad or a Muon pass) on
  // n elements: reads grad (n, grad_t) times s.grad_scale (unscale and clip in the same pass),
  // updates the fp32 master (n) and the optimizer's states in place (states[i], n fp32 each,
  // optimizer_info(s.kind).num_states of them: AdamW m and v), and writes the updated master
  // rounded to out_t into out (n), unless out is null. With s.zero_grad the gradient is left
  // all zeros.
  virtual void optimizer_update(float* master, void* grad, DType grad_t, float* const* states,
                                void* out, DType out_t, size_t n, const OptimizerStep& s) = 0;
  // General fp32 matrix product, row-major as cblas_sgemm's CblasRowMajor: c (m,n) = op(a)
  // (m,k) op(b) (k,n) + beta c, op transposing a stored (k,m) when trans_a (b stored (n,k) when
  // trans_b); lda/ldb/ldc are row strides in elements. Muon's Newton-Schulz iteration
  // (model/newton_schulz.h) runs on it.
  virtual void gemm_f32(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                        const float* b, int ldb, float* c, int ldc, float beta) = 0;
  // Sum of squares of n elements of dtype t, accumulated in double, written to *out: one double
  // in device memory, after the kernels queued so far and without waiting for them (the global
  // gradient norm reads every unit's with one copy per step, not one wait per unit).
  virtual void sum_squares(const void* x, DType t, size_t n, double* out) = 0;
  // The same, returned to the host (waits for the device).
  double sum_squares(const void* x, DType t, size_t n);
  // y (n, y_t) = alpha * x (n, fp32) + (accumulate ? y : 0), computed in fp32 and rounded once:
  // gradient averaging and accumulation into a 16-bit buffer in one pass. With sum_squares (a
  // double in device memory) non-null it also receives Σ y² of the stored result, the value
  // sum_squares(y, y_t, n) gives (on the CPU bit for bit, in the same pass), so the gradient
  // norm needs no second pass over y on the CPU and no wait on a GPU.
  virtual void scale_add(void* y, DType y_t, const float* x, float alpha, bool accumulate,
                         size_t n, double* sum_squares) = 0;
  // Block-wise symmetric quantization (ZeRO++'s qwZ and qgZ; the formula, storage and error
  // bound in model/quantize.h): x (n, t) in blocks of `block` elements (even; the last may be
  // shorter) to q (quant_bytes(n, bits) bytes; bits 8 or 4) and scales (quant_blocks(n, block)
  // fp32), all device memory.
  virtual void quantize_blocks(const void* x, DType t, size_t n, int bits, int block, void* q,
                               float* scales) = 0;
  // y (n, y_t) = the dequantized q * scale of each element; with accumulate (fp32 y only) added
  // to y in fp32 (qgZ's sum of the ranks' pieces).
  virtual void dequantize_blocks(const void* q, const float* scales, size_t n, int bits, int block,
                                 void* y, DType y_t, bool accumulate) = 0;

 protected:
  MemoryTracker tracker_;
  size_t memory_limit_ = 0;
};

// The CPU backend ("device" memory is ordinary host memory, accounted separately from the
// host staging pools offload uses). threads <= 0 keeps OpenMP's default.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

// A device buffer owned by RAII: freed through its backend, accounted under its category.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* be, size_t bytes, MemCategory c)
      : be_(be), bytes_(bytes), cat_(c), ptr_(bytes ? be->alloc(bytes, c) : nullptr) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_, bytes_ = o.bytes_, cat_ = o.cat_, ptr_ = o.ptr_;
      o.ptr_ = nullptr, o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void reset() {
    if (ptr_) be_->free(ptr_, bytes_, cat_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* be_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::kWorkspace;
  void* ptr_ = nullptr;
};

}  // namespace zt
