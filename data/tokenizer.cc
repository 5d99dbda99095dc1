#include "data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"
#include "data/spm_bridge.h"

namespace zt {
namespace {

constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD
constexpr char kHint[] =
    "Pass a sentencepiece .model file (e.g. LLaMA-2's tokenizer.model) with --tokenizer.";

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer '", path, "' does not exist or is not a file. ", kHint));
  }
  if (!std::ifstream(path, std::ios::binary).good()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", path, "' cannot be read (check permissions). ", kHint));
  }
  auto sp = std::make_shared<spm::Processor>();
  const std::string error = sp->load(path);
  if (!error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", path, "' is not a sentencepiece model (", error, "). ", kHint));
  }
  return Tokenizer(std::move(sp));
}

int Tokenizer::vocab_size() const { return sp_->piece_size(); }
int Tokenizer::bos_id() const { return sp_->bos_id(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const std::string error = sp_->encode(text, &ids);
  ZT_CHECK(error.empty());  // only fails for an unloaded model
  return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  // Decode runs of valid ids with sentencepiece; invalid ids become U+FFFD.
  std::string text;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string piece;
    const std::string error = sp_->decode(run, &piece);
    ZT_CHECK(error.empty());  // every id in `run` is in range
    text += piece;
    run.clear();
  };
  for (int id : ids) {
    if (id >= 0 && id < vocab_size()) {
      run.push_back(id);
    } else {
      flush();
      text += kReplacementChar;
    }
  }
  flush();
  return text;
}

std::string Tokenizer::decode_token(int id) const {
  if (id < 0 || id >= vocab_size()) return kReplacementChar;
  if (sp_->is_control(id)) return "";
  const std::string& piece = sp_->id_to_piece(id);
  if (sp_->is_byte(id)) {  // "<0xNN>"
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  }
  if (sp_->is_unknown(id)) return " \xE2\x81\x87 ";  // " ⁇ ", as sentencepiece decodes <unk>
  return absl::StrReplaceAll(piece, {{"\xE2\x96\x81", " "}});  // "▁" (U+2581) -> " "
}

}  // namespace zt
