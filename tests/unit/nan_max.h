// The larger of a running worst difference and the next one, a NaN winning and staying:
// std::max(worst, NaN) keeps worst, so a NaN in a compared output would pass a tolerance check.
#pragma once

#include <cmath>

namespace zt {

template <class T>
T nan_max(T worst, T next) {
  if (std::isnan(worst)) return worst;
  return std::isnan(next) || next > worst ? next : worst;
}

}  // namespace zt
