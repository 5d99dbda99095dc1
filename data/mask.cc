#include "data/mask.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status.h"

namespace zt {

namespace {
constexpr int32_t kMaskMagic = 20241201;
constexpr size_t kMaskHeaderBytes = 256 * 4;
}  // namespace

std::string mask_path_for(const std::string& shard_path) {
  const std::string bin = ".bin";
  if (shard_path.size() > bin.size() &&
      shard_path.compare(shard_path.size() - bin.size(), bin.size(), bin) == 0)
    return shard_path.substr(0, shard_path.size() - bin.size()) + ".mask";
  return shard_path + ".mask";
}

absl::Status write_mask(const std::string& path, const LossMask& mask) {
  std::string bytes(kMaskHeaderBytes, '\0');
  const bool packed = std::any_of(mask.flags.begin(), mask.flags.end(),
                                  [](uint8_t f) { return f & kMaskExampleStart; });
  const int32_t header[4] = {kMaskMagic, packed ? 2 : 1, (int32_t)mask.flags.size(), mask.seq_len};
  std::memcpy(bytes.data(), header, sizeof header);
  bytes.append(reinterpret_cast<const char*>(mask.flags.data()), mask.flags.size());
  return write_file_atomic(path, bytes);
}

absl::StatusOr<LossMask> read_mask(const std::string& path) {
  ZT_ASSIGN_OR_RETURN(const std::string bytes, read_file(path, "loss mask"));
  int32_t header[4] = {0, 0, 0, 0};
  if (bytes.size() >= kMaskHeaderBytes) std::memcpy(header, bytes.data(), sizeof header);
  if (bytes.size() < kMaskHeaderBytes || header[0] != kMaskMagic || header[1] < 1 ||
      header[1] > 2 || header[2] < 0 || header[3] < 1 ||
      bytes.size() != kMaskHeaderBytes + (size_t)header[2])
    return absl::InvalidArgumentError(
        absl::StrCat("loss mask '", path, "' is not a zerotrain mask file (magic ", kMaskMagic,
                     ", version 1 or 2, one byte per token after a 1024-byte header), or is "
                     "truncated"));
  return LossMask{std::vector<uint8_t>(bytes.begin() + kMaskHeaderBytes, bytes.end()), header[3]};
}

}  // namespace zt
