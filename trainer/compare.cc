#include "trainer/compare.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/memory.h"
#include "common/status.h"

namespace zt {
namespace {

using nlohmann::json;

struct Run {
  std::string dir;
  json info;  // run.json
  std::vector<double> step_ms, tokens_per_s, exposed_comm_ms, exposed_offload_ms;
  double loss = NAN, val_loss = NAN;
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

absl::StatusOr<Run> load(const std::string& dir) {
  Run r;
  r.dir = dir;
  const std::string run_json = (std::filesystem::path(dir) / "run.json").string();
  const std::string metrics = (std::filesystem::path(dir) / "metrics.jsonl").string();
  for (const std::string& f : {run_json, metrics})
    if (!std::filesystem::exists(f))
      return absl::InvalidArgumentError(
          absl::StrCat("'", dir, "' has no ", std::filesystem::path(f).filename().string(),
                       ": not a run directory of a finished `zerotrain train` (its --run_dir)?"));
  ZT_ASSIGN_OR_RETURN(const std::string info, read_file(run_json, "run summary"));
  r.info = json::parse(info, nullptr, false);
  if (!r.info.is_object())
    return absl::InvalidArgumentError(absl::StrCat("'", run_json, "' is not JSON"));
  ZT_ASSIGN_OR_RETURN(const std::string text, read_file(metrics, "metrics"));
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    ++line_no;
    const json j = json::parse(line.begin(), line.end(), nullptr, false);
    if (!j.is_object())
      return absl::InvalidArgumentError(
          absl::StrCat("'", metrics, "' line ", line_no, " is not a JSON object"));
    if (j.contains("val_loss")) r.val_loss = j["val_loss"].get<double>();
    if (!j.contains("step_ms")) continue;
    r.step_ms.push_back(j["step_ms"].get<double>());
    r.tokens_per_s.push_back(j.value("tokens_per_s", NAN));
    r.loss = j.value("loss", NAN);
    if (j.contains("trace")) {  // a traced step (zerotrain.trace)
      const json& t = j["trace"];
      r.exposed_comm_ms.push_back(t.value("exposed_comm_ms", NAN));
      r.exposed_offload_ms.push_back(t.value("exposed_copy_ms", NAN) +
                                     t.value("exposed_optimizer_ms", NAN));
    }
  }
  if (r.step_ms.empty())
    return absl::InvalidArgumentError(absl::StrCat("'", metrics, "' holds no training step"));
  return r;
}

std::string layout(const json& i) {
  std::string s = absl::StrCat("stage ", i.value("stage", 0));
  if (i.value("offload_optimizer", "none") != "none")
    absl::StrAppend(&s, ", optimizer ", i.value("offload_optimizer", ""));
  if (i.value("offload_param", "none") != "none")
    absl::StrAppend(&s, ", params ", i.value("offload_param", ""));
  if (i.value("delayed_param_update", false)) absl::StrAppend(&s, ", delayed update");
  return s;
}

std::string ms(double v) { return std::isnan(v) ? "-" : absl::StrFormat("%.0f", v); }
std::string loss(double v) { return std::isnan(v) ? "-" : absl::StrFormat("%.4f", v); }

}  // namespace

absl::StatusOr<std::string> compare_runs(const CompareOptions& o) {
  if (o.run_dirs.empty())
    return absl::InvalidArgumentError("compare needs one or more run directories");
  std::vector<Run> runs;
  for (const std::string& d : o.run_dirs) {
    ZT_ASSIGN_OR_RETURN(Run r, load(d));
    runs.push_back(std::move(r));
  }
  if (!o.allow_different)
    for (const Run& r : runs)
      for (const char* key : {"model_config", "train_data", "train_tokens"})
        if (r.info.value(key, json()) != runs[0].info.value(key, json()))
          return absl::InvalidArgumentError(absl::StrCat(
              "runs '", runs[0].dir, "' and '", r.dir, "' differ in ", key, " (",
              runs[0].info.value(key, json()).dump(), " against ", r.info.value(key, json()).dump(),
              "); compare them anyway with --allow_different"));
  const std::vector<std::string> head = {"run",
                                         "model",
                                         "layout",
                                         "B x T",
                                         "peak device",
                                         "peak host",
                                         "step (ms)",
                                         "tokens/s",
                                         "exposed comm (ms)",
                                         "exposed offload (ms)",
                                         "loss",
                                         "val loss"};
  std::vector<std::vector<std::string>> rows;
  for (const Run& r : runs) {
    const json& i = r.info;
    rows.push_back({std::filesystem::path(r.dir).filename().string().empty()
                        ? r.dir
                        : std::filesystem::path(r.dir).filename().string(),
                    i.value("model", "?"), layout(i),
                    absl::StrCat(i.value("micro_batch", 0), " x ", i.value("seq_len", 0),
                                 i.value("packed", false) ? " packed" : ""),
                    format_bytes(i.value("peak_device_bytes", (int64_t)0)),
                    format_bytes(i.value("peak_host_bytes", (int64_t)0)), ms(median(r.step_ms)),
                    ms(median(r.tokens_per_s)), ms(median(r.exposed_comm_ms)),
                    ms(median(r.exposed_offload_ms)), loss(r.loss), loss(r.val_loss)});
  }
  std::ostringstream out;
  if (o.markdown) {
    out << "| " << absl::StrJoin(head, " | ") << " |\n|";
    for (size_t c = 0; c < head.size(); ++c) out << (c < 4 ? "---|" : "---:|");
    out << "\n";
    for (const auto& row : rows) out << "| " << absl::StrJoin(row, " | ") << " |\n";
    return out.str();
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c)
      out << (c ? "  " : "")
          << (c < 4 ? absl::StrFormat("%-*s", width[c], cells[c])
                    : absl::StrFormat("%*s", width[c], cells[c]));
    out << "\n";
  };
  line(head);
  for (const auto& row : rows) line(row);
  return out.str();
}

}  // namespace zt
