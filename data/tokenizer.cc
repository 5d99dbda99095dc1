#include "data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"
#include "data/hf_vocab.h"
#include "data/spm_bridge.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr char kHint[] =
    "Pass a sentencepiece .model file (e.g. LLaMA-2's tokenizer.model), a Hugging Face "
    "tokenizer.json, or the model directory holding one, with --tokenizer.";

class SentencePiece final : public TokenizerModel {
 public:
  explicit SentencePiece(std::unique_ptr<spm::Processor> sp) : sp_(std::move(sp)) {}
  int vocab_size() const override { return sp_->piece_size(); }
  int bos_id() const override { return sp_->bos_id(); }
  int eos_id() const override { return sp_->eos_id(); }
  bool encodes() const override { return true; }
  std::vector<int> encode(std::string_view text) const override {
    std::vector<int> ids;
    const std::string error = sp_->encode(text, &ids);
    ZT_CHECK(error.empty());  // only fails for an unloaded model
    return ids;
  }
  std::string decode(std::span<const int> ids) const override {
    std::string text;
    const std::string error = sp_->decode(std::vector<int>(ids.begin(), ids.end()), &text);
    ZT_CHECK(error.empty());  // every id is in range
    return text;
  }
  std::string decode_token(int id) const override {
    if (sp_->is_control(id)) return "";
    const std::string& piece = sp_->id_to_piece(id);
    if (sp_->is_byte(id))  // "<0xNN>"
      return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    if (sp_->is_unknown(id)) return " \xE2\x81\x87 ";  // " ⁇ ", as sentencepiece decodes <unk>
    return absl::StrReplaceAll(piece, {{"\xE2\x96\x81", " "}});  // "▁" (U+2581) -> " "
  }

 private:
  std::unique_ptr<spm::Processor> sp_;
};

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::load(const std::string& given) {
  std::error_code ec;
  std::string path = given;
  if (fs::is_directory(given, ec)) {
    for (const char* name : kTokenizerFiles)
      if (fs::is_regular_file(fs::path(given) / name, ec)) {
        path = (fs::path(given) / name).string();
        break;
      }
    if (path == given)
      return absl::NotFoundError(absl::StrCat("tokenizer directory '", given,
                                              "' holds neither tokenizer.model nor "
                                              "tokenizer.json. ",
                                              kHint));
  }
  if (!fs::is_regular_file(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer '", path, "' does not exist or is not a file. ", kHint));
  }
  if (!std::ifstream(path, std::ios::binary).good()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", path, "' cannot be read (check permissions). ", kHint));
  }
  if (absl::EndsWith(path, ".json")) {
    ZT_ASSIGN_OR_RETURN(HfVocab v, HfVocab::load(path));
    return Tokenizer(std::make_shared<const HfVocab>(std::move(v)), path);
  }
  auto sp = std::make_unique<spm::Processor>();
  const std::string error = sp->load(path);
  if (!error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", path, "' is not a sentencepiece model (", error, "). ", kHint));
  }
  return Tokenizer(std::make_shared<const SentencePiece>(std::move(sp)), path);
}

absl::Status Tokenizer::check_encodes(std::string_view needed_by) const {
  if (m_->encodes()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(needed_by), " needs the tokenizer to encode text, and zerotrain reads '", path_,
      "' (a Hugging Face tokenizer.json) to decode only: make plain-text token shards with the "
      "model's own tokenizer (python3 scripts/prepare_hf_tokens.py --tokenizer ",
      path_,
      " --input FILE --out DIR) and train on those; instruction data and packed rows need a "
      "sentencepiece .model for now"));
}

int Tokenizer::vocab_size() const { return m_->vocab_size(); }
int Tokenizer::bos_id() const { return m_->bos_id(); }
int Tokenizer::eos_id() const { return m_->eos_id(); }

std::vector<int> Tokenizer::encode(std::string_view text) const {
  if (text.empty()) return {};
  ZT_CHECK(m_->encodes());  // callers check check_encodes() first
  return m_->encode(text);
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  // Decode runs of valid ids with the model; invalid ids become U+FFFD.
  std::string text;
  size_t begin = 0;
  for (size_t i = 0; i <= ids.size(); ++i) {
    if (i < ids.size() && ids[i] >= 0 && ids[i] < vocab_size()) continue;
    if (i > begin) text += m_->decode(ids.subspan(begin, i - begin));
    if (i < ids.size()) text += kReplacementChar;
    begin = i + 1;
  }
  return text;
}

std::string Tokenizer::decode_token(int id) const {
  if (id < 0 || id >= vocab_size()) return kReplacementChar;
  return m_->decode_token(id);
}

}  // namespace zt
