// Tests of data/: tokenizer, llm.c shards, DataLoader, prepare_text.
// References trusted: Python's sentencepiece package and llm.c's shard writer
// (dev/data/data_common.py), via fixtures from scripts/make_data_reference.py; for the
// loader, llm.c's window layout unshuffled (rank r reads [m*W*B*T + r*B*T, ... + B*T + 1)).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include <zlib.h>

#include "absl/strings/str_cat.h"
#include "data/alpaca.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace zt {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = ZT_SOURCE_DIR "/tests/fixtures/";
const std::string kTokenizer = ZT_SOURCE_DIR "/../shared/data/llama2_tokenizer.model";

#define SKIP_WITHOUT_TOKENIZER() \
  if (!fs::exists(kTokenizer))   \
  GTEST_SKIP() << "tokenizer " << kTokenizer << " is absent (shared/data not populated)"

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// gmock is not linked, so a substring check with a readable failure message.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A fresh directory per test under the gtest temp dir.
class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("zt_data_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// ---------------------------------------------------------------- tokenizer

TEST(Tokenizer, MatchesPythonSentencepiece) {
  SKIP_WITHOUT_TOKENIZER();
  const auto ref = read_json(kFixtures + "tokenizer_reference.json");
  auto tok = Tokenizer::load(kTokenizer);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->vocab_size(), ref["vocab_size"].get<int>());
  EXPECT_EQ(tok->bos_id(), ref["bos_id"].get<int>());
  EXPECT_EQ(tok->eos_id(), ref["eos_id"].get<int>());
  for (const auto& c : ref["cases"]) {
    const auto text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int>>();
    EXPECT_EQ(tok->encode(text), ids) << text;
    EXPECT_EQ(tok->decode(ids), c["decoded"].get<std::string>()) << text;
  }
}

TEST(Tokenizer, DecodeTokenStreamsTheTextWithItsDummyPrefix) {
  SKIP_WITHOUT_TOKENIZER();
  auto tok = Tokenizer::load(kTokenizer);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto ref = read_json(kFixtures + "tokenizer_reference.json");
  for (const auto& c : ref["cases"]) {
    const auto text = c["text"].get<std::string>();
    if (text.empty()) continue;
    std::string streamed = tok->decode_token(tok->bos_id());
    for (int id : tok->encode(text)) streamed += tok->decode_token(id);
    EXPECT_EQ(streamed, " " + text);
  }
  EXPECT_EQ(tok->decode_token(-1), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode_token(tok->vocab_size()), "\xEF\xBF\xBD");
  const std::vector<int> ids = {15043, 99999, 3186};  // "Hello", out of range, "world"
  EXPECT_EQ(tok->decode(ids),
            "Hello\xEF\xBF\xBD"
            "world");
}

TEST_F(DataTest, TokenizerLoadErrorsNameThePath) {
  auto missing = Tokenizer::load(path("nope.model"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(std::string(missing.status().message()), path("nope.model")));
  write_bytes(path("text.model"), "this is not a model");
  auto bad = Tokenizer::load(path("text.model"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(bad.status().message()), "not a sentencepiece model"));
  EXPECT_TRUE(Contains(std::string(bad.status().message()), path("text.model")));
}

// Hugging Face tokenizer.json, decoded as `tokenizers` decodes it (fixture:
// scripts/make_hf_tokenizer_fixture.py): byte-level BPE and sentencepiece-style byte fallback.
TEST(Tokenizer, HfTokenizerJsonDecodesAsTheTokenizersPackage) {
  const auto ref = read_json(kFixtures + "hf_tokenizer_reference.json");
  ASSERT_EQ(ref["tokenizers"].size(), 2u);
  for (const auto& t : ref["tokenizers"]) {
    const std::string file = kFixtures + t["path"].get<std::string>();
    auto tok = Tokenizer::load(file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(tok->vocab_size(), t["vocab_size"].get<int>()) << file;
    EXPECT_EQ(tok->note(), "") << file;
    EXPECT_EQ(tok->bos_id(), -1) << file;  // no config.json beside it
    for (const auto& c : t["cases"]) {
      const auto ids = c["ids"].get<std::vector<int>>();
      const auto decoded = c["decoded"].get<std::string>();
      EXPECT_EQ(tok->decode(ids), decoded) << file;
      if (!c.contains("text")) continue;  // invalid UTF-8: streamed as raw bytes
      // Streamed token by token: the same bytes, and sentencepiece's dummy prefix, which the
      // metaspace decoder strips from the whole text, stays on the first piece.
      std::string streamed;
      for (int id : ids) streamed += tok->decode_token(id);
      const bool dummy_prefix = file.find("metaspace") != std::string::npos;
      EXPECT_EQ(streamed, dummy_prefix ? " " + decoded : decoded) << file;
    }
    // Encoding is the script's (scripts/prepare_hf_tokens.py): asked for, a clear error.
    EXPECT_TRUE(tok->encode("").empty());
    const absl::Status s = tok->check_encodes("--sample_prompt");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(std::string(s.message()), "--sample_prompt"));
    EXPECT_TRUE(Contains(std::string(s.message()), "scripts/prepare_hf_tokens.py"));
  }
}

TEST_F(DataTest, HfTokenizerDirectoryBosFromConfigAndUnknownDecoder) {
  // A model directory: tokenizer.json found in it, BOS and EOS from its config.json.
  fs::copy_file(kFixtures + "hf_tokenizers/byte_level/tokenizer.json", path("tokenizer.json"));
  write_bytes(path("config.json"), R"({"bos_token_id": 0, "eos_token_id": [0, 5]})");
  auto tok = Tokenizer::load(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 0);
  EXPECT_EQ(tok->decode_token(0), "");  // <|endoftext|>: special
  // A decoder zerotrain does not read: token ids, and a note that says why.
  write_bytes(path("w.json"), R"({"model": {"type": "WordPiece", "vocab": {"a": 0, "##b": 1}},
                                  "decoder": {"type": "WordPiece"}})");
  auto wp = Tokenizer::load(path("w.json"));
  ASSERT_TRUE(wp.ok()) << wp.status();
  EXPECT_EQ(wp->decode(std::vector<int>{0, 1}), "[0][1]");
  EXPECT_TRUE(Contains(wp->note(), "WordPiece"));
  EXPECT_TRUE(Contains(wp->note(), "token ids"));
  // Not a tokenizer.json, an empty directory: errors that name the path.
  write_bytes(path("x.json"), R"({"model": {}})");
  auto bad = Tokenizer::load(path("x.json"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(bad.status().message()), path("x.json")));
  // Fields of other types than tokenizers writes, ids no table holds: errors, not crashes.
  for (const char* text :
       {R"({"model": 5})", R"({"model": {"vocab": {"a": 9223372036854775807}}})",
        R"({"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": 1, "content": "x",
            "special": "yes"}]})",
        R"({"model": {"vocab": {"a": 0}}, "decoder": {"type": "Sequence", "decoders": [5]}})"}) {
    write_bytes(path("m.json"), text);
    auto m = Tokenizer::load(path("m.json"));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  fs::create_directories(path("empty"));
  auto none = Tokenizer::load(path("empty"));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(std::string(none.status().message()), "neither tokenizer.model"));
}

// ---------------------------------------------------------------- shards

TEST_F(DataTest, ShardRoundTripUint16) {
  std::vector<uint32_t> tokens = {0, 1, 2, 65535, 50256, 7};
  ASSERT_TRUE(write_shard(path("a.bin"), tokens, 65536).ok());
  auto info = read_shard_header(path("a.bin"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_tokens, 6);
  EXPECT_EQ(info->bytes_per_token, 2);
  EXPECT_EQ(info->file_bytes, 1024 + 12);
  EXPECT_EQ(*read_shard_tokens(path("a.bin")), tokens);
  EXPECT_FALSE(fs::exists(path("a.bin.tmp")));
}

TEST_F(DataTest, ShardRoundTripUint32) {
  std::vector<uint32_t> tokens = {0, 65536, 128255, 3};
  ASSERT_TRUE(write_shard(path("a.bin"), tokens, 128256).ok());
  const std::string bytes = read_bytes(path("a.bin"));
  ASSERT_EQ(bytes.size(), 1024u + 16u);
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 4);
  EXPECT_EQ(read_shard_header(path("a.bin"))->bytes_per_token, 4);
  EXPECT_EQ(*read_shard_tokens(path("a.bin")), tokens);
}

// The fixtures were written by a numpy copy of llm.c's write_datafile.
TEST_F(DataTest, ReadsAndWritesShardsLikeLlmcPythonWriter) {
  const auto ref = read_json(kFixtures + "shard_reference.json");
  for (const auto& [name, r] : ref.items()) {
    const auto tokens = r["tokens"].get<std::vector<uint32_t>>();
    auto read = read_shard_tokens(kFixtures + name);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, tokens) << name;
    ASSERT_TRUE(write_shard(path(name), tokens, r["vocab_size"].get<int>()).ok());
    EXPECT_EQ(read_bytes(path(name)), read_bytes(kFixtures + name)) << name;  // byte-identical
  }
}

TEST_F(DataTest, ShardErrorsSayWhatIsWrong) {
  const std::vector<uint32_t> tokens(100, 5);
  ASSERT_TRUE(write_shard(path("good.bin"), tokens, 32000).ok());
  const std::string good = read_bytes(path("good.bin"));

  write_bytes(path("trunc.bin"), good.substr(0, good.size() - 3));
  auto trunc = read_shard_header(path("trunc.bin"));
  EXPECT_EQ(trunc.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(std::string(trunc.status().message()), "truncated"));
  EXPECT_TRUE(Contains(std::string(trunc.status().message()), path("trunc.bin")));

  std::string wrong = good;
  const int32_t magic = 12345;
  std::memcpy(wrong.data(), &magic, 4);
  write_bytes(path("magic.bin"), wrong);
  const std::string m(read_shard_header(path("magic.bin")).status().message());
  EXPECT_TRUE(Contains(m, "magic 12345"));
  EXPECT_TRUE(Contains(m, "20240520"));
  EXPECT_TRUE(Contains(m, "may not be an llm.c"));
  EXPECT_TRUE(Contains(m, path("magic.bin")));

  std::string version = good;
  const int32_t v = 3;
  std::memcpy(version.data() + 4, &v, 4);
  write_bytes(path("version.bin"), version);
  EXPECT_TRUE(Contains(std::string(read_shard_header(path("version.bin")).status().message()),
                       "unknown version 3"));

  write_bytes(path("empty.bin"), "");
  const std::string e(MappedShard::open(path("empty.bin")).status().message());
  EXPECT_TRUE(Contains(e, "0 bytes, shorter than the 1024-byte header"));

  EXPECT_EQ(read_shard_header(path("missing.bin")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DataTest, WriteShardRejectsBadInputAndLeavesNoPartialFile) {
  const std::vector<uint32_t> tokens = {1, 2, 40000};
  EXPECT_TRUE(
      Contains(std::string(write_shard(path("a.bin"), tokens, 32000).message()), "token 40000"));
  const auto no_dir = write_shard(path("no/such/dir/a.bin"), tokens, 65536);
  EXPECT_EQ(no_dir.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(fs::exists(path("no/such/dir/a.bin.tmp")));
}

// ---------------------------------------------------------------- loader

// Shards whose token i of shard k is k*10000 + i, so a token tells its position.
class LoaderTest : public DataTest {
 protected:
  void SetUp() override {
    DataTest::SetUp();
    for (int k = 0; k < 3; ++k) {
      std::vector<uint32_t> tokens(sizes_[k]);
      std::iota(tokens.begin(), tokens.end(), k * 10000u);
      ASSERT_TRUE(
          write_shard(path("train_00000" + std::to_string(k) + ".bin"), tokens, 65536).ok());
    }
  }
  DataLoaderOptions options(int B, int T, int rank, int world, bool shuffle, uint64_t seed = 1) {
    DataLoaderOptions o;
    o.pattern = path("train_*.bin");
    o.B = B, o.T = T, o.rank = rank, o.world_size = world, o.shuffle = shuffle, o.seed = seed;
    o.vocab_size = 32000;
    return o;
  }
  // `n` batches of `loader`'s inputs and targets, concatenated.
  static std::pair<std::vector<int>, std::vector<int>> draw(DataLoader& loader, int B, int T,
                                                            int n) {
    std::vector<int> in(size_t(n) * B * T), tg(size_t(n) * B * T);
    for (int i = 0; i < n; ++i) loader.next_batch(&in[size_t(i) * B * T], &tg[size_t(i) * B * T]);
    return {in, tg};
  }
  const int sizes_[3] = {1000, 777, 300};
};

TEST_F(LoaderTest, WindowsFollowLlmcLayoutAndTargetsAreNextTokens) {
  auto loader = DataLoader::open(options(2, 8, 1, 2, false));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->num_shards(), 3);
  EXPECT_EQ(loader->num_tokens(), 1000 + 777 + 300);
  EXPECT_EQ(loader->num_batches_per_epoch(), (999 / 8 + 776 / 8 + 299 / 8) / 4);  // seqs / (W*B)
  auto [in, tg] = draw(*loader, 2, 8, 2);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(in[i], 16 + i);       // sample 0, rank 1: tokens [B*T, 2*B*T)
    EXPECT_EQ(in[16 + i], 48 + i);  // sample 1 starts at W*B*T + B*T
    EXPECT_EQ(tg[i], in[i] + 1);
  }
}

// read_sequence (validation's reader) gives sequence i of the stream by its index alone, every
// sequence of every shard, the tail ones that a batch drops included: sequence i of shard k
// starts at token k*10000 + 8j for its j-th sequence. num_sequences counts them all.
TEST_F(LoaderTest, ReadSequenceGivesEverySequenceByIndex) {
  auto loader = DataLoader::open(options(1, 8, 0, 1, false));
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_EQ(loader->num_sequences(), 999 / 8 + 776 / 8 + 299 / 8);
  std::vector<int> in(8), tg(8);
  int64_t i = 0;
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < (sizes_[k] - 1) / 8; ++j, ++i) {
      loader->read_sequence(i, in.data(), tg.data());
      ASSERT_EQ(in[0], k * 10000 + 8 * j) << "sequence " << i;
      ASSERT_EQ(tg[7], k * 10000 + 8 * j + 8) << "sequence " << i;
    }
}

// The shards' identity (what ranks compare at start): the token count and the file's CRC-32,
// zlib's, checked here on a file whose CRC is known (the bytes of "123456789" give 0xCBF43926,
// the standard check value) and on the shard itself against zlib's crc32 of its bytes read back.
TEST_F(LoaderTest, IdentityIsTheTokenCountAndTheFilesCrc32) {
  auto loader = DataLoader::open(options(1, 8, 0, 1, false));
  ASSERT_TRUE(loader.ok()) << loader.status();
  const auto ids = loader->identity();
  ASSERT_EQ(ids.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    std::ifstream f(ids[k].path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
    EXPECT_EQ(ids[k].what, absl::StrCat(sizes_[k], " tokens, CRC-32 ",
                                        absl::Hex(crc, absl::kZeroPad8)));
  }
  EXPECT_EQ(::crc32(0, reinterpret_cast<const Bytef*>("123456789"), 9), 0xCBF43926u);
}

// With shuffling, each epoch reads every shard whole, one after another, in an order drawn anew
// for that epoch (llm.c's DataLoader permutes its shard indices at every reset): over four
// epochs the orders of the three shards are permutations and not all the same.
TEST_F(LoaderTest, EachEpochVisitsTheShardsInANewOrder) {
  auto loader = DataLoader::open(options(1, 8, 0, 1, true));
  ASSERT_TRUE(loader.ok()) << loader.status();
  const int per_epoch = (int)loader->num_batches_per_epoch();
  ASSERT_EQ(per_epoch, 999 / 8 + 776 / 8 + 299 / 8);
  std::vector<std::vector<int>> orders;
  for (int epoch = 0; epoch < 4; ++epoch) {
    auto [in, tg] = draw(*loader, 1, 8, per_epoch);
    std::vector<int> order;
    for (int i = 0; i < per_epoch; ++i) {
      const int shard = in[(size_t)i * 8] / 10000;
      if (order.empty() || order.back() != shard) order.push_back(shard);
    }
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2})) << "epoch " << epoch << ": shards read whole";
    orders.push_back(order);
  }
  EXPECT_FALSE(orders[1] == orders[0] && orders[2] == orders[0] && orders[3] == orders[0])
      << "every epoch read the shards in the same order";
}

TEST_F(LoaderTest, TwoRanksTileOneRankWithDoubleBatch) {
  for (bool shuffle : {false, true}) {
    auto r0 = DataLoader::open(options(2, 8, 0, 2, shuffle));
    auto r1 = DataLoader::open(options(2, 8, 1, 2, shuffle));
    auto one = DataLoader::open(options(4, 8, 0, 1, shuffle));
    ASSERT_TRUE(r0.ok() && r1.ok() && one.ok());
    ASSERT_EQ(r0->num_batches_per_epoch(), one->num_batches_per_epoch());
    const int steps = 2 * static_cast<int>(one->num_batches_per_epoch()) + 3;  // 2+ epochs
    std::vector<int> seen0, seen1;
    for (int s = 0; s < steps; ++s) {
      auto [in0, tg0] = draw(*r0, 2, 8, 1);
      auto [in1, tg1] = draw(*r1, 2, 8, 1);
      auto [in, tg] = draw(*one, 4, 8, 1);
      in0.insert(in0.end(), in1.begin(), in1.end());
      tg0.insert(tg0.end(), tg1.begin(), tg1.end());
      ASSERT_EQ(in0, in) << "step " << s << " shuffle " << shuffle;
      ASSERT_EQ(tg0, tg) << "step " << s << " shuffle " << shuffle;
      if (s < one->num_batches_per_epoch()) {
        seen0.insert(seen0.end(), in0.begin(), in0.begin() + 16);
        seen1.insert(seen1.end(), in1.begin(), in1.end());
      }
    }
    std::sort(seen0.begin(), seen0.end());
    std::sort(seen1.begin(), seen1.end());
    std::vector<int> common;
    std::set_intersection(seen0.begin(), seen0.end(), seen1.begin(), seen1.end(),
                          std::back_inserter(common));
    EXPECT_TRUE(common.empty()) << "ranks share input positions within an epoch";
  }
}

// The global batch does not depend on the world size: with the default shuffle, W ranks at
// micro-batch B draw together what one rank draws in W micro-batches (gradient accumulation),
// and a state saved at one world size restores at another to the same stream.
TEST_F(LoaderTest, OneGlobalStreamWhateverTheWorldSize) {
  auto r0 = DataLoader::open(options(2, 8, 0, 2, true));
  auto r1 = DataLoader::open(options(2, 8, 1, 2, true));
  DataLoaderOptions gas2 = options(2, 8, 0, 1, true);
  gas2.micro_batches_per_step = 2;
  auto one = DataLoader::open(gas2);
  ASSERT_TRUE(r0.ok() && r1.ok() && one.ok());
  ASSERT_EQ(2 * r0->num_batches_per_epoch(), one->num_batches_per_epoch());
  const int steps = 2 * static_cast<int>(r0->num_batches_per_epoch()) + 3;  // 2+ epochs
  for (int s = 0; s < steps; ++s) {
    auto [in0, tg0] = draw(*r0, 2, 8, 1);
    auto [in1, tg1] = draw(*r1, 2, 8, 1);
    auto [in, tg] = draw(*one, 2, 8, 2);  // two micro-batches of one rank
    in0.insert(in0.end(), in1.begin(), in1.end());
    tg0.insert(tg0.end(), tg1.begin(), tg1.end());
    ASSERT_EQ(in0, in) << "step " << s;
    ASSERT_EQ(tg0, tg) << "step " << s;
  }
  // Saved on one rank, resumed on two: the next step is the one rank's next two micro-batches.
  auto a = DataLoader::open(options(2, 8, 0, 2, true));
  auto b = DataLoader::open(options(2, 8, 1, 2, true));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->restore(one->state()).ok());
  ASSERT_TRUE(b->restore(one->state()).ok());
  auto [in, tg] = draw(*one, 2, 8, 2);
  auto [ina, tga] = draw(*a, 2, 8, 1);
  auto [inb, tgb] = draw(*b, 2, 8, 1);
  ina.insert(ina.end(), inb.begin(), inb.end());
  EXPECT_EQ(ina, in);
}

TEST_F(LoaderTest, ShuffleIsDeterministicAndPermutesWithoutChangingTheMultiset) {
  auto plain = DataLoader::open(options(2, 8, 0, 1, false));
  auto a = DataLoader::open(options(2, 8, 0, 1, true, 7));
  auto b = DataLoader::open(options(2, 8, 0, 1, true, 7));
  auto c = DataLoader::open(options(2, 8, 0, 1, true, 8));
  ASSERT_TRUE(plain.ok() && a.ok() && b.ok() && c.ok());
  const int n = static_cast<int>(plain->num_batches_per_epoch());
  auto [p_in, p_tg] = draw(*plain, 2, 8, n);
  auto [a_in, a_tg] = draw(*a, 2, 8, n);
  auto [b_in, b_tg] = draw(*b, 2, 8, n);
  auto [c_in, c_tg] = draw(*c, 2, 8, n);
  EXPECT_EQ(a_in, b_in);  // same seed, same order
  EXPECT_EQ(a_tg, b_tg);
  EXPECT_NE(a_in, c_in);  // another seed, another order
  EXPECT_NE(a_in, p_in);  // shuffled
  std::sort(a_in.begin(), a_in.end());
  std::sort(p_in.begin(), p_in.end());
  EXPECT_EQ(a_in, p_in);  // same windows
  EXPECT_EQ(a->epoch(), 0);
  auto [a2_in, a2_tg] = draw(*a, 2, 8, n);  // epoch 1 has a new order
  EXPECT_EQ(a->epoch(), 1);
  std::vector<int> first_epoch = b_in;
  EXPECT_NE(a2_in, first_epoch);
}

TEST_F(LoaderTest, ResetAndRestoreReplayTheSameBatches) {
  auto a = DataLoader::open(options(2, 8, 0, 1, true));
  auto b = DataLoader::open(options(2, 8, 0, 1, true));
  ASSERT_TRUE(a.ok() && b.ok());
  auto first = draw(*a, 2, 8, 5);
  const int skip = static_cast<int>(a->num_batches_per_epoch()) + 3;
  draw(*a, 2, 8, skip);
  const DataLoaderState state = a->state();
  auto next = draw(*a, 2, 8, 5);
  ASSERT_TRUE(b->restore(state).ok());
  EXPECT_EQ(draw(*b, 2, 8, 5), next);
  a->reset();
  EXPECT_EQ(a->epoch(), 0);
  EXPECT_EQ(draw(*a, 2, 8, 5), first);
  EXPECT_FALSE(b->restore({0, 3}).ok());  // not a multiple of W*B = 2
  EXPECT_FALSE(b->restore({0, 2 * (a->num_batches_per_epoch() + 1)}).ok());  // past the epoch
}

TEST_F(LoaderTest, OpenErrorsSayWhatToChange) {
  auto o = options(2, 8, 0, 1, false);
  o.pattern = path("nothing_*.bin");
  const std::string none(DataLoader::open(o).status().message());
  EXPECT_TRUE(Contains(none, o.pattern));

  o = options(4, 300, 0, 1, false);  // sequences of 301 tokens: shard 2 (300) is skipped
  auto tail = DataLoader::open(o);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_EQ(tail->num_shards(), 2);
  EXPECT_EQ(tail->num_batches_per_epoch(), 1);  // 3 + 2 sequences, 4 per micro-batch
  o = options(4, 400, 0, 1, false);  // 2 + 1 sequences of 401 tokens: fewer than W*B = 4
  const std::string small(DataLoader::open(o).status().message());
  EXPECT_TRUE(Contains(small, "hold 3 sequence(s) of T+1 = 401 tokens"));
  EXPECT_TRUE(Contains(small, "(300 tokens)"));
  EXPECT_TRUE(Contains(small, "W*B*G = 4"));
  EXPECT_TRUE(Contains(small, "train_000002.bin"));

  o = options(2, 8, 0, 1, false);
  o.vocab_size = 20000;  // shard 2 holds ids up to 20299
  const std::string vocab(DataLoader::open(o).status().message());
  EXPECT_TRUE(Contains(vocab, "token id 20299"));
  EXPECT_TRUE(Contains(vocab, "train_000002.bin"));
  EXPECT_TRUE(Contains(vocab, "larger vocabulary than the model"));

  o = options(2, 8, 2, 2, false);
  EXPECT_EQ(DataLoader::open(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- prepare

TEST_F(DataTest, PrepareWritesShardsThatDecodeBackToTheText) {
  SKIP_WITHOUT_TOKENIZER();
  const std::string a =
      "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
      "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to "
      "die than to famish?\n";
  const std::string b = "Héllo wörld 🦙\nsecond document, with its own BOS.\n";
  write_bytes(path("a.txt"), a);
  write_bytes(path("b.txt"), b);
  auto tok = Tokenizer::load(kTokenizer);
  ASSERT_TRUE(tok.ok());
  PrepareOptions o;
  o.tokenizer_path = kTokenizer;
  o.inputs = {path("a.txt"), path("b.txt")};
  o.out_dir = path("out");
  o.val_fraction = 0.2;
  o.max_shard_tokens = 20;
  ASSERT_TRUE(prepare_text(o).ok());

  std::vector<uint32_t> expected = {static_cast<uint32_t>(tok->bos_id())};
  for (int id : tok->encode(a)) expected.push_back(id);
  const size_t a_end = expected.size();
  expected.push_back(tok->bos_id());
  for (int id : tok->encode(b)) expected.push_back(id);
  const auto n = static_cast<int64_t>(expected.size());
  const int64_t n_val = std::llround(0.2 * n);

  std::vector<uint32_t> all;  // train shards in name order, then val
  std::vector<std::string> train;
  for (const auto& e : fs::directory_iterator(dir_ / "out")) {
    if (e.path().filename().string().starts_with("train_")) train.push_back(e.path().string());
  }
  std::sort(train.begin(), train.end());
  EXPECT_EQ(static_cast<int64_t>(train.size()), (n - n_val + 19) / 20);
  for (const auto& t : train) {
    auto toks = read_shard_tokens(t);
    ASSERT_TRUE(toks.ok()) << toks.status();
    EXPECT_LE(toks->size(), 20u);
    EXPECT_EQ(read_shard_header(t)->bytes_per_token, 2);
    all.insert(all.end(), toks->begin(), toks->end());
  }
  EXPECT_EQ(static_cast<int64_t>(all.size()), n - n_val);
  auto val = read_shard_tokens(path("out/val_000000.bin"));
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(static_cast<int64_t>(val->size()), n_val);
  all.insert(all.end(), val->begin(), val->end());
  ASSERT_EQ(all, expected);
  const std::vector<int> doc_a(all.begin() + 1, all.begin() + a_end);
  const std::vector<int> doc_b(all.begin() + a_end + 1, all.end());
  EXPECT_EQ(tok->decode(doc_a), a);
  EXPECT_EQ(tok->decode(doc_b), b);
}

TEST_F(DataTest, PrepareRemovesStaleTrainShards) {
  SKIP_WITHOUT_TOKENIZER();
  write_bytes(path("a.txt"), "To be, or not to be, that is the question.");
  fs::create_directories(path("out"));
  write_bytes(path("out/train_000001.bin"), "stale");
  write_bytes(path("out/train_000002.bin"), "stale");
  PrepareOptions o;
  o.tokenizer_path = kTokenizer;
  o.inputs = {path("a.txt")};
  o.out_dir = path("out");
  o.val_fraction = 0.25;
  ASSERT_TRUE(prepare_text(o).ok());
  EXPECT_TRUE(fs::exists(path("out/train_000000.bin")));
  EXPECT_FALSE(fs::exists(path("out/train_000001.bin")));
  EXPECT_FALSE(fs::exists(path("out/train_000002.bin")));
}

TEST_F(DataTest, PrepareErrorsSayWhatIsWrong) {
  SKIP_WITHOUT_TOKENIZER();
  write_bytes(path("a.txt"),
              "Some text that is long enough to split into a train part and a "
              "val part of at least two tokens each.");
  write_bytes(path("empty.txt"), "");
  write_bytes(path("tiny.txt"), "a");
  write_bytes(path("file"), "x");
  auto run = [&](PrepareOptions o) { return prepare_text(o); };
  PrepareOptions base;
  base.tokenizer_path = kTokenizer;
  base.inputs = {path("a.txt")};
  base.out_dir = path("out");
  auto o = base;
  o.inputs = {path("missing.txt")};
  EXPECT_EQ(run(o).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(std::string(run(o).message()), path("missing.txt")));
  o.inputs = {path("empty.txt")};
  EXPECT_TRUE(Contains(std::string(run(o).message()), "is empty"));
  o = base;
  o.val_fraction = 0.7;
  EXPECT_TRUE(Contains(std::string(run(o).message()), "[0, 0.5]"));
  o = base;
  o.tokenizer_path = path("nope.model");
  EXPECT_TRUE(Contains(std::string(run(o).message()), path("nope.model")));
  o = base;
  o.inputs = {path("tiny.txt")};  // [BOS, a] -> 1 train + 1 val token
  o.val_fraction = 0.5;
  EXPECT_TRUE(Contains(std::string(run(o).message()), "at least 2 tokens"));
  o = base;
  o.out_dir = path("file/out");
  EXPECT_TRUE(Contains(std::string(run(o).message()), "cannot create output directory"));
  o = base;
  o.model_vocab_size = 1000;
  EXPECT_TRUE(Contains(std::string(run(o).message()), "32000 tokens"));
  EXPECT_FALSE(fs::exists(path("out")));
}

}  // namespace
}  // namespace zt

// ---------------------------------------------------------------- instruction data

namespace zt {
namespace {

TEST_F(DataTest, AlpacaRecordsAreCheckedByIndex) {
  auto ok = parse_alpaca(R"([{"instruction": "a", "output": "b"},
                            {"instruction": "c", "input": "d", "output": "e", "id": 3}])",
                         "x.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].input, "");
  EXPECT_EQ((*ok)[1].input, "d");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"instruction": "a"})", "expected a JSON list"},
      {R"([])", "the list is empty"},
      {R"([{"instruction": "a", "output": "b"}, {"output": "b"}])", "record 1 has no \"instruction\""},
      {R"([{"instruction": "a", "output": 7}])", "record 0: \"output\" is number, not a string"},
      {R"([{"instruction": "a", "input": null, "output": "b"}])", "record 0: \"input\" is null"},
      {R"([{"instruction": "a", "output": "b"}, 5])", "record 1 is not an object"},
      {R"([{"instruction": "a", "output": "b")", "malformed JSON"}};
  for (const auto& [text, needle] : bad) {
    const auto r = parse_alpaca(text, "x.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_TRUE(Contains(std::string(r.status().message()), needle)) << r.status();
    EXPECT_TRUE(Contains(std::string(r.status().message()), "x.json")) << r.status();
  }
}

// prepare --format alpaca: one example per T-token sequence; the loader's targets are the
// response and its EOS, every other target -1 (ignored by the loss: the reference fixtures check
// against PyTorch that ignored targets add no gradient). A loader at another T is refused.
TEST_F(DataTest, InstructionShardsTrainOnlyTheResponses) {
  SKIP_WITHOUT_TOKENIZER();
  auto tok = Tokenizer::load(kTokenizer);
  ASSERT_TRUE(tok.ok());
  const std::string json = path("data.json");
  std::ofstream(json) << R"([
    {"instruction": "Name a colour.", "input": "", "output": "Blue."},
    {"instruction": "Add the numbers.", "input": "2 and 3", "output": "Five."},
    {"instruction": "Write a very long story.", "output": ")" + std::string(3000, 'x') + R"("}])";
  InstructionPrepareOptions o{kTokenizer, json, path("out"), "", 64, 0.0};
  ASSERT_TRUE(prepare_instructions(o).ok());
  DataLoaderOptions lo;
  lo.pattern = path("out/train_*.bin");
  lo.B = 1, lo.T = 64, lo.vocab_size = 32000;
  auto loader = DataLoader::open(lo);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->num_batches_per_epoch(), 2);  // the long story was skipped
  const InstructionExample examples[] = {{"Name a colour.", "", "Blue."},
                                         {"Add the numbers.", "2 and 3", "Five."}};
  for (const InstructionExample& e : examples) {
    std::vector<int> in(64), tg(64);
    loader->next_batch(in.data(), tg.data());
    const std::vector<int> prompt = tok->encode(format_prompt(alpaca_template(), e));
    std::vector<int> response = tok->encode(e.output);
    response.push_back(tok->eos_id());
    EXPECT_EQ(in[0], tok->bos_id());
    EXPECT_EQ(std::vector<int>(in.begin() + 1, in.begin() + 1 + prompt.size()), prompt);
    // Position p predicts token p + 1: the prompt's last position predicts the response's first.
    std::vector<int> trained;
    for (int p = 0; p < 64; ++p) {
      const bool in_response = p >= (int)prompt.size() && p < (int)(prompt.size() + response.size());
      if (in_response) trained.push_back(tg[p]);
      else EXPECT_EQ(tg[p], -1) << e.instruction << " position " << p;
    }
    EXPECT_EQ(trained, response) << e.instruction;
  }
  lo.T = 32;
  const auto other = DataLoader::open(lo);
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(Contains(std::string(other.status().message()), "train with --seq_len 64"));
}

// A loader over the shards `pattern` that serves one row of T tokens a batch (Llama 2's
// vocabulary).
DataLoaderOptions one_row_at_a_time(const std::string& pattern, int T) {
  DataLoaderOptions lo;
  lo.pattern = pattern;
  lo.B = 1, lo.T = T, lo.vocab_size = 32000;
  return lo;
}

// prepare --format alpaca --pack: each row holds whole examples, one after another, each
// starting with BOS at position 0 (the loader's positions count up within an example and
// restart at the next); a row's last example is followed by EOS padding, untrained. Every
// example appears exactly once, whole, with the targets of the unpacked layout; an example
// longer than T is split into pieces of T, truncated to T or skipped, and counted.
TEST_F(DataTest, PackedInstructionRowsHoldWholeExamplesWithRestartingPositions) {
  SKIP_WITHOUT_TOKENIZER();
  auto tok = Tokenizer::load(kTokenizer);
  ASSERT_TRUE(tok.ok());
  std::vector<InstructionExample> examples;
  for (int i = 0; i < 9; ++i)
    examples.push_back({"Count to " + std::to_string(i) + ".", i % 3 ? "" : "slowly",
                        std::string(1 + 7 * i, 'a' + i)});
  std::string long_output;
  for (int i = 0; i < 150; ++i) long_output += "word" + std::to_string(i) + " ";
  std::string json = "[";
  for (const auto& e : examples)
    json += R"({"instruction": ")" + e.instruction + R"(", "input": ")" + e.input +
            R"(", "output": ")" + e.output + R"("},)";
  json += R"({"instruction": "Long.", "output": ")" + long_output + R"("}])";
  std::ofstream(path("data.json")) << json;
  // The tokens of an example as prepare lays it out, and which of them are trained.
  auto layout = [&](const InstructionExample& e) {
    std::vector<int> t = {tok->bos_id()};
    for (int id : tok->encode(format_prompt(alpaca_template(), e))) t.push_back(id);
    const size_t prompt = t.size();
    for (int id : tok->encode(e.output)) t.push_back(id);
    t.push_back(tok->eos_id());
    return std::pair{t, prompt};
  };
  const int T = 128;
  const size_t long_len = layout({"Long.", "", long_output}).first.size();
  ASSERT_GT(long_len, (size_t)2 * T);
  for (Overlong how : {Overlong::kSplit, Overlong::kTruncate, Overlong::kSkip}) {
    std::filesystem::remove_all(path("out"));
    InstructionPrepareOptions o{kTokenizer, path("data.json"), path("out"), "", T, 0.0, true, how};
    const auto report = prepare_instructions(o);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->overlong, 1);
    const DataLoaderOptions lo = one_row_at_a_time(path("out/train_*.bin"), T);
    auto loader = DataLoader::open(lo);
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_TRUE(loader->packed());
    EXPECT_EQ(loader->num_batches_per_epoch(), report->rows);
    // Cut every row into its examples at position 0; collect them with their targets.
    std::vector<std::vector<int>> found, found_targets;
    int64_t example_tokens = 0;
    for (int64_t r = 0; r < report->rows; ++r) {
      std::vector<int> in(T), tg(T), pos(T);
      loader->next_batch(in.data(), tg.data(), pos.data());
      for (int t = 0; t < T; ++t) {
        if (pos[t] == 0) found.emplace_back(), found_targets.emplace_back();
        if (t > 0) ASSERT_TRUE(pos[t] == 0 || pos[t] == pos[t - 1] + 1);
        found.back().push_back(in[t]);
        found_targets.back().push_back(tg[t]);
      }
    }
    size_t pieces_of_long = 0, long_tokens = 0;
    for (size_t k = 0; k < found.size(); ++k) {
      const auto& f = found[k];
      if (f[0] != tok->bos_id()) {  // padding, or the second piece of the long example on
        if (how == Overlong::kSplit && f[0] != tok->eos_id())
          ++pieces_of_long, long_tokens += f.size();
        else
          for (size_t t = 0; t < f.size(); ++t) EXPECT_EQ(found_targets[k][t], -1) << "padding";
        continue;
      }
      bool matched = false;
      for (const auto& e : examples) {
        const auto [want, prompt] = layout(e);
        if (f != want) continue;
        matched = true;
        example_tokens += (int64_t)f.size();
        for (size_t t = 0; t < f.size(); ++t)  // position t predicts token t + 1
          EXPECT_EQ(found_targets[k][t], t + 1 >= prompt && t + 1 < f.size() ? f[t + 1] : -1)
              << e.instruction << " position " << t;
      }
      if (!matched) ++pieces_of_long, long_tokens += f.size();  // the long one's first piece
    }
    for (const auto& e : examples)
      EXPECT_EQ(std::count(found.begin(), found.end(), layout(e).first), 1) << e.instruction;
    // Split pieces overlap by one token (each starts at the previous one's last): T, then
    // T - 1 new tokens a piece, so every token of the example is a target once.
    const size_t split_pieces = 1 + (long_len - T + T - 2) / (T - 1);
    EXPECT_EQ(pieces_of_long, how == Overlong::kSplit      ? split_pieces
                              : how == Overlong::kTruncate ? 1u
                                                           : 0u);
    EXPECT_EQ(long_tokens, how == Overlong::kSplit      ? long_len + split_pieces - 1
                           : how == Overlong::kTruncate ? T
                                                        : 0);
    // Targets trained: each whole example's response and EOS, and the long one's (whole when
    // split; up to T when truncated), each once.
    int64_t want_trained = 0;
    for (const auto& e : examples) {
      const auto [t, prompt] = layout(e);
      want_trained += (int64_t)(t.size() - prompt);
    }
    const auto [lt, lprompt] = layout({"Long.", "", long_output});
    want_trained += how == Overlong::kSplit      ? (int64_t)(lt.size() - lprompt)
                    : how == Overlong::kTruncate ? (int64_t)(T - lprompt)
                                                 : 0;
    EXPECT_EQ(report->trained, want_trained);
    int64_t loaded_trained = 0;
    for (const auto& targets : found_targets)
      loaded_trained += std::count_if(targets.begin(), targets.end(), [](int t) { return t >= 0; });
    EXPECT_EQ(loaded_trained, want_trained);
    EXPECT_NEAR(report->fill(),
                (double)(example_tokens + (int64_t)long_tokens) / (double)(report->rows * T),
                1e-12);
  }
}

// prepare --pack for plain text: each file is a document ([BOS] + its tokens), packed into rows
// with the positions restarting at each; one longer than T is cut into pieces that overlap by
// one token. Every document token but BOS is a target exactly once, and each target is the
// next token of its own document. Preparing the same directory unpacked afterwards leaves no
// mask behind (the loader would misread the shards with it).
TEST_F(DataTest, PackedTextDocumentsTrainEveryTokenOnceWithinTheirDocument) {
  SKIP_WITHOUT_TOKENIZER();
  auto tok = Tokenizer::load(kTokenizer);
  ASSERT_TRUE(tok.ok());
  const int T = 64;
  PrepareOptions o;
  o.tokenizer_path = kTokenizer;
  o.out_dir = path("out");
  o.val_fraction = 0;
  o.pack = true;
  o.seq_len = T;
  int64_t want_targets = 0;
  std::vector<std::vector<int>> docs;
  for (int d = 0; d < 7; ++d) {
    std::string text;
    for (int w = 0; w < (d == 6 ? 60 : 2 + 3 * d); ++w)
      text += "w" + std::to_string(d * 100 + w) + " ";
    o.inputs.push_back(path("doc" + std::to_string(d) + ".txt"));
    std::ofstream(o.inputs.back()) << text;
    std::vector<int> t = {tok->bos_id()};
    for (int id : tok->encode(text)) t.push_back(id);
    want_targets += (int64_t)t.size() - 1;
    docs.push_back(t);
  }
  ASSERT_GT(docs.back().size(), (size_t)2 * T);  // the last is cut into pieces
  ASSERT_TRUE(prepare_text(o).ok());
  const DataLoaderOptions lo = one_row_at_a_time(path("out/train_*.bin"), T);
  auto loader = DataLoader::open(lo);
  ASSERT_TRUE(loader.ok()) << loader.status();
  ASSERT_TRUE(loader->packed());
  int64_t targets = 0;
  int whole = 0;
  for (int64_t r = 0; r < loader->num_batches_per_epoch(); ++r) {
    std::vector<int> in(T), tg(T), pos(T);
    loader->next_batch(in.data(), tg.data(), pos.data());
    for (int t = 0; t < T; ++t) {
      if (tg[t] < 0) continue;
      ++targets;
      ASSERT_TRUE(t + 1 < T && pos[t + 1] == pos[t] + 1) << "a target across an example, row " << r;
      EXPECT_EQ(tg[t], in[t + 1]);
    }
    for (int t = 0; t < T; ++t)  // whole documents, found at position 0 with their BOS
      if (pos[t] == 0 && in[t] == tok->bos_id())
        for (const auto& d : docs)
          whole += t + d.size() <= (size_t)T && std::equal(d.begin(), d.end(), in.begin() + t) &&
                   (t + d.size() == (size_t)T || pos[t + d.size()] == 0);
  }
  EXPECT_EQ(targets, want_targets);
  const auto fits = std::count_if(docs.begin(), docs.end(), [&](auto& d) { return d.size() <= T; });
  ASSERT_GE(fits, 2);
  EXPECT_EQ(whole, fits);  // the documents that fit a row, each whole once
  o.pack = false;
  ASSERT_TRUE(prepare_text(o).ok());
  EXPECT_FALSE(std::filesystem::exists(path("out/train_000000.mask")));
  auto plain = DataLoader::open(lo);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->packed());
}

// The issue's bar for packing: the shared Alpaca seed tasks fill at least 90% of their rows at
// T = 512 (padded, one example a row, they fill about a third).
TEST_F(DataTest, PackingFillsTheSeedTasksRowsAtT512) {
  SKIP_WITHOUT_TOKENIZER();
  const std::string seed = ZT_SOURCE_DIR "/../shared/data/alpaca_seed_tasks.json";
  if (!std::filesystem::exists(seed)) GTEST_SKIP() << seed << " is absent";
  InstructionPrepareOptions o{kTokenizer, seed, path("seed"), "", 512, 0.1, true};
  const auto packed = prepare_instructions(o);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_GE(packed->fill(), 0.9);
  o.pack = false;
  const auto padded = prepare_instructions(o);
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(padded->tokens, packed->tokens);
  EXPECT_EQ(padded->rows, padded->examples);
  EXPECT_LT(packed->rows * 2, padded->rows);
}

// A prompt template's placeholders are checked where it is loaded (prepare --template and
// sample --template): a misspelt one ({Instruction}) would stay in every prompt as text and
// drop the instruction from every example, so it is refused, naming it, the known ones and the
// closest; so is a template without {instruction} (or a prompt_input without {input}).
// Stanford Alpaca's own template, and braces that are no placeholder, load.
TEST_F(DataTest, PromptTemplatePlaceholdersAreChecked) {
  auto load = [&](const std::string& input, const std::string& no_input) {
    write_bytes(path("t.json"),
                nlohmann::json{{"prompt_input", input}, {"prompt_no_input", no_input}}.dump());
    return load_template(path("t.json"));
  };
  const PromptTemplate alpaca = alpaca_template();
  const auto ok = load(alpaca.prompt_input, alpaca.prompt_no_input);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(format_prompt(*ok, {"Add.", "2 and 3", ""}),
            format_prompt(alpaca, {"Add.", "2 and 3", ""}));
  EXPECT_TRUE(
      load("Reply in JSON like {\"a\": 1} or {}.\n{instruction}\n{input}\n", "{instruction} {x\n}")
          .ok());
  struct Case {
    std::string input, no_input;
    std::vector<std::string> phrases;
  };
  const Case cases[] = {
      {"{Instruction}\n{input}",
       "{instruction}",
       {"\"prompt_input\"", "{Instruction}", "not one of {instruction} and {input}",
        "did you mean {instruction}?"}},
      {"{instruction}\n{input}",
       "### {instruction}\n{inptu}",
       {"\"prompt_no_input\"", "{inptu}", "did you mean {input}?"}},
      {"{instruction}\n{input}", "### Response:\n", {"\"prompt_no_input\" has no {instruction}"}},
      {"{instruction}\n", "{instruction}", {"\"prompt_input\" has no {input}"}},
  };
  for (const Case& c : cases) {
    const auto t = load(c.input, c.no_input);
    ASSERT_FALSE(t.ok()) << c.input << " | " << c.no_input;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& p : c.phrases)
      EXPECT_TRUE(Contains(std::string(t.status().message()), p));
    EXPECT_TRUE(Contains(std::string(t.status().message()), path("t.json")));
  }
}

// The files in `dir`, sorted.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// prepare --format alpaca into a folder that holds an earlier dataset leaves only its own
// files, as plain-text prepare does: after packed text in one-row shards (train_000000 to
// train_00000N, each with its mask, and val), then 10 examples (2 for validation), then one
// example (no validation), train_*.bin and val_*.bin match only the last prepare's shards.
TEST_F(DataTest, AlpacaPrepareRemovesAnEarlierDatasetsShardsAndMasks) {
  SKIP_WITHOUT_TOKENIZER();
  std::string text;
  for (int i = 0; i < 40; ++i) text += "The quick brown fox jumps over the lazy dog. ";
  write_bytes(path("a.txt"), text);
  PrepareOptions t;
  t.tokenizer_path = kTokenizer;
  t.inputs = {path("a.txt")};
  t.out_dir = path("out");
  t.pack = true;
  t.seq_len = 16;
  t.max_shard_tokens = 16;  // one row a shard
  ASSERT_TRUE(prepare_text(t).ok());
  ASSERT_TRUE(fs::exists(path("out/train_000003.mask")));
  ASSERT_TRUE(fs::exists(path("out/val_000000.bin")));

  std::string large = "[";
  for (int i = 0; i < 10; ++i)
    large += std::string(i ? ", " : "") + R"({"instruction": "Say )" + std::to_string(i) +
             R"(.", "output": "Fine."})";
  write_bytes(path("large.json"), large + "]");
  InstructionPrepareOptions o{kTokenizer, path("large.json"), path("out"), "", 64, 0.2};
  ASSERT_TRUE(prepare_instructions(o).ok());
  EXPECT_EQ(listing(path("out")), (std::vector<std::string>{"train_000000.bin", "train_000000.mask",
                                                            "val_000000.bin", "val_000000.mask"}));

  write_bytes(path("small.json"), R"([{"instruction": "Name a colour.", "output": "Blue."}])");
  o.input = path("small.json");
  ASSERT_TRUE(prepare_instructions(o).ok());  // one example: none left for validation
  EXPECT_EQ(listing(path("out")),
            (std::vector<std::string>{"train_000000.bin", "train_000000.mask"}));
  auto loader = DataLoader::open(one_row_at_a_time(path("out/train_*.bin"), 64));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->num_batches_per_epoch(), 1);
}

}  // namespace
}  // namespace zt
