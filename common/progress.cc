#include "common/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "common/memory.h"

namespace zt {
namespace {

std::atomic<bool> g_quiet{false};

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string eta(double s) {
  if (s >= 3600) return absl::StrFormat("%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", (int)(s / 60), (int)s % 60);
  return absl::StrFormat("%ds", (int)s);
}

// The terminal's columns (stderr's), 80 when it does not say.
size_t terminal_width() {
  winsize w{};
  return ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? w.ws_col : 80;
}

}  // namespace

void set_progress_quiet(bool quiet) { g_quiet = quiet; }

Progress::Progress(std::string label, int64_t total, bool enabled, bool items)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      on_(enabled && !g_quiet),
      items_(items),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() {
  if (!on_ || !shown_) return;
  if (done_ >= total_)
    show(true);
  else if (tty_)  // cut short (an error follows): leave the line as it was
    std::fputs("\n", stderr);
}

void Progress::update(int64_t done) {
  done_ = std::min(done, total_);
  if (!on_) return;
  const auto now = std::chrono::steady_clock::now();
  // A phase shows itself after a second; then a terminal redraws 10 times a second, a log gets
  // a line every 5 seconds.
  if (seconds(now - start_) < 1.0 || (shown_ && seconds(now - last_) < (tty_ ? 0.1 : 5.0))) return;
  last_ = now;
  show(false);
}

void Progress::show(bool final) {
  const double elapsed = std::max(1e-9, seconds(std::chrono::steady_clock::now() - start_));
  const double frac = (double)done_ / total_, rate = done_ / elapsed;
  const std::string amount =
      items_ ? absl::StrFormat("%d / %d, %.1f/s", done_, total_, rate)
             : absl::StrFormat("%s / %s, %s/s", format_bytes(done_), format_bytes(total_),
                               format_bytes((int64_t)rate));
  const std::string tail =
      final ? absl::StrFormat("done in %s", eta(elapsed))
            : absl::StrFormat("ETA %s", rate > 0 ? eta((total_ - done_) / rate) : "?");
  if (tty_) {
    // A line longer than the terminal wraps, and "\r" then redraws only its last row: the bar
    // shrinks from 30 columns to 10 (or goes), then the label is cut from the left.
    const std::string text = absl::StrFormat(" %3.0f%% %s, %s", 100 * frac, amount, tail);
    const int avail = (int)terminal_width() - 1 - (int)text.size();
    int bar_w = std::min(30, avail - (int)label_.size() - 3);
    if (bar_w < 10) bar_w = avail >= 3 + 10 + 20 ? 10 : 0;
    const int label_room = std::max(0, avail - (bar_w ? bar_w + 3 : 0));
    std::string label = label_;
    if ((int)label.size() > label_room)
      label = label_room > 3 ? "..." + label.substr(label.size() - (label_room - 3)) : "";
    std::string bar;
    if (bar_w) {
      const int fill = (int)(frac * bar_w);
      bar = " [" + std::string(fill, '=') + (fill < bar_w ? ">" : "") +
            std::string(std::max(0, bar_w - fill - 1), ' ') + "]";
    }
    std::fprintf(stderr, "\r%s%s%s\033[K%s", label.c_str(), bar.c_str(), text.c_str(),
                 final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s: %.0f%% %s, %s\n", label_.c_str(), 100 * frac, amount.c_str(),
                 tail.c_str());
  }
  std::fflush(stderr);
  shown_ = true;
}

}  // namespace zt
