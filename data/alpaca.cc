#include "data/alpaca.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file.h"
#include "common/json.h"
#include "common/status.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace zt {

namespace {
constexpr int32_t kMaskMagic = 20241201;
constexpr size_t kMaskHeaderBytes = 256 * 4;
}  // namespace

absl::StatusOr<std::vector<InstructionExample>> parse_alpaca(std::string_view text,
                                                             const std::string& where) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("instruction data '", where, "': ", why));
  };
  auto parsed = parse_json(text, where, 8);
  if (!parsed.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("instruction data ", parsed.status().message()));
  const nlohmann::json& j = *parsed;
  if (!j.is_array())
    return bad("expected a JSON list of {\"instruction\", \"input\", \"output\"} records");
  if (j.empty()) return bad("the list is empty");
  std::vector<InstructionExample> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& r = j[i];
    if (!r.is_object()) return bad(absl::StrCat("record ", i, " is not an object"));
    InstructionExample e;
    for (auto [key, dst, required] :
         {std::tuple{"instruction", &e.instruction, true}, std::tuple{"input", &e.input, false},
          std::tuple{"output", &e.output, true}}) {
      if (!r.contains(key)) {
        if (required) return bad(absl::StrCat("record ", i, " has no \"", key, "\""));
        continue;
      }
      if (!r[key].is_string())
        return bad(absl::StrCat("record ", i, ": \"", key, "\" is ", r[key].type_name(),
                                ", not a string"));
      *dst = r[key].get<std::string>();
    }
    out.push_back(std::move(e));
  }
  return out;
}

PromptTemplate alpaca_template() {
  return {
      "Below is an instruction that describes a task, paired with an input that provides "
      "further context. Write a response that appropriately completes the request.\n\n"
      "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n",
      "Below is an instruction that describes a task. Write a response that appropriately "
      "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"};
}

absl::StatusOr<PromptTemplate> load_template(const std::string& path) {
  ZT_ASSIGN_OR_RETURN(const std::string text, read_file(path, "prompt template"));
  ZT_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json(text, path, 8));
  PromptTemplate t;
  for (auto [key, dst] : {std::pair{"prompt_input", &t.prompt_input},
                          std::pair{"prompt_no_input", &t.prompt_no_input}}) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string())
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt template '", path, "': needs a string \"", key,
          "\" ({\"prompt_input\": ..., \"prompt_no_input\": ...}, with {instruction} and "
          "{input})"));
    *dst = j[key].get<std::string>();
  }
  return t;
}

std::string format_prompt(const PromptTemplate& t, const InstructionExample& e) {
  return absl::StrReplaceAll(e.input.empty() ? t.prompt_no_input : t.prompt_input,
                             {{"{instruction}", e.instruction}, {"{input}", e.input}});
}

std::string mask_path_for(const std::string& shard_path) {
  const std::string bin = ".bin";
  if (shard_path.size() > bin.size() &&
      shard_path.compare(shard_path.size() - bin.size(), bin.size(), bin) == 0)
    return shard_path.substr(0, shard_path.size() - bin.size()) + ".mask";
  return shard_path + ".mask";
}

absl::Status write_mask(const std::string& path, const LossMask& mask) {
  std::string bytes(kMaskHeaderBytes, '\0');
  const int32_t header[4] = {kMaskMagic, 1, (int32_t)mask.trained.size(), mask.seq_len};
  std::memcpy(bytes.data(), header, sizeof header);
  bytes.append(reinterpret_cast<const char*>(mask.trained.data()), mask.trained.size());
  return write_file_atomic(path, bytes);
}

absl::StatusOr<LossMask> read_mask(const std::string& path) {
  ZT_ASSIGN_OR_RETURN(const std::string bytes, read_file(path, "loss mask"));
  int32_t header[4] = {0, 0, 0, 0};
  if (bytes.size() >= kMaskHeaderBytes) std::memcpy(header, bytes.data(), sizeof header);
  if (bytes.size() < kMaskHeaderBytes || header[0] != kMaskMagic || header[1] != 1 ||
      header[2] < 0 || header[3] < 1 || bytes.size() != kMaskHeaderBytes + (size_t)header[2])
    return absl::InvalidArgumentError(
        absl::StrCat("loss mask '", path, "' is not a zerotrain mask file (magic ", kMaskMagic,
                     ", version 1, one byte per token after a 1024-byte header), or is truncated"));
  return LossMask{std::vector<uint8_t>(bytes.begin() + kMaskHeaderBytes, bytes.end()), header[3]};
}

absl::Status prepare_instructions(const InstructionPrepareOptions& o) {
  if (o.seq_len < 2)
    return absl::InvalidArgumentError(absl::StrCat("--seq_len ", o.seq_len, " must be at least 2"));
  if (!(o.val_fraction >= 0 && o.val_fraction <= 0.5))
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction must be in [0, 0.5], got ", o.val_fraction));
  ZT_ASSIGN_OR_RETURN(const Tokenizer tok, Tokenizer::load(o.tokenizer_path));
  if (tok.eos_id() < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("the tokenizer '", o.tokenizer_path, "' has no EOS token to end responses"));
  ZT_ASSIGN_OR_RETURN(const std::string text, read_file(o.input, "instruction data (--input)"));
  ZT_ASSIGN_OR_RETURN(const std::vector<InstructionExample> examples, parse_alpaca(text, o.input));
  PromptTemplate tmpl = alpaca_template();
  if (!o.template_path.empty()) {
    ZT_ASSIGN_OR_RETURN(tmpl, load_template(o.template_path));
  }
  const size_t T = (size_t)o.seq_len;
  struct Seq {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> mask;
  };
  std::vector<Seq> seqs;
  int64_t skipped = 0, trained = 0;
  for (const InstructionExample& e : examples) {
    Seq s;
    if (tok.bos_id() >= 0) s.tokens.push_back(tok.bos_id());
    for (int id : tok.encode(format_prompt(tmpl, e))) s.tokens.push_back(id);
    s.mask.assign(s.tokens.size(), 0);
    for (int id : tok.encode(e.output)) s.tokens.push_back(id);
    s.tokens.push_back(tok.eos_id());
    s.mask.resize(s.tokens.size(), 1);
    if (s.tokens.size() > T) {
      ++skipped;
      continue;
    }
    trained += (int64_t)(s.tokens.size() - std::count(s.mask.begin(), s.mask.end(), 0));
    s.tokens.resize(T, tok.eos_id());
    s.mask.resize(T, 0);
    seqs.push_back(std::move(s));
  }
  if (seqs.empty())
    return absl::InvalidArgumentError(absl::StrCat("no example of '", o.input, "' fits --seq_len ",
                                                   T, " tokens (", skipped,
                                                   " longer); raise --seq_len"));
  const size_t n_val = (size_t)std::llround(o.val_fraction * (double)seqs.size());
  const size_t n_train = seqs.size() - std::min(n_val, seqs.size() - 1);
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create --out '", o.out_dir, "': ", ec.message()));
  auto write = [&](const std::string& name, size_t begin, size_t end) -> absl::Status {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> mask;
    for (size_t i = begin; i < end; ++i) {
      tokens.insert(tokens.end(), seqs[i].tokens.begin(), seqs[i].tokens.end());
      mask.insert(mask.end(), seqs[i].mask.begin(), seqs[i].mask.end());
    }
    tokens.push_back(tok.eos_id());  // the last sequence's T+1-th token (a masked target)
    mask.push_back(0);
    const std::string path = (std::filesystem::path(o.out_dir) / name).string();
    ZT_RETURN_IF_ERROR(write_shard(path, tokens, tok.vocab_size()));
    return write_mask(mask_path_for(path), LossMask{std::move(mask), o.seq_len});
  };
  ZT_RETURN_IF_ERROR(write("train_000000.bin", 0, n_train));
  if (n_train < seqs.size()) ZT_RETURN_IF_ERROR(write("val_000000.bin", n_train, seqs.size()));
  std::printf(
      "prepared %zu examples of '%s' as sequences of %zu tokens (%zu train, %zu val; %lld "
      "longer than T skipped; %lld response tokens trained) in %s\n",
      seqs.size(), o.input.c_str(), T, n_train, seqs.size() - n_train, (long long)skipped,
      (long long)trained, o.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace zt
