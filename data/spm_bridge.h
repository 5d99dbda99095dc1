// An Abseil-free wrapper of sentencepiece::SentencePieceProcessor, used only by tokenizer.cc.
// sentencepiece's header declares `namespace absl { using std::string_view; }`, which
// clashes with Debian's Abseil (its own absl::string_view class) in any file that includes
// both, so sentencepiece is included only in spm_bridge.cc and this header uses std types.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace zt::spm {

class Processor {
 public:
  Processor();
  ~Processor();
  Processor(const Processor&) = delete;
  Processor& operator=(const Processor&) = delete;

  // Loads a .model file. Returns "" on success, else sentencepiece's error message.
  std::string load(const std::string& path);
  int piece_size() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;  // -1 when the model has none
  // Token ids of `text` (no BOS/EOS). Returns "" on success, else the error message.
  std::string encode(std::string_view text, std::vector<int>* ids) const;
  // Text of `ids` (0 <= id < piece_size()). Returns "" on success, else the error message.
  std::string decode(const std::vector<int>& ids, std::string* text) const;
  const std::string& id_to_piece(int id) const;
  bool is_byte(int id) const;     // a byte-fallback piece "<0xNN>"
  bool is_control(int id) const;  // <s>, </s>, ...
  bool is_unknown(int id) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace zt::spm
