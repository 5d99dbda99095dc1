// One transformer, GPT-2 and LLaMA variants by config switches, written once over the Backend
// interface (docs/architecture.md "Transformer"). Pre-norm blocks:
//   x = x + attn(norm1(x));  x = x + mlp(norm2(x));  logits = norm_f(x) @ W_head^T
// GPT-2: LayerNorm, learned positions, GELU MLP, biases, head tied to wte.
// LLaMA: RMSNorm, RoPE, SwiGLU MLP, grouped-query attention, untied head, no biases.
#pragma once

#include <memory>
#include <vector>

#include "common/memory.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/unit_engine.h"

namespace zt {

// Rows of classifier logits one chunk holds: chunk_bytes (Backend::classifier_chunk_bytes) over
// rows of ld elements (Backend::logits_row_stride) of dtype t; at least 1, at most N (an
// estimate's N = B T may pass an int; the rows do not). The rule Transformer allocates by and
// zero/estimator.cc counts by.
int logits_chunk_rows(int ld, size_t chunk_bytes, DType t, int64_t N);

class Transformer {
 public:
  // Allocates activations for micro-batches up to (max_B, max_T) on the backend.
  // checkpoint_every (activation checkpointing; Chen et al. 2016, "Training Deep Nets with
  // Sublinear Memory Cost"; DeepSpeed's activation_checkpointing, Hugging Face's
  // gradient_checkpointing): 0 keeps every block's intermediates for the backward; k >= 1
  // keeps only the input of every k-th block (blocks 0, k, 2k, ...), and the backward
  // recomputes each segment of k blocks from its input before going back through it, so
  // the intermediates of k blocks exist at once instead of L. The recompute runs the same
  // kernels on the same inputs: gradients are bitwise those without checkpointing.
  // cpu_checkpointing (with checkpoint_every >= 1; DeepSpeed's key of that name): the kept
  // block inputs live in host memory (host_tracker(), kActivations); the device holds two
  // (N,C) buffers for the checkpoint in use, and the backward copies each segment's input
  // back before recomputing it.
  // activations: the dtype of the activations and their gradients, Backend::activation_dtype
  // of the working dtype (fp32 on the CPU; the 16-bit working dtype on a GPU). Statistics,
  // losses and logits stay fp32.
  Transformer(const ModelConfig& c, Backend* be, int max_B, int max_T, int checkpoint_every = 0,
              bool cpu_checkpointing = false, DType activations = DType::kF32);
  ~Transformer();
  const ModelConfig& config() const { return config_; }
  // Host memory of cpu_checkpointing's checkpoints (empty otherwise).
  const MemoryTracker& host_tracker() const { return host_; }
  // Milliseconds the backward spent recomputing checkpointed segments since the last reset
  // (activation_checkpointing.profile).
  double recompute_ms() const { return recompute_ms_; }
  void reset_recompute_ms() { recompute_ms_ = 0; }
  const ParamLayout& layout() const { return layout_; }
  // Rows of logits the classifier computes per chunk (default: about 32 MiB of fp32 logits,
  // (8 Mi / V) rows, at most max_B * max_T). Lowering it changes how many chunks the head runs
  // in; a larger value than the default is clamped to it (the logits buffer was sized for it).
  // The head's values change only by rounding: the weight gradient is summed chunk by chunk,
  // and the GEMMs see other shapes.
  int classifier_chunk_rows() const;
  void set_classifier_chunk_rows(int rows);

  struct LossResult {
    double loss = 0;    // mean -log p(target) over non-ignored targets (0 when none)
    double sum = 0;     // sum of -log p(target) over non-ignored targets
    int num_valid = 0;  // targets >= 0
  };
  // Forward on tokens and targets (host, (B,T), targets < 0 ignored). When grad_scale != 0
  // also runs the head's backward (fused with the chunked classifier, as llm.c), leaving
  // backward() to finish, with d(loss)/d(-log p) = grad_scale / denominator for every
  // non-ignored target. denominator (> 0; 0: this call's num_valid) is the count of targets
  // the gradient averages over: for a global batch split into G micro-batches on W ranks
  // (each rank's gradient averaged over ranks, grad_scale = 1/G), the global batch's trained
  // targets / (W*G), so the step's gradient is the mean over all its trained targets whatever
  // the split (Hugging Face transformers' num_items_in_batch, since 4.46).
  // B <= max_B, T <= max_T. positions (host, (B,T), or null: one example a row)
  // packs several examples in a row (Backend::embedding_forward's pos: 0 at each example's
  // first token, +1 after; checked); each example then computes what it would alone.
  LossResult forward(UnitEngine& e, const int* tokens, const int* targets, int B, int T,
                     float grad_scale, const int* positions = nullptr, double denominator = 0);
  // Backward of the blocks and embeddings after forward(..., grad_scale != 0).
  void backward(UnitEngine& e);
  // Logits (B,T,V) for every position into host memory (for tests and evaluation).
  void logits(UnitEngine& e, const int* tokens, int B, int T, float* out_host);
  // Logits (V) of the last position of one sequence tokens (T) into host memory (sampling).
  void last_logits(UnitEngine& e, const int* tokens, int T, float* out_host);
  // KV-cache decoding, one sequence: appends `token` at position `pos` and writes the logits
  // (V) of the next token into host memory, as last_logits on the whole sequence would, in
  // O(pos) instead of O(pos^2). The cache must hold positions 0..pos-1 from the calls before
  // (pos = 0 starts over); pos < max_T. The cache, L x (max_T, qkv_dim) in the activation
  // dtype (workspace), is
  // allocated at the first call and freed by release_cache().
  void decode(UnitEngine& e, int token, int pos, float* logits_host);
  void release_cache() { cache_.clear(); }

 private:
  struct Acts;
  struct BlockActs;
  BlockActs& acts_of(int l);    // the intermediates block l writes (shared with checkpointing)
  TensorRef block_input(int l);  // x into block l (l = n_layer: into the head)
  TensorRef act(const DeviceBuffer& b) const { return {b.data(), act_t_}; }  // an activation
  void zero(TensorRef t, size_t n) { be_->zero(t.data, t.bytes(n)); }        // t[0, n) = 0
  // The token embedding of tokens (B,T) (host); queues the ids, and targets and positions (B,T)
  // when given (for head(), and for packed rows), to the device ahead of the kernels that read
  // them.
  void embed(UnitEngine& e, const int* tokens, const int* targets, int B, int T,
             const int* positions = nullptr);
  const int* positions() const;  // packed rows: the positions on the device; else null
  // LayerNorm (GPT-2, with bias b) or RMSNorm (LLaMA, b null) over rows of width C.
  void norm_forward(TensorRef out, float* mean, float* rstd, TensorView x, TensorView w,
                    TensorView b, int N);
  void norm_backward(TensorRef dx, TensorRef dw, TensorRef db, TensorView dout, TensorView x,
                     TensorView w, const float* mean, const float* rstd, int N);
  // x += residual in place, then norm_forward of the sum, in one pass (Backend::residual_*).
  void residual_norm_forward(TensorRef x, TensorView residual, TensorRef out, float* mean,
                             float* rstd, TensorView w, TensorView b, int N);
  void block_forward(UnitEngine& e, int l);
  void block_compute(TensorView p, int l);  // block l's forward with parameters p
  // The rest of a block's forward after attention, rows N: mid = x + atty W_o, ln2 = norm(mid),
  // the MLP into fc and act, out = mid + act W_fc_out (out may be x).
  void block_tail(TensorView p, TensorView x, TensorView atty, TensorRef mid, TensorRef ln2,
                  float* ln2_mean, float* ln2_rstd, TensorRef fc, TensorRef act, TensorRef out,
                  int N);
  void block_backward(UnitEngine& e, int l);
  // Final norm, then classifier on rows [0, N) in chunks; with `loss`, the cross-entropy
  // against the targets embed() queued (and the head's backward when train). Returns the sum
  // of the per-row losses (0 without loss).
  double head(UnitEngine& e, bool loss, int rows_from, int rows, bool train, float dscale,
              float* logits_host);
  // The first `rows` rows of the classifier's logits buffer, as fp32 rows of V, into out.
  void copy_logits_to_host(float* out, int rows);

  ModelConfig config_;
  ParamLayout layout_;
  Backend* be_;
  int max_B_, max_T_;
  int checkpoint_every_ = 0;
  bool cpu_checkpointing_ = false;
  DType act_t_ = DType::kF32;
  double recompute_ms_ = 0;
  MemoryTracker host_;
  std::vector<std::vector<char>> host_checkpoints_;  // cpu_checkpointing: input of block i k
  void save_checkpoint(int i);     // cpu_checkpointing: block i k's input to host memory
  void restore_checkpoint(int i);  // and back
  int B_ = 0, T_ = 0;
  std::unique_ptr<Acts> a_;
  std::vector<DeviceBuffer> cache_;  // decode(): each layer's qkv rows (after RoPE), act_t_
};

}  // namespace zt
