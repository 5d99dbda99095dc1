// common/progress.h on a stream that is not a terminal (ctest's): silent for a phase that ends
// within a second and under --quiet; otherwise a plain line with percent, bytes, rate and ETA,
// and one at the end saying how long it took.
#include "common/progress.h"

#include <gtest/gtest.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace zt {
namespace {

// What `f` writes to stderr.
template <class F>
std::string stderr_of(F f) {
  const std::string path = ::testing::TempDir() + "/progress_stderr.txt";
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  std::FILE* file = std::fopen(path.c_str(), "w");
  dup2(fileno(file), STDERR_FILENO);
  f();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::fclose(file);
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

TEST(Progress, PlainLinesOffATerminalAndSilenceWhenQuickOrQuiet) {
  EXPECT_EQ(stderr_of([] {
              Progress p("quick", 2048);
              p.update(2048);
            }),
            "");
  const std::string slow = stderr_of([] {
    Progress p("loading", 2048);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    p.update(1024);
    p.update(2048);  // within 5 s of the last line: no line until the end
  });
  EXPECT_NE(slow.find("loading: 50% 1.00 KiB / 2.00 KiB, "), std::string::npos) << slow;
  EXPECT_NE(slow.find("/s, ETA "), std::string::npos) << slow;
  EXPECT_NE(slow.find("loading: 100% 2.00 KiB / 2.00 KiB, "), std::string::npos) << slow;
  EXPECT_NE(slow.find("done in 1s"), std::string::npos) << slow;
  EXPECT_EQ(std::count(slow.begin(), slow.end(), '\n'), 2) << slow;
  set_progress_quiet(true);
  EXPECT_EQ(stderr_of([] {
              Progress p("quiet", 10, true, /*items=*/true);
              std::this_thread::sleep_for(std::chrono::milliseconds(1100));
              p.update(5);
              p.update(10);
            }),
            "");
  set_progress_quiet(false);
}

// On a terminal 100 columns wide, a label too long for the line is cut from the left and the
// bar narrowed so the redrawn line never wraps (a wrapped line is redrawn only in its last row).
TEST(Progress, ALongLabelIsCutToTheTerminalsWidth) {
  int master = -1, slave = -1;
  winsize w{};
  w.ws_col = 100;
  w.ws_row = 24;
  if (openpty(&master, &slave, nullptr, nullptr, &w) != 0) GTEST_SKIP() << "no pseudo-terminal";
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(slave, STDERR_FILENO);
  const std::string label = "loading /a/very/long/directory/of/checkpoints/model.safetensors";
  {
    Progress p(label, 2048);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    p.update(2048);
  }
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(slave);
  std::string out(4096, '\0');
  out.resize(std::max<ssize_t>(0, read(master, out.data(), out.size())));
  close(master);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();  // onlcr
  const size_t last = out.rfind('\r');
  ASSERT_NE(last, std::string::npos) << out;
  std::string line = out.substr(last + 1);
  line = line.substr(0, line.find("\033[K"));
  EXPECT_LE(line.size(), 99u) << line;
  EXPECT_EQ(line.rfind("...", 0), 0u) << line;
  EXPECT_NE(line.find("safetensors [==========] 100%"), std::string::npos) << line;
  EXPECT_NE(line.find("100%"), std::string::npos) << line;
}

}  // namespace
}  // namespace zt
