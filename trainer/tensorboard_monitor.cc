// DeepSpeed's tensorboard monitor as a MetricsSink (trainer/metrics.h make_tensorboard_sink).
#include <isa-l/crc.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/status.h"
#include "tensorboard_event.pb-c.h"  // protoc-c
#include "trainer/metrics.h"

namespace zt {
namespace {

// A record's checksum as TFRecord files carry it: CRC32C (ISA-L's crc32_iscsi with the
// customary all-ones start and final inversion), rotated right by 15 and offset, so that a CRC
// of data holding CRCs does not degenerate.
uint32_t masked_crc32c(const std::string& bytes) {
  const uint32_t crc =
      ~crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(bytes.data())),
                   static_cast<int>(bytes.size()), 0xFFFFFFFFu);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// One TFRecord: the length (uint64, little-endian), its masked CRC, the data, its masked CRC.
std::string record(const std::string& data) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((uint64_t)data.size() >> (8 * i));
  auto le32 = [](uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
    return s;
  };
  return absl::StrCat(len, le32(masked_crc32c(len)), data, le32(masked_crc32c(data)));
}

class TensorBoardSink final : public ScalarMonitor {
 public:
  TensorBoardSink(std::FILE* f, std::string path, int64_t batch, bool fp16, bool breakdown,
                  std::function<double()> clock)
      : ScalarMonitor(batch, fp16, breakdown),
        f_(f),
        path_(std::move(path)),
        clock_(std::move(clock)) {}
  ~TensorBoardSink() override { std::fclose(f_); }

  absl::Status start() {
    Zt__Tensorboard__Event e = ZT__TENSORBOARD__EVENT__INIT;
    e.wall_time = clock_();
    e.what_case = ZT__TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    std::string version = "brain.Event:2";
    e.file_version = version.data();
    return write(e);
  }

 private:
  absl::Status scalar(const std::string& tag, int64_t x, double value) override {
    std::string name = tag;
    Zt__Tensorboard__SummaryValue v = ZT__TENSORBOARD__SUMMARY_VALUE__INIT;
    v.tag = name.data();
    v.value_case = ZT__TENSORBOARD__SUMMARY_VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = static_cast<float>(value);
    Zt__Tensorboard__SummaryValue* values[] = {&v};
    Zt__Tensorboard__Summary summary = ZT__TENSORBOARD__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = values;
    Zt__Tensorboard__Event e = ZT__TENSORBOARD__EVENT__INIT;
    e.wall_time = clock_();
    e.step = x;
    e.what_case = ZT__TENSORBOARD__EVENT__WHAT_SUMMARY;
    e.summary = &summary;
    return write(e);
  }

  absl::Status write(const Zt__Tensorboard__Event& e) {
    std::string data(zt__tensorboard__event__get_packed_size(&e), '\0');
    zt__tensorboard__event__pack(&e, reinterpret_cast<uint8_t*>(data.data()));
    return append_line(f_, path_, record(data));  // flushed; a failed write cut back
  }

  std::FILE* f_;
  std::string path_;
  std::function<double()> clock_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsSink>> make_tensorboard_sink(const std::string& dir,
                                                                   int64_t train_batch_size,
                                                                   bool fp16, bool breakdown,
                                                                   std::function<double()> clock) {
  if (!clock)
    clock = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat("tensorboard: cannot create '", dir,
                                                   "': ", ec.message(),
                                                   "; give a writable tensorboard.output_path"));
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const std::string path =
      absl::StrFormat("%s/events.out.tfevents.%010d.%s", dir, static_cast<int64_t>(clock()), host);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f)
    return absl::InvalidArgumentError(absl::StrCat("tensorboard: cannot write '", path,
                                                   "': ", std::strerror(errno),
                                                   "; give a writable tensorboard.output_path"));
  auto sink = std::make_unique<TensorBoardSink>(f, path, train_batch_size, fp16, breakdown,
                                                std::move(clock));
  ZT_RETURN_IF_ERROR(sink->start());
  return std::unique_ptr<MetricsSink>(std::move(sink));
}

}  // namespace zt
