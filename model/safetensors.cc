// safetensors reader/writer; see safetensors.h for the format.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/json.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace zt {
namespace {

using json = nlohmann::json;

// Element sizes of every dtype the safetensors spec defines.
const std::map<std::string, size_t>& known_dtypes() {
  static const auto* m = new std::map<std::string, size_t>{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  return *m;
}

std::string errno_text() { return std::strerror(errno); }

absl::Status bad_file(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid safetensors file: ", what));
}

// Reads a little-endian u64 from unaligned bytes.
uint64_t load_u64_le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Reader

struct SafeTensorsFile::Mapping {
  const std::byte* data = nullptr;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data != nullptr) ::munmap(const_cast<std::byte*>(data), size);
  }
};

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<SafeTensorsFile> SafeTensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::string why = errno_text();
    if (errno == ENOENT)
      return absl::NotFoundError(absl::StrCat(path, ": cannot open safetensors file: ", why));
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open safetensors file: ", why));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat: ", why));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return bad_file(path, "not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return bad_file(
        path, absl::StrCat("truncated: ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  std::string mmap_err = addr == MAP_FAILED ? errno_text() : "";
  ::close(fd);
  if (addr == MAP_FAILED)
    return absl::InvalidArgumentError(absl::StrCat(path, ": mmap: ", mmap_err));
  auto map = std::make_shared<Mapping>();
  map->data = static_cast<const std::byte*>(addr);
  map->size = size;

  const uint64_t header_len = load_u64_le(map->data);
  if (header_len > size - 8) {
    return bad_file(path, absl::StrCat("truncated or corrupt: header length ", header_len,
                                       " goes beyond the file (", size, " bytes)"));
  }
  const char* htext = reinterpret_cast<const char*>(map->data + 8);
  auto parsed = parse_json(std::string_view(htext, header_len), "bad JSON header");
  if (!parsed.ok()) return bad_file(path, std::string(parsed.status().message()));
  const json header = std::move(*parsed);
  if (!header.is_object()) return bad_file(path, "the JSON header is not an object");

  SafeTensorsFile f;
  f.path_ = path;
  f.data_start_ = 8 + static_cast<size_t>(header_len);
  const size_t data_size = size - f.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad_file(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          return bad_file(path,
                          absl::StrCat("__metadata__ value of '", m.key(), "' is not a string"));
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto where = [&](const std::string& what) {
      return bad_file(path, absl::StrCat("tensor '", name, "': ", what));
    };
    if (!v.is_object()) return where("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) return where("missing string \"dtype\"");
    if (!v.contains("shape") || !v["shape"].is_array()) return where("missing array \"shape\"");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2 || !v["data_offsets"][0].is_number_unsigned() ||
        !v["data_offsets"][1].is_number_unsigned())
      return where("\"data_offsets\" must be [begin, end] (non-negative integers)");
    Entry e;
    e.dtype = v["dtype"].get<std::string>();
    auto dt = known_dtypes().find(e.dtype);
    if (dt == known_dtypes().end()) {
      std::vector<std::string> names;
      for (const auto& [k, unused] : known_dtypes()) names.push_back(k);
      return where(
          absl::StrCat("unknown dtype '", e.dtype, "' (known: ", absl::StrJoin(names, ", "), ")"));
    }
    // numel with overflow check against the file size.
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) return where("shape entries must be non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim / 8)
        return where("shape is too large");
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t begin = v["data_offsets"][0].get<uint64_t>();
    const uint64_t end = v["data_offsets"][1].get<uint64_t>();
    if (begin > end)
      return where(absl::StrCat("data_offsets [", begin, ", ", end, "] has begin > end"));
    if (end > data_size)
      return where(absl::StrCat("data_offsets [", begin, ", ", end,
                                "] out of range: the data section has ", data_size,
                                " bytes (file truncated?)"));
    if (end - begin != numel * dt->second)
      return where(absl::StrCat("data_offsets span ", end - begin, " bytes but shape and dtype ",
                                e.dtype, " need ", numel * dt->second));
    e.begin = static_cast<size_t>(begin);
    e.end = static_cast<size_t>(end);
    f.tensors_.emplace(name, std::move(e));
  }
  // Overlap: sort non-empty ranges by begin; each must start at or after the previous end.
  std::vector<std::pair<size_t, const std::string*>> order;
  for (const auto& [name, e] : f.tensors_)
    if (e.end > e.begin) order.emplace_back(e.begin, &name);
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    const Entry& prev = f.tensors_.at(*order[i - 1].second);
    if (order[i].first < prev.end)
      return bad_file(path, absl::StrCat("tensors '", *order[i - 1].second, "' and '",
                                         *order[i].second, "' have overlapping data_offsets"));
  }
  f.map_ = std::move(map);
  return f;
}

std::vector<std::string> SafeTensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, unused] : tensors_) out.push_back(name);
  return out;
}

bool SafeTensorsFile::contains(const std::string& name) const { return tensors_.count(name) > 0; }

absl::StatusOr<TensorInfo> SafeTensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in ", path_, " (",
                                            tensors_.size(), " tensors)"));
  const Entry& e = it->second;
  TensorInfo t;
  t.dtype = e.dtype;
  t.shape = e.shape;
  t.bytes = std::span<const std::byte>(map_->data + data_start_ + e.begin, e.end - e.begin);
  return t;
}

absl::Status SafeTensorsFile::read_f32(const std::string& name, std::span<float> out) const {
  ZT_ASSIGN_OR_RETURN(TensorInfo t, info(name));
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16" && t.dtype != "F64")
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' in ", path_, " has dtype ",
                                                   t.dtype, "; expected F32, BF16, F16 or F64"));
  const int64_t n = t.numel();
  if (static_cast<int64_t>(out.size()) != n)
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' in ", path_, " has ", n, " elements, but ", out.size(),
                     " were expected (shape mismatch with the model config?)"));
  const std::byte* p = t.bytes.data();
  if (t.dtype == "F32") {
    std::memcpy(out.data(), p, static_cast<size_t>(n) * 4);
  } else if (t.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(p + 2 * i));
  } else if (t.dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(p + 2 * i));
  } else {  // F64, checked above
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> SafeTensorsFile::read_i64(const std::string& name) const {
  ZT_ASSIGN_OR_RETURN(TensorInfo t, info(name));
  const int64_t n = t.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  const std::byte* p = t.bytes.data();
  if (t.dtype == "I64") {
    std::memcpy(out.data(), p, static_cast<size_t>(n) * 8);
  } else if (t.dtype == "I32") {
    for (int64_t i = 0; i < n; ++i) out[i] = load<int32_t>(p + 4 * i);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' in ", path_, " has dtype ",
                                                   t.dtype, "; expected I64 or I32"));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Hugging Face model directory

std::vector<std::string> SafeTensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, unused] : where_) out.push_back(name);
  return out;
}

bool SafeTensorsModel::contains(const std::string& name) const { return where_.count(name) > 0; }

absl::StatusOr<const SafeTensorsFile*> SafeTensorsModel::shard_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    return absl::NotFoundError(absl::StrCat("tensor '", name, "' not found in model directory ",
                                            dir_, " (", where_.size(), " tensors)"));
  return &shards_[it->second];
}

absl::StatusOr<TensorInfo> SafeTensorsModel::info(const std::string& name) const {
  ZT_ASSIGN_OR_RETURN(const SafeTensorsFile* f, shard_of(name));
  return f->info(name);
}

absl::Status SafeTensorsModel::read_f32(const std::string& name, std::span<float> out) const {
  ZT_ASSIGN_OR_RETURN(const SafeTensorsFile* f, shard_of(name));
  return f->read_f32(name, out);
}

absl::StatusOr<std::vector<int64_t>> SafeTensorsModel::read_i64(const std::string& name) const {
  ZT_ASSIGN_OR_RETURN(const SafeTensorsFile* f, shard_of(name));
  return f->read_i64(name);
}

absl::StatusOr<SafeTensorsModel> open_hf_model_dir(const std::string& dir) {
  auto exists = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
  };
  SafeTensorsModel m;
  m.dir_ = dir;
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (exists(single)) {
    ZT_ASSIGN_OR_RETURN(SafeTensorsFile f, SafeTensorsFile::open(single));
    for (const std::string& n : f.names()) m.where_[n] = 0;
    m.shards_.push_back(std::move(f));
    return m;
  }
  if (!exists(index))
    return absl::NotFoundError(
        absl::StrCat(dir,
                     ": no model.safetensors or model.safetensors.index.json; pass a Hugging Face "
                     "model directory"));

  ZT_ASSIGN_OR_RETURN(std::string text, read_file(index, "safetensors index"));
  ZT_ASSIGN_OR_RETURN(const json j, parse_json(text, index));
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return absl::InvalidArgumentError(
        absl::StrCat(index, ": missing \"weight_map\" object (tensor name -> shard file)"));

  std::map<std::string, size_t> shard_index;  // shard file name -> index into shards_
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": weight_map entry '", it.key(), "' is not a file name"));
    const std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": weight_map entry '", it.key(), "' names '", file,
                       "'; shard files must be plain file names in the same directory"));
    auto [s, inserted] = shard_index.emplace(file, m.shards_.size());
    if (inserted) {
      ZT_ASSIGN_OR_RETURN(SafeTensorsFile f, SafeTensorsFile::open(dir + "/" + file));
      m.shards_.push_back(std::move(f));
    }
    if (!m.shards_[s->second].contains(it.key()))
      return absl::InvalidArgumentError(absl::StrCat(index, ": weight_map puts tensor '", it.key(),
                                                     "' in ", file, ", which does not hold it"));
    m.where_[it.key()] = s->second;
  }
  // Tensors a shard holds but the index does not list are still served, once.
  for (size_t i = 0; i < m.shards_.size(); ++i) {
    for (const std::string& n : m.shards_[i].names()) {
      auto [w, inserted] = m.where_.emplace(n, i);
      if (!inserted && w->second != i)
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor '", n, "' is in two shards: ", m.shards_[w->second].path(),
                         " and ", m.shards_[i].path()));
    }
  }
  return m;
}

// ---------------------------------------------------------------------------------------
// Writer

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "F32";
}

absl::Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps __metadata__ first and tensors in the caller's order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = md;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot write a tensor named '", t.name, "'"));
    if (!seen.insert(t.name).second)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", t.name, "' appears twice"));
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor '", t.name, "' has a negative dimension ", d));
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t nbytes = numel * dtype_size(t.dtype);
    if (t.bytes.size() != nbytes)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", t.name, "' has ", t.bytes.size(), " bytes but its shape and dtype ",
          safetensors_dtype_name(t.dtype), " need ", nbytes));
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  const std::string tmp = path + ".tmp";
  {  // FileWriter removes the temporary file on any error
    ZT_ASSIGN_OR_RETURN(FileWriter f, FileWriter::create(tmp));
    ZT_RETURN_IF_ERROR(f.write(len_le, 8));
    ZT_RETURN_IF_ERROR(f.write(text.data(), text.size()));
    for (const NamedTensor& t : tensors)
      ZT_RETURN_IF_ERROR(f.write(t.bytes.data(), t.bytes.size()));
    ZT_RETURN_IF_ERROR(f.close());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    return absl::InvalidArgumentError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace zt
