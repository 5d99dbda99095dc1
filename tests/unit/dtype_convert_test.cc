// fp32 <-> bf16 / fp16 conversions: the scalar functions against independent references (exact
// nearest-even rounding worked out in double for bf16; the CPU's own F16C instruction for
// fp16), and every SIMD level this CPU supports against the scalar functions, bit for bit, on
// edge values (zeros, infinities, NaN payloads, denormals, ties, overflow) and a sweep of bit
// patterns, at lengths and offsets that exercise the vector tails.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/simd.h"
#include "gtest/gtest.h"
#include "model/backend.h"

namespace zt {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Edge values plus a deterministic sweep of bit patterns (every exponent, many mantissas).
std::vector<float> test_values() {
  std::vector<uint32_t> u = {0x00000000, 0x80000000, 0x7f800000, 0xff800000,  // zeros, infs
                             0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff,  // NaNs
                             0xffffffff, 0x7fffffff, 0x7fe12345, 0xff812345,
                             0x00000001, 0x80000001, 0x007fffff, 0x00400000,  // denormals
                             0x00008000, 0x00018000, 0x3f808000, 0x3f818000,  // bf16 ties
                             0x3f807fff, 0x3f808001, 0x7f7fffff, 0x7f7f8000,  // bf16 overflow
                             0x7f7f7fff, 0xff7fffff, 0x477fe000, 0x477fefff,  // fp16 max region
                             0x477ff000, 0x477fffff, 0x47800000, 0x33000000,  // fp16 tiny
                             0x33000001, 0x337fffff, 0x387fc000, 0x38800000,
                             0x3f800000, 0xbf800000, 0x3effffff, 0x3a800800,
                             0x3f801000, 0x3f803000, 0xbf801000, 0x38801000};  // fp16 ties
  for (uint64_t x = 0; x < (uint64_t{1} << 32); x += 65537 * 3) u.push_back((uint32_t)x);
  std::vector<float> v;
  for (uint32_t b : u) v.push_back(from_bits(b));
  return v;
}

// Round-to-nearest-even to bf16, by comparing the two neighbouring bf16 values in double.
uint16_t bf16_reference(float x) {
  const uint32_t u = bits(x);
  if (std::isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  const uint16_t lo = (uint16_t)(u >> 16);  // truncation toward zero
  if ((u & 0xffff) == 0) return lo;
  const uint16_t hi = lo + 1;                // next value away from zero (may be inf)
  const double dx = std::fabs((double)x);
  const double dlo = std::fabs((double)bf16_to_f32(lo));
  // The value past the largest finite bf16 is 2^128 for rounding purposes.
  const double dhi = (hi & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::fabs((double)bf16_to_f32(hi));
  if (dx - dlo < dhi - dx) return lo;
  if (dx - dlo > dhi - dx) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(DTypeConvert, ScalarBf16MatchesExactNearestEven) {
  for (float x : test_values()) {
    ASSERT_EQ(f32_to_bf16(x), bf16_reference(x)) << std::hex << bits(x);
    if (!std::isnan(x)) {
      ASSERT_EQ(bits(bf16_to_f32(f32_to_bf16(x))) >> 16, f32_to_bf16(x));
    }
  }
}

__attribute__((target("f16c"))) uint16_t f16c_reference(float x) {
  return (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
__attribute__((target("f16c"))) float f16c_widen(uint16_t h) { return _cvtsh_ss(h); }

TEST(DTypeConvert, ScalarF16MatchesF16cInstruction) {
  if (!cpu_supports(SimdLevel::kAvx2)) GTEST_SKIP() << "this CPU has no F16C to compare with";
  for (float x : test_values()) ASSERT_EQ(f32_to_f16(x), f16c_reference(x)) << std::hex << bits(x);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = f16_to_f32((uint16_t)h), b = f16c_widen((uint16_t)h);
    ASSERT_EQ(bits(a), bits(b)) << std::hex << h;
  }
}

// IEEE 754's round to nearest, ties to even, in closed form (no F16C needed): 1 + 2^-11 lies
// halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01); 1 + 3 * 2^-11 halfway between 0x3c01
// and 1 + 2^-9 (0x3c02, even).
TEST(DTypeConvert, F16RoundsTiesToEven) {
  EXPECT_EQ(f32_to_f16(1.f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(f32_to_f16(-(1.f + 0x1p-11f)), 0xbc00);
  EXPECT_EQ(f32_to_f16(1.f + 0x1p-11f + 0x1p-20f), 0x3c01);  // past the tie: up
}

TEST(DTypeConvert, NanAndInfStayThemselves) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::kBF16, DType::kF16}) {
    uint16_t h[4];
    const float in[4] = {inf, -inf, std::nanf(""), -std::nanf("")};
    convert(in, DType::kF32, h, t, 4);
    float out[4];
    convert(h, t, out, DType::kF32, 4);
    EXPECT_EQ(out[0], inf);
    EXPECT_EQ(out[1], -inf);
    EXPECT_TRUE(std::isnan(out[2]) && !std::signbit(out[2]));
    EXPECT_TRUE(std::isnan(out[3]) && std::signbit(out[3]));
  }
}

class EveryLevel : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(EveryLevel, ConversionsMatchScalarBitForBit) {
  const SimdLevel level = GetParam();
  if (!cpu_supports(level))
    GTEST_SKIP() << "this CPU does not support " << simd_level_name(level);
  const std::vector<float> v = test_values();
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> want(v.size()), got(v.size() + 64, 0xabcd);
    convert(v.data(), DType::kF32, want.data(), t, v.size(), SimdLevel::kScalar);
    // Odd lengths and offsets: every vector tail and an unaligned start.
    for (size_t off : {0, 1, 7}) {
      for (size_t n : {size_t{1}, size_t{15}, size_t{17}, size_t{33}, v.size() - off}) {
        std::fill(got.begin(), got.end(), 0xabcd);
        convert(v.data() + off, DType::kF32, got.data(), t, n, level);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], want[off + i]) << dtype_name(t) << " i=" << i << " n=" << n;
        ASSERT_EQ(got[n], 0xabcd) << "wrote past the end";
      }
    }
    // Widening every 16-bit pattern.
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = (uint16_t)h;
    std::vector<float> w1(65536), w2(65536);
    convert(all.data(), t, w1.data(), DType::kF32, all.size(), SimdLevel::kScalar);
    convert(all.data() + 3, t, w2.data(), DType::kF32, all.size() - 3, level);
    for (size_t i = 0; i + 3 < all.size(); ++i) ASSERT_EQ(bits(w2[i]), bits(w1[i + 3])) << i;
  }
  // A widening past 64 MiB of output into 64-byte-aligned memory (as the backends allocate)
  // takes the streaming-store path; the odd length leaves a tail for the normal stores.
  const size_t big = (size_t{17} << 20) + 5;
  std::vector<uint16_t> h(big);
  for (size_t i = 0; i < big; ++i) h[i] = (uint16_t)(i * 40503u);
  std::vector<float> want(big);
  std::unique_ptr<float, decltype(&std::free)> got(
      static_cast<float*>(std::aligned_alloc(64, (big * 4 + 63) / 64 * 64)), &std::free);
  convert(h.data(), DType::kBF16, want.data(), DType::kF32, big, SimdLevel::kScalar);
  convert(h.data(), DType::kBF16, got.get(), DType::kF32, big, level);
  ASSERT_EQ(std::memcmp(want.data(), got.get(), big * 4), 0);
}

// scale_add against its definition written with the scalar conversions: alpha * x rounded, plus
// the widened y, rounded once to y's dtype.
TEST_P(EveryLevel, ScaleAddMatchesScalarDefinition) {
  const SimdLevel level = GetParam();
  if (!cpu_supports(level))
    GTEST_SKIP() << "this CPU does not support " << simd_level_name(level);
  const size_t n = 100'003;
  std::vector<float> x(n), y0(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::sin(0.37f * (float)i) * 3.f;
    y0[i] = std::cos(0.11f * (float)i);
  }
  const float alpha = 0.3f;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool acc : {true, false}) {
      std::vector<uint8_t> y(n * dtype_size(t)), want(n * dtype_size(t));
      convert(y0.data(), DType::kF32, y.data(), t, n, SimdLevel::kScalar);
      for (size_t i = 0; i < n; ++i) {
        const float ax = alpha * x[i];
        float old;
        convert(y.data() + i * dtype_size(t), t, &old, DType::kF32, 1, SimdLevel::kScalar);
        const float v = acc ? ax + old : ax;
        convert(&v, DType::kF32, want.data() + i * dtype_size(t), t, 1, SimdLevel::kScalar);
      }
      scale_add(y.data(), t, x.data(), alpha, acc, n, level);
      ASSERT_EQ(y, want) << dtype_name(t) << (acc ? " accumulate" : " overwrite");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Simd, EveryLevel,
                         ::testing::Values(SimdLevel::kAvx2, SimdLevel::kAvx512,
                                           SimdLevel::kAvx512Bf16),
                         [](const auto& info) { return std::string(simd_level_name(info.param)); });

// The embedding lookup reads bf16 / fp16 tables as stored (Engine::fetch_stored): each output
// element is the widened table entry, plus the widened position entry, summed in fp32.
TEST(EmbeddingLookup, StoredTablesGiveTheWidenedRows) {
  const int V = 50, T = 5, B = 3, C = 24;
  auto be = make_cpu_backend(2);
  std::vector<int> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 17 + 3) % V;
  std::vector<float> wte(V * C), wpe(T * C);
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = std::sin(0.37f * i) * 0.3f;
  for (size_t i = 0; i < wpe.size(); ++i) wpe[i] = std::cos(0.11f * i) * 0.05f;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> te(wte.size() * dtype_size(t)), pe(wpe.size() * dtype_size(t));
    convert(wte.data(), DType::kF32, te.data(), t, wte.size(), SimdLevel::kScalar);
    convert(wpe.data(), DType::kF32, pe.data(), t, wpe.size(), SimdLevel::kScalar);
    std::vector<float> out(B * T * C);
    be->embedding_forward(out.data(), tokens.data(), te.data(), pe.data(), t, B, T, C);
    for (int bt = 0; bt < B * T; ++bt)
      for (int c = 0; c < C; ++c) {
        const float want = load_f32(te.data(), t, (size_t)tokens[bt] * C + c) +
                           load_f32(pe.data(), t, (size_t)(bt % T) * C + c);
        ASSERT_EQ(out[(size_t)bt * C + c], want) << dtype_name(t) << " row " << bt << " col " << c;
      }
  }
}

}  // namespace
}  // namespace zt
