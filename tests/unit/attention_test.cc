// The CPU backend's attention keeps only the log-sum-exp (B,NH,T) between forward and backward.
// References: the plain attention that stores its (B,NH,T,T) probabilities
// (model/cpu/attention_reference.h), on awkward sizes; the log-sum-exp computed in double from
// the scores; and the Transformer's allocation, which must not grow with T^2.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/backend.h"
#include "model/config.h"
#include "model/cpu/attention_reference.h"
#include "model/transformer.h"
#include "tests/unit/nan_max.h"

namespace zt {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ||a - b|| / max(||b||, 1): relative, with the inputs' unit scale as the floor (at T = 1 the
// q and k gradients are exactly zero in the reference, and rounding-sized here).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += std::pow((double)a[i] - b[i], 2);
    den += std::pow((double)b[i], 2);
  }
  return std::sqrt(num / std::max(den, 1.0));
}

// T = 1, 7, 129, 1000; head sizes 32, 64, 80; GQA ratios (NH / KVH) 1, 4 and 8: every T with
// every ratio, the head size cycling.
TEST(Attention, MatchesTheTTReferenceOnAwkwardSizes) {
  auto be = make_cpu_backend(2);
  const int B = 2, heads[] = {32, 64, 80};
  int c = 0;
  for (int T : {1, 7, 129, 1000}) {
    for (int ratio : {1, 4, 8}) {
      const int hd = heads[c++ % 3], KVH = 8 / ratio > 1 ? 2 : 1, NH = KVH * ratio;
      const int row = (NH + 2 * KVH) * hd;
      SCOPED_TRACE(testing::Message() << "T " << T << " hd " << hd << " NH " << NH << " KVH "
                                      << KVH);
      const std::vector<float> qkv = random_vector((size_t)B * T * row, T + hd, 1.f);
      const std::vector<float> dout = random_vector((size_t)B * T * NH * hd, 7 * T + hd, 1.f);
      std::vector<float> out((size_t)B * T * NH * hd), lse((size_t)B * NH * T);
      std::vector<float> ref_out(out.size()), att((size_t)B * NH * T * T);
      be->attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, KVH, hd);
      reference_attention_forward(ref_out.data(), att.data(), qkv.data(), B, T, NH, KVH, hd);
      EXPECT_LE(rel_diff(out, ref_out), 1e-5);
      // lse in double from the scores: log sum_t2 exp(q . k / sqrt(hd)).
      double worst = 0;
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
          for (int t = 0; t < T; t += std::max(1, T / 17)) {
            const float* q = &qkv[((size_t)b * T + t) * row + (size_t)h * hd];
            double sum = 0;
            for (int t2 = 0; t2 <= t; ++t2) {
              const float* k = &qkv[((size_t)b * T + t2) * row + (size_t)(NH + h / ratio) * hd];
              double s = 0;
              for (int i = 0; i < hd; ++i) s += (double)q[i] * k[i];
              sum += std::exp(s / std::sqrt((double)hd));
            }
            const double want = std::log(sum);
            worst = nan_max(worst, std::fabs(lse[((size_t)b * NH + h) * T + t] - want) /
                                       std::max(1.0, std::fabs(want)));
          }
      EXPECT_LE(worst, 1e-5);
      std::vector<float> dqkv(qkv.size()), ref_dqkv(qkv.size());
      be->attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH,
                             KVH, hd);
      reference_attention_backward(ref_dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, NH,
                                   KVH, hd);
      // Every gradient: q, k and v parts separately.
      for (int part = 0; part < 3; ++part) {
        const int from = part == 0 ? 0 : part == 1 ? NH * hd : (NH + KVH) * hd;
        const int width = part == 0 ? NH * hd : KVH * hd;
        std::vector<float> got, want;
        for (size_t r = 0; r < (size_t)B * T; ++r)
          for (int i = 0; i < width; ++i) {
            got.push_back(dqkv[r * row + from + i]);
            want.push_back(ref_dqkv[r * row + from + i]);
          }
        EXPECT_LE(rel_diff(got, want), 1e-5) << "gradient part " << part << " (q, k, v)";
      }
    }
  }
}

// No T x T term: the Transformer's activations grow linearly with T (equal steps of T add
// equal bytes), measured on the backend's tracker at T = 256, 512, 768 and 1024.
TEST(Attention, ActivationMemoryGrowsLinearlyWithT) {
  auto c = preset("tiny-llama");
  ASSERT_TRUE(c.ok());
  c->max_seq_len = 1024;
  std::vector<int64_t> bytes;
  for (int T : {256, 512, 768, 1024}) {
    auto be = make_cpu_backend(1);
    Transformer tr(*c, be.get(), 1, T);
    bytes.push_back((int64_t)be->tracker().current(MemCategory::kActivations));
  }
  EXPECT_EQ(bytes[1] - bytes[0], bytes[2] - bytes[1]);
  EXPECT_EQ(bytes[2] - bytes[1], bytes[3] - bytes[2]);
}

}  // namespace
}  // namespace zt
