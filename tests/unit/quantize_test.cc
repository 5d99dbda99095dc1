// Block-wise quantization (model/quantize.h; ZeRO++'s qwZ and qgZ) on the CPU backend against
// the numpy reference in tests/fixtures/quant_reference.json (scripts/make_quant_reference.py):
// the same integers, the same scales and the same dequantized values, bit for bit, and the
// stated error bound max|x - x'| <= max|x| / (2 qmax) per block.
#include "model/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "json_fixture.h"
#include "model/backend.h"
#include "tests/unit/nan_max.h"

namespace zt {
namespace {

TEST(Quantize, MatchesTheNumpyReferenceBitForBit) {
  const auto fx = load_json_fixture("quant_reference.json", "make_quant_reference.py");
  ASSERT_TRUE(fx.contains("cases"));
  auto be = make_cpu_backend();
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const size_t n = c["n"];
    const int bits = c["bits"], block = c["block"];
    const DType t = c["dtype"] == "bf16" ? DType::kBF16 : DType::kF32;
    std::vector<float> x = c["x"].get<std::vector<float>>();
    std::vector<uint16_t> x16(n);
    const void* in = x.data();
    if (t == DType::kBF16) {  // the values are bf16 already: the conversion is exact
      convert(x.data(), DType::kF32, x16.data(), t, n);
      in = x16.data();
    }
    std::vector<uint8_t> q(quant_bytes(n, bits), 0xAA);
    std::vector<float> scales(quant_blocks(n, block), -1.f);
    be->quantize_blocks(in, t, n, bits, block, q.data(), scales.data());
    const auto want_q = c["q"].get<std::vector<int>>();
    const auto want_s = c["scales"].get<std::vector<float>>();
    const auto want_d = c["dequantized"].get<std::vector<float>>();
    ASSERT_EQ(scales.size(), want_s.size());
    for (size_t b = 0; b < scales.size(); ++b) EXPECT_EQ(scales[b], want_s[b]) << "block " << b;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(quant_load(q.data(), i, bits), want_q[i]) << i;
    if (bits == 4 && n % 2 == 1) EXPECT_EQ(q.back() >> 4, 0) << "an odd length's last nibble";

    std::vector<float> y(n);
    be->dequantize_blocks(q.data(), scales.data(), n, bits, block, y.data(), DType::kF32, false);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(y[i], want_d[i]) << i;
      float absmax = 0;
      const size_t lo = i / block * block;
      for (size_t j = lo; j < std::min(n, lo + block); ++j) absmax = std::max(absmax, std::fabs(x[j]));
      if (absmax > 0) worst = nan_max(worst, std::fabs(x[i] - y[i]) / (double)absmax);
    }
    EXPECT_LE(worst, 0.5 / quant_qmax(bits) * (1 + 1e-6));
    EXPECT_NEAR(worst, c["max_error_over_absmax"].get<double>(), 1e-7);

    // Accumulating adds the dequantized values to what is there, in fp32.
    std::vector<float> acc(n, 1.f);
    be->dequantize_blocks(q.data(), scales.data(), n, bits, block, acc.data(), DType::kF32, true);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 1.f + want_d[i]) << i;
    // Into bf16: the dequantized value rounded once.
    std::vector<uint16_t> yb(n);
    be->dequantize_blocks(q.data(), scales.data(), n, bits, block, yb.data(), DType::kBF16, false);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(yb[i], f32_to_bf16(want_d[i])) << i;
  }
}

// A block holding a NaN or an infinity gets a NaN scale: every value of it dequantizes to NaN
// (a non-finite gradient stays visible to the norm), the other blocks are untouched.
TEST(Quantize, NonFiniteBlocksDequantizeToNan) {
  auto be = make_cpu_backend();
  for (int bits : {8, 4}) {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      std::vector<float> x(24);
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * (float)i - 2.f;
      x[13] = bad;  // in the second block of 8
      std::vector<uint8_t> q(quant_bytes(x.size(), bits));
      std::vector<float> scales(3), y(x.size());
      be->quantize_blocks(x.data(), DType::kF32, x.size(), bits, 8, q.data(), scales.data());
      be->dequantize_blocks(q.data(), scales.data(), x.size(), bits, 8, y.data(), DType::kF32,
                            false);
      EXPECT_TRUE(std::isnan(scales[1])) << bad;
      EXPECT_FALSE(std::isnan(scales[0]) || std::isnan(scales[2]));
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(std::isnan(y[i]), i >= 8 && i < 16) << "element " << i << ", bad " << bad;
    }
  }
}

// The storage format, read back: 8 bits a two's complement byte, 4 bits two two's complement
// nibbles (element 2i low). The quantizer writes only [-qmax, qmax], so the nibble 8 (-8) is
// read here only: every byte value against the sign extension by shifts.
TEST(Quantize, StoredIntegersAreTwosComplement) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte[1] = {(uint8_t)b};
    const int low = (int)(int8_t)(uint8_t)(b << 4) >> 4, high = (int)(int8_t)(uint8_t)b >> 4;
    EXPECT_EQ(quant_load(byte, 0, 4), low) << "byte " << b;
    EXPECT_EQ(quant_load(byte, 1, 4), high) << "byte " << b;
    EXPECT_EQ(quant_load(byte, 0, 8), b < 128 ? b : b - 256) << "byte " << b;
  }
}

}  // namespace
}  // namespace zt
