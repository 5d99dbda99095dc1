// DeepSpeed's csv_monitor as a MetricsSink (trainer/metrics.h make_csv_sink).
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file.h"
#include "common/status.h"
#include "trainer/metrics.h"

namespace zt {
namespace {

// x in its shortest form that reads back as the same double (as Python's repr writes it).
std::string shortest(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

class CsvSink final : public ScalarMonitor {
 public:
  CsvSink(std::string dir, int64_t batch, bool fp16, bool breakdown, int64_t resumed_step)
      : ScalarMonitor(batch, fp16, breakdown), dir_(std::move(dir)), resumed_step_(resumed_step) {}
  ~CsvSink() override {
    for (auto& [tag, file] : files_) std::fclose(file.f);
  }

 private:
  // The row "x,value" into the tag's file, opened (and started, or cut back to the resumed
  // step) at its first row.
  absl::Status scalar(const std::string& tag, int64_t x, double value) override {
    File& file = files_[tag];
    if (!file.f) {
      file.path = dir_ + "/" + absl::StrReplaceAll(tag, {{"/", "_"}, {" ", "_"}}) + ".csv";
      ZT_ASSIGN_OR_RETURN(file.f, start(tag, file.path));
    }
    return append_line(file.f, file.path, absl::StrCat(x, ",", shortest(value), "\n"));
  }

  absl::StatusOr<std::FILE*> start(const std::string& tag, const std::string& path) {
    const std::string header = "step," + tag.substr(tag.rfind('/') + 1) + "\n";
    std::string kept = header;
    if (resumed_step_ >= 0) {  // the rows up to the resumed step's samples
      std::ifstream in(path);
      std::string line;
      for (bool first = true; std::getline(in, line); first = false) {
        if (first) continue;  // its header
        int64_t x = 0;
        const auto r = std::from_chars(line.data(), line.data() + line.size(), x);
        if (r.ec == std::errc() && *r.ptr == ',' && x <= resumed_step_ * batch_)
          kept += line + "\n";
      }
    }
    ZT_RETURN_IF_ERROR(write_file_atomic(path, kept));
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (!f)
      return absl::InternalError(absl::StrCat("csv_monitor: cannot write '", path,
                                              "': ", std::strerror(errno ? errno : EIO)));
    return f;
  }

  std::string dir_;
  int64_t resumed_step_;
  struct File {
    std::FILE* f = nullptr;
    std::string path;
  };
  std::map<std::string, File> files_;  // by tag, opened at its first row
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsSink>> make_csv_sink(const std::string& dir,
                                                           int64_t train_batch_size, bool fp16,
                                                           bool breakdown, int64_t resumed_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat("csv_monitor: cannot create '", dir,
                                                   "': ", ec.message(),
                                                   "; give a writable csv_monitor.output_path"));
  return std::unique_ptr<MetricsSink>(
      new CsvSink(dir, train_batch_size, fp16, breakdown, resumed_step));
}

}  // namespace zt
