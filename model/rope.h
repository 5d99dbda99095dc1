// RoPE's frequencies, shared by the CPU and CUDA kernels (plain C++, host and device): the base
// theta^(-2i/hd) of rotary position embedding (Su et al., RoFormer), and the rescaled ones of
// Llama 3.x and of linear position interpolation, as transformers defines them
// (`_compute_llama3_parameters`, `_compute_linear_scaling_rope_parameters` in
// modeling_rope_utils.py; Chen et al. 2023 for the linear one).
#pragma once

#include "model/optimizer_math.h"  // ZT_HOST_DEVICE

namespace zt {

enum class RopeScalingType : int { kNone, kLinear, kLlama3 };

// config.json's rope_scaling (or transformers 5's rope_parameters). factor: the context's
// growth; Llama 3's frequencies between the low- and high-frequency wavelengths
// original_max_position / low_freq_factor and / high_freq_factor are blended.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.f, low_freq_factor = 1.f, high_freq_factor = 4.f;
  float original_max_position = 8192.f;
};

// What Backend::rope needs: the base and the scaling. A bare theta converts (no scaling).
struct RopeParams {
  float theta = 1e4f;
  RopeScaling scaling;
  ZT_HOST_DEVICE RopeParams(float t = 1e4f, RopeScaling s = {}) : theta(t), scaling(s) {}
};

// The frequency f = theta^(-2i/hd) rescaled: unchanged without scaling; f / factor (linear);
// Llama 3: unchanged where its wavelength 2 pi / f is under the high-frequency one, f / factor
// above the low-frequency one, and between them (1 - s) f / factor + s f with
// s = (original_max_position / wavelength - low_freq_factor) / (high - low).
ZT_HOST_DEVICE inline float rope_scaled(float f, RopeScaling r) {
  if (r.type == RopeScalingType::kNone) return f;
  if (r.type == RopeScalingType::kLinear) return f / r.factor;
  const float wavelen = 2.f * 3.14159265358979323846f / f;
  if (wavelen < r.original_max_position / r.high_freq_factor) return f;
  if (wavelen > r.original_max_position / r.low_freq_factor) return f / r.factor;
  const float s = (r.original_max_position / wavelen - r.low_freq_factor) /
                  (r.high_freq_factor - r.low_freq_factor);
  return (1.f - s) * f / r.factor + s * f;
}

}  // namespace zt
