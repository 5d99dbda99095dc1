// One transformer, GPT-2 and LLaMA variants by config switches, written once over the Backend
// interface (DESIGN.md "Transformer"). Pre-norm blocks:
//   x = x + attn(norm1(x));  x = x + mlp(norm2(x));  logits = norm_f(x) @ W_head^T
// GPT-2: LayerNorm, learned positions, GELU MLP, biases, head tied to wte.
// LLaMA: RMSNorm, RoPE, SwiGLU MLP, grouped-query attention, untied head, no biases.
#pragma once

#include <memory>
#include <vector>

#include "model/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/unit_engine.h"

namespace zt {

class Transformer {
 public:
  // Allocates activations for micro-batches up to (max_B, max_T) on the backend.
  Transformer(const ModelConfig& c, Backend* be, int max_B, int max_T);
  ~Transformer();
  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  struct LossResult {
    double loss = 0;    // mean -log p(target) over non-ignored targets
    int num_valid = 0;  // targets >= 0
  };
  // Forward on tokens and targets (host, (B,T), targets < 0 ignored). When grad_scale != 0
  // also runs the head's backward (fused with the chunked classifier, as llm.c) with
  // d(loss) = grad_scale, leaving backward() to finish; grad_scale = 1/GAS for gradient
  // accumulation. B <= max_B, T <= max_T.
  LossResult forward(UnitEngine& e, const int* tokens, const int* targets, int B, int T,
                     float grad_scale);
  // Backward of the blocks and embeddings after forward(..., grad_scale != 0).
  void backward(UnitEngine& e);
  // Logits (B,T,V) for every position into host memory (for tests and evaluation).
  void logits(UnitEngine& e, const int* tokens, int B, int T, float* out_host);
  // Logits (V) of the last position of one sequence tokens (T) into host memory (sampling).
  void last_logits(UnitEngine& e, const int* tokens, int T, float* out_host);

 private:
  struct Acts;
  void embed(UnitEngine& e, const int* tokens, int B, int T);
  // LayerNorm (GPT-2, with bias b) or RMSNorm (LLaMA, b null) over rows of width C.
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, int N);
  void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                     const float* w, const float* mean, const float* rstd, int N);
  void block_forward(UnitEngine& e, int l);
  void block_backward(UnitEngine& e, int l);
  // Final norm, then classifier on rows [0, N) in chunks; optional CE loss / head backward.
  // Returns the sum of the per-row losses when targets are given.
  double head(UnitEngine& e, const int* targets_host, int rows_from, int rows, bool train,
              float dscale, float* logits_host);

  ModelConfig config_;
  ParamLayout layout_;
  Backend* be_;
  int max_B_, max_T_;
  int B_ = 0, T_ = 0;
  std::unique_ptr<Acts> a_;
};

}  // namespace zt
