// Parameter layout: tensors grouped into units in execution order (embeddings, each block,
// the final norm and head). A unit's tensors are contiguous in one flat buffer; a unit is what
// ZeRO gathers, reduces and frees (docs/architecture.md "Transformer"). Matrices are stored (out,
// in), as nn.Linear.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace zt {

struct TensorSlot {
  std::string name;            // internal name, e.g. "qkv.w"
  std::vector<int64_t> shape;  // e.g. {qkv_dim, C}
  size_t offset = 0;           // in elements, from the start of the unit's flat buffer
  size_t numel = 0;
};

struct Unit {
  std::string name;  // "embedding", "block.3", "head"
  std::vector<TensorSlot> tensors;
  size_t numel = 0;  // Ψ of this unit (unpadded)
  const TensorSlot* find(const std::string& tensor) const;
};

// A hidden matrix as an nn.Linear weight (rows = out features, cols = in), `offset` elements
// from the start of its unit: what Muon orthogonalises whole.
struct MatrixSlot {
  size_t offset = 0;
  int64_t rows = 0, cols = 0;
};

// Per-block tensor indices into Unit::tensors, fixed by the architecture.
// GPT-2: ln1.w ln1.b qkv.w qkv.b attn_out.w attn_out.b ln2.w ln2.b fc.w fc.b fc_out.w fc_out.b
// LLaMA: ln1.w qkv.w attn_out.w ln2.w fc.w (gate|up, (2I, C)) fc_out.w
class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& c);
  const std::vector<Unit>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int embedding_unit() const { return 0; }
  int block_unit(int layer) const { return 1 + layer; }
  int head_unit() const { return num_units() - 1; }
  size_t total_numel() const;  // Ψ
  // The hidden matrices of unit u, in offset order: each block's 2-D weights as the separate
  // nn.Linear projections of Hugging Face's LLaMA (q, k, v, o, gate, up, down), GPT-2's fused
  // c_attn split the same way (q, k, v, as modded-nanogpt does). Embeddings, head, norms and
  // biases are none (Muon's recipe: they take AdamW).
  const std::vector<MatrixSlot>& hidden_matrices(int u) const { return matrices_[u]; }

 private:
  std::vector<Unit> units_;
  std::vector<std::vector<MatrixSlot>> matrices_;  // per unit
};

}  // namespace zt
