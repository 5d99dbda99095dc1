// Metrics: one JSON object per line in <run dir>/metrics.jsonl (docs/architecture.md "Files and
// formats"), flushed per line so a crashed run keeps what it measured.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace zt {

class MetricsWriter {
 public:
  // Opens dir/metrics.jsonl for appending, creating dir if needed, and leaves what is there
  // until begin(). Error names the path.
  static absl::StatusOr<MetricsWriter> open(const std::string& dir);
  // Once the run knows where it starts: a fresh run (resumed_step < 0) starts a new file, the
  // previous one kept as metrics.jsonl.prev; a run resumed after step k continues the file,
  // keeping the lines of steps <= k and dropping later ones (written by the run that was
  // stopped after the save), so one log covers the whole job however often it resumes.
  absl::Status begin(int64_t resumed_step);
  MetricsWriter(MetricsWriter&& o) noexcept : f_(o.f_), path_(std::move(o.path_)) {
    o.f_ = nullptr;
  }
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  ~MetricsWriter();
  // Appends `line` and flushes it. A failed write (ENOSPC, EFBIG, EIO) is an error naming the
  // file and the reason (Internal), and the file is cut back to its last complete line.
  absl::Status write(const nlohmann::json& line);

 private:
  MetricsWriter(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  std::FILE* f_ = nullptr;
  std::string path_;
};

// "1h02m", "3m07s", "42s": a duration in seconds for progress lines.
std::string format_duration(double seconds);

}  // namespace zt
