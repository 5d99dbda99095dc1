// Attention forward + backward on the CPU backend against the plain attention that keeps its
// (B,NH,T,T) probabilities (model/cpu/attention_reference.h), same inputs and threads,
// alternating rounds; prints a markdown table of median milliseconds and ms per 1k tokens.
// Default shape: TinyLlama-1.1B's (32 query heads, 4 kv heads, head size 64) at T = 2048.
//
//   build/benchmarks/attention_bench [--T 2048] [--B 1] [--NH 32] [--KVH 4] [--hd 64]
//       [--rounds 5] [--threads 2]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/cpu/attention_reference.h"

int main(int argc, char** argv) {
  int T = 2048, B = 1, NH = 32, KVH = 4, hd = 64, rounds = 5, threads = omp_get_max_threads();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::stoi(argv[i + 1]);
    if (a == "--T") T = v;
    else if (a == "--B") B = v;
    else if (a == "--NH") NH = v;
    else if (a == "--KVH") KVH = v;
    else if (a == "--hd") hd = v;
    else if (a == "--rounds") rounds = v;
    else if (a == "--threads") threads = v;
    else {
      std::fprintf(stderr, "error: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  auto be = zt::make_cpu_backend(threads);
  const size_t row = (size_t)(NH + 2 * KVH) * hd;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> qkv((size_t)B * T * row), dout((size_t)B * T * NH * hd);
  for (float& x : qkv) x = d(rng);
  for (float& x : dout) x = d(rng);
  std::vector<float> out(dout.size()), dqkv(qkv.size()), lse((size_t)B * NH * T);
  std::vector<float> att((size_t)B * NH * T * T);
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::vector<double> lean_f, lean_b, ref_f, ref_b;
  for (int r = 0; r < rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      const bool lean = (side == 0) == (r % 2 == 0);
      std::fill(dqkv.begin(), dqkv.end(), 0.f);
      const auto t0 = clock::now();
      if (lean) be->attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, KVH, hd);
      else zt::reference_attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, hd);
      const auto t1 = clock::now();
      if (lean)
        be->attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T,
                               NH, KVH, hd);
      else
        zt::reference_attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T,
                                         NH, KVH, hd);
      const auto t2 = clock::now();
      (lean ? lean_f : ref_f).push_back(ms(t0, t1));
      (lean ? lean_b : ref_b).push_back(ms(t1, t2));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double lf = median(lean_f), lb = median(lean_b), rf = median(ref_f), rb = median(ref_b);
  const double k = B * T / 1000.0;
  std::printf("| attention (B %d, T %d, %d heads, %d kv heads, head size %d) | forward ms | "
              "backward ms | total ms per 1k tokens | memory kept for the backward |\n",
              B, T, NH, KVH, hd);
  std::printf("|---|---:|---:|---:|---:|\n");
  std::printf("| T x T reference | %.0f | %.0f | %.0f | %.1f MiB |\n", rf, rb, (rf + rb) / k,
              B * NH * (double)T * T * 4 / (1 << 20));
  std::printf("| log-sum-exp only (the backend's) | %.0f | %.0f | %.0f | %.3f MiB |\n", lf, lb,
              (lf + lb) / k, B * NH * (double)T * 4 / (1 << 20));
  std::printf("\nlean / reference: %.2fx time (median of %d alternating rounds, %d threads)\n",
              (lf + lb) / (rf + rb), rounds, threads);
  return 0;
}
