// Any bytes as a checkpoint's meta.json (some sealed with their own checksum), beside a rank
// file of 144 bytes: reading must refuse them or read only within the files (the tiny-llama
// layout).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "model/layout.h"
#include "trainer/checkpoint_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = "/tmp/zt_fuzz_ckpt_" + std::to_string(getpid());
  static const zt::ParamLayout layout(*zt::preset("tiny-llama"));
  static bool ready = [] {
    std::filesystem::create_directories(dir);
    std::FILE* f = std::fopen((dir + "/rank_00000.bin").c_str(), "wb");
    const char zeros[144] = {0};
    std::fwrite(zeros, 1, sizeof zeros, f);
    std::fclose(f);
    return true;
  }();
  (void)ready;
  // Half the inputs that parse as a JSON object are sealed with their own checksum first
  // (version 2's meta_crc32), so mutations reach the fields behind the check too.
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size > 0 && data[size - 1] % 2) {
    const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
    if (j.is_object()) bytes = zt::sealed_meta_text(j);
  }
  std::FILE* f = std::fopen((dir + "/meta.json").c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  auto meta = zt::read_checkpoint_meta(dir);
  if (!meta.ok()) return 0;
  (void)zt::read_checkpoint(
      dir, *meta, layout, [](int, std::span<const float>, std::span<const std::span<const float>>) {
        return absl::OkStatus();
      });
  return 0;
}
