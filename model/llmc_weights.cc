#include "model/llmc_weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace zt {

namespace {
constexpr int32_t kMagic = 20240326;
constexpr size_t kHeaderBytes = 256 * 4;

// Where a tensor lies in the file and how transformers names and shapes it.
struct Entry {
  size_t offset;                  // elements after the header
  int64_t rows, cols;             // as stored (llm.c: nn.Linear (out, in)); cols 1 for vectors
  std::vector<int64_t> hf_shape;  // as transformers has it
  bool transpose;                 // Conv1D: transformers stores (in, out)
};
}  // namespace

struct LlmcModelFile::Data {
  std::string path;
  void* map = nullptr;
  size_t bytes = 0;
  DType dtype = DType::kF32;
  std::map<std::string, Entry> entries;
  ~Data() {
    if (map) munmap(map, bytes);
  }
  const std::byte* tensor_bytes(const Entry& e) const {
    return static_cast<const std::byte*>(map) + kHeaderBytes + e.offset * dtype_size(dtype);
  }
};

bool is_llmc_model_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  int32_t magic = 0;
  const bool ok = ::read(fd, &magic, 4) == 4 && magic == kMagic;
  ::close(fd);
  return ok;
}

absl::StatusOr<LlmcModelFile> LlmcModelFile::open(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("llm.c model file '", path, "': ", why));
  };
  auto d = std::make_shared<Data>();
  d->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bad(absl::StrCat("cannot open: ", std::strerror(errno)));
  struct stat st {};
  ::fstat(fd, &st);
  d->bytes = (size_t)st.st_size;
  if (d->bytes < kHeaderBytes) {
    ::close(fd);
    return bad(absl::StrCat(d->bytes, " bytes, shorter than its 1024-byte header"));
  }
  d->map = mmap(nullptr, d->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (d->map == MAP_FAILED) {
    d->map = nullptr;
    return bad(absl::StrCat("cannot map: ", std::strerror(errno)));
  }
  int32_t h[256];
  std::memcpy(h, d->map, sizeof h);
  if (h[0] != kMagic) return bad(absl::StrCat("magic ", h[0], ", not llm.c's ", kMagic));
  if (h[1] != 3 && h[1] != 5)
    return bad(absl::StrCat("version ", h[1], "; versions 3 (fp32) and 5 (bf16) are read"));
  d->dtype = h[1] == 3 ? DType::kF32 : DType::kBF16;
  const int64_t maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
  if (maxT <= 0 || V <= 0 || L <= 0 || NH <= 0 || C <= 0 || Vp < V || C % NH != 0 ||
      C > (1 << 20) || Vp > (1 << 24) || L > 4096 || maxT > (1 << 24))
    return bad(absl::StrCat("header maxT ", maxT, " V ", V, " L ", L, " NH ", NH, " C ", C, " Vp ",
                            Vp, " is not a GPT-2"));
  size_t at = 0;
  auto put = [&](const std::string& name, int64_t rows, int64_t cols, std::vector<int64_t> hf_shape,
                 bool transpose) {
    d->entries[name] = {at, rows, cols, std::move(hf_shape), transpose};
    at += (size_t)rows * cols;
  };
  put("transformer.wte.weight", Vp, C, {V, C}, false);
  put("transformer.wpe.weight", maxT, C, {maxT, C}, false);
  struct PerLayer {
    const char* name;
    int64_t rows, cols;
    bool matrix;
  };
  const PerLayer layers[] = {
      {"ln_1.weight", C, 1, false},           {"ln_1.bias", C, 1, false},
      {"attn.c_attn.weight", 3 * C, C, true}, {"attn.c_attn.bias", 3 * C, 1, false},
      {"attn.c_proj.weight", C, C, true},     {"attn.c_proj.bias", C, 1, false},
      {"ln_2.weight", C, 1, false},           {"ln_2.bias", C, 1, false},
      {"mlp.c_fc.weight", 4 * C, C, true},    {"mlp.c_fc.bias", 4 * C, 1, false},
      {"mlp.c_proj.weight", C, 4 * C, true},  {"mlp.c_proj.bias", C, 1, false}};
  for (const PerLayer& t : layers)
    for (int64_t l = 0; l < L; ++l)
      put(absl::StrCat("transformer.h.", l, ".", t.name), t.rows, t.cols,
          t.matrix ? std::vector<int64_t>{t.cols, t.rows} : std::vector<int64_t>{t.rows}, t.matrix);
  put("transformer.ln_f.weight", C, 1, {C}, false);
  put("transformer.ln_f.bias", C, 1, {C}, false);
  const size_t want = kHeaderBytes + at * dtype_size(d->dtype);
  if (d->bytes != want)
    return bad(absl::StrCat(d->bytes, " bytes, but its header's tensors take ", want,
                            ": truncated, or not written by llm.c's write_model"));
  LlmcModelFile f;
  f.data_ = std::move(d);
  ModelConfig& c = f.config_;
  c = ModelConfig::of(Family::kGPT2);
  c.vocab_size = (int)V, c.max_seq_len = (int)maxT, c.n_layer = (int)L, c.n_head = (int)NH;
  c.n_kv_head = (int)NH, c.hidden = (int)C, c.intermediate = (int)(4 * C);
  c.norm_eps = 1e-5f;
  return f;
}

HfTensorReader LlmcModelFile::reader() const {
  std::shared_ptr<const Data> d = data_;
  return {[d](const std::string& n) { return d->entries.count(n) > 0; },
          [d](const std::string& n) -> absl::StatusOr<std::vector<int64_t>> {
            auto it = d->entries.find(n);
            if (it == d->entries.end())
              return absl::NotFoundError(absl::StrCat("no tensor '", n, "' in '", d->path, "'"));
            return it->second.hf_shape;
          },
          [d](const std::string& n, std::span<float> out) -> absl::Status {
            auto it = d->entries.find(n);
            if (it == d->entries.end())
              return absl::NotFoundError(absl::StrCat("no tensor '", n, "' in '", d->path, "'"));
            const Entry& e = it->second;
            size_t numel = 1;
            for (int64_t s : e.hf_shape) numel *= (size_t)s;
            if (out.size() != numel)
              return absl::InvalidArgumentError(absl::StrCat("tensor '", n, "' has ", numel,
                                                             " elements, ", out.size(), " asked"));
            const std::byte* src = d->tensor_bytes(e);
            if (!e.transpose) {  // wte: its first V rows
              convert(src, d->dtype, out.data(), DType::kF32, numel);
              return absl::OkStatus();
            }
            std::vector<float> stored((size_t)e.rows * e.cols);  // (out, in) -> (in, out)
            convert(src, d->dtype, stored.data(), DType::kF32, stored.size());
            for (int64_t i = 0; i < e.rows; ++i)
              for (int64_t j = 0; j < e.cols; ++j) out[j * e.rows + i] = stored[i * e.cols + j];
            return absl::OkStatus();
          }};
}

}  // namespace zt
