#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace zt {

static_assert(std::endian::native == std::endian::little, "shards are little-endian");

namespace {

constexpr int kMaxU16Vocab = 65536;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

absl::Status write_error(const std::string& path, const char* what) {
  return absl::PermissionDeniedError(absl::StrCat("cannot write shard '", path, "': ", what, " (",
                                                  std::strerror(errno),
                                                  "). Check the directory exists and is "
                                                  "writable and the disk is not full."));
}

template <typename T>
absl::Status write_tokens(const std::string& tmp, const int32_t* header,
                          std::span<const uint32_t> tokens) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return write_error(tmp, "open failed");
  if (std::fwrite(header, 4, kShardHeaderInts, f.get()) != kShardHeaderInts) {
    return write_error(tmp, "header write failed");
  }
  std::vector<T> buf(std::min<size_t>(tokens.size(), size_t{1} << 20));
  for (size_t at = 0; at < tokens.size(); at += buf.size()) {
    const size_t n = std::min(buf.size(), tokens.size() - at);
    std::copy_n(tokens.begin() + at, n, buf.begin());  // uint32 -> T, range checked before
    if (std::fwrite(buf.data(), sizeof(T), n, f.get()) != n) {
      return write_error(tmp, "token write failed");
    }
  }
  if (std::fclose(f.release()) != 0) return write_error(tmp, "close failed");
  return absl::OkStatus();
}

}  // namespace

absl::Status write_shard(const std::string& path, std::span<const uint32_t> tokens,
                         int vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("write_shard '", path, "': vocab_size must be positive, got ", vocab_size));
  }
  if (tokens.size() >= (size_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("write_shard '", path, "': ", tokens.size(),
                     " tokens do not fit one shard (the header holds an int32 count); split them"));
  }
  const auto max_it = std::max_element(tokens.begin(), tokens.end());
  if (max_it != tokens.end() && *max_it >= static_cast<uint32_t>(vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "write_shard '", path, "': token ", *max_it, " at position ", max_it - tokens.begin(),
        " is outside the vocabulary of ", vocab_size, " tokens"));
  }
  const bool u16 = vocab_size <= kMaxU16Vocab;
  int32_t header[kShardHeaderInts] = {};
  header[0] = u16 ? kShardMagicU16 : kShardMagicU32;
  header[1] = u16 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(tokens.size());
  const std::string tmp = path + ".tmp";
  absl::Status status = u16 ? write_tokens<uint16_t>(tmp, header, tokens)
                            : write_tokens<uint32_t>(tmp, header, tokens);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = write_error(path, "rename from .tmp failed");
  }
  if (!status.ok()) std::remove(tmp.c_str());
  return status;
}

absl::StatusOr<ShardInfo> read_shard_header(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("token shard '", path, "' does not exist or is not a file"));
  }
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "': cannot read its size: ", ec.message()));
  }
  if (file_bytes < kShardHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token shard '", path, "' has ", file_bytes, " bytes, shorter than the ", kShardHeaderBytes,
        "-byte header of an llm.c shard; it is empty, truncated or not a "
        "shard. Recreate it (zerotrain prepare)."));
  }
  int32_t header[kShardHeaderInts];
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(header), kShardHeaderBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "' cannot be read (check permissions)"));
  }
  ShardInfo info;
  info.file_bytes = file_bytes;
  const int32_t magic = header[0], version = header[1];
  if (magic == kShardMagicU16 || magic == kShardMagicU32) {
    const bool u16 = magic == kShardMagicU16;
    const int32_t expected = u16 ? kShardVersionU16 : kShardVersionU32;
    if (version != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token shard '", path, "' has magic ", magic, " but unknown version ", version,
          " (expected ", expected, "); it was written by an unsupported llm.c version"));
    }
    info.bytes_per_token = u16 ? 2 : 4;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "' has magic ", magic, ", expected ", kShardMagicU16,
                     " (uint16 tokens) or ", kShardMagicU32,
                     " (uint32 tokens); it may not be an llm.c "
                     "token shard. Create shards with zerotrain prepare."));
  }
  info.num_tokens = header[2];
  if (info.num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "' has a negative token count ", info.num_tokens));
  }
  const int64_t expected_bytes = kShardHeaderBytes + info.num_tokens * info.bytes_per_token;
  if (file_bytes != expected_bytes) {
    return absl::DataLossError(
        absl::StrCat("token shard '", path, "': header says ", info.num_tokens, " tokens of ",
                     info.bytes_per_token, " bytes (", expected_bytes,
                     " bytes with the header) but the "
                     "file has ",
                     file_bytes, " bytes; it is truncated or corrupt. Recreate it."));
  }
  return info;
}

absl::StatusOr<MappedShard> MappedShard::open(const std::string& path) {
  MappedShard shard;
  ZT_ASSIGN_OR_RETURN(shard.info_, read_shard_header(path));
  shard.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "' cannot be opened: ", std::strerror(errno)));
  }
  void* map = ::mmap(nullptr, shard.info_.file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("token shard '", path, "' cannot be mapped: ", std::strerror(map_errno)));
  }
  shard.map_ = map;
  shard.map_bytes_ = shard.info_.file_bytes;
  return shard;
}

MappedShard::MappedShard(MappedShard&& other) noexcept { *this = std::move(other); }

MappedShard& MappedShard::operator=(MappedShard&& other) noexcept {
  if (this != &other) {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    path_ = std::move(other.path_);
    info_ = other.info_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
  }
  return *this;
}

MappedShard::~MappedShard() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

uint32_t MappedShard::token(int64_t i) const {
  ZT_CHECK(i >= 0 && i < info_.num_tokens);
  const char* data = static_cast<const char*>(map_) + kShardHeaderBytes;
  if (info_.bytes_per_token == 2) {
    uint16_t t;
    std::memcpy(&t, data + 2 * i, 2);
    return t;
  }
  uint32_t t;
  std::memcpy(&t, data + 4 * i, 4);
  return t;
}

void MappedShard::read(int64_t start, std::span<int> out) const {
  ZT_CHECK(start >= 0 && start + static_cast<int64_t>(out.size()) <= info_.num_tokens);
  const char* data = static_cast<const char*>(map_) + kShardHeaderBytes;
  if (info_.bytes_per_token == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(data) + start;  // 2-aligned: page + 1024
    std::copy(p, p + out.size(), out.begin());
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(data) + start;
    std::transform(p, p + out.size(), out.begin(), [](uint32_t t) { return static_cast<int>(t); });
  }
}

uint32_t MappedShard::max_token() const {
  const char* data = static_cast<const char*>(map_) + kShardHeaderBytes;
  const int64_t n = info_.num_tokens;
  if (n == 0) return 0;
  if (info_.bytes_per_token == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(data);
    return *std::max_element(p, p + n);
  }
  const auto* p = reinterpret_cast<const uint32_t*>(data);
  return *std::max_element(p, p + n);
}

uint32_t MappedShard::crc32() const {
  const auto* p = static_cast<const Bytef*>(map_);
  return static_cast<uint32_t>(::crc32_z(::crc32_z(0, nullptr, 0), p, map_bytes_));
}

absl::StatusOr<std::vector<uint32_t>> read_shard_tokens(const std::string& path) {
  ZT_ASSIGN_OR_RETURN(MappedShard shard, MappedShard::open(path));
  std::vector<uint32_t> tokens(shard.num_tokens());
  for (int64_t i = 0; i < shard.num_tokens(); ++i) tokens[i] = shard.token(i);
  return tokens;
}

}  // namespace zt
