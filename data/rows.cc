#include "data/rows.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/mask.h"
#include "data/shard.h"

namespace zt {

absl::StatusOr<Overlong> parse_overlong(std::string_view name) {
  if (name == "skip") return Overlong::kSkip;
  if (name == "truncate") return Overlong::kTruncate;
  if (name == "split") return Overlong::kSplit;
  return absl::InvalidArgumentError(
      absl::StrCat("--overlong '", std::string(name), "' is not one of skip, truncate, split"));
}

std::vector<Piece> lay_out(const std::vector<Piece>& pieces, size_t T, bool pack, uint32_t pad) {
  std::vector<std::vector<size_t>> rows;  // piece indices
  if (!pack) {
    for (size_t i = 0; i < pieces.size(); ++i) rows.push_back({i});
  } else {
    std::vector<size_t> order(pieces.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return pieces[a].tokens.size() > pieces[b].tokens.size();
    });
    std::multimap<size_t, size_t> room;  // free tokens -> row
    for (size_t i : order) {
      const size_t n = pieces[i].tokens.size();
      auto it = room.lower_bound(n);  // the fullest row it fits in
      size_t r;
      if (it == room.end()) {
        r = rows.size();
        rows.emplace_back();
        room.emplace(T - n, r);
      } else {
        r = it->second;
        const size_t left = it->first - n;
        room.erase(it);
        room.emplace(left, r);
      }
      rows[r].push_back(i);
    }
  }
  std::vector<Piece> out;
  for (const auto& row : rows) {
    Piece r;
    for (size_t i : row) {
      r.tokens.insert(r.tokens.end(), pieces[i].tokens.begin(), pieces[i].tokens.end());
      r.flags.insert(r.flags.end(), pieces[i].flags.begin(), pieces[i].flags.end());
      if (!pack) continue;
      // Nothing before it in the row predicts an example's first token (a split piece's is
      // trained otherwise): it starts the example, untrained.
      uint8_t& first = r.flags[r.flags.size() - pieces[i].flags.size()];
      first = kMaskExampleStart;
    }
    if (pack && r.tokens.size() < T) r.flags.push_back(kMaskExampleStart), r.tokens.push_back(pad);
    r.tokens.resize(T, pad);
    r.flags.resize(T, 0);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Piece> cut(const Piece& e, size_t T, Overlong how, bool pack) {
  if (e.tokens.size() <= T) return {e};
  if (how == Overlong::kSkip) return {};
  // Packed, a piece's first token is never a target (lay_out), so split pieces overlap by one
  // token: each starts at the previous one's last, trained there.
  const size_t end = how == Overlong::kTruncate ? T : e.tokens.size();
  const size_t stride = pack ? T - 1 : T;
  std::vector<Piece> pieces;
  for (size_t at = 0;; at += stride) {
    const size_t n = std::min(T, end - at);
    pieces.push_back({{e.tokens.begin() + at, e.tokens.begin() + at + n},
                      {e.flags.begin() + at, e.flags.begin() + at + n}});
    if (at + n >= end) break;
  }
  return pieces;
}

absl::Status write_rows(const std::string& path, const std::vector<Piece>& rows, int seq_len,
                        uint32_t pad, int vocab_size, int64_t* rows_written, int64_t* trained) {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> flags;
  for (const Piece& row : rows) {
    tokens.insert(tokens.end(), row.tokens.begin(), row.tokens.end());
    flags.insert(flags.end(), row.flags.begin(), row.flags.end());
    *trained += std::count_if(row.flags.begin(), row.flags.end(),
                              [](uint8_t f) { return f & kMaskTrained; });
    ++*rows_written;
  }
  tokens.push_back(pad);  // the last row's T+1-th token (a masked target)
  flags.push_back(0);
  ZT_RETURN_IF_ERROR(write_shard(path, tokens, vocab_size));
  return write_mask(mask_path_for(path), LossMask{std::move(flags), seq_len});
}

}  // namespace zt
