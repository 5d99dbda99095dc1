// Tokenizer: a sentencepiece model (.model file, e.g. LLaMA-2's 32,000-token vocabulary), or a
// Hugging Face tokenizer.json read for decoding only (data/hf_vocab.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zt {

// The files a model directory may hold its tokenizer in, in the order load() looks for them.
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.model", "tokenizer.json"};
// What decoding gives for a byte that is not text, and ids outside the vocabulary.
inline constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD

// One kind of tokenizer file behind Tokenizer: sentencepiece (data/tokenizer.cc) or
// tokenizer.json (data/hf_vocab.h). Ids given to decode and decode_token are valid.
class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual bool encodes() const = 0;  // false: encode is not available
  virtual std::vector<int> encode(std::string_view text) const = 0;
  virtual std::string decode(std::span<const int> ids) const = 0;
  virtual std::string decode_token(int id) const = 0;
  // Why samples will not read as text (an unknown decoder), or empty.
  virtual std::string note() const { return ""; }
};

// Immutable after load; copies share one model; encode/decode are safe from many threads.
class Tokenizer {
 public:
  // Loads a sentencepiece .model file, a Hugging Face tokenizer.json (a path ending in .json),
  // or a directory holding tokenizer.model (first) or tokenizer.json.
  // Errors: NotFound when `path` does not exist, or is a directory with neither file;
  // InvalidArgument when it is unreadable or not a tokenizer of either kind. Both name the path.
  static absl::StatusOr<Tokenizer> load(const std::string& path);

  // OK when encode() works; else InvalidArgument saying that `needed_by` (what the user asked
  // for, e.g. "--sample_prompt") needs encoding, which a tokenizer.json does not give here, and
  // that scripts/prepare_hf_tokens.py makes token shards with the model's own tokenizer.
  absl::Status check_encodes(std::string_view needed_by) const;
  // Why samples will not read as text (a tokenizer.json whose decoder zerotrain does not
  // read: they print token ids), or empty.
  std::string note() const { return m_->note(); }
  // The file loaded (a directory given to load() resolved to the file in it).
  const std::string& path() const { return path_; }

  // Number of pieces in the vocabulary (ids are 0 .. vocab_size()-1). 32,000 for LLaMA-2.
  int vocab_size() const;
  // Id of <s> (beginning of sequence), or -1 when the model has none. 1 for LLaMA-2.
  int bos_id() const;
  // Id of </s> (end of sequence), or -1 when the model has none. 2 for LLaMA-2.
  int eos_id() const;

  // Token ids of UTF-8 `text`, without BOS/EOS (add them yourself). Empty text -> {}. Only
  // where check_encodes() is OK (else empty text only).
  std::vector<int> encode(std::string_view text) const;

  // UTF-8 text of `ids`, as sentencepiece (or the tokenizer.json's decoder) decodes it (control
  // tokens such as BOS/EOS give
  // "", the dummy-prefix space of the first piece is dropped). Ids outside
  // [0, vocab_size()) give U+FFFD, so text sampled from a model with a larger vocabulary
  // still prints.
  std::string decode(std::span<const int> ids) const;

  // Bytes of one token, for streaming samples: "▁" becomes " " (so a word-initial token
  // gives its leading space), a byte-fallback piece "<0xNN>" gives that single byte (a
  // multi-byte UTF-8 character arrives over several calls), control tokens give "", ids
  // outside [0, vocab_size()) give U+FFFD. Concatenating decode_token over encode(text)
  // gives " " + text for LLaMA-2's model (which adds a dummy prefix space).
  std::string decode_token(int id) const;

 private:
  Tokenizer(std::shared_ptr<const TokenizerModel> m, std::string path)
      : m_(std::move(m)), path_(std::move(path)) {}
  std::shared_ptr<const TokenizerModel> m_;
  std::string path_;
};

}  // namespace zt
