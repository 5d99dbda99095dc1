#include "offload/cpu_optimizer.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/timer.h"
#include "model/cpu/cpu_adam.h"
#include "model/cpu/optimizer_step.h"
#include "zero/host_buffer.h"

namespace zt {
namespace {

constexpr size_t kAlign = NvmeSwapper::kAlign;

// Master weights and optimizer states in host memory, or (with a swapper) in one file per unit
// that the CPU step reads and writes one sub-group at a time through a host window. A file
// holds, per sub-group of g elements (offload_granule: a multiple of 1024), [master | state 0
// | state 1 ...] (AdamW: master, m, v), each region g * 4 bytes, whole 4 KiB blocks.
class CpuOptimizerState final : public OptimizerState {
 public:
  CpuOptimizerState(Backend* be, const CpuOffloadOptions& o, std::unique_ptr<NvmeSwapper> nvme)
      : be_(be), opt_(o), arrays_(1 + optimizer_info(o.kind).num_states), nvme_(std::move(nvme)) {}
  ~CpuOptimizerState() override {  // no copy may still read or write freed memory
    be_->wait_copy(std::max(out_ticket_[0], out_ticket_[1]));
  }

  void add_unit(size_t owned, float* /*fp32_working: the master lives off the device*/) override {
    Unit u;
    u.owned = owned;
    u.granule = offload_granule(owned, opt_.sub_group_size, nvme_ ? 1024 : 1);
    if (nvme_) {
      u.region = u.granule * 4;  // whole 4 KiB blocks: the granule is a multiple of 1024
      const size_t bytes = nvme_state_bytes(owned, opt_.sub_group_size, opt_.kind);
      auto h = nvme_->create(bytes);
      if (!h.ok()) throw_status(h.status());
      u.file = *h;
      host_.on_alloc(MemCategory::kNvme, bytes);
    } else {
      for (int i = 0; i < arrays_; ++i)
        u.arrays[i] = HostBuffer(owned * 4, MemCategory::kOptimizer, &host_, pin_with());
    }
    granule_ = std::max(granule_, u.granule);
    units_.push_back(std::move(u));
  }

  void set_master(int u, const float* host) override {
    Unit& x = units_[u];
    for (size_t begin = 0; begin < x.owned; begin += x.granule) {
      const size_t n = std::min(x.granule, x.owned - begin);
      State st = acquire(u, begin, /*read=*/false);
      std::copy(host + begin, host + begin + n, st.master);
      if (nvme_) {
        for (int i = 0; i + 1 < arrays_; ++i) std::fill(st.state[i], st.state[i] + n, 0.f);
        release(st, u, begin);
      }
    }
    flush();
  }
  void get_master(int u, float* host) override {
    Unit& x = units_[u];
    for (size_t begin = 0; begin < x.owned; begin += x.granule) {
      const size_t n = std::min(x.granule, x.owned - begin);
      const State st = acquire(u, begin, /*read=*/true);
      std::copy(st.master, st.master + n, host + begin);
    }
  }
  void set_states(int u, const float* const* host) override {
    Unit& x = units_[u];
    for (size_t begin = 0; begin < x.owned; begin += x.granule) {
      const size_t n = std::min(x.granule, x.owned - begin);
      State st = acquire(u, begin, /*read=*/true);  // NVMe: the master is read, kept
      for (int i = 0; i + 1 < arrays_; ++i)
        std::copy(host[i] + begin, host[i] + begin + n, st.state[i]);
      if (nvme_) release(st, u, begin);
    }
    flush();
  }
  void get_states(int u, float* const* host) override {
    Unit& x = units_[u];
    for (size_t begin = 0; begin < x.owned; begin += x.granule) {
      const size_t n = std::min(x.granule, x.owned - begin);
      const State st = acquire(u, begin, /*read=*/true);
      for (int i = 0; i + 1 < arrays_; ++i)
        std::copy(st.state[i], st.state[i] + n, host[i] + begin);
    }
  }
  OptimizerKind kind() const override { return opt_.kind; }
  bool master_is_working_copy(int) const override { return false; }

  // The pipeline of ZeRO-Offload (Ren et al. 2021, Section 4.2) inside one unit: its elements
  // go in tiles of half a staging buffer, so while the CPU step works on tile k, tile k + 1's
  // gradient moves device -> host and tile k - 1's updated weights host -> device, both on the
  // backend's copy stream. The last tiles' copies stay in flight into the next call (flush()
  // waits for them).
  void update(int u, const Io& io, const OptimizerStep& s) override {
    Unit& x = units_[u];
    ZT_CHECK(s.kind == opt_.kind);
    const size_t gb = dtype_size(io.grad_t), ob = dtype_size(io.out_t);
    ensure_staging();
    OptimizerStep host_step = s;
    // A device gradient is copied into staging and zeroed on the device below; a host one is
    // read in place and kept.
    const bool on_device = !io.grad_on_host;
    const bool out_on_device = io.out && !io.out_on_host;
    host_step.zero_grad = false;
    char* const grad = static_cast<char*>(io.grad);
    char* const out = static_cast<char*>(io.out);
    const size_t half = staging_elems(granule_) / 2;
    auto tile_at = [&](size_t pos) {  // a tile never crosses a sub-group (an NVMe window)
      return std::min({half, x.owned - pos, (pos / x.granule + 1) * x.granule - pos});
    };
    auto stage = [&](const HostBuffer& b, int h) { return b.data_bytes() + h * half * 4; };
    uint64_t grad_ticket[2] = {0, 0};
    auto fetch = [&](size_t pos, int h) {
      const size_t n = tile_at(pos);
      grad_ticket[h] = be_->copy_to_host_async(stage(grad_stage_, h), grad + pos * gb, n * gb);
      to_host_ += (int64_t)(n * gb);
    };
    if (on_device && x.owned > 0) fetch(0, 0);
    State st{};
    size_t st_begin = SIZE_MAX;  // the sub-group st holds
    int h = 0;
    for (size_t pos = 0; pos < x.owned; h = 1 - h) {
      const size_t n = tile_at(pos), sg = pos / x.granule * x.granule;
      if (sg != st_begin) {
        if (nvme_ && st_begin != SIZE_MAX) release(st, u, st_begin);  // written back (or behind)
        st = acquire(u, sg, /*read=*/true);  // NVMe: read in (or read ahead)
        st_begin = sg;
      }
      void* g = grad + pos * gb;
      if (on_device) {
        Timer t;
        be_->wait_copy(grad_ticket[h]);
        if (s.zero_grad) be_->zero(grad + pos * gb, n * gb);  // its copy has read it
        if (pos + n < x.owned) fetch(pos + n, 1 - h);
        g = stage(grad_stage_, h);
        clock_.add(OffloadClock::kGradOut, t.ms());
      }
      // Host-resident weights (parameter offload, delayed update) take the update directly.
      void* o = !io.out ? nullptr : io.out_on_host ? out + pos * ob : stage(out_stage_, h);
      if (out_on_device) {  // this half's previous copy to the device has read it
        Timer t;
        be_->wait_copy(out_ticket_[h]);
        clock_.add(OffloadClock::kParamIn, t.ms());
      }
      Timer adam;
      const size_t off = pos - sg;
      float* states[kMaxOptimizerStates] = {};
      for (int i = 0; i + 1 < arrays_; ++i) states[i] = st.state[i] + off;
      host_step.offset = s.offset + pos;  // Muon: where this tile sits among the matrices
      cpu_optimizer_step(st.master + off, g, io.grad_t, states, o, io.out_t, n, host_step);
      clock_.add(OffloadClock::kCpuStep, adam.ms());
      if (out_on_device) {
        out_ticket_[h] = be_->copy_to_device_async(out + pos * ob, o, n * ob);
        to_device_ += (int64_t)(n * ob);
      }
      pos += n;
    }
    if (nvme_ && st_begin != SIZE_MAX) release(st, u, st_begin);
  }

  void prepare_staging() override { ensure_staging(); }
  void flush() override {
    be_->wait_copy(std::max(out_ticket_[0], out_ticket_[1]));  // the working copy is whole
    if (!nvme_ || win_.empty()) return;
    Timer t;
    for (int w = 0; w < (int)win_.size(); ++w) settle(w);
    clock_.add(OffloadClock::kNvmeWrite, t.ms());
  }
  const MemoryTracker* host_tracker() const override { return &host_; }
  int64_t bytes_to_host() const override { return to_host_; }
  int64_t bytes_to_device() const override { return to_device_; }
  OffloadTimes times() const override { return clock_.times(); }

 private:
  struct Unit {
    size_t owned = 0, granule = 0;
    HostBuffer arrays[1 + kMaxOptimizerStates];  // host memory: master, then the states
    int file = -1;                               // NVMe
    size_t region = 0;  // NVMe: bytes of one array (master or a state) per sub-group
  };
  struct State {
    float* master;
    float* state[kMaxOptimizerStates];
    int window;  // NVMe: the window holding them
  };
  // NVMe: a host buffer of the master and states for one sub-group, its transfers in flight, and
  // the sub-group it was read ahead for (unit -1: none).
  struct Window {
    HostBuffer buf;
    std::vector<std::future<absl::Status>> io;
    int unit = -1;
    size_t begin = 0;
  };

  // Errors past setup have no Status path through the engine's calls; they end the run with
  // the message (the trainer turns exceptions into an error and, on several ranks, stops all).
  [[noreturn]] static void throw_status(const absl::Status& s) {
    throw std::runtime_error(std::string(s.message()));
  }

  Backend* pin_with() const { return opt_.pin_memory ? be_ : nullptr; }
  // One sub-group of gradient and of working copy, at the first use (every unit is known
  // then). Once: the first update may run on the pipeline's thread or the training thread.
  void ensure_staging() {
    std::call_once(staging_once_, [this] {
      const size_t bytes = staging_elems(granule_) * 4;
      grad_stage_ = HostBuffer(bytes, MemCategory::kPinnedHost, &host_, pin_with());
      out_stage_ = HostBuffer(bytes, MemCategory::kPinnedHost, &host_, pin_with());
    });
  }
  // The state of the sub-group of unit u starting at element `begin`: the unit's host buffers,
  // or an NVMe window (read from the file first when `read`, unless it was read ahead). With
  // pipeline_read the next sub-group (the unit's next, else the next unit's first) starts
  // reading into the other window now, queued behind that window's write-behind: the swapper's
  // I/O thread runs transfers in order, so neither waits here while CPU Adam works.
  State acquire(int u, size_t begin, bool read) {
    Unit& x = units_[u];
    if (!nvme_) {
      State st{x.arrays[0].f32() + begin, {}, -1};
      for (int i = 0; i + 1 < arrays_; ++i) st.state[i] = x.arrays[1 + i].f32() + begin;
      return st;
    }
    Timer wait;
    ensure_windows();
    int w = -1;
    for (int i = 0; i < (int)win_.size(); ++i)
      if (win_[i].unit == u && win_[i].begin == begin) w = i;  // read ahead
    const bool ahead = w >= 0;
    if (!ahead) w = next_win_;
    settle(w);          // its write-behind, then its read-ahead, have landed
    win_[w].unit = -1;  // in use: its contents change now
    if (!ahead && read) {
      const absl::Status st =
          nvme_->read(x.file, win_[w].buf.data(), arrays_ * x.region, offset(x, begin));
      if (!st.ok()) throw_status(st);
    }
    next_win_ = (w + 1) % (int)win_.size();
    if (read && opt_.pipeline_read) read_ahead(u, begin, next_win_);
    clock_.add(OffloadClock::kNvmeRead, wait.ms());
    char* p = static_cast<char*>(win_[w].buf.data());
    State st{reinterpret_cast<float*>(p), {}, w};
    for (int i = 0; i + 1 < arrays_; ++i)
      st.state[i] = reinterpret_cast<float*>(p + (1 + i) * x.region);
    return st;
  }
  // Writes the window back (behind, with pipeline_write).
  void release(const State& st, int u, size_t begin) {
    Unit& x = units_[u];
    Window& w = win_[st.window];
    if (opt_.pipeline_write) {
      w.io.push_back(
          nvme_->write_async(x.file, w.buf.data(), arrays_ * x.region, offset(x, begin)));
      return;
    }
    Timer wait;
    const absl::Status s = nvme_->write(x.file, w.buf.data(), arrays_ * x.region, offset(x, begin));
    clock_.add(OffloadClock::kNvmeWrite, wait.ms());
    if (!s.ok()) throw_status(s);
  }
  void read_ahead(int u, size_t begin, int w) {
    if (begin + units_[u].granule >= units_[u].owned) {  // the next unit's first sub-group
      if (++u >= (int)units_.size()) return;
      begin = 0;
    } else {
      begin += units_[u].granule;
    }
    Unit& x = units_[u];
    win_[w].io.push_back(
        nvme_->read_async(x.file, win_[w].buf.data(), arrays_ * x.region, offset(x, begin)));
    win_[w].unit = u;
    win_[w].begin = begin;
  }
  // Waits for window w's transfers; a failed one ends the run with its error.
  void settle(int w) {
    absl::Status first = absl::OkStatus();
    std::vector<std::future<absl::Status>> io = std::move(win_[w].io);  // cleared whatever happens
    win_[w].io.clear();
    for (auto& f : io) {
      const absl::Status s = f.get();
      if (first.ok()) first = s;
    }
    if (!first.ok()) {
      win_[w].unit = -1;
      throw_status(first);
    }
  }
  void ensure_windows() {
    if (!win_.empty()) return;
    win_.resize(opt_.pipeline_read || opt_.pipeline_write ? 2 : 1);
    for (Window& w : win_) {
      w.buf =
          HostBuffer(arrays_ * granule_ * 4, MemCategory::kPinnedHost, &host_, pin_with(), kAlign);
      nvme_->register_buffer(w.buf.data(), w.buf.bytes());
    }
  }
  size_t offset(const Unit& x, size_t begin) const {
    return begin / x.granule * arrays_ * x.region;
  }

  Backend* be_;
  CpuOffloadOptions opt_;
  int arrays_;          // fp32 arrays per element: the master and the optimizer's states
  MemoryTracker host_;  // declared before the buffers it accounts
  std::vector<Unit> units_;
  size_t granule_ = 0;  // the largest sub-group of any unit (staging: staging_elems of it)
  HostBuffer grad_stage_, out_stage_;
  std::vector<Window> win_;
  int next_win_ = 0;
  std::once_flag staging_once_;
  int64_t to_host_ = 0, to_device_ = 0;
  uint64_t out_ticket_[2] = {0, 0};  // the last copy out of each half of out_stage_
  OffloadClock clock_;
  // Last: destroyed first, so its ring is closed before the window it reads into is freed.
  std::unique_ptr<NvmeSwapper> nvme_;
};

}  // namespace

std::unique_ptr<OptimizerState> make_cpu_optimizer_state(Backend* be, const CpuOffloadOptions& o) {
  return std::make_unique<CpuOptimizerState>(be, o, nullptr);
}

std::unique_ptr<OptimizerState> make_nvme_optimizer_state(Backend* be, const CpuOffloadOptions& o,
                                                          std::unique_ptr<NvmeSwapper> swapper) {
  ZT_CHECK(swapper != nullptr);
  return std::make_unique<CpuOptimizerState>(be, o, std::move(swapper));
}

}  // namespace zt
