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
#include <functional>
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
#include "trainer/engine_options.h"
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

// A neighbouring core kept busy while it lives: a thread repeating `work` until destroyed.
class BusyNeighbour {
 public:
  explicit BusyNeighbour(std::function<void()> work)
      : thread_([this, work = std::move(work)] {
          while (!stop_.load(std::memory_order_relaxed)) work();
        }) {}
  ~BusyNeighbour() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};  // before thread_: set before the thread starts
  std::thread thread_;
};

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
  uint64_t x = 1;
  const BusyNeighbour spin([&x] {
    x = x * 6364136223846793005ull + 1;
    asm volatile("" : : "r"(x));
  });
  const double beside = on_one_thread([&] { return best_of(3, gemm); });
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

namespace {

// One micro-batch's forward and backward of a model on the CPU backend, weights from
// init_unit, ready to time.
class TimedModel {
 public:
  // Errors: the run's optimizer state or parameter store cannot be made.
  static absl::StatusOr<std::unique_ptr<TimedModel>> make(const ModelConfig& c,
                                                          const DsConfig& ds, int B, int T,
                                                          int threads,
                                                          const std::vector<int>& tokens,
                                                          const std::vector<int>& targets) {
    std::unique_ptr<TimedModel> m(new TimedModel(c, B, T, threads, tokens, targets));
    ZT_ASSIGN_OR_RETURN(auto optimizer, optimizer_state(ds, m->be_.get()));
    ZT_ASSIGN_OR_RETURN(auto params, param_store(ds, c, 1, m->be_.get()));
    EngineOptions eo = engine_options(ds);
    eo.zero.zeropp = {};  // one rank: no groups to quantize over or split into
    eo.node_shared_params = false;
    eo.offload_pipeline = false;  // the step between passes ends before the next one starts
    eo.delayed_update_after = -1;
    eo.second_group_lr = nullptr;  // every group at the step's rate 0
    m->engine_ = std::make_unique<Engine>(m->model_.layout(), m->be_.get(), m->comm_.get(), eo,
                                          std::move(optimizer), std::move(params));
    const ParamLayout& layout = m->model_.layout();
    for (int u = 0; u < layout.num_units(); ++u) {
      std::vector<float> w(layout.units()[u].numel);
      init_unit(c, layout.units()[u], u, 1, w);
      m->engine_->set_unit_params(u, w);
    }
    return m;
  }
  // One pass, a step's first micro-batch (the gradients' first way out, not the accumulating
  // one), then an untimed step at learning rate 0 so that the next pass is a first one too (and
  // stage 3 has a recorded order to prefetch by).
  absl::StatusOr<double> seconds() {
    const auto t0 = std::chrono::steady_clock::now();
    engine_->begin_pass();
    engine_->set_gradient_accumulation_boundary(true);
    model_.forward(*engine_, tokens_.data(), targets_.data(), B_, T_, 1.f);
    model_.backward(*engine_);
    const double s = seconds_since(t0);
    ZT_RETURN_IF_ERROR(engine_->step(0.f).status());
    return s;
  }

 private:
  TimedModel(const ModelConfig& c, int B, int T, int threads, const std::vector<int>& tokens,
             const std::vector<int>& targets)
      : be_(make_cpu_backend(threads)),
        comm_(make_single_process_communicator(be_.get())),
        model_(c, be_.get(), B, T, 0, false, be_->activation_dtype(DType::kF32)),
        B_(B), T_(T), tokens_(tokens), targets_(targets) {}
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Communicator> comm_;
  Transformer model_;
  std::unique_ptr<Engine> engine_;
  int B_, T_;
  const std::vector<int>& tokens_;
  const std::vector<int>& targets_;
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

absl::StatusOr<MicroBatchTimes> measure_micro_batch(const ModelConfig& c, const DsConfig& ds,
                                                    int B, int T, int threads,
                                                    bool beside_busy_core) {
  // The model cut to one block and to three, both held while their passes alternate (a shared
  // host's pace drifts); a block is half their difference.
  ModelConfig one = c, three = c;
  one.n_layer = 1;
  three.n_layer = 3;
  // Master weights, two moments, the working copy and the gradient: 16 bytes a parameter or more.
  const double bytes =
      16.0 * ((double)ParamLayout(one).total_numel() + (double)ParamLayout(three).total_numel());
  const double memory = (double)physical_memory_bytes();  // 0: unknown
  if (memory > 0 && bytes > memory / 4)
    return absl::FailedPreconditionError(absl::StrFormat(
        "timing the model cut to one and three blocks here would take %.1f GiB, over a quarter "
        "of this machine's memory",
        bytes / (1 << 30)));
  // The run's engine on one rank, its offloaded state in host memory (a drive's time is the
  // model's NVMe term, and the probe writes nothing there).
  DsConfig run = ds;
  for (OffloadDevice* d : {&run.zero.offload_optimizer.device, &run.zero.offload_param.device})
    if (*d == OffloadDevice::kNvme) *d = OffloadDevice::kCpu;
  std::vector<int> tokens((size_t)B * T), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = (int)((i * 7919 + 13) % c.vocab_size);
    targets[i] = (int)((i * 104729 + 7) % c.vocab_size);
  }
  ZT_ASSIGN_OR_RETURN(auto m1, TimedModel::make(one, run, B, T, threads, tokens, targets));
  ZT_ASSIGN_OR_RETURN(auto m3, TimedModel::make(three, run, B, T, threads, tokens, targets));
  // A warm-up pass each (first touch of the activations and buffers), then alternating passes.
  ZT_RETURN_IF_ERROR(m1->seconds().status());
  ZT_RETURN_IF_ERROR(m3->seconds().status());
  // Up to 5 pairs, fewer where the passes already took 8 s (a long micro-batch: one pair is
  // then most of a minute's timing).
  constexpr int kPasses = 5;
  constexpr double kBudgetSeconds = 8;
  std::vector<double> t1, t3, busy;
  double spent = 0;
  for (int i = 0; i < kPasses && (i == 0 || spent < kBudgetSeconds); ++i) {
    ZT_ASSIGN_OR_RETURN(const double one_pass, m1->seconds());
    ZT_ASSIGN_OR_RETURN(const double three_pass, m3->seconds());
    t1.push_back(one_pass), t3.push_back(three_pass);
    spent += one_pass + three_pass;
  }
  if (beside_busy_core) {  // the neighbour streams 2 x 64 MiB as CPU Adam streams its state
    const size_t n = size_t{64} << 20;
    std::vector<char> from(n, 1), to(n, 2);
    const BusyNeighbour stream([&] { std::memcpy(to.data(), from.data(), n); });
    for (size_t i = 0; i < t3.size(); ++i) {
      ZT_ASSIGN_OR_RETURN(const double pass, m3->seconds());
      busy.push_back(pass);
    }
  }
  MicroBatchTimes t;
  t.block_s = std::max(0.0, (median(t3) - median(t1)) / 2);
  t.rest_s = std::max(0.0, median(t1) - t.block_s);
  if (beside_busy_core) t.busy_core_slowdown = std::clamp(median(busy) / median(t3), 1.0, 2.0);
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
