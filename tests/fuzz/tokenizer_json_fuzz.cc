// Any bytes as a Hugging Face tokenizer.json: HfVocab::load must refuse them or return a
// vocabulary whose every id decodes (data/hf_vocab.h), never crash or throw.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "data/hf_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/zt_fuzz_tokenizer_" + std::to_string(getpid()) + ".json";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), (long)size);
  auto v = zt::HfVocab::load(path);
  if (!v.ok()) return 0;
  std::vector<int> ids;
  for (int id = 0; id < v->vocab_size() && id < 512; ++id) {
    (void)v->decode_token(id);
    ids.push_back(id);
  }
  (void)v->decode(ids);
  return 0;
}
