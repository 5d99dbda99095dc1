// The loss mask beside a token shard: which targets are trained (instruction data trains only on
// responses, data/alpaca.h) and where packed rows start an example (data/rows.h). The loader
// (data/loader.h) reads it and turns untrained targets into -1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zt {

// The mask beside a shard: `shard_path` with its ".bin" replaced by ".mask" (or ".mask"
// appended). Format: 256 int32 header (magic 20241201, version, token count, the seq_len T its
// sequences were laid out for), then one byte of flags per token: kMaskTrained (version 1 has
// only this one), kMaskExampleStart (version 2: packed rows).
std::string mask_path_for(const std::string& shard_path);
inline constexpr uint8_t kMaskTrained = 1;       // the token is trained as a target
inline constexpr uint8_t kMaskExampleStart = 2;  // the token starts an example in a packed row
struct LossMask {
  std::vector<uint8_t> flags;  // per token
  int seq_len = 0;             // T the rows were laid out for
};
// Writes version 1 when no token has kMaskExampleStart, else version 2.
absl::Status write_mask(const std::string& path, const LossMask& mask);
// Reads a mask file written by write_mask. Errors name the file (magic, count, size).
absl::StatusOr<LossMask> read_mask(const std::string& path);

}  // namespace zt
