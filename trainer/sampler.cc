#include "trainer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zt {

int sample_token(std::span<const float> logits, float temperature, int top_k,
                 std::mt19937_64& rng) {
  const int V = static_cast<int>(logits.size());
  if (temperature <= 0.f)
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  int k = (top_k > 0 && top_k < V) ? top_k : V;
  if (k < V)
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
  float maxv = -INFINITY;
  for (int i = 0; i < k; ++i) maxv = std::max(maxv, logits[ids[i]]);
  std::vector<double> p(k);
  for (int i = 0; i < k; ++i) p[i] = std::exp((logits[ids[i]] - maxv) / temperature);
  std::discrete_distribution<int> d(p.begin(), p.end());
  return ids[d(rng)];
}

}  // namespace zt
