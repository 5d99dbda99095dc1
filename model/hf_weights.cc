#include "model/hf_weights.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace zt {

std::vector<HfPiece> hf_pieces(const ModelConfig& c, const ParamLayout& layout, int u) {
  const Unit& unit = layout.units()[u];
  std::vector<HfPiece> out;
  auto whole = [&](const char* slot, std::string name, bool transposed = false) {
    const TensorSlot* s = unit.find(slot);
    ZT_CHECK(s);
    const int64_t cols = s->shape.size() > 1 ? s->shape[1] : 1;
    out.push_back({std::move(name), s, 0, s->shape[0], cols, transposed});
  };
  auto rows = [&](const char* slot, std::string name, int64_t from, int64_t n) {
    const TensorSlot* s = unit.find(slot);
    ZT_CHECK(s);
    out.push_back({std::move(name), s, from, n, s->shape.size() > 1 ? s->shape[1] : 1, false});
  };
  const bool head = u == layout.head_unit(), emb = u == layout.embedding_unit();
  if (c.family == Family::kGPT2) {
    if (emb) {
      whole("wte", "transformer.wte.weight");
      whole("wpe", "transformer.wpe.weight");
      out.back().prefix = true;
    } else if (head) {
      whole("lnf.w", "transformer.ln_f.weight");
      whole("lnf.b", "transformer.ln_f.bias");
    } else {
      const std::string p = absl::StrCat("transformer.h.", u - 1, ".");
      whole("ln1.w", p + "ln_1.weight");
      whole("ln1.b", p + "ln_1.bias");
      whole("qkv.w", p + "attn.c_attn.weight", true);
      whole("qkv.b", p + "attn.c_attn.bias");
      whole("attn_out.w", p + "attn.c_proj.weight", true);
      whole("attn_out.b", p + "attn.c_proj.bias");
      whole("ln2.w", p + "ln_2.weight");
      whole("ln2.b", p + "ln_2.bias");
      whole("fc.w", p + "mlp.c_fc.weight", true);
      whole("fc.b", p + "mlp.c_fc.bias");
      whole("fc_out.w", p + "mlp.c_proj.weight", true);
      whole("fc_out.b", p + "mlp.c_proj.bias");
    }
    return out;
  }
  if (emb) {
    whole("wte", "model.embed_tokens.weight");
  } else if (head) {
    whole("lnf.w", "model.norm.weight");
    if (!c.tied_embeddings) whole("lm_head.w", "lm_head.weight");
  } else {
    const std::string p = absl::StrCat("model.layers.", u - 1, ".");
    const int64_t q = c.attn_dim(), kv = (int64_t)c.n_kv_head * c.head_dim();
    whole("ln1.w", p + "input_layernorm.weight");
    rows("qkv.w", p + "self_attn.q_proj.weight", 0, q);
    rows("qkv.w", p + "self_attn.k_proj.weight", q, kv);
    rows("qkv.w", p + "self_attn.v_proj.weight", q + kv, kv);
    if (c.qkv_bias) {
      rows("qkv.b", p + "self_attn.q_proj.bias", 0, q);
      rows("qkv.b", p + "self_attn.k_proj.bias", q, kv);
      rows("qkv.b", p + "self_attn.v_proj.bias", q + kv, kv);
    }
    whole("attn_out.w", p + "self_attn.o_proj.weight");
    if (c.out_bias) whole("attn_out.b", p + "self_attn.o_proj.bias");
    whole("ln2.w", p + "post_attention_layernorm.weight");
    rows("fc.w", p + "mlp.gate_proj.weight", 0, c.intermediate);
    rows("fc.w", p + "mlp.up_proj.weight", c.intermediate, c.intermediate);
    whole("fc_out.w", p + "mlp.down_proj.weight");
    if (c.mlp_bias) {
      rows("fc.b", p + "mlp.gate_proj.bias", 0, c.intermediate);
      rows("fc.b", p + "mlp.up_proj.bias", c.intermediate, c.intermediate);
      whole("fc_out.b", p + "mlp.down_proj.bias");
    }
  }
  return out;
}

absl::Status load_hf_unit(const HfTensorReader& r, const ModelConfig& c, const ParamLayout& layout,
                          int u, std::span<float> out) {
  ZT_CHECK(out.size() == layout.units()[u].numel);
  std::vector<float> buf;
  for (const HfPiece& p : hf_pieces(c, layout, u)) {
    std::string name = p.hf_name;
    // Original GPT-2 checkpoints name tensors without the "transformer." prefix.
    if (!r.contains(name) && name.starts_with("transformer.") && r.contains(name.substr(12)))
      name = name.substr(12);
    if (!r.contains(name))
      return absl::NotFoundError(absl::StrCat("tensor '", name,
                                              "' is missing from the "
                                              "checkpoint; is it a ",
                                              family_name(c.family),
                                              " model whose config.json matches its weights?"));
    ZT_ASSIGN_OR_RETURN(std::vector<int64_t> shape, r.shape(name));
    const bool vec = p.slot->shape.size() == 1;
    std::vector<int64_t> want = vec            ? std::vector<int64_t>{p.rows}
                                : p.transposed ? std::vector<int64_t>{p.cols, p.rows}
                                               : std::vector<int64_t>{p.rows, p.cols};
    const bool prefix_ok = p.prefix && shape.size() == 2 && shape[0] >= p.rows && shape[1] == p.cols;
    if (shape != want && !prefix_ok)
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                     absl::StrJoin(shape, ", "),
                                                     "] but the model "
                                                     "config needs [",
                                                     absl::StrJoin(want, ", "),
                                                     "]; check that the config matches the "
                                                     "checkpoint"));
    buf.resize((prefix_ok ? shape[0] : p.rows) * p.cols);
    ZT_RETURN_IF_ERROR(r.read_f32(name, buf));
    buf.resize(p.rows * p.cols);
    float* dst = out.data() + p.slot->offset + p.row_offset * p.cols;
    if (!p.transposed) {
      std::copy(buf.begin(), buf.end(), dst);
    } else {  // (cols, rows) -> (rows, cols)
      for (int64_t i = 0; i < p.cols; ++i)
        for (int64_t j = 0; j < p.rows; ++j) dst[j * p.cols + i] = buf[i * p.rows + j];
    }
  }
  return absl::OkStatus();
}

std::vector<HfTensor> hf_unit_tensors(const ModelConfig& c, const ParamLayout& layout, int u,
                                      std::span<const float> unit) {
  ZT_CHECK(unit.size() == layout.units()[u].numel);
  std::vector<HfTensor> out;
  for (const HfPiece& p : hf_pieces(c, layout, u)) {
    HfTensor t;
    t.name = p.hf_name;
    const bool vec = p.slot->shape.size() == 1;
    t.shape = vec ? std::vector<int64_t>{p.rows}
                  : p.transposed ? std::vector<int64_t>{p.cols, p.rows}
                                 : std::vector<int64_t>{p.rows, p.cols};
    const float* src = unit.data() + p.slot->offset + p.row_offset * p.cols;
    t.values.resize(p.rows * p.cols);
    if (!p.transposed) {
      std::copy(src, src + p.rows * p.cols, t.values.begin());
    } else {  // (rows, cols) -> (cols, rows)
      for (int64_t i = 0; i < p.cols; ++i)
        for (int64_t j = 0; j < p.rows; ++j) t.values[i * p.rows + j] = src[j * p.cols + i];
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace zt
