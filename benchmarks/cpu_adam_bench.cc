// CPU Adam at memory speed: parameters/s of model/cpu/cpu_adam.h against the machine's bandwidth
// bound, measured in the same run on the same threads.
//
//   build/benchmarks/cpu_adam_bench [--params N] [--threads T] [--reps R] [--pages huge|4k]
//                                   [--serve 1 [--optimizer adamw|lion|adagrad]] [--aligned 1]
//
// Prints one JSON object. The bound is the bytes an Adam step must move per parameter (28: fp32
// grad read, master/m/v read and written; or bf16 grad read and bf16 copy written) divided by
//   - triad: a STREAM triad (a = b + s c; 12 bytes per element, STREAM's count) bandwidth;
//   - pattern: the Adam step's own streams with trivial arithmetic (the same loads and stores,
//     so the same prefetch and write-allocate behaviour: what this access pattern can reach).
// benchmarks/cpu_adam_compare.py runs this beside DeepSpeed's CPU Adam and torch.optim.AdamW;
// benchmarks/cpu_optimizer_compare.py serves Lion and Adagrad beside DeepSpeed's.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/bandwidth.h"
#include "common/memory.h"
#include "common/simd.h"
#include "common/timer.h"
#include "model/cpu/cpu_adam.h"
#include "model/cpu/optimizer_step.h"

namespace zt {
namespace {

// Median seconds of each job over `reps` rounds, each round running every job once in turn,
// so the bandwidth bound and the kernels see the same moments of the machine's drift.
std::vector<double> interleaved_medians(int reps, const std::vector<std::function<void()>>& jobs) {
  for (const auto& job : jobs) job();  // warm-up: first touch and caches
  std::vector<std::vector<double>> s(jobs.size());
  for (int r = 0; r < reps; ++r)
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Timer t;
      jobs[j]();
      s[j].push_back(t.ms() / 1e3);
    }
  std::vector<double> med;
  for (auto& x : s) {
    std::sort(x.begin(), x.end());
    med.push_back(x[x.size() / 2]);
  }
  return med;
}

bool huge_pages = true;  // --pages huge: as the trainer allocates (common/memory.h)
// --aligned 1: every buffer on a 2 MiB boundary, without alloc_streaming's stagger, to measure
// what the stagger buys.
bool aligned = false;

// The AdamW step every measurement takes (cpu_adam_compare.py gives the other sides the same
// hyper-parameters): step number t, fp32 arithmetic, bias correction on.
OptimizerStep bench_step(int t) {
  return OptimizerStep{1e-3, 0.9, 0.999, 1e-8, 0.1, t, 1.0, true, true};
}

// n elements of T, in whole cache lines.
template <class T>
size_t array_bytes(size_t n) {
  return (n * sizeof(T) + 63) / 64 * 64;
}

template <class T>
T* alloc_array(size_t n, T init) {
  const size_t bytes = array_bytes<T>(n);
  T* p = static_cast<T*>(huge_pages ? alloc_streaming(bytes, aligned ? kHugePageBytes : 64)
                                    : std::aligned_alloc(64, bytes));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] = init;  // first touch by the threads that use it
  return p;
}

template <class T>
void free_array(T* p, size_t n) {
  huge_pages ? free_streaming(p, array_bytes<T>(n)) : std::free(p);
}

// The hyper-parameters cpu_optimizer_compare.py gives DeepSpeed's CPU Lion and CPU Adagrad.
OptimizerStep optimizer_step(OptimizerKind kind, int t) {
  switch (kind) {
    case OptimizerKind::kLion:
      return {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1, .t = t, .kind = kind};
    case OptimizerKind::kAdagrad:
      return {.lr = 1e-2, .eps = 1e-10, .weight_decay = 0.1, .t = t, .kind = kind};
    case OptimizerKind::kAdamW: break;
  }
  return bench_step(t);
}

// --serve: one fp32 step of `kind` (the CPU's best SIMD level) per "step" line on stdin, its
// seconds on stdout, so the compare scripts can alternate single steps with another process's.
int serve(size_t n, int threads, OptimizerKind kind) {
  omp_set_num_threads(threads);
  float* p = alloc_array<float>(n, 1.f);
  float* m = alloc_array<float>(n, 0.f);
  float* v = alloc_array<float>(n, 0.f);
  float* g = alloc_array<float>(n, 1e-3f);
  float* states[] = {m, v};
  int t = 0;
  char line[64];
  while (std::fgets(line, sizeof line, stdin)) {
    const Timer timer;
    cpu_optimizer_step(p, g, DType::kF32, states, nullptr, DType::kF32, n,
                       optimizer_step(kind, ++t));
    std::printf("%.9f\n", timer.ms() / 1e3);
    std::fflush(stdout);
  }
  for (float* q : {p, m, v, g}) free_array(q, n);
  return 0;
}

int run(size_t n, int threads, int reps) {
  omp_set_num_threads(threads);
  float* p = alloc_array<float>(n, 1.f);
  float* m = alloc_array<float>(n, 0.f);
  float* v = alloc_array<float>(n, 0.f);
  float* g32 = alloc_array<float>(n, 1e-3f);
  uint16_t* g16 = alloc_array<uint16_t>(n, f32_to_bf16(1e-3f));
  uint16_t* out16 = alloc_array<uint16_t>(n, 0);

  std::vector<std::function<void()>> jobs = {
      [&] {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; ++i) p[i] = m[i] + 0.5f * v[i];
      },
      [&] { bench::adam_pattern(p, m, v, g32, g16, out16, n, false); },
      [&] { bench::adam_pattern(p, m, v, g32, g16, out16, n, true); }};
  struct Kernel {
    SimdLevel level;
    bool bf16;
  };
  std::vector<Kernel> kernels;
  int t = 0;
  for (SimdLevel l :
       {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Bf16}) {
    if (!cpu_supports(l)) continue;
    for (bool bf16 : {false, true}) {
      kernels.push_back({l, bf16});
      jobs.push_back([&, l, bf16] {
        const OptimizerStep a = bench_step(++t);
        if (bf16)
          cpu_adam_step(p, g16, DType::kBF16, m, v, out16, DType::kBF16, n, a, l);
        else
          cpu_adam_step(p, g32, DType::kF32, m, v, nullptr, DType::kF32, n, a, l);
      });
    }
  }
  const std::vector<double> sec = interleaved_medians(reps, jobs);
  const double triad_gbs = 12.0 * n / sec[0] / 1e9, pattern_s = sec[1], pattern16_s = sec[2];

  std::printf(
      "{\"params\": %zu, \"threads\": %d, \"reps\": %d, \"simd\": \"%s\", "
      "\"pages\": \"%s\", \"aligned\": %s,\n",
      n, threads, reps, std::string(simd_level_name(cpu_simd_level())).c_str(),
      huge_pages ? "huge" : "4k", aligned ? "true" : "false");
  std::printf(" \"triad_GBps\": %.2f, \"bound_triad_Gparams\": %.4f,\n", triad_gbs,
              triad_gbs / 28.0);
  std::printf(" \"pattern_fp32_GBps\": %.2f, \"pattern_bf16_GBps\": %.2f,\n",
              28.0 * n / pattern_s / 1e9, 28.0 * n / pattern16_s / 1e9);
  std::printf(" \"bound_pattern_fp32_Gparams\": %.4f, \"bound_pattern_bf16_Gparams\": %.4f,\n",
              n / pattern_s / 1e9, n / pattern16_s / 1e9);
  std::printf(" \"cpu_adam\": [");
  for (size_t k = 0; k < kernels.size(); ++k)
    std::printf("%s\n   {\"simd\": \"%s\", \"grads\": \"%s\", \"Gparams\": %.4f}", k ? "," : "",
                std::string(simd_level_name(kernels[k].level)).c_str(),
                kernels[k].bf16 ? "bf16 (+bf16 copy)" : "fp32", n / sec[3 + k] / 1e9);
  std::printf("]}\n");
  for (float* q : {p, m, v, g32}) free_array(q, n);
  for (uint16_t* q : {g16, out16}) free_array(q, n);
  return 0;
}

}  // namespace
}  // namespace zt

namespace {
constexpr const char* kUsage =
    "usage: cpu_adam_bench [--params N >= 1] [--threads T >= 1] [--reps R >= 1] "
    "[--pages huge|4k] [--serve 0|1] [--optimizer adamw|lion|adagrad] [--aligned 0|1]\n";

// The whole of s as a number >= 1, or 0.
size_t positive(const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  return *s && *end == '\0' && s[0] != '-' ? size_t(v) : 0;
}

bool one_of(const std::string& v, const char* a, const char* b) { return v == a || v == b; }
}  // namespace

int main(int argc, char** argv) {
  size_t n = 100'000'000;
  int threads = omp_get_max_threads(), reps = 7;
  bool serve = false;
  zt::OptimizerKind kind = zt::OptimizerKind::kAdamW;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (!one_of(a, "--params", "--threads") && !one_of(a, "--reps", "--pages") &&
        !one_of(a, "--serve", "--aligned") && a != "--optimizer") {
      std::fprintf(stderr, "error: unknown flag %s\n%s", argv[i], kUsage);
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n%s", argv[i], kUsage);
      return 2;
    }
    const std::string v = argv[i + 1];
    bool ok = true;
    if (a == "--params")
      ok = (n = positive(argv[i + 1])) > 0;
    else if (a == "--threads")
      ok = (threads = int(positive(argv[i + 1]))) > 0;
    else if (a == "--reps")
      ok = (reps = int(positive(argv[i + 1]))) > 0;
    else if (a == "--pages")
      ok = one_of(v, "huge", "4k"), zt::huge_pages = v == "huge";
    else if (a == "--serve")
      ok = one_of(v, "0", "1"), serve = v == "1";
    else if (a == "--optimizer")
      ok = one_of(v, "adamw", "lion") || v == "adagrad",
      kind = v == "lion"      ? zt::OptimizerKind::kLion
             : v == "adagrad" ? zt::OptimizerKind::kAdagrad
                              : zt::OptimizerKind::kAdamW;
    else
      ok = one_of(v, "0", "1"), zt::aligned = v == "1";  // --aligned
    if (!ok) {
      std::fprintf(stderr, "error: bad value '%s' for %s\n%s", argv[i + 1], argv[i], kUsage);
      return 2;
    }
  }
  if (zt::aligned && !zt::huge_pages) {
    std::fprintf(stderr, "error: --aligned 1 needs --pages huge (4 KiB pages take no stagger)\n");
    return 2;
  }
  if (kind != zt::OptimizerKind::kAdamW && !serve) {
    std::fprintf(stderr, "error: --optimizer lion|adagrad is for --serve 1\n");
    return 2;
  }
  return serve ? zt::serve(n, threads, kind) : zt::run(n, threads, reps);
}
