// Progress of a long phase (loading weights, tokenizing, saving, resuming, exporting) on
// stderr: on a terminal one line redrawn in place, "label [=====>   ] 45% 1.20 GiB / 2.67 GiB,
// 310 MiB/s, ETA 5s", a long label cut from the left ("...t/model.safetensors") to fit the
// terminal's width; elsewhere (a log file, a pipe) a plain line every 5 seconds and one at the
// end; nothing with --quiet (set_progress_quiet) or for phases that
// end within a second. Only one rank reports (the caller passes enabled = rank 0).
//
// No Debian package offers a C++ progress bar (indicators and the like are header-only
// GitHub projects), and nothing is copied into this repository, so this is our own, small.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace zt {

// --quiet: every Progress stays silent.
void set_progress_quiet(bool quiet);

class Progress {
 public:
  // `total` units of work (bytes, or items with items = true), reported under `label`.
  Progress(std::string label, int64_t total, bool enabled = true, bool items = false);
  ~Progress();  // finishes the line if something was shown
  // `done` of total so far (monotonic); redraws at most 10 times a second.
  void update(int64_t done);
  void add(int64_t n) { update(done_ + n); }

 private:
  void show(bool final);
  std::string label_;
  int64_t total_, done_ = 0;
  bool on_, items_, tty_, shown_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace zt
