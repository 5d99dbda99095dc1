#include "common/trace.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/file.h"

namespace zt {
namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* track_name(Track t) {
  switch (t) {
    case Track::kCompute: return "compute";
    case Track::kCommunication: return "communication";
    case Track::kDeviceToHost: return "device->host";
    case Track::kHostToDevice: return "host->device";
    case Track::kOptimizer: return "optimizer";
    case Track::kNvmeRead: return "nvme read";
    case Track::kNvmeWrite: return "nvme write";
    case Track::kDelayedUpdate: return "delayed update";
    case Track::kCount: break;
  }
  return "?";
}

Tracer& Tracer::instance() {
  static Tracer t;
  return t;
}

void Tracer::configure(int rank, int64_t first, int64_t last) {
  std::lock_guard<std::mutex> lk(mu_);
  rank_ = rank, first_ = first, last_ = last;
  origin_ns_ = steady_ns();
  events_.clear();
  windows_.clear();
}

double Tracer::now_us() const { return (steady_ns() - origin_ns_) / 1e3; }

void Tracer::begin_step(int64_t step) {
  if (!configured() || step < first_ || step > last_) return;
  std::lock_guard<std::mutex> lk(mu_);
  training_thread_ = std::this_thread::get_id();
  step_start_us_ = now_us();
  step_first_event_ = events_.size();
  recording_.store(true, std::memory_order_relaxed);
}

TraceSummary Tracer::end_step(int64_t step) {
  if (!recording()) return {};
  recording_.store(false, std::memory_order_relaxed);
  const double end = now_us();
  add(Track::kCompute, "step", (int)step, step_start_us_, end - step_start_us_);
  std::lock_guard<std::mutex> lk(mu_);
  windows_.emplace_back(step_start_us_, end);
  TraceSummary s{step, (end - step_start_us_) / 1e3};
  for (size_t i = step_first_event_; i < events_.size(); ++i) {
    const Event& e = events_[i];
    if (!e.training_thread) continue;
    const double ms = e.dur_us / 1e3;
    switch (e.track) {
      case Track::kCompute:
        if (std::string_view(e.name) == "wait for communication") s.exposed_comm_ms += ms;
        break;
      case Track::kDeviceToHost:
      case Track::kHostToDevice: s.exposed_copy_ms += ms; break;
      case Track::kOptimizer:
      case Track::kNvmeRead:
      case Track::kNvmeWrite: s.exposed_optimizer_ms += ms; break;
      default: break;
    }
  }
  return s;
}

void Tracer::add(Track t, const char* name, int index, double start_us, double dur_us,
                 int64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  events_.push_back({t, name, index, start_us, std::max(0.0, dur_us), bytes,
                     std::this_thread::get_id() == training_thread_});
}

absl::Status Tracer::write(const std::string& dir) const {
  std::lock_guard<std::mutex> lk(mu_);
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"ph", "M"},
                {"name", "process_name"},
                {"pid", rank_},
                {"args", {{"name", absl::StrCat("rank ", rank_)}}}});
  for (int t = 0; t < (int)Track::kCount; ++t) {
    ev.push_back({{"ph", "M"},
                  {"name", "thread_name"},
                  {"pid", rank_},
                  {"tid", t},
                  {"args", {{"name", track_name(static_cast<Track>(t))}}}});
    ev.push_back({{"ph", "M"},
                  {"name", "thread_sort_index"},
                  {"pid", rank_},
                  {"tid", t},
                  {"args", {{"sort_index", t}}}});
  }
  for (const Event& e : events_) {
    // Inside the step it began in: work a background thread finishes after its step ended
    // (a collective, the delayed update) is cut at the step's end.
    const auto w = std::find_if(windows_.begin(), windows_.end(), [&](const auto& w) {
      return e.start_us >= w.first - 1 && e.start_us <= w.second;
    });
    if (w == windows_.end()) continue;
    const double start = std::max(e.start_us, w->first);
    const double end = std::min(e.start_us + e.dur_us, w->second);
    nlohmann::json j = {{"ph", "X"},
                        {"name", e.index >= 0 ? absl::StrCat(e.name, " ", e.index) : e.name},
                        {"cat", track_name(e.track)},
                        {"pid", rank_},
                        {"tid", (int)e.track},
                        {"ts", start},
                        {"dur", std::max(0.0, end - start)}};
    if (e.bytes >= 0) j["args"] = {{"bytes", e.bytes}};
    ev.push_back(std::move(j));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path =
      (std::filesystem::path(dir) / absl::StrCat("trace_rank", rank_, ".json")).string();
  return write_file_atomic(path,
                           nlohmann::json{{"traceEvents", ev}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace zt
