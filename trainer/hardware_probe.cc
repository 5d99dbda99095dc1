#include "trainer/hardware_probe.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

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
#include "offload/nvme_swapper.h"

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

// OpenBLAS sgemm on a GPT-2-sized block GEMM (2048 x 768 @ 768 x 3072), every thread.
double sgemm_flops() {
  const int M = 2048, K = 768, N = 3072;
  std::vector<float> a((size_t)M * K, 0.5f), b((size_t)K * N, 0.25f), c((size_t)M * N);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, a.data(), K, b.data(), N,
                0.f, c.data(), N);
  };
  run();
  return 2.0 * M * N * K / best_of(3, run);
}

// Bytes a copy of 256 MiB reads and writes a second, every thread copying its slice (as CPU Adam
// and the CPU backend's kernels stream memory).
double copy_bandwidth() {
  const size_t n = size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  auto copy = [&] {
#pragma omp parallel
    {
      const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
    }
  };
  copy();
  return 2.0 * n / best_of(3, copy);
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
      h.source = "measured here earlier (" + cache + ")";
      if (report) *report = h.source;
      if (h.peak_flops > 0 && h.host_bw > 0 && h.nvme_bw > 0) return h;
    }
  }
  h.peak_flops = sgemm_flops();
  h.host_bw = h.device_bw = h.pcie_bw = h.link_bw = copy_bandwidth();
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
                            {"disk_bytes_per_s", h.nvme_bw}};
  (void)write_file_atomic(cache, j.dump(2));  // a cache: not writing it only costs time later
  return h;
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
