// A Hugging Face tokenizer.json (the `tokenizers` library's file, which Llama 3, Qwen2, Mistral
// and GPT-2 checkpoints ship) read for decoding: each id's bytes, as its decoder would give
// them. zerotrain does not encode with it: scripts/prepare_hf_tokens.py makes the token shards
// with the `tokenizers` package (docs/data.md "Models whose tokenizer is not sentencepiece").
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace zt {

class HfVocab final : public TokenizerModel {
 public:
  // Reads `path` (a tokenizer.json). The decoder is recognised when it is `ByteLevel` (GPT-2,
  // Llama 3, Qwen2: each piece's characters stand for bytes, GPT-2's bytes_to_unicode table)
  // or, alone or in a `Sequence`, `Metaspace` / `Replace` "▁" -> " " with `ByteFallback`
  // (Llama 2, Mistral as transformers converts them: "▁" is a space, "<0xNN>" one byte, and
  // `Strip` of one leading space, as sentencepiece drops its dummy prefix); any other decoder
  // decodes each token as "[id]" and note() says why. `<0xNN>` pieces are bytes only with a
  // ByteFallback step. BOS and EOS: config.json's bos_token_id
  // and eos_token_id beside it (the first of a list), else -1. Added tokens marked special
  // decode to "". Errors (InvalidArgument naming the path): unreadable, not JSON, a field of
  // another type than tokenizers writes, no model.vocab (BPE's or WordPiece's object of piece ->
  // id, or Unigram's list), an id outside [0, 2^31) or given twice, ids far sparser than pieces.
  static absl::StatusOr<HfVocab> load(const std::string& path);

  int vocab_size() const override { return (int)pieces_.size(); }
  int bos_id() const override { return bos_; }
  int eos_id() const override { return eos_; }
  bool encodes() const override { return false; }
  std::vector<int> encode(std::string_view) const override { return {}; }
  // Valid ids only (Tokenizer checks): their bytes concatenated, invalid UTF-8 replaced by
  // U+FFFD as `tokenizers` replaces it, less the first's leading space where the decoder strips
  // it. decode_token gives a token's raw bytes (a character may span several tokens).
  std::string decode(std::span<const int> ids) const override;
  std::string decode_token(int id) const override;
  std::string note() const override { return note_; }

 private:
  // load() past the JSON parse; throws nlohmann::json::exception on a field of another type.
  static absl::StatusOr<HfVocab> read(const nlohmann::json& j, const std::string& path,
                                      const std::function<absl::Status(const std::string&)>& bad);

  std::vector<std::string> pieces_;  // id -> the bytes it decodes to
  std::vector<bool> special_;        // id -> an added token marked special
  std::vector<bool> byte_token_;     // id -> a ByteFallback piece "<0xNN>" (one byte)
  bool known_decoder_ = false;
  bool byte_level_ = false;
  bool strip_first_space_ = false;
  int bos_ = -1, eos_ = -1;
  std::string note_;
};

}  // namespace zt
