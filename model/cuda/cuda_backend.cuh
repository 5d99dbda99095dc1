// CudaBackend: declaration shared by the kernel files (one family per file, as model/cpu/).
// All kernels run on one stream owned by the backend; synchronize() waits for it. Offload's
// asynchronous copies run on copy streams (copy_streams_), ordered against the first by events.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/block_cache.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/cudnn_attention.h"

namespace zt {

// cuBLASLt's GELU epilogues: kForward, D = gelu(x) and aux = x (GELU_AUX, or GELU_AUX_BIAS with
// a bias); kBackward, D = x gelu'(aux) (DGELU). aux has D's dtype and shape, rows of aux_ld
// elements (a multiple of 8), and starts on a 16-byte boundary.
struct GeluEpilogue {
  enum Kind : int32_t { kNone, kForward, kBackward } kind = kNone;
  void* aux = nullptr;
  int aux_ld = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  std::string_view name() const override { return "cuda"; }

#include "model/backend_kernels.inc"  // NOLINT: memory and kernel overrides

  cudaStream_t stream() const { return stream_; }
  // cuDNN runs attention from now on (kCudnn), or where it supports the shape (kAuto).
  void use_cudnn(std::unique_ptr<CudnnAttention> cudnn, AttentionImpl how) {
    cudnn_ = std::move(cudnn);
    attention_ = how;
  }
#ifdef ZT_CUDA_EMU
  // Emulated device memory is host memory, unless guarded or made opaque (emu/cuda_emu.h).
  bool host_addressable() const override { return emu::host_addressable(); }
#else
  bool host_addressable() const override { return false; }
#endif
  void* stream_handle() const override { return stream_; }
  // Parameters as stored: 16-bit GEMMs run on tensor cores (model/cuda/matmul.cu).
  DType weight_dtype(DType working) const override { return working; }
  // Activations in the working dtype too (llm.c's floatX): half the bytes, and GEMMs read and
  // write them without conversions.
  DType activation_dtype(DType working) const override { return working; }
  // Weight gradients are added into fp32 only (grad_dtype's default): the engine's accumulator.
  int logits_row_stride(int V) const override;
  void matmul_gelu_forward(TensorRef out, TensorRef pre, TensorView inp, TensorView weight,
                           TensorView bias, int N, int C, int OC) override;
  void matmul_dgelu_backward(TensorRef dpre, TensorRef scratch, TensorRef dweight, TensorRef dbias,
                             TensorView dout, TensorView act, TensorView weight, TensorView pre,
                             int N, int C, int OC) override;
  size_t classifier_chunk_bytes() const override;
  absl::StatusOr<std::string> prepare_attention(DType act, int B, int T, int NH, int KVH,
                                                int hd) override;
  bool pin_host(void* p, size_t bytes) override;
  void unpin_host(void* p, size_t bytes) override;
  uint64_t copy_to_host_async(void* dst, const void* src, size_t bytes) override;
  uint64_t copy_to_device_async(void* dst, const void* src, size_t bytes) override;
  uint64_t copy_to_device_unjoined(void* dst, const void* src, size_t bytes) override;
  void join_copy(uint64_t ticket) override;
  void wait_copy(uint64_t ticket) override;
  // Also sizes the block cache: a share of the limit (kCacheShare).
  void set_memory_limit(size_t bytes) override;

 private:
  // The norms' weight (and bias) gradients, summed over N rows in two fixed-order passes
  // (column_sum.cuh): dw (C) += sum_n dout * xhat, db (C, or null) += sum_n dout; xhat =
  // (inp - mean) * rstd, or inp * rstd with mean null (RMSNorm). Deterministic, unlike atomics.
  void norm_param_grads(float* dw, float* db, TensorView dout, TensorView inp, const float* mean,
                        const float* rstd, int N, int C);
  // C (rows m, cols n; row-major, fp32 or ab_t) = op(A) op(B) + beta C (+ bias (n) on every
  // row, of C's dtype, when given: cuBLASLt's bias epilogue), A and B of dtype ab_t, with fp32
  // accumulation; beta 0 or 1.
  // Each configuration's descriptors and algorithm are made once and kept (gemm_plans_). When
  // the heuristic finds no algorithm (operands 2 bytes off a 4-byte boundary: 16-bit rows of
  // an odd length), the operands are copied to aligned buffers with padded rows and the
  // product runs there (gemm_padded); C comes back the same way. An n or k off a multiple of
  // 16 bytes (a vocabulary of 50257) splits into an aligned GEMM and a small one for the rest.
  // With a GELU epilogue (GPT-2's MLP: matmul_gelu_forward, matmul_dgelu_backward) it returns
  // false, having done nothing, when cuBLASLt has no algorithm for it; true otherwise.
  bool gemm(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda, const void* B,
            int ldb, DType ab_t, TensorRef C, int ldc, float beta, TensorView bias = TensorView(),
            const GeluEpilogue& gelu = {});
  void gemm_padded(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
                   const void* B, int ldb, DType ab_t, TensorRef C, int ldc, float beta,
                   TensorView bias);
  struct GemmPlans;                        // matmul.cu
  std::shared_ptr<GemmPlans> gemm_plans_;  // destroyed before lt_ (its descriptors)
  // x (n elements) as dtype t: x itself when it is stored so, else converted into buf
  // (workspace).
  const void* rounded(TensorView x, size_t n, DType t, DeviceBuffer& buf);
  // The fp32 pointer of a weight gradient (null stays null); grad_dtype() is fp32 here, so a
  // 16-bit one is a caller's bug and aborts.
  static float* grad_f32(TensorRef g);
  // Whether cuDNN runs attention of shape s: it is loaded and its graphs for s are built (under
  // kAuto a shape it refuses runs on the flash kernels; under kCudnn that aborts, which
  // prepare_attention reports as an error before the first step).
  bool cudnn_runs(const AttentionShape& s);
  // Builds cuDNN's graphs for s and records whether it runs s; the error only under kCudnn.
  absl::Status prepare_cudnn(const AttentionShape& s);
  // The bytes one piece of scratch may take: a sixteenth of the device's memory (or of its
  // limit), at least 32 MiB. The classifier's logits chunk and, under kAuto, cuDNN's workspace
  // (past it, the flash kernels run instead); kCudnn, asked for by name, has no cap.
  size_t scratch_budget() const;
  size_t cudnn_workspace_limit() const {
    return attention_ == AttentionImpl::kCudnn ? SIZE_MAX : scratch_budget();
  }
  // Makes device_ the calling host thread's current device (the CUDA runtime keeps one per
  // thread, GPU 0 until set). Every entry point another thread may call (allocation, copies,
  // their waits, pinning) starts with it: on a node of several GPUs, a rank's copy or optimizer
  // thread would otherwise allocate, pin and copy on GPU 0, another rank's.
  void bind_thread() const;
  int device_;
  AttentionImpl attention_ = AttentionImpl::kFlash;
  std::unique_ptr<CudnnAttention> cudnn_;        // reset first in the destructor (it frees memory)
  std::map<AttentionShape, bool> cudnn_shapes_;  // prepared: supported or not
  // The copy streams' side of copy_to_*_async: the copy on its direction's stream after the
  // kernels queued so far, an event after it (an H2D's joins stream_ there when `join`), and
  // its ticket. Copies may be queued from several host threads (the delayed update's and the
  // trainer's), so copy_mu_ guards them.
  uint64_t queue_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                      bool join = true);
  // Freed blocks by exact (256-rounded) size, reused without cudaMalloc, cudaFree or a stream
  // sync: every kernel runs on stream_, so a reused block's next use is ordered after its last.
  // (A block a queued copy reads or writes is not freed before its wait_copy: the callers'
  // contract, Backend::copy_to_host_async.)
  // The cache keeps at most this share of the device's memory (or of its limit): a fixed cap
  // would make a large GPU's big blocks go through cudaFree, which waits for the device, and
  // would be most of a small one's memory. An eighth holds the two largest pieces of scratch
  // (scratch_budget: a sixteenth each) and leaves NCCL's own lazy buffers room.
  static constexpr size_t kCacheShare = 8;
  BlockCache cache_;
  cudaStream_t stream_ = nullptr;
  // Device -> host; host -> device; host -> device unjoined (copy_to_device_unjoined), a stream
  // of its own so that a small copy joined at once (a step's token ids) does not queue behind
  // a model's worth of weights that the kernels need only unit by unit.
  enum CopyStream { kToHost = 0, kToDevice = 1, kToDeviceUnjoined = 2, kCopyStreams = 3 };
  cudaStream_t copy_streams_[kCopyStreams] = {};
  cudaEvent_t compute_mark_ = nullptr;  // re-recorded on stream_ before each queued copy
  std::mutex copy_mu_;
  uint64_t last_ticket_ = 0;
  struct QueuedCopy {
    uint64_t ticket;
    cudaEvent_t done;  // recorded after it on its stream
    int dir;           // index into copy_streams_
    // Host threads in wait_copy on `done` outside the lock: it is not recycled (and recorded
    // for another copy) while one may still wait on it.
    int waiters = 0;
  };
  std::deque<QueuedCopy> copies_;  // queued, not yet waited for, in ticket order
  std::vector<cudaEvent_t> spare_events_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;
  static constexpr unsigned kMaxReduceBlocks = 1024;
  double* reduce_ = nullptr;  // sum_squares: a partial per block
};

}  // namespace zt
