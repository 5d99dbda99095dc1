// The OpenMP loop every streaming CPU kernel uses: fixed-size pieces, static schedule, so each
// thread walks contiguous memory and the pieces (hence any per-piece partial result) do not
// depend on the thread count.
#pragma once

#include <algorithm>
#include <cstddef>

namespace zt {

// Calls fn(k, begin, end) for the k-th piece [begin, end) of [0, n) in pieces of `chunk`
// elements (the last may be shorter), in parallel; a single piece runs without a parallel
// region.
template <class Fn>
void for_each_chunk(size_t n, size_t chunk, Fn&& fn) {
  const size_t pieces = (n + chunk - 1) / chunk;
  if (pieces <= 1) {  // no region at all: even an if(false) one costs microseconds per call
    if (n > 0) fn(0, 0, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < pieces; ++k) fn(k, k * chunk, std::min(n, (k + 1) * chunk));
}

}  // namespace zt
