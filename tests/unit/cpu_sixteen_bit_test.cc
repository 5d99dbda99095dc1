// The CPU backend's kernels on 16-bit parameters and parameter gradients (Backend::weight_dtype,
// Backend::grad_dtype). Reference: the same kernel on fp32 buffers (itself checked by finite
// differences and the PyTorch fixtures), with the 16-bit rule applied on the host:
// - a bf16 / fp16 weight computes as an fp32 weight holding its widened values (the CPU's
//   activations stay fp32; nothing else is rounded): both against the sum in double, up to fp32
//   rounding of the terms. Never bit for bit between the two GEMM paths: the 16-bit path runs a
//   block of the weight's rows at a time, and how OpenBLAS splits K and orders its sums depends
//   on the kernel it picks for the CPU (OPENBLAS_CORETYPE), not on us;
// - a 16-bit weight gradient g becomes round(g + the kernel's fp32 contribution), rounded once,
//   as the engine's fold of a zeroed fp32 accumulator gave: against g + the contribution summed
//   in double, within half a 16-bit step of it plus fp32 rounding of the terms. Bitwise only for
//   the bias and the norms, whose contribution our own loop sums the same way on both paths.
//   Shapes make the matmul's weight-gradient path take several blocks of rows, a ragged last
//   one, and a K (rows of the batch) above OpenBLAS's K block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "model/backend.h"

namespace zt {
namespace {

std::vector<float> random(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// x's values as dtype t holds them (still fp32).
std::vector<float> representable(std::vector<float> x, DType t) {
  std::vector<uint16_t> h(x.size());
  convert(x.data(), DType::kF32, h.data(), t, x.size());
  convert(h.data(), t, x.data(), DType::kF32, x.size());
  return x;
}

std::vector<uint16_t> to16(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> h(x.size());
  convert(x.data(), DType::kF32, h.data(), t, x.size());
  return h;
}

// round_t(widen(g0) + contribution), element by element: the expected 16-bit gradient.
std::vector<uint16_t> rounded_sum(const std::vector<uint16_t>& g0, const std::vector<float>& c,
                                  DType t) {
  std::vector<float> w(g0.size());
  convert(g0.data(), t, w.data(), DType::kF32, g0.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] += c[i];
  return to16(w, t);
}

// A 16-bit weight gradient (OC, C) that held g0 after adding dout^T (N, OC) @ inp (N, C):
// against g0 + the product summed in double, each value within half a 16-bit step (its one
// rounding) plus fp32 rounding of the terms (1e-5 of their absolute sum), whatever order the
// GEMM summed in.
void expect_gradient(const std::vector<uint16_t>& got, const std::vector<uint16_t>& g0,
                     const std::vector<float>& dout, const std::vector<float>& inp, DType t, int N,
                     int C, int OC, const std::string& what) {
  std::vector<float> a(got.size()), w0(g0.size());
  convert(got.data(), t, a.data(), DType::kF32, a.size());
  convert(g0.data(), t, w0.data(), DType::kF32, w0.size());
  const double half_step = t == DType::kBF16 ? 0x1p-9 : 0x1p-12;  // relative, with margin
  const double tiny = t == DType::kBF16 ? 0.0 : 0x1p-24;          // fp16's subnormal step
  std::vector<double> sum(a.size()), abs_sum(a.size());
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      const double d = dout[(size_t)n * OC + o];
      const float* x = inp.data() + (size_t)n * C;
      double* s = sum.data() + (size_t)o * C;
      double* as = abs_sum.data() + (size_t)o * C;
      for (int c = 0; c < C; ++c) {
        s[c] += d * x[c];
        as[c] += std::fabs(d * x[c]);
      }
    }
  for (size_t i = 0; i < a.size(); ++i) {
    const double ref = w0[i] + sum[i], slack = 1e-5 * (abs_sum[i] + std::fabs(w0[i]));
    ASSERT_LE(std::fabs(a[i] - ref), 2 * half_step * (std::fabs(ref) + slack) + slack + tiny)
        << what << " " << i << ": " << a[i] << " against " << ref;
  }
}

// out (N, OC) of inp (N, C) @ w^T (OC, C) + b against the sum in double, up to fp32 rounding of
// the terms.
void expect_forward(const std::vector<float>& out, const std::vector<float>& inp,
                    const std::vector<float>& w, const std::vector<float>& b, int N, int C, int OC,
                    const std::string& what) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double sum = b.empty() ? 0.0 : b[o], abs_sum = std::fabs(sum);
      for (int c = 0; c < C; ++c) {
        const double term = (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
        sum += term;
        abs_sum += std::fabs(term);
      }
      ASSERT_NEAR(out[(size_t)n * OC + o], sum, 1e-5 * abs_sum) << what << " " << n << "," << o;
    }
}

std::string shape_name(int N, int C, int OC, float scale) {
  return std::to_string(N) + "x" + std::to_string(C) + "x" + std::to_string(OC) + " " +
         std::to_string(scale);
}

// dinp (N,C) against dinp0 + dout @ w summed in double, up to fp32 rounding of the terms.
void expect_input_gradient(const std::vector<float>& got, const std::vector<float>& dinp0,
                           const std::vector<float>& dout, const std::vector<float>& w, int N,
                           int C, int OC, const std::string& what) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const size_t i = (size_t)n * C + c;
      double sum = dinp0[i], abs_sum = std::fabs(dinp0[i]);
      for (int o = 0; o < OC; ++o) {
        const double term = (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
        sum += term;
        abs_sum += std::fabs(term);
      }
      ASSERT_NEAR(got[i], sum, 1e-5 * abs_sum) << what << " " << n << "," << c;
    }
}

class CpuSixteenBit : public ::testing::TestWithParam<DType> {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend(2);
};

TEST_P(CpuSixteenBit, WeightsComputeAsTheirWidenedValues) {
  const DType t = GetParam();
  const int N = 7, C = 300, OC = 2000;
  const auto inp = random((size_t)N * C, 1), dout = random((size_t)N * OC, 2);
  const auto w = representable(random((size_t)OC * C, 3, 0.05f), t);
  const auto b = representable(random(OC, 4), t);
  const auto w16 = to16(w, t), b16 = to16(b, t);
  std::vector<float> out32((size_t)N * OC), out16(out32.size());
  be_->matmul_forward(out32.data(), inp.data(), w.data(), b.data(), N, C, OC);
  be_->matmul_forward(out16.data(), inp.data(), TensorView(w16.data(), t),
                      TensorView(b16.data(), t), N, C, OC);
  expect_forward(out32, inp, w, b, N, C, OC, "fp32 weight");
  expect_forward(out16, inp, w, b, N, C, OC, "16-bit weight");
  std::vector<float> dinp32((size_t)N * C), dinp16(dinp32.size()), dw((size_t)OC * C);
  be_->matmul_backward(dinp32.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C,
                       OC);
  be_->matmul_backward(dinp16.data(), dw.data(), nullptr, dout.data(), inp.data(),
                       TensorView(w16.data(), t), N, C, OC);
  // The input gradient of a 16-bit weight is summed a block of rows at a time (each thread's
  // part, then the parts): both agree with the sum in double up to fp32 rounding of the terms.
  const std::vector<float> zeros(dinp32.size(), 0.f);
  expect_input_gradient(dinp32, zeros, dout, w, N, C, OC, "fp32 weight");
  expect_input_gradient(dinp16, zeros, dout, w, N, C, OC, "16-bit weight");
}

// A 16-bit weight with a 16-bit gradient, as the blocks train: forward and both gradients, into
// an input gradient and a weight gradient that already hold values. Shapes: blocks of rows with
// a ragged last one, C above OpenBLAS's K block (1100); one output row (OC = 1: fewer blocks
// than threads); a batch whose input gradient goes in two slabs of rows (2100 x 1000); the
// decoding step's single row (N = 1) forward.
TEST_P(CpuSixteenBit, SixteenBitWeightWithSixteenBitGradient) {
  const DType t = GetParam();
  for (auto [N, C, OC] : {std::tuple{7, 300, 2000}, std::tuple{5, 1100, 2001}, std::tuple{3, 64, 1},
                          std::tuple{2100, 1000, 64}, std::tuple{1, 300, 500}}) {
    const std::string what = shape_name(N, C, OC, 0.01f);
    const auto inp = random((size_t)N * C, 11), dout = random((size_t)N * OC, 12);
    const auto w = representable(random((size_t)OC * C, 13, 0.05f), t);
    const auto w16 = to16(w, t);
    std::vector<float> out32((size_t)N * OC), out16(out32.size());
    be_->matmul_forward(out32.data(), inp.data(), w.data(), nullptr, N, C, OC);
    be_->matmul_forward(out16.data(), inp.data(), TensorView(w16.data(), t), nullptr, N, C, OC);
    // Per block of rows the GEMM runs single-threaded, where OpenBLAS may split K (C) other
    // than its threaded driver does (C = 1100 here): the same sums up to fp32 rounding.
    expect_forward(out16, inp, w, {}, N, C, OC, what + " 16-bit");
    expect_forward(out32, inp, w, {}, N, C, OC, what + " fp32");
    const auto dinp0 = random((size_t)N * C, 14);
    const auto g0 = to16(random((size_t)OC * C, 15, 0.01f), t);
    auto dinp = dinp0;
    auto dw16 = g0;
    be_->matmul_backward(dinp.data(), TensorRef(dw16.data(), t), nullptr, dout.data(), inp.data(),
                         TensorView(w16.data(), t), N, C, OC);
    expect_input_gradient(dinp, dinp0, dout, w, N, C, OC, what);
    expect_gradient(dw16, g0, dout, inp, t, N, C, OC, what);
  }
}

TEST_P(CpuSixteenBit, MatmulAddsItsWeightGradientRoundedOnce) {
  const DType t = GetParam();
  // Blocks of rows: 2000 x 300 in 2 x 2 blocks of 500 rows; 601 x 500 in 2 (301 and a ragged
  // 300) with K = 1100 rows, more than one of OpenBLAS's K blocks.
  for (auto [N, C, OC] : {std::tuple{7, 300, 2000}, std::tuple{1100, 500, 601}}) {
    const auto inp = random((size_t)N * C, 5), dout = random((size_t)N * OC, 6),
               w = random((size_t)OC * C, 7, 0.05f);
    std::vector<float> dw32((size_t)OC * C, 0.f), db32(OC, 0.f), dinp((size_t)N * C, 0.f);
    be_->matmul_backward(dinp.data(), dw32.data(), db32.data(), dout.data(), inp.data(), w.data(),
                         N, C, OC);
    // Earlier micro-steps' values (small, so the sum's rounding shows) and none (zeros).
    for (float scale : {0.f, 0.01f}) {
      const auto g0 = to16(random((size_t)OC * C, 8, scale), t), b0 = to16(random(OC, 9, scale), t);
      auto dw16 = g0, db16 = b0;
      be_->matmul_backward(dinp.data(), TensorRef(dw16.data(), t), TensorRef(db16.data(), t),
                           dout.data(), inp.data(), w.data(), N, C, OC);
      expect_gradient(dw16, g0, dout, inp, t, N, C, OC, shape_name(N, C, OC, scale));
      // The bias gradient is our loop on both paths (no BLAS), summed in one order: bitwise.
      EXPECT_EQ(db16, rounded_sum(b0, db32, t)) << N << "x" << C << "x" << OC << " " << scale;
    }
  }
}

TEST_P(CpuSixteenBit, NormsAddTheirWeightGradientsRoundedOnce) {
  const DType t = GetParam();
  const int N = 9, C = 48;
  const auto x = random((size_t)N * C, 10), dy = random((size_t)N * C, 11), w = random(C, 12),
             b = random(C, 13);
  std::vector<float> y((size_t)N * C), mean(N), rstd(N), dx((size_t)N * C);
  const auto g0 = to16(random(C, 14, 0.01f), t), h0 = to16(random(C, 15, 0.01f), t);
  // LayerNorm: dw and db.
  be_->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5f);
  std::vector<float> dw32(C, 0.f), db32(C, 0.f);
  be_->layernorm_backward(dx.data(), dw32.data(), db32.data(), dy.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  // The norms' weight gradients are our own loops (no BLAS), the fp32 contribution summed in the
  // same order on both paths and rounded once: bitwise.
  auto dw16 = g0, db16 = h0;
  be_->layernorm_backward(dx.data(), TensorRef(dw16.data(), t), TensorRef(db16.data(), t),
                          dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  EXPECT_EQ(dw16, rounded_sum(g0, dw32, t));
  EXPECT_EQ(db16, rounded_sum(h0, db32, t));
  // RMSNorm: dw.
  be_->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  std::vector<float> rw32(C, 0.f);
  be_->rmsnorm_backward(dx.data(), rw32.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  auto rw16 = g0;
  be_->rmsnorm_backward(dx.data(), TensorRef(rw16.data(), t), dy.data(), x.data(), w.data(),
                        rstd.data(), N, C);
  EXPECT_EQ(rw16, rounded_sum(g0, rw32, t));
}

TEST_P(CpuSixteenBit, AddsIntoTheStoredDtype) {
  EXPECT_EQ(be_->grad_dtype(GetParam()), GetParam());
  EXPECT_EQ(be_->weight_dtype(GetParam()), DType::kF32);  // fetch() widens: the head's unit
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CpuSixteenBit, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace zt
