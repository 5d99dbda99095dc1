#include "trainer/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/status.h"

namespace zt {

absl::StatusOr<MetricsWriter> MetricsWriter::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot create run directory '", dir, "': ", ec.message(), "; pass a writable --run-dir"));
  const std::string path = dir + "/metrics.jsonl";
  std::FILE* f = std::fopen(path.c_str(), "a");  // writable, and nothing changed yet
  if (!f)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write '", path, "': ", std::strerror(errno), "; pass a writable --run-dir"));
  return MetricsWriter(f, path);
}

namespace {
// The log's lines as JSON objects, in order; a torn or foreign line is skipped.
template <class F>
void for_each_line(const std::string& path, F&& f) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) f(line, j);
  }
}
// The step a line is about: a step's, a validation's, or the end of training's.
int64_t step_of(const nlohmann::json& j) {
  for (const char* key : {"step", "end_of_training"})
    if (j.contains(key) && j[key].is_number_integer()) return j[key].get<int64_t>();
  return -1;
}
}  // namespace

bool MetricsWriter::ended(int64_t steps) const {
  bool ended = false;
  for_each_line(path_, [&](const std::string&, const nlohmann::json& j) {
    ended |= j.contains("end_of_training") && step_of(j) == steps;
  });
  return ended;
}

absl::Status MetricsWriter::begin(int64_t resumed_step, bool at_end) {
  std::fclose(f_);
  f_ = nullptr;
  std::error_code ec;
  if (resumed_step < 0) {
    // The earlier run's log is kept aside (not an empty file open() just made).
    if (std::filesystem::exists(path_, ec) && std::filesystem::file_size(path_, ec) > 0)
      std::filesystem::rename(path_, path_ + ".prev", ec);
  } else {
    std::string kept;
    for_each_line(path_, [&](const std::string& line, const nlohmann::json& j) {
      const int64_t step = step_of(j);
      // From after the save (the resumed run writes its own), or its end logged again.
      if (step > resumed_step || (at_end && step == resumed_step && !j.contains("loss"))) return;
      kept += line + "\n";  // (a torn last line is dropped)
    });
    ZT_RETURN_IF_ERROR(write_file_atomic(path_, kept));  // the old log stays until this is whole
  }
  f_ = std::fopen(path_.c_str(), resumed_step < 0 ? "w" : "a");
  if (!f_)
    return absl::InternalError(
        absl::StrCat("cannot write '", path_, "': ", std::strerror(errno ? errno : EIO)));
  return absl::OkStatus();
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

absl::Status MetricsWriter::write(const nlohmann::json& line) {
  return append_line(f_, path_, line.dump() + "\n");
}

nlohmann::json StepRecord::json() const {
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"step_ms", step_ms},
                      {"tokens_per_s", tokens_per_s},
                      {"forward_ms", forward_ms},
                      {"backward_ms", backward_ms},
                      {"optimizer_ms", optimizer_ms},
                      {"comm_wait_ms", comm_wait_ms},
                      {"loss_scale", loss_scale},
                      {"skipped", skipped}};
  if (offload)
    j["offload"] = {{"grad_out_ms", offload->grad_out_ms},
                    {"cpu_step_ms", offload->cpu_step_ms},
                    {"param_in_ms", offload->param_in_ms},
                    {"nvme_read_ms", offload->nvme_read_ms},
                    {"nvme_write_ms", offload->nvme_write_ms}};
  if (trace) {
    const double ms = trace->step_ms > 0 ? trace->step_ms : 1;
    j["trace"] = {{"exposed_comm_ms", trace->exposed_comm_ms},
                  {"exposed_copy_ms", trace->exposed_copy_ms},
                  {"exposed_optimizer_ms", trace->exposed_optimizer_ms},
                  {"exposed_comm_share", trace->exposed_comm_ms / ms},
                  {"exposed_copy_share", trace->exposed_copy_ms / ms},
                  {"exposed_optimizer_share", trace->exposed_optimizer_ms / ms}};
  }
  return j;
}

namespace {

class ConsoleSink final : public MetricsSink {
 public:
  ConsoleSink(int64_t breakdown_every, bool show_recompute)
      : every_(breakdown_every), recompute_(show_recompute) {}

  absl::Status step(const StepRecord& s) override {
    std::printf(
        "step %4lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f ms | %.0f tok/s | "
        "ETA %s%s\n",
        (long long)s.step, (long long)s.steps, s.loss, s.lr, s.grad_norm, s.step_ms, s.tokens_per_s,
        format_duration(s.eta_s).c_str(),
        s.skipped
            ? absl::StrFormat(" | fp16 overflow: step skipped, loss scale %g", s.next_loss_scale)
                  .c_str()
            : "");
    if (every_ > 0 && s.step % every_ == 0) {
      std::printf(
          "  time (ms) | forward %.1f | backward %.1f | communication wait %.1f | "
          "optimizer %.1f",
          s.forward_ms, s.backward_ms, s.comm_wait_ms, s.optimizer_ms);
      if (recompute_) std::printf(" | recompute (in backward) %.1f", s.recompute_ms);
      std::printf("\n");
      if (s.offload) {  // within the phases above (gradients move out during the backward)
        const OffloadTimes& o = *s.offload;
        std::printf(
            "  offload (ms) | gradients out %.1f | CPU step %.1f | parameters in %.1f | NVMe "
            "read wait %.1f | NVMe write wait %.1f\n",
            o.grad_out_ms, o.cpu_step_ms, o.param_in_ms, o.nvme_read_ms, o.nvme_write_ms);
      }
    }
    if (s.trace) {  // exposed: on the training thread, not hidden behind compute
      const TraceSummary& t = *s.trace;
      const double pct = t.step_ms > 0 ? 100 / t.step_ms : 0;
      std::printf(
          "  traced (rank 0, ms, share of the step) | exposed communication %.1f (%.1f%%) | "
          "copies %.1f (%.1f%%) | optimizer %.1f (%.1f%%)\n",
          t.exposed_comm_ms, t.exposed_comm_ms * pct, t.exposed_copy_ms, t.exposed_copy_ms * pct,
          t.exposed_optimizer_ms, t.exposed_optimizer_ms * pct);
    }
    std::fflush(stdout);
    return absl::OkStatus();
  }

  absl::Status validation(int64_t step, double loss) override {
    std::printf("step %lld | val loss %.4f\n", (long long)step, loss);
    return absl::OkStatus();
  }

 private:
  int64_t every_;
  bool recompute_;
};

}  // namespace

std::unique_ptr<MetricsSink> make_console_sink(int64_t breakdown_every, bool show_recompute) {
  return std::make_unique<ConsoleSink>(breakdown_every, show_recompute);
}

std::string format_duration(double seconds) {
  const long s = seconds < 0 ? 0 : static_cast<long>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

absl::Status ScalarMonitor::step(const StepRecord& s) {
  const int64_t x = s.step * batch_;
  ZT_RETURN_IF_ERROR(scalar("Train/Samples/train_loss", x, s.loss));
  ZT_RETURN_IF_ERROR(scalar("Train/Samples/lr", x, s.lr));
  if (fp16_) ZT_RETURN_IF_ERROR(scalar("Train/Samples/loss_scale", x, s.loss_scale));
  ZT_RETURN_IF_ERROR(scalar("Train/Samples/grad_norm", x, s.grad_norm));
  ZT_RETURN_IF_ERROR(scalar("Train/Samples/tokens_per_s", x, s.tokens_per_s));
  if (breakdown_) {
    ZT_RETURN_IF_ERROR(scalar("Train/Samples/elapsed_time_ms_forward", x, s.forward_ms));
    ZT_RETURN_IF_ERROR(scalar("Train/Samples/elapsed_time_ms_backward", x, s.backward_ms));
    ZT_RETURN_IF_ERROR(scalar("Train/Samples/elapsed_time_ms_step", x, s.optimizer_ms));
  }
  return end_of_rows();
}

absl::Status ScalarMonitor::validation(int64_t step, double loss) {
  ZT_RETURN_IF_ERROR(scalar("Train/Samples/val_loss", step * batch_, loss));
  return end_of_rows();
}

}  // namespace zt
