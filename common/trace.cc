#include "common/trace.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
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
    case Track::kOptimizerThread: return "optimizer thread";
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
  if (!configured() || step < first_ - 1 || step > last_) return;
  std::lock_guard<std::mutex> lk(mu_);
  training_thread_ = std::this_thread::get_id();
  recording_.store(true, std::memory_order_relaxed);  // from the step before the first
  if (step < first_) return;
  in_step_ = true;
  step_ = step;
  step_start_us_ = now_us();
  step_first_event_ = events_.size();
}

TraceSummary Tracer::end_step(int64_t step) {
  double start;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!in_step_ || step != step_) return {};
    in_step_ = false;
    start = step_start_us_;
  }
  const double end = now_us();
  if (step == last_) recording_.store(false, std::memory_order_relaxed);
  add(Track::kCompute, "step", (int)step, start, end - start);
  std::lock_guard<std::mutex> lk(mu_);
  windows_.emplace_back(start, end);
  TraceSummary s{step, (end - start) / 1e3};
  for (size_t i = step_first_event_; i < events_.size(); ++i) {
    const Event& e = events_[i];
    if (e.thread != training_thread_) continue;
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
  events_.push_back(
      {t, name, index, start_us, std::max(0.0, dur_us), bytes, std::this_thread::get_id()});
}

absl::Status Tracer::write(const std::string& dir) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (windows_.empty()) return absl::OkStatus();  // no traced step ran: no file
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"ph", "M"},
                {"name", "process_name"},
                {"pid", rank_},
                {"args", {{"name", absl::StrCat("rank ", rank_)}}}});
  // One tid per (track, thread): track t's own tid t goes to the training thread where it works
  // on t, else to the first thread that does; any other thread gets a tid after kCount.
  std::map<std::pair<int, std::thread::id>, int> tids;
  std::vector<int> threads_on(static_cast<int>(Track::kCount), 0);
  auto overlaps = [](const Event& e, const std::pair<double, double>& w) {
    return e.dur_us > 0 ? e.start_us < w.second && e.start_us + e.dur_us > w.first
                        : e.start_us >= w.first - 1 && e.start_us <= w.second;
  };
  auto drawn = [&](const Event& e) {
    return std::any_of(windows_.begin(), windows_.end(), [&](auto& w) { return overlaps(e, w); });
  };
  for (const Event& e : events_)
    if (e.thread == training_thread_ && threads_on[static_cast<int>(e.track)] == 0 && drawn(e)) {
      tids[{static_cast<int>(e.track), e.thread}] = static_cast<int>(e.track);
      threads_on[static_cast<int>(e.track)] = 1;
    }
  auto name_track = [&](int tid, int track, int nth) {
    const std::string name = track_name(static_cast<Track>(track));
    ev.push_back({{"ph", "M"},
                  {"name", "thread_name"},
                  {"pid", rank_},
                  {"tid", tid},
                  {"args", {{"name", nth ? absl::StrCat(name, " (", nth + 1, ")") : name}}}});
    ev.push_back({{"ph", "M"},
                  {"name", "thread_sort_index"},
                  {"pid", rank_},
                  {"tid", tid},
                  {"args", {{"sort_index", track * 16 + nth}}}});
  };
  for (int t = 0; t < (int)Track::kCount; ++t) name_track(t, t, 0);
  auto tid_of = [&](const Event& e) {
    const int t = static_cast<int>(e.track);
    auto [it, fresh] = tids.try_emplace({t, e.thread}, t);
    if (fresh && threads_on[t]++ > 0) {
      it->second = static_cast<int>(Track::kCount) + static_cast<int>(tids.size());
      name_track(it->second, t, threads_on[t] - 1);
    }
    return it->second;
  };
  for (const Event& e : events_) {
    // One piece per traced step the event overlaps, cut at the step's edges; what falls
    // between or before the traced steps is left out.
    const double end = e.start_us + e.dur_us;
    for (const auto& [w0, w1] : windows_) {
      if (!overlaps(e, {w0, w1})) continue;
      const double a = std::max(e.start_us, w0), b = std::min(end, w1);
      nlohmann::json j = {{"ph", "X"},
                          {"name", e.index >= 0 ? absl::StrCat(e.name, " ", e.index) : e.name},
                          {"cat", track_name(e.track)},
                          {"pid", rank_},
                          {"tid", tid_of(e)},
                          {"ts", a},
                          {"dur", std::max(0.0, b - a)}};
      if (e.bytes >= 0) j["args"]["bytes"] = e.bytes;
      if (a > e.start_us || b < end) j["args"]["cut_at_step_edge"] = true;
      ev.push_back(std::move(j));
      if (e.dur_us == 0) break;
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path =
      (std::filesystem::path(dir) / absl::StrCat("trace_rank", rank_, ".json")).string();
  return write_file_atomic(path,
                           nlohmann::json{{"traceEvents", ev}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace zt
