#include "offload/param_offload.h"

#include <chrono>
#include <future>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/timer.h"
#include "zero/host_buffer.h"

namespace zt {
namespace {

[[noreturn]] void throw_status(const absl::Status& s) {
  throw std::runtime_error(std::string(s.message()));
}

// Shards in host memory, or past max_in_cpu elements in files read through a small LRU pool of
// host buffers (written through: a buffer always equals its file).
class OffloadedParamStore final : public ParamStore {
 public:
  OffloadedParamStore(Backend* be, const ParamOffloadOptions& o, std::unique_ptr<NvmeSwapper> nvme)
      : be_(be), opt_(o), nvme_(std::move(nvme)) {}
  ~OffloadedParamStore() override { be_->wait_copy(last_ticket_); }  // none reads freed memory

  int add(size_t bytes, bool on_drive) override {
    ZT_CHECK(!on_drive || nvme_);
    Shard s;
    s.bytes = bytes;
    if (!on_drive) {
      s.host = HostBuffer(bytes, MemCategory::kParams, &host_, pin_with());
    } else {
      s.rounded = (bytes + NvmeSwapper::kAlign - 1) / NvmeSwapper::kAlign * NvmeSwapper::kAlign;
      auto h = nvme_->create(s.rounded);
      if (!h.ok()) throw_status(h.status());
      s.file = *h;
      host_.on_alloc(MemCategory::kNvme, s.rounded);
      buffer_bytes_ = std::max(buffer_bytes_, s.rounded);
    }
    shards_.push_back(std::move(s));
    return (int)shards_.size() - 1;
  }

  int64_t host_elems() const override {
    return nvme_ ? opt_.max_in_cpu : std::numeric_limits<int64_t>::max();
  }

  uint64_t load(int h, void* device_dst) override {
    Shard& s = shards_[h];
    const void* src = s.host.data();
    Slot* slot = nullptr;
    if (!src) {
      ZT_CHECK(writing_ == nullptr);
      Slot& b = slot_for(h);
      slot = &b;
      b.ahead = false;
      if (b.holder == h && b.reading.valid()) {  // read ahead: wait for that read only
        const absl::Status st = settle(b);
        if (!st.ok()) {
          b.holder = -1;
          throw_status(st);
        }
      }
      if (b.holder != h) {
        (void)settle(b);           // another shard's read ahead, no longer wanted here
        be_->wait_copy(b.ticket);  // its last copy to the device has read it
        b.holder = -1;             // holds nothing valid until the read succeeds
        Timer wait;
        const absl::Status st = nvme_->read(s.file, b.buf.data(), s.rounded, 0);
        clock_.add(OffloadClock::kNvmeRead, wait.ms());
        if (!st.ok()) throw_status(st);
        b.holder = h;
      }
      src = b.buf.data();
    }
    // Queued, not waited for: the host goes on queuing the kernels before the gather's use
    // instead of waiting for every kernel already queued, as a synchronous copy would.
    Timer t;
    s.ticket = be_->copy_to_device_async(device_dst, src, s.bytes);
    if (slot) slot->ticket = s.ticket;
    last_ticket_ = s.ticket;
    to_device_ += (int64_t)s.bytes;
    clock_.add(OffloadClock::kParamIn, t.ms());
    return s.ticket;
  }

  void* begin_write(int h) override {
    Shard& s = shards_[h];
    be_->wait_copy(s.ticket);  // the shard's last copy to the device has read it
    if (s.host.data()) return s.host.data();
    Slot& b = slot_for(h);
    (void)settle(b);  // a read ahead into it ends before the new value is written there
    b.ahead = false;
    be_->wait_copy(b.ticket);
    b.holder = -1;  // not a valid copy until end_write
    writing_ = &b;
    return b.buf.data();
  }
  void end_write(int h) override {
    Shard& s = shards_[h];
    if (s.host.data()) return;
    ZT_CHECK(writing_ != nullptr);
    Timer wait;
    const absl::Status st = nvme_->write(s.file, writing_->buf.data(), s.rounded, 0);
    clock_.add(OffloadClock::kNvmeWrite, wait.ms());
    if (!st.ok()) throw_status(st);
    writing_->holder = h;
    writing_ = nullptr;
  }

  Place place(int h) const override {
    if (shards_[h].host.data()) return Place::kHost;
    const int i = held(h);
    return i < 0 ? Place::kDrive : pool_[i].reading.valid() ? Place::kReading : Place::kHost;
  }
  bool read_done(int h) const override {
    const int i = held(h);
    return i >= 0 &&
           (!pool_[i].reading.valid() ||
            pool_[i].reading.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  }
  bool reads_ahead() const override { return nvme_ && opt_.read_ahead && opt_.buffer_count >= 3; }
  // Keeps shard h for its load: a buffer already holding it (or reading it) is marked read
  // ahead, else the shard is read into the least recently used buffer not read ahead, on the
  // swapper's I/O thread, while the caller goes on; load(h) then waits for that read only.
  // Buffers read ahead are kept until their load, and one buffer is always left for loads on
  // demand (which never take a buffer read ahead). A failed read is reported by load(h).
  bool prefetch(int h) override {
    ZT_CHECK(writing_ == nullptr);
    if (!reads_ahead()) return false;
    if (shards_[h].host.data()) return true;
    ensure_pool();
    const int kept = held(h);
    if (kept >= 0 && pool_[kept].ahead) return true;
    int ahead = 0;
    for (const Slot& b : pool_) ahead += b.ahead;
    if (ahead + 1 >= (int)pool_.size()) return false;
    if (kept >= 0) {
      pool_[kept].ahead = true;
      return true;
    }
    Slot& b = slot_for(-1);
    (void)settle(b);
    be_->wait_copy(b.ticket);  // its last copy to the device has read it
    b.holder = h;
    b.ahead = true;
    b.reading = nvme_->read_async(shards_[h].file, b.buf.data(), shards_[h].rounded, 0);
    return true;
  }
  void forget_reads_ahead() override {
    for (Slot& b : pool_) b.ahead = false;
  }

  const MemoryTracker& host_tracker() const override { return host_; }
  int64_t bytes_to_device() const override { return to_device_; }
  OffloadTimes times() const override { return clock_.times(); }
  int64_t nvme_bytes_read() const override { return nvme_ ? nvme_->bytes_read() : 0; }
  int64_t nvme_bytes_written() const override { return nvme_ ? nvme_->bytes_written() : 0; }

 private:
  struct Shard {
    size_t bytes = 0;
    HostBuffer host;      // resident in host memory
    uint64_t ticket = 0;  // its last copy to the device
    int file = -1;        // or on the drive
    size_t rounded = 0;   // file bytes (whole 4 KiB blocks)
  };
  struct Slot {
    HostBuffer buf;
    int holder = -1;  // the shard whose current value the buffer holds
    uint64_t used = 0;
    uint64_t ticket = 0;                // its last copy to the device
    std::future<absl::Status> reading;  // a read ahead into it, while valid
    bool ahead = false;                 // read ahead, not loaded yet
  };

  // Waits for a read ahead into b (the time counts as waiting for the drive); its status.
  absl::Status settle(Slot& b) {
    if (!b.reading.valid()) return absl::OkStatus();
    Timer wait;
    const absl::Status st = b.reading.get();
    clock_.add(OffloadClock::kNvmeRead, wait.ms());
    return st;
  }

  // The index of the buffer holding shard h (its value, or a read ahead of it), or -1.
  int held(int h) const {
    for (int i = 0; i < (int)pool_.size(); ++i)
      if (pool_[i].holder == h) return i;
    return -1;
  }

  // The pool is allocated at the first use, when every shard is known.
  void ensure_pool() {
    if (!pool_.empty()) return;
    pool_.resize((size_t)std::max<int64_t>(opt_.buffer_count, 1));
    for (Slot& b : pool_) {
      b.buf = HostBuffer(buffer_bytes_, MemCategory::kPinnedHost, &host_, pin_with(),
                         NvmeSwapper::kAlign);
      nvme_->register_buffer(b.buf.data(), b.buf.bytes());
    }
  }
  // The buffer holding shard h, else the least recently used one not holding a read ahead
  // (prefetch makes sure there is one).
  Slot& slot_for(int h) {
    ensure_pool();
    const int i = held(h);
    Slot* pick = i >= 0 ? &pool_[i] : nullptr;
    if (i < 0)
      for (Slot& b : pool_)
        if (!b.ahead && (!pick || b.used < pick->used)) pick = &b;
    ZT_CHECK(pick != nullptr);  // prefetch leaves a buffer not read ahead
    pick->used = ++lru_clock_;
    return *pick;
  }

  Backend* pin_with() const { return opt_.pin_memory ? be_ : nullptr; }
  Backend* be_;
  ParamOffloadOptions opt_;
  MemoryTracker host_;  // declared before the buffers it accounts
  std::vector<Shard> shards_;
  std::vector<Slot> pool_;
  Slot* writing_ = nullptr;
  size_t buffer_bytes_ = 0;
  int64_t to_device_ = 0;
  uint64_t lru_clock_ = 0;
  uint64_t last_ticket_ = 0;  // the last copy to the device
  OffloadClock clock_;
  // Last: destroyed first, so its ring is closed before the buffers it reads into are freed.
  std::unique_ptr<NvmeSwapper> nvme_;
};

}  // namespace

std::unique_ptr<ParamStore> make_host_param_store(Backend* be, bool pin_memory) {
  ParamOffloadOptions o;
  o.pin_memory = pin_memory;
  return std::make_unique<OffloadedParamStore>(be, o, nullptr);
}

std::unique_ptr<ParamStore> make_nvme_param_store(Backend* be, const ParamOffloadOptions& o,
                                                  std::unique_ptr<NvmeSwapper> swapper) {
  ZT_CHECK(swapper != nullptr);
  return std::make_unique<OffloadedParamStore>(be, o, std::move(swapper));
}

absl::Status check_param_buffers(const ParamOffloadOptions& o, int64_t largest_shard,
                                 size_t elem_bytes, int64_t host_bytes) {
  if (o.buffer_count < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.offload_param.buffer_count is ", o.buffer_count,
        ": NVMe parameter offload needs at least one buffer to read shards through; set it to "
        "1 or more (DeepSpeed's default: 5)"));
  if (o.buffer_size < largest_shard)
    return absl::InvalidArgumentError(
        absl::StrCat("zero_optimization.offload_param.buffer_size ", o.buffer_size,
                     " elements is smaller than this rank's largest parameter shard, ",
                     largest_shard, " elements; set buffer_size to at least ", largest_shard));
  const double need = (double)o.buffer_count * (double)o.buffer_size * (double)elem_bytes;
  if (host_bytes > 0 && need > (double)host_bytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.offload_param: buffer_count ", o.buffer_count, " x buffer_size ",
        o.buffer_size, " elements x ", elem_bytes, " bytes = ",
        format_bytes((int64_t)std::min(need, 9.0e18)), " of buffers is more than this machine's ",
        format_bytes(host_bytes), " of memory; lower buffer_count or buffer_size (", largest_shard,
        " elements is the least buffer_size that holds every shard)"));
  return absl::OkStatus();
}

}  // namespace zt
