// Reference: std::exp (glibc, correctly rounded to < 1 ulp) over the softmax input range.
#include "model/cpu/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/unit/nan_max.h"

namespace zt {
namespace {

TEST(VecMath, ExpFastMatchesStdExp) {
  double worst = 0;
  for (float x = -87.f; x <= 88.f; x += 0.001f) {
    const double ref = std::exp((double)x);
    worst = nan_max(worst, std::fabs(exp_fast(x) - ref) / ref);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(exp_fast(0.f), 1.f);
  EXPECT_GT(exp_fast(-1000.f), 0.f);  // clamped, never NaN
}

}  // namespace
}  // namespace zt
