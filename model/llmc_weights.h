// llm.c GPT-2 model files (gpt2_124M.bin and friends) as a weight source for --init_from.
// Layout, as llm.c's train_gpt2.py write_model writes it: 256 int32 header (magic 20240326;
// version 3 = fp32 tensors, 5 = bf16; then maxT, V, L, NH, C, Vp), then the tensors in llm.c's
// order: wte (Vp, C: the vocabulary padded to a multiple of 128), wpe (maxT, C), and for each of
// ln_1.w, ln_1.b, c_attn.w (3C, C), c_attn.b, c_proj.w (C, C), c_proj.b, ln_2.w, ln_2.b,
// c_fc.w (4C, C), c_fc.b, mlp c_proj.w (C, 4C), mlp c_proj.b the L layers' tensors back to
// back, then ln_f.w, ln_f.b. Weights are nn.Linear's (out, in).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/hf_weights.h"

namespace zt {

// Whether `path` is a regular file starting with llm.c's model magic.
bool is_llmc_model_file(const std::string& path);

class LlmcModelFile {
 public:
  // Maps `path` and checks its header and size. Errors (InvalidArgument, naming the file): not
  // an llm.c model file (magic), an unknown version (3 and 5 are read), a header that is not a
  // valid GPT-2 (non-positive sizes, Vp < V, C not a multiple of NH), a file whose size is not
  // the header's tensors exactly.
  static absl::StatusOr<LlmcModelFile> open(const std::string& path);
  // GPT-2 with maxT positions, V tokens, L layers, NH heads, C channels, MLP 4C.
  const ModelConfig& config() const { return config_; }
  // The tensors under transformers' GPT2LMHeadModel names and shapes (Conv1D weights (in, out),
  // wte without the padding rows), for load_hf_unit. Valid while this file object lives.
  HfTensorReader reader() const;

 private:
  struct Data;
  std::shared_ptr<const Data> data_;
  ModelConfig config_;
};

}  // namespace zt
