// Tokenizer: a sentencepiece model (.model file, e.g. LLaMA-2's 32,000-token vocabulary).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zt {

namespace spm {
class Processor;
}  // namespace spm

// Immutable after load; copies share one model; encode/decode are safe from many threads.
class Tokenizer {
 public:
  // Loads a sentencepiece .model file.
  // Errors: NotFound when `path` does not exist or is not a regular file;
  // InvalidArgument when it is unreadable or not a sentencepiece model. Both name the path.
  static absl::StatusOr<Tokenizer> load(const std::string& path);

  // Number of pieces in the vocabulary (ids are 0 .. vocab_size()-1). 32,000 for LLaMA-2.
  int vocab_size() const;
  // Id of <s> (beginning of sequence), or -1 when the model has none. 1 for LLaMA-2.
  int bos_id() const;
  // Id of </s> (end of sequence), or -1 when the model has none. 2 for LLaMA-2.
  int eos_id() const;

  // Token ids of UTF-8 `text`, without BOS/EOS (add them yourself). Empty text -> {}.
  std::vector<int> encode(std::string_view text) const;

  // UTF-8 text of `ids`, as sentencepiece decodes it (control tokens such as BOS/EOS give
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
  explicit Tokenizer(std::shared_ptr<const spm::Processor> sp) : sp_(std::move(sp)) {}
  std::shared_ptr<const spm::Processor> sp_;
};

}  // namespace zt
