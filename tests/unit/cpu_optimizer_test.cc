// The CPU optimizer steps (model/cpu/cpu_adam.h, model/cpu/optimizer_step.h): after 10 steps on
// 1M parameters with fp32, bf16 and fp16 gradients, AdamW matches torch.optim.AdamW /
// torch.optim.Adam (L2) (fixture by scripts/make_cpu_adam_reference.py), Adagrad
// torch.optim.Adagrad and Lion the paper's update (scripts/make_optimizer_reference.py), to 1e-6
// relative, Muon its author's update (scripts/make_muon_reference.py); every SIMD level gives
// the scalar path's bits; the fused 16-bit working copy is the
// master rounded to nearest even.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/cpu/cpu_adam.h"
#include "model/cpu/optimizer_step.h"
#include "model/newton_schulz.h"
#include "tests/unit/json_fixture.h"
#include "tests/unit/nan_max.h"

namespace zt {
namespace {

// The fixture script's hash: uniform on [-1, 1) on a 2^-23 grid.
float hash_uniform(uint32_t i, uint32_t stream) {
  uint32_t x = i * 0x9E3779B1u + stream * 0x85EBCA77u + 0x165667B1u;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  x *= 0x297A2D39u;
  x ^= x >> 15;
  return (float)((int32_t)(x >> 8) - (1 << 23)) / (float)(1 << 23);
}

// Gradient of `step` for n elements, stored in dtype t.
std::vector<uint8_t> gradient(size_t n, int step, DType t) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = hash_uniform((uint32_t)i, step) / 8;
  std::vector<uint8_t> out(n * dtype_size(t));
  convert(g.data(), DType::kF32, out.data(), t, n, SimdLevel::kScalar);
  return out;
}

struct State {
  std::vector<float> p, m, v;
  std::vector<uint16_t> out;
};

State run(size_t n, DType grad_t, DType out_t, const OptimizerStep& base, int steps,
          SimdLevel level) {
  State s{std::vector<float>(n), std::vector<float>(n, 0.f), std::vector<float>(n, 0.f),
          std::vector<uint16_t>(n)};
  for (size_t i = 0; i < n; ++i) s.p[i] = 1.f + 0.5f * hash_uniform((uint32_t)i, 0);
  for (int t = 1; t <= steps; ++t) {
    OptimizerStep a = base;
    a.t = t;
    auto g = gradient(n, t, grad_t);
    cpu_adam_step(s.p.data(), g.data(), grad_t, s.m.data(), s.v.data(),
                  out_t == DType::kF32 ? nullptr : s.out.data(), out_t, n, a, level);
  }
  return s;
}

// got (every element) against the fixture case's samples c[key] (every stride-th element) and
// their float64 sum c["sum_" + key], to 1e-6: relative to each element where per_element (values
// bounded away from 0), else to the largest magnitude (a signed sum of gradients crosses zero).
void expect_matches(const nlohmann::json& c, const std::vector<float>& got, const std::string& key,
                    bool per_element, size_t stride, const std::string& what) {
  const auto& want = c[key];
  double scale = 0, worst = 0;
  for (const auto& w : want) scale = std::max(scale, std::fabs(w.get<double>()));
  size_t at = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    const double w = want[k], gv = got[k * stride];
    const double e = std::fabs(gv - w) / (per_element ? std::fabs(w) : scale);
    if (std::isnan(e) || e > worst) worst = e, at = k;  // a NaN fails, and stays
  }
  EXPECT_LE(worst, 1e-6) << what << " " << key << " at element " << at * stride << ": "
                         << got[at * stride] << " vs " << want[at].get<double>();
  double sum = 0;
  for (float x : got) sum += x;
  const double want_sum = c["sum_" + key];
  EXPECT_LE(std::fabs(sum - want_sum), 1e-6 * std::fabs(want_sum)) << what << " sum_" << key;
}

TEST(CpuAdam, MatchesTorchAdamWAndAdamL2) {
  const nlohmann::json fx =
      load_json_fixture("cpu_adam_reference.json", "make_cpu_adam_reference.py");
  ASSERT_FALSE(fx.is_null());
  const size_t n = fx["n"], stride = fx["stride"];
  for (const auto& c : fx["cases"]) {
    const DType grad_t = *parse_dtype(c["grad_dtype"].get<std::string>());
    OptimizerStep a{fx["lr"], fx["beta1"],       fx["beta2"],      fx["eps"], fx["weight_decay"],
                    1,        fx["grad_factor"], c["adam_w_mode"], true};
    const State s = run(n, grad_t, DType::kBF16, a, fx["steps"], cpu_simd_level());
    const std::string what = std::string(c["grad_dtype"]) + (a.adam_w_mode ? " AdamW" : " Adam L2");
    auto check = [&](const std::vector<float>& got, const char* key, bool per_element) {
      expect_matches(c, got, key, per_element, stride, what);
    };
    check(s.p, "param", true);
    check(s.m, "exp_avg", false);
    check(s.v, "exp_avg_sq", true);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(s.out[i], f32_to_bf16(s.p[i])) << what << " " << i;
  }
}

class CpuAdamLevels : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(CpuAdamLevels, SimdPathsMatchScalarBitForBit) {
  const SimdLevel level = GetParam();
  if (!cpu_supports(level)) GTEST_SKIP() << "this CPU does not support " << simd_level_name(level);
  const size_t n = 100'003;  // several tiles and a vector tail
  for (DType grad_t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType out_t : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (bool adam_w : {true, false}) {
        const OptimizerStep a{3e-3, 0.9, 0.95, 1e-8, 0.1, 1, 0.37, adam_w, true};
        const State want = run(n, grad_t, out_t, a, 3, SimdLevel::kScalar);
        const State got = run(n, grad_t, out_t, a, 3, level);
        const std::string what = std::string(dtype_name(grad_t)) + " -> " +
                                 std::string(dtype_name(out_t)) + (adam_w ? " AdamW" : " L2");
        ASSERT_EQ(std::memcmp(got.p.data(), want.p.data(), n * 4), 0) << what;
        ASSERT_EQ(std::memcmp(got.m.data(), want.m.data(), n * 4), 0) << what;
        ASSERT_EQ(std::memcmp(got.v.data(), want.v.data(), n * 4), 0) << what;
        ASSERT_EQ(got.out, want.out) << what;
      }
    }
  }
}

TEST_P(CpuAdamLevels, ConsumedGradientIsZeroedAndResultUnchanged) {
  const SimdLevel level = GetParam();
  if (!cpu_supports(level)) GTEST_SKIP() << "this CPU does not support " << simd_level_name(level);
  const size_t n = 20'011;
  for (DType grad_t : {DType::kF32, DType::kBF16, DType::kF16}) {
    OptimizerStep a{1e-3, 0.9, 0.999, 1e-8, 0.1, 1, 1.0, true, true};
    std::vector<float> p1(n, 1.f), m1(n, 0.f), v1(n, 0.f), p2 = p1, m2 = m1, v2 = v1;
    auto g1 = gradient(n, 1, grad_t), g2 = g1;
    cpu_adam_step(p1.data(), g1.data(), grad_t, m1.data(), v1.data(), nullptr, DType::kF32, n, a,
                  level);
    a.zero_grad = true;
    cpu_adam_step(p2.data(), g2.data(), grad_t, m2.data(), v2.data(), nullptr, DType::kF32, n, a,
                  level);
    EXPECT_EQ(p1, p2) << dtype_name(grad_t);
    EXPECT_EQ(v1, v2) << dtype_name(grad_t);
    EXPECT_TRUE(std::all_of(g2.begin(), g2.end(), [](uint8_t b) { return b == 0; }))
        << dtype_name(grad_t);
  }
}

TEST_P(CpuAdamLevels, SumSquaresMatchesDoubleSum) {
  const SimdLevel level = GetParam();
  if (!cpu_supports(level)) GTEST_SKIP() << "this CPU does not support " << simd_level_name(level);
  const size_t n = 70'001;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto g = gradient(n, 5, t);
    std::vector<float> f(n);
    convert(g.data(), t, f.data(), DType::kF32, n, SimdLevel::kScalar);
    double want = 0;
    for (float x : f) want += (double)x * x;
    // fp32 runs of 64 squares per lane (cpu_adam.h): within 1e-6 on these values.
    EXPECT_NEAR(cpu_sum_squares(g.data(), t, n, level), want, 1e-6 * want) << dtype_name(t);
  }
}

// The fused gradient write + norm: the same stored values as scale_add, and a sum of squares
// equal bit for bit to a separate cpu_sum_squares pass over them (so fusing changes no step).
TEST(CpuAdam, ScaleAddSumSquaresEqualsSeparatePasses) {
  const size_t n = 70'001;  // several 8K tiles and a ragged end
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = hash_uniform((uint32_t)i, 9);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool accumulate : {false, true}) {
      const auto y0 = gradient(n, 3, t);
      auto fused = y0, separate = y0;
      const double got = cpu_scale_add_sum_squares(fused.data(), t, x.data(), 0.5f, accumulate, n);
      scale_add(separate.data(), t, x.data(), 0.5f, accumulate, n, SimdLevel::kScalar);
      EXPECT_EQ(fused, separate) << dtype_name(t);
      const double want = cpu_sum_squares(separate.data(), t, n);
      EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0)
          << dtype_name(t) << " accumulate " << accumulate << ": " << got << " vs " << want;
      std::vector<float> f(n);
      convert(separate.data(), t, f.data(), DType::kF32, n, SimdLevel::kScalar);
      double exact = 0;
      for (float v : f) exact += (double)v * v;
      EXPECT_NEAR(got, exact, 1e-6 * exact) << dtype_name(t);
    }
  }
}

// Lion and Adagrad: one state tensor each, run through cpu_optimizer_step.
struct OneState {
  std::vector<float> p, s;
  std::vector<uint16_t> out;
};
OneState run_one_state(size_t n, DType grad_t, DType out_t, const OptimizerStep& base, int steps,
                       SimdLevel level) {
  OneState s{std::vector<float>(n), std::vector<float>(n, 0.f), std::vector<uint16_t>(n)};
  for (size_t i = 0; i < n; ++i) s.p[i] = 1.f + 0.5f * hash_uniform((uint32_t)i, 0);
  for (int t = 1; t <= steps; ++t) {
    OptimizerStep a = base;
    a.t = t;
    auto g = gradient(n, t, grad_t);
    float* states[] = {s.s.data()};
    cpu_optimizer_step(s.p.data(), g.data(), grad_t, states,
                       out_t == DType::kF32 ? nullptr : s.out.data(), out_t, n, a, level);
  }
  return s;
}

TEST(CpuOptimizers, LionMatchesThePaperAndAdagradMatchesTorch) {
  const nlohmann::json fx =
      load_json_fixture("optimizer_reference.json", "make_optimizer_reference.py");
  ASSERT_FALSE(fx.is_null());
  const size_t n = fx["n"], stride = fx["stride"];
  const nlohmann::json &l = fx["lion"], &g = fx["adagrad"];
  int seen[2] = {0, 0};
  for (const auto& c : fx["cases"]) {
    const DType grad_t = *parse_dtype(c["grad_dtype"].get<std::string>());
    const bool lion = c["optimizer"] == "Lion";
    ++seen[lion];
    OptimizerStep a{.grad_scale = fx["grad_factor"]};
    if (lion) {
      a.kind = OptimizerKind::kLion;
      a.lr = l["lr"], a.beta1 = l["beta1"], a.beta2 = l["beta2"],
      a.weight_decay = l["weight_decay"];
    } else {
      a.kind = OptimizerKind::kAdagrad;
      a.lr = g["lr"], a.eps = g["eps"], a.weight_decay = g["weight_decay"];
      a.lr_decay = g["lr_decay"];
    }
    const OneState s = run_one_state(n, grad_t, DType::kBF16, a, fx["steps"], cpu_simd_level());
    const std::string what = std::string(c["optimizer"]) + " " + std::string(c["grad_dtype"]);
    expect_matches(c, s.p, "param", true, stride, what);
    expect_matches(c, s.s, lion ? "exp_avg" : "sum", !lion, stride, what);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(s.out[i], f32_to_bf16(s.p[i])) << what << " " << i;
  }
  EXPECT_EQ(seen[0], 3) << "Adagrad cases";
  EXPECT_EQ(seen[1], 3) << "Lion cases";
}

TEST_P(CpuAdamLevels, LionAndAdagradPathsMatchScalarBitForBit) {
  const SimdLevel level = GetParam();
  if (!cpu_supports(level)) GTEST_SKIP() << "this CPU does not support " << simd_level_name(level);
  const size_t n = 100'003;  // several tiles and a vector tail
  for (OptimizerKind k : {OptimizerKind::kLion, OptimizerKind::kAdagrad}) {
    for (DType grad_t : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType out_t : {DType::kF32, DType::kBF16, DType::kF16}) {
        const OptimizerStep a{.lr = 3e-3,
                              .beta2 = 0.95,
                              .eps = 1e-10,
                              .weight_decay = 0.1,
                              .grad_scale = 0.37,
                              .kind = k,
                              .lr_decay = 0.05};
        const OneState want = run_one_state(n, grad_t, out_t, a, 3, SimdLevel::kScalar);
        const OneState got = run_one_state(n, grad_t, out_t, a, 3, level);
        const std::string what = std::string(optimizer_info(k).name) + " " +
                                 std::string(dtype_name(grad_t)) + " -> " +
                                 std::string(dtype_name(out_t));
        ASSERT_EQ(std::memcmp(got.p.data(), want.p.data(), n * 4), 0) << what;
        ASSERT_EQ(std::memcmp(got.s.data(), want.s.data(), n * 4), 0) << what;
        ASSERT_EQ(got.out, want.out) << what;
      }
    }
  }
}

TEST_P(CpuAdamLevels, LionAndAdagradZeroTheConsumedGradient) {
  const SimdLevel level = GetParam();
  if (!cpu_supports(level)) GTEST_SKIP() << "this CPU does not support " << simd_level_name(level);
  const size_t n = 20'011;
  for (OptimizerKind k : {OptimizerKind::kLion, OptimizerKind::kAdagrad}) {
    for (DType grad_t : {DType::kF32, DType::kBF16, DType::kF16}) {
      OptimizerStep a{.lr = 1e-3, .weight_decay = 0.1, .kind = k};
      std::vector<float> p1(n, 1.f), s1(n, 0.f), p2 = p1, s2 = s1;
      auto g1 = gradient(n, 1, grad_t), g2 = g1;
      float* st1[] = {s1.data()};
      float* st2[] = {s2.data()};
      cpu_optimizer_step(p1.data(), g1.data(), grad_t, st1, nullptr, DType::kF32, n, a, level);
      a.zero_grad = true;
      cpu_optimizer_step(p2.data(), g2.data(), grad_t, st2, nullptr, DType::kF32, n, a, level);
      EXPECT_EQ(p1, p2) << dtype_name(grad_t);
      EXPECT_EQ(s1, s2) << dtype_name(grad_t);
      EXPECT_EQ(g1, gradient(n, 1, grad_t)) << "kept without zero_grad";
      EXPECT_TRUE(std::all_of(g2.begin(), g2.end(), [](uint8_t b) { return b == 0; }))
          << dtype_name(grad_t);
    }
  }
}

// Muon: model/optimizer_math.h's two passes around model/newton_schulz.h, as
// zero/muon_rule.cc runs them on one unit, after 10 steps on a unit of a wide matrix, a
// vector (AdamW), a tall and a square matrix match the float64 reference of
// scripts/make_muon_reference.py to 1e-6; passes called in pieces at any offset (an offloaded
// state's tiles) give the same bits as one call.
TEST(Muon, MatchesTheReferenceInOnePieceOrMany) {
  const nlohmann::json fx = load_json_fixture("muon_reference.json", "make_muon_reference.py");
  ASSERT_FALSE(fx.is_null());
  const size_t n = fx["n"];
  struct Matrix {
    size_t offset;
    int rows, cols;
  };
  std::vector<Matrix> matrices;
  std::vector<size_t> spans;
  for (const auto& t : fx["layout"]) {
    if (t["shape"].size() != 2) continue;
    matrices.push_back({t["offset"], t["shape"][0], t["shape"][1]});
    spans.insert(spans.end(),
                 {matrices.back().offset,
                  matrices.back().offset + (size_t)matrices.back().rows * matrices.back().cols});
  }
  auto be = make_cpu_backend(1);
  struct Result {
    std::vector<float> p, m, v;
  };
  auto run = [&](size_t piece) {
    Result r{std::vector<float>(n), std::vector<float>(n, 0.f), std::vector<float>(n, 0.f)};
    for (size_t i = 0; i < n; ++i) r.p[i] = 1.f + 0.5f * hash_uniform((uint32_t)i, 0);
    std::vector<float> u(n), o(n);
    for (int t = 1; t <= (int)fx["steps"]; ++t) {
      auto g = gradient(n, t, DType::kF32);
      OptimizerStep s{.lr = fx["lr"],
                      .beta1 = fx["betas"][0],
                      .beta2 = fx["betas"][1],
                      .eps = fx["eps"],
                      .weight_decay = fx["weight_decay"],
                      .t = t,
                      .grad_scale = fx["grad_factor"],
                      .kind = OptimizerKind::kMuon,
                      .momentum = fx["momentum"],
                      .aux_lr = fx["adam_lr"],
                      .muon_spans = spans.data(),
                      .num_muon_spans = (int)spans.size() / 2};
      auto pass = [&](int which, float* grad, float* out) {
        s.muon_pass = which;
        for (size_t at = 0; at < n; at += piece) {
          s.offset = at;
          float* states[] = {r.m.data() + at, r.v.data() + at};
          cpu_optimizer_step(r.p.data() + at, grad + at, DType::kF32, states,
                             out ? out + at : nullptr, DType::kF32, std::min(piece, n - at), s);
        }
      };
      pass(1, reinterpret_cast<float*>(g.data()), u.data());
      for (const Matrix& x : matrices)
        newton_schulz5(be.get(), u.data() + x.offset, x.rows, x.cols, o.data() + x.offset);
      pass(2, o.data(), nullptr);
    }
    return r;
  };
  const Result whole = run(n);
  auto check = [&](const std::vector<float>& got, const char* key, bool per_element) {
    const auto& want = fx[key];
    double scale = 0, worst = 0;
    for (const auto& w : want) scale = std::max(scale, std::fabs(w.get<double>()));
    for (size_t i = 0; i < n; ++i) {
      const double w = want[i];
      worst = nan_max(worst, std::fabs(got[i] - w) / (per_element ? std::fabs(w) : scale));
    }
    EXPECT_LE(worst, 1e-6) << key;
  };
  check(whole.p, "param", true);
  check(whole.m, "exp_avg", false);
  check(whole.v, "exp_avg_sq", false);
  for (size_t piece : {(size_t)1000, (size_t)77}) {
    const Result cut = run(piece);
    EXPECT_EQ(cut.p, whole.p) << "pieces of " << piece;
    EXPECT_EQ(cut.m, whole.m) << "pieces of " << piece;
    EXPECT_EQ(cut.v, whole.v) << "pieces of " << piece;
  }
}

INSTANTIATE_TEST_SUITE_P(Simd, CpuAdamLevels,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512,
                                           SimdLevel::kAvx512Bf16),
                         [](const auto& info) { return std::string(simd_level_name(info.param)); });

}  // namespace
}  // namespace zt
