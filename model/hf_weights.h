// Hugging Face tensor names <-> our units. GPT-2 (transformers GPT2LMHeadModel: Conv1D weights
// stored (in, out), fused c_attn) and LLaMA (LlamaForCausalLM: nn.Linear (out, in), separate
// q/k/v and gate/up, which we fuse into qkv.w and fc.w by rows).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/layout.h"

namespace zt {

// Where a HF tensor lands: rows [row_offset, row_offset + rows) of internal tensor `slot`
// (cols columns). transposed: the HF tensor is stored (cols, rows), as GPT-2's Conv1D.
struct HfPiece {
  std::string hf_name;
  const TensorSlot* slot;
  int64_t row_offset, rows, cols;
  bool transposed;
  // The checkpoint's tensor may have more rows; its first `rows` are read (GPT-2's learned
  // positions under a shorter --max_seq_len).
  bool prefix = false;
};

// The pieces of unit u (0 = embedding, 1..L = blocks, L+1 = head) in HF names.
std::vector<HfPiece> hf_pieces(const ModelConfig& c, const ParamLayout& layout, int u);

// Reads named tensors as fp32 (a safetensors file or HF model directory; see reader_of).
struct HfTensorReader {
  std::function<bool(const std::string&)> contains;
  std::function<absl::StatusOr<std::vector<int64_t>>(const std::string&)> shape;
  std::function<absl::Status(const std::string&, std::span<float>)> read_f32;
};
// Adapts SafeTensorsFile / SafeTensorsModel; `prefix` is prepended to every name (e.g. "grad."
// for the reference fixtures' gradients).
template <class Source>
HfTensorReader reader_of(const Source& s, std::string prefix = "") {
  return {[&s, prefix](const std::string& n) { return s.contains(prefix + n); },
          [&s, prefix](const std::string& n) -> absl::StatusOr<std::vector<int64_t>> {
            auto i = s.info(prefix + n);
            if (!i.ok()) return i.status();
            return i->shape;
          },
          [&s, prefix](const std::string& n, std::span<float> out) {
            return s.read_f32(prefix + n, out);
          }};
}

// Fills unit u's fp32 values (layout order) from HF tensors. GPT-2 names are accepted with or
// without the "transformer." prefix. Errors: a missing tensor or a shape that disagrees with
// the model config (names the tensor, both shapes, and suggests checking --model).
absl::Status load_hf_unit(const HfTensorReader& r, const ModelConfig& c, const ParamLayout& layout,
                          int u, std::span<float> out);

// A Hugging Face tensor of a unit, as fp32: the inverse of load_hf_unit's reading.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // row-major, shape's product elements
};
// The tensors of unit u from its fp32 values (layout order), named and shaped as transformers
// saves GPT2LMHeadModel ("transformer." prefix, Conv1D weights (in, out)) and LlamaForCausalLM
// (q/k/v and gate/up split back out). load_hf_unit of them gives `unit` back exactly.
std::vector<HfTensor> hf_unit_tensors(const ModelConfig& c, const ParamLayout& layout, int u,
                                      std::span<const float> unit);

}  // namespace zt
