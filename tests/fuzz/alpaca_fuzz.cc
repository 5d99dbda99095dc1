// Any bytes as Alpaca instruction data: parse_alpaca must refuse them or return records, and
// the template must format them.
#include <cstdint>
#include <string_view>

#include "data/alpaca.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = zt::parse_alpaca(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!r.ok()) return 0;
  for (const zt::InstructionExample& e : *r) (void)zt::format_prompt(zt::alpaca_template(), e);
  return 0;
}
