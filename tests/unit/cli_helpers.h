// For tests that run the zerotrain binary: a directory per test with random token shards, a
// shell command's exit code and output, and the values a run wrote to metrics.jsonl.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/shard.h"

namespace zt::test {

// A fresh, empty directory for the running test: TMP/zt_<prefix>_<pid>_<test name>.
inline std::filesystem::path test_dir(const std::string& prefix) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() /
                                  ("zt_" + prefix + "_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// `n` random tokens below `vocab` (mt19937 seeded `seed`) written as each llm.c shard of `names`.
inline ::testing::AssertionResult write_random_shards(const std::filesystem::path& dir,
                                                      const std::vector<std::string>& names,
                                                      size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> toks(n);
  for (auto& t : toks) t = rng() % vocab;
  for (const std::string& name : names)
    if (!write_shard((dir / name).string(), toks, vocab).ok())
      return ::testing::AssertionFailure() << "cannot write " << (dir / name);
  return ::testing::AssertionSuccess();
}

struct Result {
  int code;         // exit code, or 128 + signal
  std::string out;  // stdout and stderr together
};

inline Result run_shell(const std::string& cmd) {
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// The framed sample of a `zerotrain sample` output ("sample:\n---\n..."): on a loaded machine the
// weights' loading or initialisation takes over a second and shows progress lines before it.
inline std::string sample_of(const std::string& out) {
  const size_t at = out.find("sample:\n---\n");
  return at == std::string::npos ? out : out.substr(at);
}

// `key` of every line of run_dir/metrics.jsonl that has it, in order.
inline std::vector<double> metric_values(const std::string& run_dir, const std::string& key) {
  std::vector<double> v;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains(key)) v.push_back(j[key]);
  }
  return v;
}

}  // namespace zt::test
