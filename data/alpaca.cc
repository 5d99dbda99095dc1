#include "data/alpaca.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/edit_distance.h"
#include "common/file.h"
#include "common/json.h"
#include "common/progress.h"
#include "common/status.h"
#include "data/mask.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace zt {

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

namespace {

// The placeholders format_prompt fills.
constexpr std::string_view kInstruction = "{instruction}", kInput = "{input}";

// The template text of `key` in the file `path`: each "{name}" in it (a name of 1 to 40 bytes
// without braces, quotes or line breaks, as a placeholder typed by hand; braces around JSON or
// code are not one) must be a known placeholder, else it would stay in every prompt as text
// and what it meant to place would be dropped; and `required` must appear.
absl::Status check_placeholders(const std::string& text, const char* key, const std::string& path,
                                std::initializer_list<std::string_view> required) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt template '", path, "': \"", key, "\" ", why));
  };
  for (size_t open = text.find('{'); open != std::string::npos; open = text.find('{', open + 1)) {
    const size_t close = text.find_first_of("{}\"\n", open + 1);
    if (close == std::string::npos || text[close] != '}' || close == open + 1 ||
        close - open - 1 > 40)
      continue;
    const std::string_view name = std::string_view(text).substr(open, close - open + 1);
    if (name == kInstruction || name == kInput) continue;
    const std::string_view closest =
        edit_distance(name, kInstruction) <= edit_distance(name, kInput) ? kInstruction : kInput;
    return bad(absl::StrCat("has the placeholder ", std::string(name), ", which is not one of ",
                            std::string(kInstruction), " and ", std::string(kInput),
                            " (did you mean ", std::string(closest),
                            "?): it would stay in every prompt as text"));
  }
  for (std::string_view p : required)
    if (text.find(p) == std::string::npos)
      return bad(absl::StrCat("has no ", std::string(p), ": every example's ",
                              p == kInput ? "input" : "instruction",
                              " would be left out of its prompt; add it"));
  return absl::OkStatus();
}

}  // namespace

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
  ZT_RETURN_IF_ERROR(
      check_placeholders(t.prompt_input, "prompt_input", path, {kInstruction, kInput}));
  ZT_RETURN_IF_ERROR(
      check_placeholders(t.prompt_no_input, "prompt_no_input", path, {kInstruction}));
  return t;
}

std::string format_prompt(const PromptTemplate& t, const InstructionExample& e) {
  return absl::StrReplaceAll(e.input.empty() ? t.prompt_no_input : t.prompt_input,
                             {{"{instruction}", e.instruction}, {"{input}", e.input}});
}

absl::StatusOr<InstructionPrepareReport> prepare_instructions(const InstructionPrepareOptions& o) {
  if (o.seq_len < 2)
    return absl::InvalidArgumentError(absl::StrCat("--seq_len ", o.seq_len, " must be at least 2"));
  if (!(o.val_fraction >= 0 && o.val_fraction <= 0.5))
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction must be in [0, 0.5], got ", o.val_fraction));
  ZT_ASSIGN_OR_RETURN(const Tokenizer tok, Tokenizer::load(o.tokenizer_path));
  ZT_RETURN_IF_ERROR(tok.check_encodes("prepare --format alpaca"));
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
  InstructionPrepareReport rep;
  rep.seq_len = o.seq_len;
  std::vector<std::vector<Piece>> kept;  // per kept example, its pieces
  Progress progress("tokenizing examples", (int64_t)examples.size(), true, /*items=*/true);
  for (const InstructionExample& e : examples) {
    progress.add(1);
    Piece s;
    if (tok.bos_id() >= 0) s.tokens.push_back(tok.bos_id());
    for (int id : tok.encode(format_prompt(tmpl, e))) s.tokens.push_back(id);
    s.flags.assign(s.tokens.size(), 0);
    for (int id : tok.encode(e.output)) s.tokens.push_back(id);
    s.tokens.push_back(tok.eos_id());
    s.flags.resize(s.tokens.size(), kMaskTrained);
    rep.overlong += s.tokens.size() > T;
    std::vector<Piece> pieces = cut(s, T, o.overlong, o.pack);
    if (pieces.empty()) continue;
    for (const Piece& p : pieces) rep.tokens += (int64_t)p.tokens.size();
    kept.push_back(std::move(pieces));
  }
  if (kept.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("no example of '", o.input, "' fits --seq_len ", T, " tokens (", rep.overlong,
                     " longer); raise --seq_len, or --overlong truncate or split"));
  rep.examples = (int64_t)kept.size();
  const size_t n_val = (size_t)std::llround(o.val_fraction * (double)kept.size());
  const size_t n_train = kept.size() - std::min(n_val, kept.size() - 1);
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create --out '", o.out_dir, "': ", ec.message()));
  // Examples [begin, end) as rows into the shard `name` and its mask.
  auto write = [&](const std::string& name, size_t begin, size_t end) -> absl::Status {
    std::vector<Piece> pieces;
    for (size_t i = begin; i < end; ++i)
      pieces.insert(pieces.end(), kept[i].begin(), kept[i].end());
    const uint32_t eos = tok.eos_id();
    return write_rows((std::filesystem::path(o.out_dir) / name).string(),
                      lay_out(pieces, T, o.pack, eos), o.seq_len, eos, tok.vocab_size(), &rep.rows,
                      &rep.trained);
  };
  ZT_RETURN_IF_ERROR(write("train_000000.bin", 0, n_train));
  if (n_train < kept.size()) ZT_RETURN_IF_ERROR(write("val_000000.bin", n_train, kept.size()));
  remove_stale_shards(o.out_dir, 1, n_train < kept.size());
  static constexpr const char* kOverlong[] = {"skipped", "truncated", "split"};
  std::printf(
      "prepared %lld examples of '%s' (%zu train, %zu val; %lld longer than T = %zu %s) as %lld "
      "%s rows of T tokens, %.1f%% of them example tokens; %lld response tokens trained; in %s\n",
      (long long)rep.examples, o.input.c_str(), n_train, kept.size() - n_train,
      (long long)rep.overlong, T, kOverlong[(int)o.overlong], (long long)rep.rows,
      o.pack ? "packed" : "padded", 100 * rep.fill(), (long long)rep.trained, o.out_dir.c_str());
  return rep;
}

}  // namespace zt
