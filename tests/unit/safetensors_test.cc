// safetensors reader/writer. References trusted: the files in tests/fixtures/ written by
// Python's `safetensors` package (via transformers' save_pretrained) and by
// scripts/make_reference.py; and our own writer for round trips.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(ZT_SOURCE_DIR) + "/tests/fixtures";

// A fresh empty directory for one test, removed when the test ends.
class ScopedDir {
 public:
  explicit ScopedDir(const std::string& name)
      : path_((fs::path(::testing::TempDir()) /
               ("zt_safetensors_" + name + "_" + std::to_string(::getpid())))
                  .string()) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScopedDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header string and `data_bytes` bytes of zero data.
std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data_bytes, '\0');
}

std::string status_text(const absl::Status& s) { return std::string(s.message()); }

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

TEST(SafeTensors, WriterReaderRoundTripAllDtypes) {
  const ScopedDir dir_tmp("roundtrip");
  const std::string& dir = dir_tmp.path();
  const std::string path = dir + "/a.safetensors";
  std::vector<float> a(2 * 3);
  std::iota(a.begin(), a.end(), -2.5f);
  std::vector<uint16_t> b, h;
  for (float x : {1.0f, -2.0f, 0.5f, 3.0f}) {
    b.push_back(f32_to_bf16(x));
    h.push_back(f32_to_f16(x));
  }
  std::vector<float> scalar = {7.25f};
  std::vector<NamedTensor> ts = {
      {"a.weight", DType::kF32, {2, 3}, bytes_of(a)},
      {"b", DType::kBF16, {4}, bytes_of(b)},
      {"h", DType::kF16, {2, 2}, bytes_of(h)},
      {"s", DType::kF32, {}, bytes_of(scalar)},
      {"empty", DType::kF32, {0, 5}, {}},
  };
  ASSERT_TRUE(write_safetensors(path, ts, {{"format", "pt"}, {"step", "3"}}).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto f = SafeTensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->names(), (std::vector<std::string>{"a.weight", "b", "empty", "h", "s"}));
  EXPECT_TRUE(f->contains("b"));
  EXPECT_FALSE(f->contains("c"));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("step"), "3");

  auto info = f->info("a.weight");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->dtype, "F32");
  EXPECT_EQ(info->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(info->bytes.size(), 24u);

  std::vector<float> out(6);
  ASSERT_TRUE(f->read_f32("a.weight", out).ok());
  EXPECT_EQ(out, a);
  std::vector<float> out4(4);
  ASSERT_TRUE(f->read_f32("b", out4).ok());
  EXPECT_EQ(out4, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
  ASSERT_TRUE(f->read_f32("h", out4).ok());
  EXPECT_EQ(out4, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
  std::vector<float> out1(1);
  ASSERT_TRUE(f->read_f32("s", out1).ok());
  EXPECT_EQ(out1[0], 7.25f);
  EXPECT_EQ(f->info("s")->shape.size(), 0u);
  EXPECT_TRUE(f->read_f32("empty", std::span<float>()).ok());

  // The header is space-padded so the data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  EXPECT_EQ(len[0] % 8, 0);
}

TEST(SafeTensors, ReadF32ConvertsF64AndReadI64ReadsI32) {
  const ScopedDir dir_tmp("f64");
  const std::string& dir = dir_tmp.path();
  const std::string path = dir + "/x.safetensors";
  std::string data(16 + 12, '\0');
  double d[2] = {1.5, -0.25};
  int32_t i[3] = {-100, 0, 70};
  std::memcpy(data.data(), d, 16);
  std::memcpy(data.data() + 16, i, 12);
  std::string header = R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                       R"("i":{"dtype":"I32","shape":[3],"data_offsets":[16,28]}})";
  std::string file = raw_file(header, 0) + data;
  write_file(path, file);
  auto f = SafeTensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(2);
  ASSERT_TRUE(f->read_f32("d", out).ok());
  EXPECT_EQ(out, (std::vector<float>{1.5f, -0.25f}));
  auto ids = f->read_i64("i");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int64_t>{-100, 0, 70}));
  // Wrong kind of read.
  EXPECT_NE(status_text(f->read_f32("i", std::span<float>(out.data(), 2))).find("I32"),
            std::string::npos);
  EXPECT_NE(status_text(f->read_i64("d").status()).find("F64"), std::string::npos);
}

TEST(SafeTensors, ReadF32NumelMismatchSaysBothCounts) {
  const ScopedDir dir_tmp("numel");
  const std::string& dir = dir_tmp.path();
  const std::string path = dir + "/a.safetensors";
  std::vector<float> a(6, 1.f);
  ASSERT_TRUE(write_safetensors(path, {{"w", DType::kF32, {2, 3}, bytes_of(a)}}).ok());
  auto f = SafeTensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  std::vector<float> out(5);
  absl::Status s = f->read_f32("w", out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(status_text(s).find("has 6 elements, but 5"), std::string::npos) << s;
}

TEST(SafeTensors, MissingTensorNamesTensorAndFile) {
  const ScopedDir dir_tmp("missing_tensor");
  const std::string& dir = dir_tmp.path();
  const std::string path = dir + "/a.safetensors";
  std::vector<float> a(1, 1.f);
  ASSERT_TRUE(write_safetensors(path, {{"w", DType::kF32, {1}, bytes_of(a)}}).ok());
  auto f = SafeTensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  absl::Status s = f->info("lm_head.weight").status();
  EXPECT_TRUE(absl::IsNotFound(s));
  EXPECT_NE(status_text(s).find("'lm_head.weight'"), std::string::npos) << s;
  EXPECT_NE(status_text(s).find(path), std::string::npos) << s;
}

TEST(SafeTensors, WriterRejectsBadTensorsAndKeepsTheOldFile) {
  const ScopedDir dir_tmp("atomic");
  const std::string& dir = dir_tmp.path();
  const std::string path = dir + "/a.safetensors";
  std::vector<float> good(4, 2.f);
  ASSERT_TRUE(write_safetensors(path, {{"w", DType::kF32, {4}, bytes_of(good)}}).ok());
  // Byte count does not match shape.
  absl::Status s = write_safetensors(path, {{"w", DType::kF32, {5}, bytes_of(good)}});
  EXPECT_NE(status_text(s).find("has 16 bytes but its shape and dtype F32 need 20"),
            std::string::npos)
      << s;
  // Duplicate name.
  s = write_safetensors(
      path, {{"w", DType::kF32, {4}, bytes_of(good)}, {"w", DType::kF32, {4}, bytes_of(good)}});
  EXPECT_NE(status_text(s).find("appears twice"), std::string::npos) << s;
  // Unwritable destination: the directory does not exist.
  s = write_safetensors(dir + "/no/such/dir/x.safetensors",
                        {{"w", DType::kF32, {4}, bytes_of(good)}});
  EXPECT_NE(status_text(s).find("cannot create"), std::string::npos) << s;
  // The good file is untouched and no temporary remains.
  auto f = SafeTensorsFile::open(path);
  ASSERT_TRUE(f.ok());
  std::vector<float> out(4);
  ASSERT_TRUE(f->read_f32("w", out).ok());
  EXPECT_EQ(out, good);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Each malformed file is rejected by open() with a message containing `expect`.
struct Malformed {
  const char* name;
  std::string bytes;
  const char* expect;
};

TEST(SafeTensors, MalformedFilesGiveUsefulErrors) {
  const ScopedDir dir_tmp("malformed");
  const std::string& dir = dir_tmp.path();
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::string huge_len(8, '\0');
  huge_len[0] = '\x10';
  huge_len[3] = '\x01';  // 16 MiB header in a 20-byte file
  std::vector<Malformed> cases = {
      {"truncated", std::string("\x05\x00\x00", 3), "truncated"},
      {"header_beyond_file", huge_len + "{\"a\":1}    ", "goes beyond the file"},
      {"bad_json", raw_file("{\"w\": {\"dtype\": ", 0), "bad JSON header"},
      {"not_object", raw_file("[1, 2]", 0), "not an object"},
      {"offsets_out_of_range", raw_file("{" + ok_entry + "}", 4), "out of range"},
      {"overlapping",
       raw_file("{" + ok_entry + R"(,"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "overlapping"},
      {"unknown_dtype", raw_file(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8),
       "unknown dtype 'F33'"},
      {"size_mismatch", raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "need 12"},
      {"negative_offsets",
       raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8), "data_offsets"},
      {"begin_after_end", raw_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
       "begin > end"},
      {"missing_shape", raw_file(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8), "shape"},
      {"bad_metadata", raw_file(R"({"__metadata__":{"a":1}})", 0), "__metadata__"},
  };
  for (const Malformed& c : cases) {
    const std::string path = dir + "/" + c.name + ".safetensors";
    write_file(path, c.bytes);
    auto f = SafeTensorsFile::open(path);
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_NE(status_text(f.status()).find(c.expect), std::string::npos)
        << c.name << ": " << f.status();
    EXPECT_NE(status_text(f.status()).find(path), std::string::npos) << c.name;
  }
  auto missing = SafeTensorsFile::open(dir + "/nope.safetensors");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(status_text(missing.status()).find("nope.safetensors"), std::string::npos);
}

TEST(SafeTensors, ShardedHfDirectoryServesTensorsAcrossShards) {
  const ScopedDir dir_tmp("sharded");
  const std::string& dir = dir_tmp.path();
  std::vector<float> a = {1, 2, 3}, b = {4, 5};
  ASSERT_TRUE(write_safetensors(dir + "/model-00001-of-00002.safetensors",
                                {{"a", DType::kF32, {3}, bytes_of(a)}})
                  .ok());
  ASSERT_TRUE(write_safetensors(dir + "/model-00002-of-00002.safetensors",
                                {{"b", DType::kF32, {1, 2}, bytes_of(b)}})
                  .ok());
  write_file(dir + "/model.safetensors.index.json",
             R"({"metadata":{"total_size":20},"weight_map":{)"
             R"("a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  auto m = open_hf_model_dir(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m->shards().size(), 2u);
  std::vector<float> out(2);
  ASSERT_TRUE(m->read_f32("b", out).ok());
  EXPECT_EQ(out, b);
  EXPECT_EQ(m->info("a")->shape, (std::vector<int64_t>{3}));
  absl::Status s = m->info("c").status();
  EXPECT_NE(status_text(s).find("'c' not found in model directory " + dir), std::string::npos) << s;

  // The index puts a tensor in a shard that does not hold it.
  write_file(dir + "/model.safetensors.index.json",
             R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})");
  s = open_hf_model_dir(dir).status();
  EXPECT_NE(status_text(s).find("does not hold it"), std::string::npos) << s;
  // No weight_map.
  write_file(dir + "/model.safetensors.index.json", R"({"metadata":{}})");
  s = open_hf_model_dir(dir).status();
  EXPECT_NE(status_text(s).find("weight_map"), std::string::npos) << s;

  const ScopedDir empty_tmp("empty_model_dir");
  const std::string& empty = empty_tmp.path();
  s = open_hf_model_dir(empty).status();
  EXPECT_TRUE(absl::IsNotFound(s));
  EXPECT_NE(status_text(s).find("no model.safetensors"), std::string::npos) << s;
}

// Mean cross-entropy of logits (N, V) against targets (N), skipping -100, in double.
double mean_cross_entropy(const std::vector<float>& logits, const std::vector<int64_t>& targets,
                          int V) {
  double sum = 0;
  int count = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] == -100) continue;
    const float* row = logits.data() + i * V;
    double mx = *std::max_element(row, row + V), z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
    sum += std::log(z) + mx - row[targets[i]];
    ++count;
  }
  return sum / count;
}

// Checks the reference file's loss is the unshifted mean cross-entropy of its logits.
void expect_loss_matches_logits(const SafeTensorsFile& ref, int V) {
  std::vector<float> logits(2 * 8 * V), loss(1);
  ASSERT_TRUE(ref.read_f32("logits", logits).ok());
  ASSERT_TRUE(ref.read_f32("loss", loss).ok());
  auto targets = ref.read_i64("targets");
  ASSERT_TRUE(targets.ok());
  EXPECT_NEAR(mean_cross_entropy(logits, *targets, V), loss[0], 1e-5);
}

// Fixtures written by transformers' save_pretrained (the `safetensors` package) and by
// scripts/make_reference.py.
TEST(SafeTensors, ReadsTinyGpt2FixtureFromPythonSafetensors) {
  auto m = open_hf_model_dir(kFixtures + "/tiny_gpt2");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->names().size(), 28u);  // 2 + 12 per block * 2 + ln_f (2); no lm_head (tied)
  EXPECT_FALSE(m->contains("lm_head.weight"));
  EXPECT_EQ(m->shards()[0].metadata().at("format"), "pt");
  EXPECT_EQ(m->info("transformer.wte.weight")->shape, (std::vector<int64_t>{67, 32}));
  EXPECT_EQ(m->info("transformer.wpe.weight")->shape, (std::vector<int64_t>{16, 32}));
  // HF Conv1D: (in, out).
  EXPECT_EQ(m->info("transformer.h.0.attn.c_attn.weight")->shape, (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(m->info("transformer.h.1.mlp.c_proj.weight")->shape, (std::vector<int64_t>{128, 32}));
  std::vector<float> ln(32);
  ASSERT_TRUE(m->read_f32("transformer.ln_f.weight", ln).ok());
  for (float x : ln) EXPECT_NEAR(x, 1.0f, 0.6f);  // 1 + N(0, 0.1)

  auto ref = SafeTensorsFile::open(kFixtures + "/tiny_gpt2/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->info("logits")->shape, (std::vector<int64_t>{2, 8, 67}));
  std::vector<float> loss(1);
  ASSERT_TRUE(ref->read_f32("loss", loss).ok());
  EXPECT_TRUE(std::isfinite(loss[0]));
  EXPECT_GT(loss[0], 0.f);
  auto ids = ref->read_i64("input_ids");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 16u);
  for (int64_t t : *ids) EXPECT_TRUE(t >= 0 && t < 67);
  auto targets = ref->read_i64("targets");
  ASSERT_TRUE(targets.ok());
  EXPECT_EQ(std::count(targets->begin(), targets->end(), -100), 3);
  // A gradient for every parameter, same shape.
  for (const std::string& n : m->names())
    EXPECT_EQ(ref->info("grad." + n)->shape, m->info(n)->shape) << n;
  EXPECT_EQ(ref->info("adamw_losses")->shape, (std::vector<int64_t>{10}));
  std::vector<float> hp(5);
  ASSERT_TRUE(ref->read_f32("adamw_hparams", hp).ok());
  EXPECT_FLOAT_EQ(hp[0], 1e-2f);
  EXPECT_FLOAT_EQ(hp[4], 0.1f);
  EXPECT_TRUE(ref->metadata().count("settings"));
  expect_loss_matches_logits(*ref, 67);
}

TEST(SafeTensors, ReadsTinyLlamaFixtureFromPythonSafetensors) {
  auto m = open_hf_model_dir(kFixtures + "/tiny_llama");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->names().size(), 21u);
  EXPECT_EQ(m->info("model.embed_tokens.weight")->shape, (std::vector<int64_t>{71, 32}));
  EXPECT_EQ(m->info("lm_head.weight")->shape, (std::vector<int64_t>{71, 32}));
  // nn.Linear: (out, in); GQA: 2 KV heads * head_dim 8.
  EXPECT_EQ(m->info("model.layers.0.self_attn.q_proj.weight")->shape,
            (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(m->info("model.layers.1.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(m->info("model.layers.0.mlp.down_proj.weight")->shape, (std::vector<int64_t>{32, 40}));

  auto ref = SafeTensorsFile::open(kFixtures + "/tiny_llama/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->info("logits")->shape, (std::vector<int64_t>{2, 8, 71}));
  std::vector<float> loss(1), losses(10);
  ASSERT_TRUE(ref->read_f32("loss", loss).ok());
  EXPECT_TRUE(std::isfinite(loss[0]));
  ASSERT_TRUE(ref->read_f32("adamw_losses", losses).ok());
  EXPECT_FLOAT_EQ(losses[0], loss[0]);  // loss before the first step is the batch loss
  EXPECT_LT(losses[9], losses[0]);
  expect_loss_matches_logits(*ref, 71);
  for (const std::string& n : m->names())
    EXPECT_EQ(ref->info("grad." + n)->shape, m->info(n)->shape) << n;
}

}  // namespace
}  // namespace zt
