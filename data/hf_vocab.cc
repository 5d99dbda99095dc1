#include "data/hf_vocab.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>

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

// Appends `bytes` as UTF-8 with each maximal invalid subsequence replaced by U+FFFD, as Rust's
// String::from_utf8_lossy does for the `tokenizers` package's ByteLevel decoder.
void append_lossy_utf8(std::string_view bytes, std::string* out) {
  for (size_t i = 0; i < bytes.size();) {
    const auto c = (unsigned char)bytes[i];
    if (c < 0x80) {
      out->push_back((char)c);
      ++i;
      continue;
    }
    // The continuation bytes a lead byte takes, and the first one's range (no overlong forms,
    // surrogates or code points past U+10FFFF).
    int need = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
      need = 1;
    else if (c == 0xE0)
      need = 2, lo = 0xA0;
    else if (c == 0xED)
      need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
      need = 2;
    else if (c == 0xF0)
      need = 3, lo = 0x90;
    else if (c == 0xF4)
      need = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3)
      need = 3;
    size_t j = i + 1;
    int got = 0;
    for (; need > 0 && got < need && j < bytes.size(); ++got, ++j) {
      const auto d = (unsigned char)bytes[j];
      if (d < lo || d > hi) break;
      lo = 0x80, hi = 0xBF;
    }
    if (need > 0 && got == need)
      out->append(bytes.substr(i, j - i));
    else
      out->append(kReplacementChar);
    i = j;  // past the maximal invalid subsequence, at the byte that ended it
  }
}

bool valid_utf8(std::string_view bytes) {
  std::string out;
  append_lossy_utf8(bytes, &out);
  return out == bytes;
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
  try {
    return read(j, path, bad);
  } catch (const json::exception& e) {  // a field of another type than tokenizers writes
    return bad(absl::StrCat("has a field zerotrain cannot read (", e.what(), ")"));
  }
}

absl::StatusOr<HfVocab> HfVocab::read(const nlohmann::json& j, const std::string& path,
                                      const std::function<absl::Status(const std::string&)>& bad) {
  const json model = j.value("model", json::object());
  const json vocab = model.is_object() ? model.value("vocab", json()) : json();
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
  const size_t from_vocab = entries.size();
  std::vector<std::pair<int64_t, bool>> added;  // id, special
  for (const json& t : j.value("added_tokens", json::array()))
    if (t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
        t["content"].is_string()) {
      entries.emplace_back(t["content"].get<std::string>(), t["id"].get<int64_t>());
      added.emplace_back(t["id"].get<int64_t>(), t.value("special", false));
    }
  // Ids index a table: each in [0, 2^31), and no more than a million unused between them.
  int64_t n = 0;
  for (const auto& [piece, id] : entries) {
    if (id < 0 || id >= (int64_t{1} << 31))
      return bad(absl::StrCat("gives the piece '", piece, "' the id ", id));
    n = std::max(n, id + 1);
  }
  if (entries.empty() || n > (int64_t)entries.size() + 1'000'000)
    return bad(absl::StrCat("has ids from 0 to ", n - 1, " for ", entries.size(), " pieces"));
  HfVocab v;
  v.pieces_.assign((size_t)n, "");
  v.special_.assign((size_t)n, false);
  v.byte_token_.assign((size_t)n, false);
  std::vector<bool> seen((size_t)n), is_added((size_t)n);
  for (size_t e = 0; e < entries.size(); ++e) {
    const auto& [piece, id] = entries[e];
    // An added token may repeat the vocabulary's entry for its id (Llama 2's <unk> <s> </s>).
    if (seen[(size_t)id] && v.pieces_[(size_t)id] != piece)
      return bad(absl::StrCat("gives the id ", id, " to two pieces"));
    seen[(size_t)id] = true;
    v.pieces_[(size_t)id] = piece;
    if (e >= from_vocab) is_added[(size_t)id] = true;
  }
  for (const auto& [id, special] : added)
    v.special_[(size_t)id] = v.special_[(size_t)id] || special;

  const json decoder = j.value("decoder", json());
  const bool byte_level = step_of(decoder, "ByteLevel") != nullptr;
  const bool byte_fallback = step_of(decoder, "ByteFallback") != nullptr;
  const bool metaspace = step_of(decoder, "Metaspace") || byte_fallback ||
                         (step_of(decoder, "Replace") && !byte_level);
  v.known_decoder_ = byte_level || metaspace;
  if (const json* s = step_of(decoder, "Strip")) v.strip_first_space_ = s->value("start", 0) >= 1;
  if (const json* m = step_of(decoder, "Metaspace"))  // the first piece's dummy prefix goes
    v.strip_first_space_ =
        m->value("prepend_scheme", "always") != "never" && m->value("add_prefix_space", true);
  if (!v.known_decoder_) {
    const json type = decoder.is_object() ? decoder.value("type", json("none")) : json("none");
    v.note_ = absl::StrCat("tokenizer '", path, "': its decoder (",
                           type.is_string() ? type.get<std::string>() : type.dump(),
                           ") is not one zerotrain reads (ByteLevel; Metaspace or Replace with "
                           "ByteFallback), so samples print token ids");
    return v;
  }
  const std::vector<int> byte = byte_of_code_point();
  for (size_t id = 0; id < v.pieces_.size(); ++id) {
    std::string& p = v.pieces_[id];
    if (is_added[id]) continue;  // added tokens are their content, not mapped
    if (byte_level) {
      std::vector<uint32_t> cps;
      std::string bytes;
      bool ok = code_points(p, &cps);
      for (uint32_t cp : cps) {
        ok &= cp < byte.size() && byte[cp] >= 0;
        if (ok) bytes += (char)byte[cp];
      }
      if (ok) p = bytes;  // else kept as written (not a byte-level piece)
    } else if (byte_fallback && p.size() == 6 && p.rfind("<0x", 0) == 0 && p[5] == '>' &&
               std::isxdigit((unsigned char)p[3]) && std::isxdigit((unsigned char)p[4])) {
      p = std::string(1, (char)std::stoi(p.substr(3, 2), nullptr, 16));
      v.byte_token_[id] = true;
    } else {
      for (size_t at; (at = p.find(kMetaspace)) != std::string::npos;) p.replace(at, 3, " ");
    }
  }
  v.byte_level_ = byte_level;
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

// As the `tokenizers` package decodes: ByteLevel's bytes as lossy UTF-8; ByteFallback's run of
// byte pieces as its bytes when they are valid UTF-8, else U+FFFD for each.
std::string HfVocab::decode(std::span<const int> ids) const {
  if (!known_decoder_) {
    std::string text;
    for (int id : ids) text += decode_token(id);
    return text;
  }
  std::string raw, text;
  for (size_t i = 0; i < ids.size();) {
    if (!byte_token_[ids[i]]) {
      raw += decode_token(ids[i++]);
      continue;
    }
    std::string run;
    size_t k = i;
    for (; k < ids.size() && byte_token_[ids[k]]; ++k) run += pieces_[ids[k]];
    if (valid_utf8(run)) {
      raw += run;
    } else {
      for (; i < k; ++i) raw += kReplacementChar;
    }
    i = k;
  }
  if (byte_level_)
    append_lossy_utf8(raw, &text);
  else
    text = std::move(raw);
  if (strip_first_space_ && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace zt
