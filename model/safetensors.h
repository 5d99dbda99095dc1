// safetensors reader and writer, and Hugging Face model directories (single file or
// sharded with model.safetensors.index.json). docs/architecture.md "Files and formats": weights
// in/out.
//
// File layout (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of JSON header | data
// The header maps each tensor name to {"dtype": "F32"|"BF16"|..., "shape": [..],
// "data_offsets": [begin, end]} (byte offsets into the data, which follows the header),
// plus an optional "__metadata__" object of string -> string. Data is little-endian, row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace zt {

// One tensor of an open file: a view into the mapped file, valid while any copy of the
// SafeTensorsFile / SafeTensorsModel it came from is alive.
struct TensorInfo {
  std::string dtype;           // safetensors spelling: "F32", "BF16", "F16", "F64", "I64", ...
  std::vector<int64_t> shape;  // row-major; {} is a scalar (1 element)
  std::span<const std::byte> bytes;  // numel() * element size bytes, not necessarily aligned

  // Product of shape (1 for a scalar).
  int64_t numel() const;
};

// A read-only safetensors file, memory-mapped. Cheap to copy (the mapping is shared).
class SafeTensorsFile {
 public:
  // Maps `path` and validates the whole header: every tensor's dtype is known, its byte
  // range is inside the data section, matches numel * element size, and overlaps no other.
  // Errors (InvalidArgument/NotFound, each naming the file): missing or unreadable file,
  // truncated file, header length beyond the file, bad JSON, offsets out of range or
  // overlapping, unknown dtype, malformed entries.
  static absl::StatusOr<SafeTensorsFile> open(const std::string& path);

  // The path given to open().
  const std::string& path() const { return path_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  // Whether the file holds a tensor called `name`.
  bool contains(const std::string& name) const;
  // dtype, shape and bytes of `name`; NotFound naming the tensor and the file.
  absl::StatusOr<TensorInfo> info(const std::string& name) const;
  // The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copies tensor `name` into `out` as fp32, converting from F32, BF16, F16 or F64.
  // Errors: missing tensor, other dtypes, out.size() != numel (says both counts).
  absl::Status read_f32(const std::string& name, std::span<float> out) const;
  // Reads an integer tensor (I64 or I32) as int64, row-major. Errors: missing tensor, other dtype.
  absl::StatusOr<std::vector<int64_t>> read_i64(const std::string& name) const;

 private:
  struct Mapping;  // RAII mmap of the whole file
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;  // byte offsets into the data section
  };
  std::string path_;
  std::shared_ptr<const Mapping> map_;
  size_t data_start_ = 0;  // 8 + header length
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory: `model.safetensors`, or the shards listed in
// `model.safetensors.index.json` ({"weight_map": {tensor name: shard file name}}).
// Offers the same lookup as SafeTensorsFile across all shards.
class SafeTensorsModel {
 public:
  // The directory given to open_hf_model_dir().
  const std::string& dir() const { return dir_; }
  // Tensor names across all shards, sorted.
  std::vector<std::string> names() const;
  // Whether any shard holds `name`.
  bool contains(const std::string& name) const;
  // Lookup as SafeTensorsFile::info; NotFound names the tensor and the directory.
  absl::StatusOr<TensorInfo> info(const std::string& name) const;
  // As SafeTensorsFile::read_f32, on the shard that holds `name`.
  absl::Status read_f32(const std::string& name, std::span<float> out) const;
  // As SafeTensorsFile::read_i64, on the shard that holds `name`.
  absl::StatusOr<std::vector<int64_t>> read_i64(const std::string& name) const;
  // The open shard files (one for an unsharded model).
  const std::vector<SafeTensorsFile>& shards() const { return shards_; }

 private:
  friend absl::StatusOr<SafeTensorsModel> open_hf_model_dir(const std::string& dir);
  absl::StatusOr<const SafeTensorsFile*> shard_of(const std::string& name) const;
  std::string dir_;
  std::vector<SafeTensorsFile> shards_;
  std::map<std::string, size_t> where_;  // tensor name -> index into shards_
};

// Opens `dir`/model.safetensors if present, else `dir`/model.safetensors.index.json and
// every shard it names. Errors: neither file present, bad index JSON or missing
// "weight_map", a shard that fails SafeTensorsFile::open, a tensor the index assigns to
// a shard that does not hold it, a tensor held by two shards.
absl::StatusOr<SafeTensorsModel> open_hf_model_dir(const std::string& dir);

// A tensor to write: a view of `bytes` (numel * dtype_size(dtype) bytes, little-endian,
// row-major). The caller keeps the bytes alive until write_safetensors returns.
struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;  // written as "F32", "BF16" or "F16"
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// The safetensors spelling of a storage dtype: "F32", "BF16", "F16".
std::string safetensors_dtype_name(DType t);

// Writes `tensors` (in the given order, data contiguous) and `metadata` as "__metadata__"
// to `path`. Writes `path`.tmp, fsyncs, then renames over `path`, so a failure never
// replaces a good file. Errors: empty or duplicate name, the name "__metadata__", a
// negative dimension, bytes.size() != numel * element size, I/O failure (says the path).
absl::Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace zt
