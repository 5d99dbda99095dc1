#include "data/hf_vocab.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace zt {
namespace {

using nlohmann::json;

constexpr char kMetaspace[] = "\xE2\x96\x81";  // "▁" (U+2581)

// GPT-2's bytes_to_unicode, inverted: the code point a byte-level piece writes for each byte
// -> the byte. Printable Latin-1 bytes stand for themselves; the other 68 take the code points
// from 256 up, in byte order.
std::vector<int> byte_of_code_point() {
  std::vector<int> byte(512, -1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    byte[printable ? b : next++] = b;
  }
  return byte;
}

// The code points of UTF-8 `s`; false on a malformed sequence.
bool code_points(std::string_view s, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < s.size();) {
    const auto c = (unsigned char)s[i];
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = cp << 6 | ((unsigned char)s[i + k] & 0x3F);
    out->push_back(cp);
    i += n;
  }
  return true;
}

// Whether the decoder (or a step of its Sequence) has `type`, and the step itself.
const json* step_of(const json& decoder, std::string_view type) {
  if (!decoder.is_object()) return nullptr;
  if (decoder.value("type", "") == type) return &decoder;
  if (decoder.value("type", "") == "Sequence" && decoder.contains("decoders"))
    for (const json& d : decoder["decoders"])
      if (d.value("type", "") == type) return &d;
  return nullptr;
}

int config_id(const json& config, const char* key) {
  if (!config.contains(key)) return -1;
  const json& v = config[key];
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int>();
  return v.is_number_integer() ? v.get<int>() : -1;
}

}  // namespace

absl::StatusOr<HfVocab> HfVocab::load(const std::string& path) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer '", path, "' ", why,
        ". Give the model's tokenizer.json (from its Hugging Face directory) or a sentencepiece "
        ".model"));
  };
  std::ifstream in(path);
  if (!in) return bad("cannot be read (check permissions)");
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("is not JSON");
  const json model = j.value("model", json::object());
  const json vocab = model.value("vocab", json());
  std::vector<std::pair<std::string, int64_t>> entries;  // piece, id
  if (vocab.is_object()) {                               // BPE, WordPiece: piece -> id
    for (const auto& [piece, id] : vocab.items())
      if (id.is_number_integer()) entries.emplace_back(piece, id.get<int64_t>());
  } else if (vocab.is_array()) {  // Unigram: [piece, score], the id its place
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i].is_array() && !vocab[i].empty() && vocab[i][0].is_string())
        entries.emplace_back(vocab[i][0].get<std::string>(), (int64_t)i);
  } else {
    return bad("has no model.vocab (is it a tokenizer.json?)");
  }
  std::vector<bool> added;
  HfVocab v;
  for (const json& t : j.value("added_tokens", json::array()))
    if (t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
        t["content"].is_string()) {
      entries.emplace_back(t["content"].get<std::string>(), t["id"].get<int64_t>());
      const size_t id = (size_t)std::max<int64_t>(0, t["id"].get<int64_t>());
      if (t.value("special", false)) {
        if (v.special_.size() <= id) v.special_.resize(id + 1);
        v.special_[id] = true;
      }
      if (added.size() <= id) added.resize(id + 1);
      added[id] = true;
    }
  int64_t n = 0;
  for (const auto& e : entries) n = std::max(n, e.second + 1);
  if (entries.empty() || n > (int64_t)entries.size() + 1'000'000)
    return bad(absl::StrCat("has ids from 0 to ", n - 1, " for ", entries.size(), " pieces"));
  v.pieces_.assign((size_t)n, "");
  v.special_.resize((size_t)n);
  added.resize((size_t)n);
  std::vector<bool> seen((size_t)n);
  for (const auto& [piece, id] : entries) {
    if (id < 0) return bad(absl::StrCat("gives the piece '", piece, "' the id ", id));
    // An added token may repeat the vocabulary's entry for its id (Llama 2's <unk> <s> </s>).
    if (seen[(size_t)id] && v.pieces_[(size_t)id] != piece)
      return bad(absl::StrCat("gives the id ", id, " to two pieces"));
    seen[(size_t)id] = true;
    v.pieces_[(size_t)id] = piece;
  }

  const json decoder = j.value("decoder", json());
  const bool byte_level = step_of(decoder, "ByteLevel") != nullptr;
  const bool metaspace = step_of(decoder, "Metaspace") || step_of(decoder, "ByteFallback") ||
                         (step_of(decoder, "Replace") && !byte_level);
  v.known_decoder_ = byte_level || metaspace;
  if (const json* s = step_of(decoder, "Strip")) v.strip_first_space_ = s->value("start", 0) >= 1;
  if (const json* m = step_of(decoder, "Metaspace"))  // the first piece's dummy prefix goes
    v.strip_first_space_ =
        m->value("prepend_scheme", "always") != "never" && m->value("add_prefix_space", true);
  if (!v.known_decoder_) {
    v.note_ = absl::StrCat("tokenizer '", path, "': its decoder (",
                           decoder.is_object() ? decoder.value("type", "none") : "none",
                           ") is not one zerotrain reads (ByteLevel; Metaspace or Replace with "
                           "ByteFallback), so samples print token ids");
  } else {
    const std::vector<int> byte = byte_of_code_point();
    for (size_t id = 0; id < v.pieces_.size(); ++id) {
      std::string& p = v.pieces_[id];
      if (added[id]) continue;  // added tokens are their content, not mapped
      if (byte_level) {
        std::vector<uint32_t> cps;
        std::string bytes;
        bool ok = code_points(p, &cps);
        for (uint32_t cp : cps) {
          ok &= cp < byte.size() && byte[cp] >= 0;
          if (ok) bytes += (char)byte[cp];
        }
        if (ok) p = bytes;  // else kept as written (not a byte-level piece)
      } else if (p.size() == 6 && p.rfind("<0x", 0) == 0 && p[5] == '>') {
        p = std::string(1, (char)std::stoi(p.substr(3, 2), nullptr, 16));  // byte fallback
      } else {
        for (size_t at; (at = p.find(kMetaspace)) != std::string::npos;) p.replace(at, 3, " ");
      }
    }
  }
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "config.json";
  if (std::ifstream cin{config}) {
    const json c = json::parse(cin, nullptr, false);
    if (c.is_object()) {
      v.bos_ = config_id(c, "bos_token_id");
      v.eos_ = config_id(c, "eos_token_id");
    }
  }
  if (v.bos_ >= n) v.bos_ = -1;
  if (v.eos_ >= n) v.eos_ = -1;
  return v;
}

std::string HfVocab::decode_token(int id) const {
  if (!known_decoder_) return absl::StrCat("[", id, "]");
  return special_[id] ? "" : pieces_[id];
}

std::string HfVocab::decode(std::span<const int> ids) const {
  std::string text;
  for (int id : ids) text += decode_token(id);
  if (known_decoder_ && strip_first_space_ && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace zt
