// common/progress.h on a stream that is not a terminal (ctest's): silent for a phase that ends
// within a second and under --quiet; otherwise a plain line with percent, bytes, rate and ETA,
// and one at the end saying how long it took.
#include "common/progress.h"

#include <gtest/gtest.h>
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

}  // namespace
}  // namespace zt
