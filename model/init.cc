#include "model/init.h"

#include <cmath>
#include <random>

#include "common/status.h"

namespace zt {

void init_unit(const ModelConfig& c, const Unit& unit, int u, uint64_t seed, std::span<float> out) {
  ZT_CHECK(out.size() == unit.numel);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(u) + 1);
  // Box-Muller on mt19937_64 bits: identical on every platform (std::normal_distribution is not).
  auto normal = [&]() {
    const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  const double resid_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  for (const TensorSlot& t : unit.tensors) {
    float* p = out.data() + t.offset;
    const std::string& n = t.name;
    const bool is_norm = n.starts_with("ln") && n.ends_with(".w");
    const bool is_bias = n.ends_with(".b");
    const double std = (n == "attn_out.w" || n == "fc_out.w") ? resid_std : 0.02;
    for (size_t i = 0; i < t.numel; ++i)
      p[i] = is_norm ? 1.f : is_bias ? 0.f : static_cast<float>(std * normal());
  }
}

}  // namespace zt
