// common/trace.h on hand-placed events: what write() keeps, cuts and splits, which track (tid)
// each thread's events go to, and what a step's summary counts as exposed.
#include "common/trace.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace zt {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// From another thread than the caller's (the training thread's).
template <class F>
void on_other_thread(F f) {
  std::thread t(f);
  t.join();
}

nlohmann::json written(const std::string& dir) {
  std::ifstream in(dir + "/trace_rank0.json");
  return nlohmann::json::parse(in)["traceEvents"];
}

// Steps 2 and 3 traced. A background event begun in step 1 (recording starts a step early) and
// running past step 3 is drawn as one piece per traced step, each cut at the step's edges;
// partly overlapping NVMe waits of two threads go to two tracks, the training thread's on the
// track's own; the step's exposed optimizer time is the training thread's wait alone; a step
// left without end() (an error returned) is ended by TracedStep, and recording stops after the
// last traced step.
TEST(Tracer, SplitsAtStepEdgesAndGivesEachThreadItsTrack) {
  Tracer& tr = Tracer::instance();
  tr.configure(0, 2, 3);
  EXPECT_FALSE(tr.recording());
  tr.begin_step(1);
  EXPECT_TRUE(tr.recording()) << "from the step before the first traced one";
  const double long_start = tr.now_us();
  on_other_thread([&] { tr.add(Track::kOptimizerThread, "delayed update", -1, long_start, 1e12); });
  sleep_ms(2);
  EXPECT_EQ(tr.end_step(1).step, 0) << "step 1 is not traced";

  tr.begin_step(2);
  sleep_ms(6);
  const double m = tr.now_us();
  tr.add(Track::kNvmeRead, "read", -1, m - 4000, 3000);  // the training thread's wait, 3 ms
  on_other_thread([&] { tr.add(Track::kNvmeRead, "read", -1, m - 3500, 3000); });
  const TraceSummary s2 = tr.end_step(2);
  EXPECT_EQ(s2.step, 2);
  EXPECT_NEAR(s2.exposed_optimizer_ms, 3.0, 1e-9) << "the other thread's wait is not exposed";
  {
    TracedStep step3(3);
    sleep_ms(2);
  }  // left early: the destructor ends it
  EXPECT_FALSE(tr.recording());
  EXPECT_EQ(tr.end_step(3).step, 0) << "already ended";

  const std::string dir = ::testing::TempDir() + "/trace_test";
  ASSERT_TRUE(tr.write(dir).ok());
  std::map<int, std::string> track;  // tid -> name
  std::vector<std::pair<double, double>> steps;
  std::vector<nlohmann::json> delayed, reads;
  for (const auto& e : written(dir)) {
    if (e["ph"] == "M" && e["name"] == "thread_name") track[e["tid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    if (name.rfind("step ", 0) == 0)
      steps.emplace_back(e["ts"], e["ts"].get<double>() + e["dur"].get<double>());
    if (name == "delayed update") delayed.push_back(e);
    if (name == "read") reads.push_back(e);
  }
  ASSERT_EQ(steps.size(), 2u);
  ASSERT_EQ(delayed.size(), 2u) << "one piece per traced step";
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(delayed[i]["ts"].get<double>(), steps[i].first);
    EXPECT_NEAR(delayed[i]["ts"].get<double>() + delayed[i]["dur"].get<double>(), steps[i].second,
                1e-6);
    EXPECT_TRUE(delayed[i]["args"]["cut_at_step_edge"].get<bool>());
  }
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_NE(reads[0]["tid"], reads[1]["tid"]) << "two threads, two tracks";
  EXPECT_EQ(track[reads[0]["tid"]], "nvme read") << "the training thread's, first";
  EXPECT_EQ(track[reads[1]["tid"]], "nvme read (2)");
  EXPECT_FALSE(reads[0].contains("args")) << "inside its step: not cut";
}

}  // namespace
}  // namespace zt
