// A JSON key given twice is an error in every file zerotrain reads (issue 10): the shared
// parser (common/json.h) names the file and the key's path, at the top level and nested, and
// each reader passes it on. DeepSpeed refuses such a ds_config too ("Duplicate keys in
// DeepSpeed config"); nlohmann alone would keep the last value.
#include "common/json.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/alpaca.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "tests/unit/cli_helpers.h"
#include "trainer/checkpoint_format.h"
#include "trainer/ds_config.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

void expect_twice(const absl::Status& s, const std::string& where, const std::string& path) {
  ASSERT_FALSE(s.ok()) << where << " " << path;
  const std::string m(s.message());
  EXPECT_NE(m.find(where), std::string::npos) << m;
  EXPECT_NE(m.find(path + ": given twice"), std::string::npos) << m;
}

TEST(Json, RepeatedKeysAreNamedByPath) {
  EXPECT_TRUE(parse_json(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]})", "f").ok());
  expect_twice(parse_json(R"({"a": 1, "a": 2})", "f.json").status(), "f.json", "a");
  expect_twice(parse_json(R"({"a": {"b": 1, "c": {}, "b": 2}})", "f.json").status(), "f.json",
               "a.b");
  expect_twice(parse_json(R"({"r": [{"x": 1}, 5, {"x": 1, "y": [], "x": 2}]})", "f").status(), "f",
               "r[2].x");
  expect_twice(parse_json(R"([[], [{"k": {"k": 1, "k": 2}}]])", "f").status(), "f", "[1][0].k.k");
  EXPECT_NE(std::string(parse_json("{\"a\": ", "f").status().message()).find("malformed JSON"),
            std::string::npos);
}

TEST(Json, EveryReaderRefusesRepeatedKeys) {
  // ds_config, top level and nested.
  expect_twice(parse_ds_config(R"({"train_batch_size": 8, "gradient_clipping": 1.0,
                                   "gradient_clipping": 0.5})",
                               1, "ds.json")
                   .status(),
               "ds.json", "gradient_clipping");
  expect_twice(parse_ds_config(R"({"train_batch_size": 8,
                                   "zero_optimization": {"stage": 2, "stage": 0}})",
                               1, "ds.json")
                   .status(),
               "ds.json", "zero_optimization.stage");
  // config.json.
  const std::string llama = R"("model_type": "llama", "vocab_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 2, "hidden_size": 8, "intermediate_size": 16)";
  ASSERT_TRUE(config_from_hf_json("{" + llama + "}", "config.json").ok());
  expect_twice(config_from_hf_json("{" + llama + R"(, "hidden_size": 16})", "config.json").status(),
               "config.json", "hidden_size");
  expect_twice(config_from_hf_json("{" + llama + R"(, "rope_parameters": {"rope_theta": 1.0,
                                    "rope_theta": 2.0}})",
                                   "config.json")
                   .status(),
               "config.json", "rope_parameters.rope_theta");
  // Alpaca data and a prompt template.
  expect_twice(
      parse_alpaca(R"([{"instruction": "a", "output": "b", "output": "c"}])", "d.json").status(),
      "d.json", "[0].output");
  const fs::path dir = test::test_dir("json");
  std::ofstream(dir / "t.json") << R"({"prompt_input": "x", "prompt_no_input": "y",
                                       "prompt_input": "z"})";
  expect_twice(load_template((dir / "t.json").string()).status(), "t.json", "prompt_input");
  // A safetensors header (top level and inside a tensor's entry) and a sharded index.
  auto header_file = [&](const std::string& name, const std::string& header) {
    std::string bytes(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    std::ofstream((dir / name).string(), std::ios::binary)
        << bytes << header << std::string(4, '\0');
    return (dir / name).string();
  };
  const std::string entry = R"("w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  ASSERT_TRUE(SafeTensorsFile::open(header_file("ok.safetensors", "{" + entry + "}")).ok());
  expect_twice(SafeTensorsFile::open(header_file("a.safetensors", "{" + entry + ", " + entry + "}"))
                   .status(),
               "a.safetensors", "w");
  expect_twice(SafeTensorsFile::open(header_file("b.safetensors",
                                                 R"({"w": {"dtype": "F32", "dtype": "F16",
                                                     "shape": [1], "data_offsets": [0, 4]}})"))
                   .status(),
               "b.safetensors", "w.dtype");
  fs::create_directories(dir / "hf");
  std::ofstream(dir / "hf/model.safetensors.index.json")
      << R"({"weight_map": {"w": "x.safetensors", "w": "y.safetensors"}})";
  expect_twice(open_hf_model_dir((dir / "hf").string()).status(), "model.safetensors.index.json",
               "weight_map.w");
  std::ofstream(dir / "hf/model.safetensors.index.json")
      << R"({"weight_map": {"w": "x.safetensors"}, "weight_map": {}})";
  expect_twice(open_hf_model_dir((dir / "hf").string()).status(), "model.safetensors.index.json",
               "weight_map");
  // Checkpoint metadata.
  fs::create_directories(dir / "ck");
  std::ofstream(dir / "ck/meta.json")
      << R"({"format": "zerotrain-checkpoint", "version": 1, "data": {"epoch": 0, "epoch": 1}})";
  expect_twice(read_checkpoint_meta((dir / "ck").string()).status(), "meta.json", "data.epoch");
  std::ofstream(dir / "ck/meta.json") << R"({"format": "zerotrain-checkpoint", "version": 1,
                                           "step": 1, "step": 2})";
  expect_twice(read_checkpoint_meta((dir / "ck").string()).status(), "meta.json", "step");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
