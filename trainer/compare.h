// `zerotrain compare RUN_DIR...`: runs side by side, one row each, from what a training run
// leaves in its run directory (--run_dir): run.json (trainer/train.cc write_run_summary: the
// model, data and layout, peak memories) and metrics.jsonl (every step and validation).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zt {

struct CompareOptions {
  std::vector<std::string> run_dirs;
  bool markdown = false;         // a Markdown table (for docs/) instead of aligned columns
  bool allow_different = false;  // compare runs of different models or data
};

// The table: per run, its directory, model, stage and offload, micro-batch x T, peak device
// memory (the tracker's, max over ranks), peak host memory (maximum resident set, max over
// ranks), median step time (ms) and tokens/s over its steps, the exposed communication and
// offload (copies and optimizer) time of its traced steps (median ms; "-" when not traced:
// zerotrain.trace), and the final training and validation loss ("-" without validation). Errors
// (InvalidArgument): no run directory; one without run.json or metrics.jsonl (names it: did the run
// finish?), or with no step; runs whose model or training data differ (names both), unless
// allow_different.
absl::StatusOr<std::string> compare_runs(const CompareOptions& o);

}  // namespace zt
