// Any bytes as a safetensors file: open() must refuse them or map tensors that read in bounds.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/zt_fuzz_" + std::to_string(getpid()) + ".safetensors";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto file = zt::SafeTensorsFile::open(path);
  if (!file.ok()) return 0;
  for (const std::string& name : file->names()) {
    auto info = file->info(name);
    if (!info.ok() || info->numel() > (int64_t)1 << 20) continue;
    std::vector<float> out((size_t)info->numel());
    (void)file->read_f32(name, out);
    (void)file->read_i64(name);
  }
  return 0;
}
