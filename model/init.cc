#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/parallel.h"
#include "common/status.h"

namespace zt {

void init_unit(const ModelConfig& c, const Unit& unit, int u, uint64_t seed, std::span<float> out) {
  ZT_CHECK(out.size() == unit.numel);
  // Each piece of kPiece elements of a tensor draws from its own generator, seeded by (seed,
  // unit, tensor, piece): the pieces run in parallel (TinyLlama's 1.1B values take seconds, not
  // half a minute) and the values do not depend on the thread count.
  constexpr size_t kPiece = size_t{1} << 16;
  const double resid_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  for (size_t ti = 0; ti < unit.tensors.size(); ++ti) {
    const TensorSlot& t = unit.tensors[ti];
    float* p = out.data() + t.offset;
    const std::string& n = t.name;
    if (n.starts_with("ln") && n.ends_with(".w")) {  // norm weights
      std::fill(p, p + t.numel, 1.f);
      continue;
    }
    if (n.ends_with(".b")) {
      std::fill(p, p + t.numel, 0.f);
      continue;
    }
    const double std = (n == "attn_out.w" || n == "fc_out.w") ? resid_std : 0.02;
    for_each_chunk(t.numel, kPiece, [&](size_t k, size_t begin, size_t end) {
      // seed_seq keeps 32 bits of each value: the 64-bit ones go in as two halves.
      std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                        static_cast<uint32_t>(u), static_cast<uint32_t>(ti),
                        static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
      std::mt19937_64 rng(seq);
      // Box-Muller on mt19937_64 bits: identical on every platform (std::normal_distribution
      // is not).
      for (size_t i = begin; i < end; ++i) {
        const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
        const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        p[i] = static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
      }
    });
  }
}

}  // namespace zt
