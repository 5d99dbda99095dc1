// Examples laid out as rows of T tokens for the loader (data/loader.h), with the loss mask
// beside their shard (data/mask.h): one example a row, padded, or packed, as
// many whole examples a row as fit. Shared by instruction data (data/alpaca.h) and plain-text
// documents (data/prepare.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zt {

// An example (or a piece of one): tokens and their mask flags (kMaskTrained, ...).
struct Piece {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> flags;
};

// What happens to an example longer than T tokens: left out, cut to its first T tokens, or cut
// into pieces of T (the last shorter): consecutive rows when padded (a row's last position
// predicts the next piece's first token), examples of their own when packed, overlapping by
// one token so that every token is still a target once (a packed example's first is not).
enum class Overlong { kSkip, kTruncate, kSplit };
// "skip", "truncate", "split". Error: InvalidArgument naming the choices.
absl::StatusOr<Overlong> parse_overlong(std::string_view name);

// e as pieces of at most T tokens: itself when it fits; else as `how` says (kSkip: none).
std::vector<Piece> cut(const Piece& e, size_t T, Overlong how, bool pack);

// Rows of T tokens: each piece alone (padded), or packed best-fit decreasing (the longest
// first, each into the fullest row with room). Pads with `pad` (untrained); in packed rows
// each piece's first token is flagged kMaskExampleStart (and never trained: nothing of its
// example precedes it), and the padding starts an example of its own.
std::vector<Piece> lay_out(const std::vector<Piece>& pieces, size_t T, bool pack, uint32_t pad);

// Writes `rows` (each T long) to the shard at `path` (its T+1-th token of the last row: `pad`,
// untrained) and its mask (mask_path_for). Adds the rows and trained targets written to the
// counters. Errors: write_shard's and write_mask's.
absl::Status write_rows(const std::string& path, const std::vector<Piece>& rows, int seq_len,
                        uint32_t pad, int vocab_size, int64_t* rows_written, int64_t* trained);

}  // namespace zt
