// zerotrain export (see export.h).
#include "trainer/export.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/dtype.h"
#include "common/file.h"
#include "common/status.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/layout.h"
#include "model/safetensors.h"
#include "trainer/checkpoint.h"
#include "trainer/model_source.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// Tensors gathered into the current shard, written when it is full.
struct ShardWriter {
  std::string out;
  DType dtype;
  int64_t max_bytes;
  std::vector<std::pair<std::string, std::vector<int64_t>>> pending;  // name, shape
  std::vector<std::vector<std::byte>> data;
  int64_t bytes = 0, total = 0;
  std::vector<std::vector<std::string>> shards;  // tensor names per written shard

  absl::Status add(const HfTensor& t) {
    const int64_t b = (int64_t)(t.values.size() * dtype_size(dtype));
    if (!pending.empty() && bytes + b > max_bytes) ZT_RETURN_IF_ERROR(flush());
    std::vector<std::byte> raw(b);
    convert(t.values.data(), DType::kF32, raw.data(), dtype, t.values.size());
    pending.push_back({t.name, t.shape});
    data.push_back(std::move(raw));
    bytes += b, total += b;
    return absl::OkStatus();
  }
  // Shard k as model-k.tmp.safetensors until the count is known (renamed by finish()).
  absl::Status flush() {
    if (pending.empty()) return absl::OkStatus();
    std::vector<NamedTensor> tensors;
    std::vector<std::string> names;
    for (size_t i = 0; i < pending.size(); ++i) {
      tensors.push_back({pending[i].first, dtype, pending[i].second, data[i]});
      names.push_back(pending[i].first);
    }
    ZT_RETURN_IF_ERROR(write_safetensors(temp_name(shards.size()), tensors, {{"format", "pt"}}));
    shards.push_back(std::move(names));
    pending.clear(), data.clear();
    bytes = 0;
    return absl::OkStatus();
  }
  std::string temp_name(size_t k) const {
    return (fs::path(out) / absl::StrFormat("model-%05d.tmp.safetensors", k + 1)).string();
  }
  // Final names and the index.
  absl::Status finish() {
    ZT_RETURN_IF_ERROR(flush());
    nlohmann::json index = {{"metadata", {{"total_size", total}}},
                            {"weight_map", nlohmann::json::object()}};
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string name =
          absl::StrFormat("model-%05d-of-%05d.safetensors", k + 1, shards.size());
      std::error_code ec;
      fs::rename(temp_name(k), fs::path(out) / name, ec);
      if (ec)
        return absl::InternalError(absl::StrCat("cannot rename '", temp_name(k), "' to '", name,
                                                "' in '", out, "': ", ec.message()));
      for (const std::string& t : shards[k]) index["weight_map"][t] = name;
    }
    ZT_RETURN_IF_ERROR(write_file_atomic((fs::path(out) / "model.safetensors.index.json").string(),
                                         index.dump(2) + "\n"));
    // An earlier export into the same directory with another shard count left shards the new
    // index does not name: remove them (only files of that naming pattern).
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out, ec)) {
      const std::string f = e.path().filename().string();
      const bool shard_name = f.starts_with("model-") && f.ends_with(".safetensors") &&
                              f.find("-of-") != std::string::npos;
      if (shard_name && f.find(absl::StrFormat("-of-%05d.", shards.size())) == std::string::npos)
        fs::remove(e.path(), ec);
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status run_export(const ExportOptions& o) {
  if (o.checkpoint.empty() || o.out.empty())
    return absl::InvalidArgumentError("export needs --checkpoint DIR --out DIR");
  ZT_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(o.dtype));
  if (o.max_shard_bytes < 1) return absl::InvalidArgumentError("--max_shard_size must be positive");
  ZT_ASSIGN_OR_RETURN(const std::string dir, require_checkpoint(o.checkpoint, "--checkpoint"));
  ZT_ASSIGN_OR_RETURN(const nlohmann::json meta, read_checkpoint_meta(dir));
  if (!checkpoint_meta_checked(meta))
    std::fprintf(stderr, "%s\n", unchecked_meta_notice(dir).c_str());
  ZT_ASSIGN_OR_RETURN(const ModelConfig c, checkpoint_model(meta, dir));
  int bos = -1, eos = -1;  // -1: not written
  std::string tokenizer_file;  // the file --tokenizer names (or its directory holds)
  if (!o.tokenizer.empty()) {
    ZT_ASSIGN_OR_RETURN(const Tokenizer tok, load_tokenizer_for(o.tokenizer, c));
    bos = tok.bos_id(), eos = tok.eos_id();
    tokenizer_file = tok.path();
  } else if (c.family == Family::kGPT2) {
    bos = eos = 50256;  // GPT-2's <|endoftext|>
  }
  // Only ids the vocabulary holds (a tiny test model's 256 tokens have no 50256): transformers
  // warns on every load of a config naming a token the embedding lacks.
  if (bos >= c.vocab_size) bos = -1;
  if (eos >= c.vocab_size) eos = -1;
  std::error_code ec;
  if (fs::exists(fs::path(o.out) / "meta.json", ec) || fs::exists(fs::path(o.out) / "latest", ec))
    return absl::InvalidArgumentError(
        absl::StrCat("--out '", o.out, "' holds a zerotrain checkpoint; export into another "
                     "directory"));
  fs::create_directories(o.out, ec);
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create --out '", o.out, "': ", ec.message()));
  const ParamLayout layout(c);
  ShardWriter w{o.out, dtype, o.max_shard_bytes};
  ZT_RETURN_IF_ERROR(read_checkpoint(
      dir, meta, layout,
      [&](int u, std::span<const float> master, std::span<const std::span<const float>>) {
        for (const HfTensor& t : hf_unit_tensors(c, layout, u, master))
          ZT_RETURN_IF_ERROR(w.add(t));
        return absl::OkStatus();
      }));
  ZT_RETURN_IF_ERROR(w.finish());
  const char* torch_dtype = dtype == DType::kBF16  ? "bfloat16"
                            : dtype == DType::kF16 ? "float16"
                                                   : "float32";
  ZT_RETURN_IF_ERROR(write_file_atomic((fs::path(o.out) / "config.json").string(),
                                       hf_config_json(c, torch_dtype, bos, eos)));
  nlohmann::json gen = {{"_from_model_config", true}};
  if (bos >= 0) gen["bos_token_id"] = bos;
  if (eos >= 0) gen["eos_token_id"] = eos;
  ZT_RETURN_IF_ERROR(
      write_file_atomic((fs::path(o.out) / "generation_config.json").string(), gen.dump(2) + "\n"));
  if (!tokenizer_file.empty()) {  // under the name transformers looks for
    ZT_ASSIGN_OR_RETURN(const std::string bytes, read_file(tokenizer_file, "tokenizer"));
    const char* name = tokenizer_file.ends_with(".json") ? "tokenizer.json" : "tokenizer.model";
    ZT_RETURN_IF_ERROR(write_file_atomic((fs::path(o.out) / name).string(), bytes));
  }
  std::printf("exported '%s' (step %lld) to '%s': %d shard(s), %s\n", dir.c_str(),
              (long long)meta.value("step", (int64_t)0), o.out.c_str(), (int)w.shards.size(),
              std::string(dtype_name(dtype)).c_str());
  return absl::OkStatus();
}

}  // namespace zt
