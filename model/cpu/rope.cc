// Rotary position embedding (Su et al., RoFormer), Hugging Face's rotate_half layout: within a
// head of size hd, element i pairs with i + hd/2 (i < hd/2) and rotates by angle
//   a = p * f_i, f_i = theta^(-2i/hd) (rescaled as model/rope.h says):
//   (x1, x2) -> (x1 cos a - x2 sin a, x2 cos a + x1 sin a),
// p the row's position (t, or pos[b,t] in packed rows).
// Backward is the same rotation by -a.
#include <cmath>
#include <vector>

#include "model/cpu/cpu_backend.h"

namespace zt {

void CpuBackend::rope(TensorRef qkv_a, int B, int T, int NH, int KVH, int hd,
                      const RopeParams& rope, bool inverse, int pos0, const int* pos) {
  float* qkv = f32(qkv_a);
  const int half = hd / 2;
  const int heads = NH + KVH;  // q and k heads are rotated; v is not
  const int row = (NH + 2 * KVH) * hd;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = rope_scaled(static_cast<float>(std::pow((double)rope.theta, -2.0 * i / hd)),
                              rope.scaling);
  const float sign = inverse ? -1.f : 1.f;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; ++bt) {
    const int t = pos0 + (pos ? pos[bt] : bt % T);
    float* r = qkv + (size_t)bt * row;
    for (int i = 0; i < half; ++i) {
      const float a = static_cast<float>(t) * inv_freq[i];
      const float c = std::cos(a), s = sign * std::sin(a);
      for (int h = 0; h < heads; ++h) {
        float* x = r + (size_t)h * hd;
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

}  // namespace zt
