// Metrics: one JSON object per line in <run dir>/metrics.jsonl (DESIGN.md "Files and
// formats"), flushed per line so a crashed run keeps what it measured.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace zt {

class MetricsWriter {
 public:
  // Creates dir/metrics.jsonl (a previous one becomes metrics.jsonl.prev), creating dir if
  // needed. Error names the path.
  static absl::StatusOr<MetricsWriter> open(const std::string& dir);
  MetricsWriter(MetricsWriter&& o) noexcept : f_(o.f_) { o.f_ = nullptr; }
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  ~MetricsWriter();
  void write(const nlohmann::json& line);

 private:
  explicit MetricsWriter(std::FILE* f) : f_(f) {}
  std::FILE* f_ = nullptr;
};

// "1h02m", "3m07s", "42s": a duration in seconds for progress lines.
std::string format_duration(double seconds);

}  // namespace zt
