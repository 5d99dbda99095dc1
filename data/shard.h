// llm.c token shards: a 1024-byte header of 256 little-endian int32, then the tokens.
//   header[0] magic, header[1] version, header[2] number of tokens, the rest zero.
//   uint16 tokens: magic 20240520, version 1 (GPT-2 style, vocabularies <= 65,536).
//   uint32 tokens: magic 20240801, version 7 (llm.c's LLaMA-3 format, larger vocabularies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zt {

inline constexpr int kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;  // 1024
inline constexpr int32_t kShardMagicU16 = 20240520;
inline constexpr int32_t kShardVersionU16 = 1;
inline constexpr int32_t kShardMagicU32 = 20240801;
inline constexpr int32_t kShardVersionU32 = 7;

// What a shard's header says, checked against its file.
struct ShardInfo {
  int64_t num_tokens = 0;   // tokens after the header
  int bytes_per_token = 0;  // 2 (uint16) or 4 (uint32)
  int64_t file_bytes = 0;   // = kShardHeaderBytes + num_tokens * bytes_per_token
};

// Writes `tokens` to `path` as an llm.c shard: uint16 when vocab_size <= 65,536, else
// uint32. Writes `path`.tmp and renames it, so a failed write never replaces a good file.
// Errors: InvalidArgument when vocab_size <= 0, a token is >= vocab_size (names it), or
// there are 2^31 tokens or more (the header holds an int32 count); PermissionDenied
// naming the path when the file cannot be written (missing directory, no space, ...).
absl::Status write_shard(const std::string& path, std::span<const uint32_t> tokens, int vocab_size);

// Reads and checks the header of the shard at `path` against the file size.
// Errors (each names the path): NotFound (missing file), InvalidArgument (shorter than the
// 1024-byte header, wrong magic, unknown version, negative count), DataLoss (token count
// disagrees with the file size, e.g. a truncated copy).
absl::StatusOr<ShardInfo> read_shard_header(const std::string& path);

// A shard mapped read-only into memory (mmap), so shards of hundreds of MB cost no reads
// until touched. Movable, not copyable; unmaps on destruction.
class MappedShard {
 public:
  // Maps the shard at `path` after read_shard_header's checks (same errors).
  static absl::StatusOr<MappedShard> open(const std::string& path);

  MappedShard(MappedShard&& other) noexcept;
  MappedShard& operator=(MappedShard&& other) noexcept;
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;
  ~MappedShard();

  const std::string& path() const { return path_; }
  const ShardInfo& info() const { return info_; }
  int64_t num_tokens() const { return info_.num_tokens; }

  // Token i, 0 <= i < num_tokens() (checked).
  uint32_t token(int64_t i) const;
  // Copies tokens [start, start + out.size()) into `out` as int (range checked).
  void read(int64_t start, std::span<int> out) const;
  // Largest token id in the shard (scans every token; 0 for an empty shard).
  uint32_t max_token() const;
  // CRC-32 (zlib's) of the whole file, header included: with the size, the shard's identity
  // when ranks check that they read the same data.
  uint32_t crc32() const;

 private:
  MappedShard() = default;
  std::string path_;
  ShardInfo info_;
  void* map_ = nullptr;  // whole file, header included
  size_t map_bytes_ = 0;
};

// All tokens of the shard at `path` (for small files and tests). Errors as open().
absl::StatusOr<std::vector<uint32_t>> read_shard_tokens(const std::string& path);

}  // namespace zt
