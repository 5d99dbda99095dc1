#include "model/layout.h"

namespace zt {

const TensorSlot* Unit::find(const std::string& tensor) const {
  for (const auto& t : tensors)
    if (t.name == tensor) return &t;
  return nullptr;
}

static void add(Unit& u, std::string name, std::vector<int64_t> shape) {
  TensorSlot s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.numel = 1;
  for (int64_t d : s.shape) s.numel *= static_cast<size_t>(d);
  s.offset = u.numel;
  u.numel += s.numel;
  u.tensors.push_back(std::move(s));
}

ParamLayout::ParamLayout(const ModelConfig& c) {
  const int64_t C = c.hidden, I = c.intermediate, V = c.vocab_size;
  const bool ln = c.norm == NormKind::kLayerNorm;  // LayerNorm's bias beside its weight
  Unit emb{"embedding", {}, 0};
  add(emb, "wte", {V, C});
  if (c.learned_positions) add(emb, "wpe", {c.max_seq_len, C});
  units_.push_back(std::move(emb));
  for (int l = 0; l < c.n_layer; ++l) {
    Unit b{"block." + std::to_string(l), {}, 0};
    add(b, "ln1.w", {C});
    if (ln) add(b, "ln1.b", {C});
    add(b, "qkv.w", {c.qkv_dim(), C});
    if (c.qkv_bias) add(b, "qkv.b", {c.qkv_dim()});
    add(b, "attn_out.w", {C, c.attn_dim()});
    if (c.out_bias) add(b, "attn_out.b", {C});
    add(b, "ln2.w", {C});
    if (ln) add(b, "ln2.b", {C});
    add(b, "fc.w", {c.fc_dim(), C});
    if (c.mlp_bias) add(b, "fc.b", {c.fc_dim()});
    add(b, "fc_out.w", {C, I});
    if (c.mlp_bias) add(b, "fc_out.b", {C});
    units_.push_back(std::move(b));
  }
  // The hidden matrices: row blocks of the fused projections, then the output and down ones.
  const int64_t q = c.attn_dim(), kv = (int64_t)c.n_kv_head * c.head_dim();
  matrices_.resize(units_.size() + 1);
  for (int l = 0; l < c.n_layer; ++l) {
    const Unit& b = units_[block_unit(l)];
    std::vector<MatrixSlot>& m = matrices_[block_unit(l)];
    auto rows = [&](const char* tensor, std::vector<int64_t> heights) {
      const TensorSlot& t = *b.find(tensor);
      size_t off = t.offset;
      for (int64_t h : heights) {
        m.push_back({off, h, t.shape[1]});
        off += (size_t)h * t.shape[1];
      }
    };
    rows("qkv.w", {q, kv, kv});
    rows("attn_out.w", {C});
    rows("fc.w", c.mlp == MlpKind::kSwiGLU ? std::vector<int64_t>{I, I} : std::vector<int64_t>{I});
    rows("fc_out.w", {C});
  }
  Unit head{"head", {}, 0};
  add(head, "lnf.w", {C});
  if (ln) add(head, "lnf.b", {C});
  if (!c.tied_embeddings) add(head, "lm_head.w", {V, C});
  units_.push_back(std::move(head));
}

size_t ParamLayout::total_numel() const {
  size_t n = 0;
  for (const auto& u : units_) n += u.numel;
  return n;
}

}  // namespace zt
