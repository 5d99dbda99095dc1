#include "trainer/hardware_probe.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/memory.h"
#include "common/status.h"
#include "model/backend.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/transformer.h"
#include "offload/nvme_swapper.h"
#include "zero/comm.h"

namespace zt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best of `n` timings of f().
template <class F>
double best_of(int n, F f) {
  double best = 1e30;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// OpenBLAS sgemm on a GPT-2-sized block GEMM (M x 768 @ 768 x 3072: M = kFullRows, or the
// kSkinnyRows of a short micro-batch; zero/step_time.h), every thread.
double sgemm_flops(int M = kFullRows) {
  const int K = 768, N = 3072, reps = kFullRows / M;  // each timing the same FLOPs
  std::vector<float> a((size_t)M * K, 0.5f), b((size_t)K * N, 0.25f), c((size_t)M * N);
  auto run = [&] {
    for (int r = 0; r < reps; ++r)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, a.data(), K, b.data(),
                  N, 0.f, c.data(), N);
  };
  run();
  return 2.0 * M * N * K * reps / best_of(7, run);  // the best of several: a shared host is noisy
}

// f() on one OpenMP thread (OpenBLAS's OpenMP build follows the caller's thread count).
template <class F>
double on_one_thread(F f) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double r = f();
  omp_set_num_threads(threads);
  return r;
}

// Bytes a copy of 256 MiB reads and writes a second, every thread copying its slice (as CPU Adam
// and the CPU backend's kernels stream memory), or one thread alone.
double copy_bandwidth(bool one_thread = false) {
  const size_t n = size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  auto copy = [&] {
#pragma omp parallel if (!one_thread)
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
    }
  };
  copy();
  return 2.0 * n / best_of(3, copy);
}

// A one-thread sgemm's time beside another core kept busy (a spin loop: no memory traffic) over
// its time alone: what the offload pipeline's optimizer thread costs the compute beside it where
// cores share a clock or an SMT core (a VM's vCPUs). 1 on a one-core machine.
double busy_core_slowdown(int cores) {
  if (cores < 2) return 1;
  const int M = 512, K = 768, N = 768;
  std::vector<float> a((size_t)M * K, 0.5f), b((size_t)K * N, 0.25f), c((size_t)M * N);
  auto gemm = [&] {
    for (int i = 0; i < 8; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, a.data(), K, b.data(),
                  N, 0.f, c.data(), N);
  };
  const double alone = on_one_thread([&] {
    gemm();
    return best_of(3, gemm);
  });
  std::atomic<bool> stop{false};
  std::thread spin([&] {
    uint64_t x = 1;
    while (!stop.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
    asm volatile("" : : "r"(x));
  });
  const double beside = on_one_thread([&] { return best_of(3, gemm); });
  stop = true;
  spin.join();
  return std::clamp(beside / alone, 1.0, 2.0);
}

// The drive under `dir` as the optimizer's NVMe offload uses it: zerotrain's swapper (io_uring,
// O_DIRECT, DeepSpeed's aio defaults) writing 256 MiB and reading it back; the mean of the two
// rates (a step reads and writes the same bytes).
absl::StatusOr<double> disk_bandwidth(const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(auto swapper, NvmeSwapper::open(dir, AioOptions{}));
  const size_t n = size_t{256} << 20;
  void* buf = alloc_streaming(n, NvmeSwapper::kAlign);
  if (!buf) return absl::ResourceExhaustedError("--hardware this: no memory for the disk probe");
  std::memset(buf, 3, n);
  swapper->register_buffer(buf, n);
  absl::Status st = absl::OkStatus();
  double write_s = 0, read_s = 0;
  if (auto h = swapper->create(n); !h.ok()) {
    st = h.status();
  } else {
    auto t0 = std::chrono::steady_clock::now();
    st = swapper->write(*h, buf, n, 0);
    write_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    if (st.ok()) st = swapper->read(*h, buf, n, 0);
    read_s = seconds_since(t0);
  }
  free_streaming(buf, n);
  if (!st.ok()) return st;
  return 2.0 * n / (write_s + read_s);
}

std::string cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = xdg && *xdg ? xdg : absl::StrCat(home ? home : "/tmp", "/.cache");
  return base + "/zerotrain/hardware_this.json";
}

}  // namespace

absl::StatusOr<Hardware> measure_this_machine(const std::string& disk_dir, bool refresh,
                                              std::string* report) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const int cores = (int)std::thread::hardware_concurrency();
  const std::string cache = cache_path();
  Hardware h;
  h.name = "this";
  h.cpu_backend = true;
  h.cores = cores;
  h.efficiency = 0.65;  // the CPU backend's forward and backward against sgemm (docs/estimator.md)
  if (!refresh) {
    auto text = read_file(cache, "hardware cache");
    const nlohmann::json j =
        text.ok() ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    auto number = [&](const char* k) {
      return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
    };
    const bool same = j.is_object() && j.contains("host") && j["host"].is_string() &&
                      j["host"] == host && number("cores") == cores && j.contains("disk_dir") &&
                      j["disk_dir"].is_string() && j["disk_dir"] == disk_dir;
    if (same) {
      h.peak_flops = number("sgemm_flops");
      h.host_bw = h.device_bw = h.pcie_bw = h.link_bw = number("copy_bytes_per_s");
      h.nvme_bw = number("disk_bytes_per_s");
      h.thread_bw = number("thread_copy_bytes_per_s");
      h.skinny_flops = number("skinny_sgemm_flops");
      h.thread_flops = number("thread_sgemm_flops");
      h.busy_core_slowdown = number("busy_core_slowdown");
      h.source = "measured here earlier (" + cache + ")";
      if (report) *report = h.source;
      if (h.peak_flops > 0 && h.host_bw > 0 && h.nvme_bw > 0 && h.thread_bw > 0 &&
          h.skinny_flops > 0 && h.thread_flops > 0 && h.busy_core_slowdown >= 1)
        return h;
    }
  }
  h.peak_flops = sgemm_flops();
  h.skinny_flops = sgemm_flops(kSkinnyRows);
  h.thread_flops = on_one_thread([] { return sgemm_flops(); });
  h.host_bw = h.device_bw = h.pcie_bw = h.link_bw = copy_bandwidth();
  h.thread_bw = copy_bandwidth(true);
  h.busy_core_slowdown = busy_core_slowdown(cores);
  auto disk = disk_bandwidth(disk_dir);
  if (!disk.ok()) return disk.status();
  h.nvme_bw = *disk;
  h.source = "measured now, cached in " + cache;
  if (report) *report = h.source;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(cache).parent_path(), ec);
  const nlohmann::json j = {{"host", host},
                            {"cores", cores},
                            {"disk_dir", disk_dir},
                            {"sgemm_flops", h.peak_flops},
                            {"copy_bytes_per_s", h.host_bw},
                            {"disk_bytes_per_s", h.nvme_bw},
                            {"skinny_sgemm_flops", h.skinny_flops},
                            {"thread_sgemm_flops", h.thread_flops},
                            {"thread_copy_bytes_per_s", h.thread_bw},
                            {"busy_core_slowdown", h.busy_core_slowdown}};
  (void)write_file_atomic(cache, j.dump(2));  // a cache: not writing it only costs time later
  return h;
}

absl::StatusOr<MicroBatchTimes> measure_micro_batch(const ModelConfig& c, const EngineOptions& run,
                                                    int B, int T, int threads,
                                                    bool beside_busy_core) {
  ModelConfig two = c;
  two.n_layer = 2;
  // Master weights, two moments, the working copy and the gradient: 16 bytes a parameter or more.
  const double bytes = 16.0 * (double)ParamLayout(two).total_numel();
  const double memory = (double)physical_memory_bytes();  // 0: unknown
  if (memory > 0 && bytes > memory / 4)
    return absl::FailedPreconditionError(absl::StrFormat(
        "timing two blocks of the model here would take %.1f GiB, over a quarter of this "
        "machine's memory", bytes / (1 << 30)));
  EngineOptions eo;
  eo.param_dtype = run.param_dtype;
  eo.grad_dtype = run.grad_dtype;
  std::vector<int> tokens((size_t)B * T), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = (int)((i * 7919 + 13) % c.vocab_size);
    targets[i] = (int)((i * 104729 + 7) % c.vocab_size);
  }
  // One micro-batch's forward and backward of `layers` blocks: seconds alone and beside the
  // streaming thread (0 when not asked).
  auto time_model = [&](int layers, bool busy) {
    ModelConfig m = c;
    m.n_layer = layers;
    auto be = make_cpu_backend(threads);
    auto comm = make_single_process_communicator(be.get());
    Transformer model(m, be.get(), B, T, 0, false, be->activation_dtype(eo.param_dtype));
    Engine engine(model.layout(), be.get(), comm.get(), eo);
    const ParamLayout& layout = model.layout();
    for (int u = 0; u < layout.num_units(); ++u) {
      std::vector<float> w(layout.units()[u].numel);
      init_unit(m, layout.units()[u], u, 1, w);
      engine.set_unit_params(u, w);
    }
    auto pass = [&] {
      engine.begin_pass();
      engine.set_gradient_accumulation_boundary(true);
      model.forward(engine, tokens.data(), targets.data(), B, T, 1.f);
      model.backward(engine);
    };
    pass();
    const double alone = best_of(3, pass);
    if (!busy) return std::pair{alone, 0.0};
    // The neighbour streams 2 x 64 MiB as CPU Adam streams its state.
    std::atomic<bool> stop{false};
    std::thread stream([&] {
      const size_t n = size_t{64} << 20;
      std::vector<char> a(n, 1), b(n, 2);
      while (!stop.load(std::memory_order_relaxed)) std::memcpy(b.data(), a.data(), n);
    });
    const double beside = best_of(3, pass);
    stop = true;
    stream.join();
    return std::pair{alone, beside};
  };
  const double one = time_model(1, false).first;
  const auto [two_alone, two_beside] = time_model(2, beside_busy_core);
  MicroBatchTimes t;
  t.block_s = std::max(0.0, two_alone - one);
  t.rest_s = std::max(0.0, one - t.block_s);
  if (beside_busy_core) t.busy_core_slowdown = std::clamp(two_beside / two_alone, 1.0, 2.0);
  return t;
}

absl::StatusOr<Hardware> hardware_named(const std::string& name, const std::string& disk_dir,
                                        std::string* source) {
  if (name == "this" || name == "this-refresh")
    return measure_this_machine(disk_dir.empty() ? "/tmp" : disk_dir, name == "this-refresh",
                                source);
  ZT_ASSIGN_OR_RETURN(Hardware h, hardware_profile(name));
  if (source) *source = h.source;
  return h;
}

}  // namespace zt
