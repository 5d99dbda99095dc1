#include "trainer/model_source.h"

#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/progress.h"
#include "common/status.h"
#include "model/hf_weights.h"
#include "model/init.h"
#include "model/llmc_weights.h"
#include "model/safetensors.h"

namespace zt {

absl::StatusOr<ModelConfig> resolve_model(const std::string& model, const std::string& init_from,
                                          int64_t max_seq_len) {
  ZT_ASSIGN_OR_RETURN(ModelConfig c, model_of(model, init_from, max_seq_len));
  if (init_from.empty() || model.empty()) return c;
  ZT_RETURN_IF_ERROR(check_same_model(model, c, "--init_from '" + init_from + "'"));
  return c;
}

absl::Status check_same_model(const std::string& model, const ModelConfig& c,
                              const std::string& source) {
  if (model.empty()) return absl::OkStatus();
  ZT_ASSIGN_OR_RETURN(ModelConfig p, preset(model));
  std::string diff;
  std::map<std::string, std::string> theirs;  // c's shape fields by name
  for_each_field(c, [&](const char* name, auto value, bool shapes) {
    if (shapes) theirs[name] = absl::StrCat(value);
  });
  for_each_field(p, [&](const char* name, auto value, bool shapes) {
    if (!shapes) return;
    const std::string ours = absl::StrCat(value);
    const auto it = theirs.find(name);
    const std::string other = it == theirs.end() ? "absent" : it->second;
    if (it != theirs.end()) theirs.erase(it);
    if (ours != other)
      absl::StrAppend(&diff, diff.empty() ? "" : ", ",
                      std::string_view(name) == "arch" ? "architecture" : name, " ", ours, " vs ",
                      other);
  });
  for (const auto& [name, value] : theirs)  // a feature only c has
    absl::StrAppend(&diff, diff.empty() ? "" : ", ", name, " absent vs ", value);
  if (!diff.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--model ", model, " and ", source, " are different models (", diff, "); give ", source,
        " alone (its config is used), or a --model that matches it"));
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> model_of(const std::string& model, const std::string& init_from,
                                     int64_t max_seq_len) {
  ModelConfig c;
  if (!init_from.empty() && is_llmc_model_file(init_from)) {
    ZT_ASSIGN_OR_RETURN(const LlmcModelFile f, LlmcModelFile::open(init_from));
    c = f.config();
    ZT_RETURN_IF_ERROR(set_max_seq_len(c, max_seq_len, init_from));
  } else if (!init_from.empty()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(init_from, ec))
      return absl::InvalidArgumentError(absl::StrCat(
          "--init_from '", init_from, "' is a file but not an llm.c GPT-2 model file (no magic ",
          "20240326); give a Hugging Face model directory or an llm.c .bin"));
    const std::string path = init_from + "/config.json";
    ZT_ASSIGN_OR_RETURN(std::string text,
                        read_file(path, "--init_from needs a Hugging Face model directory; file"));
    ZT_ASSIGN_OR_RETURN(c, config_from_hf_json(text, path));
    ZT_RETURN_IF_ERROR(set_max_seq_len(c, max_seq_len, path));
  } else {
    ZT_ASSIGN_OR_RETURN(c, preset(model));
    ZT_RETURN_IF_ERROR(set_max_seq_len(c, max_seq_len, "--model " + model));
  }
  return c;
}

absl::Status load_initial_params(const ModelConfig& c, const ParamLayout& layout,
                                 const std::string& init_from, uint64_t seed, Engine& engine,
                                 bool report) {
  std::vector<float> host;
  Progress progress(init_from.empty() ? "initialising weights" : "loading weights " + init_from,
                    (int64_t)layout.total_numel() * 4, report);
  if (init_from.empty()) {
    for (int u = 0; u < layout.num_units(); ++u) {
      host.resize(layout.units()[u].numel);
      init_unit(c, layout.units()[u], u, seed, host);
      engine.set_unit_params(u, host);
      progress.add((int64_t)host.size() * 4);
    }
    return absl::OkStatus();
  }
  std::optional<SafeTensorsModel> hf;
  std::optional<LlmcModelFile> llmc;
  HfTensorReader reader;
  if (is_llmc_model_file(init_from)) {  // an llm.c GPT-2 .bin
    ZT_ASSIGN_OR_RETURN(llmc, LlmcModelFile::open(init_from));
    reader = llmc->reader();
  } else {
    ZT_ASSIGN_OR_RETURN(hf, open_hf_model_dir(init_from));
    reader = reader_of(*hf);
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    host.resize(layout.units()[u].numel);
    ZT_RETURN_IF_ERROR(load_hf_unit(reader, c, layout, u, host));
    engine.set_unit_params(u, host);
    progress.add((int64_t)host.size() * 4);
  }
  return absl::OkStatus();
}

absl::StatusOr<Tokenizer> load_tokenizer_for(const std::string& path, const ModelConfig& c) {
  ZT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(path));
  if (tok.vocab_size() > c.vocab_size)
    return absl::InvalidArgumentError(
        absl::StrCat("the tokenizer '", path, "' has ", tok.vocab_size(),
                     " tokens but the model's vocabulary has only ", c.vocab_size,
                     "; use a model whose vocab_size is at least the tokenizer's"));
  return tok;
}

}  // namespace zt
