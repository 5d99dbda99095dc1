// The machine's sgemm rate through the same BLAS the CPU backend calls (model/cpu/matmul.cc),
// for the ratio the per-op profile is read against (docs/benchmarks.md, "Where a step's time
// goes"): 4096^3, the usual peak figure, and the forward products of GPT-2 124M at B x T =
// 8 x 256 in the backend's layout (out (N, OC) = inp (N, C) @ W (OC, C)^T).
//   OMP_NUM_THREADS=2 build/benchmarks/sgemm_bench
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <vector>

namespace {

void BM_Sgemm(benchmark::State& state) {
  const int N = (int)state.range(0), C = (int)state.range(1), OC = (int)state.range(2);
  std::vector<float> a((size_t)N * C, 0.5f), w((size_t)OC * C, 0.25f), out((size_t)N * OC);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.f, a.data(), C, w.data(), C,
                0.f, out.data(), OC);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * C * OC / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"N", "C", "OC"})
    ->Args({4096, 4096, 4096})
    ->Args({2048, 768, 2304})   // q|k|v
    ->Args({2048, 768, 768})    // attention output
    ->Args({2048, 768, 3072})   // MLP up
    ->Args({2048, 3072, 768})   // MLP down
    ->Args({2048, 768, 50257})  // the classifier (zerotrain runs it in row chunks)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
