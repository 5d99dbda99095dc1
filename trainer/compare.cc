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
  bool loss_diverged = false;  // the last step's loss was null: NaN or inf
};

// Median of the finite values; NaN when there are none (a NaN loss dumps as null).
double median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// j[key] as a number: NaN when absent or null (NaN and inf dump as null); an error naming
// the file, line and key when it holds anything else.
absl::StatusOr<double> number(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return NAN;
  if (!j[key].is_number())
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"", key, "\" is ", j[key].dump(), ", not a number"));
  return j[key].get<double>();
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
    return absl::InvalidArgumentError(
        absl::StrCat("'", run_json, "' is not a JSON object (the run summary train writes)"));
  ZT_ASSIGN_OR_RETURN(const std::string text, read_file(metrics, "metrics"));
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    ++line_no;
    const json j = json::parse(line.begin(), line.end(), nullptr, false);
    if (!j.is_object())
      return absl::InvalidArgumentError(
          absl::StrCat("'", metrics, "' line ", line_no, " is not a JSON object"));
    const std::string where = absl::StrCat("'", metrics, "' line ", line_no);
    if (j.contains("val_loss")) {
      ZT_ASSIGN_OR_RETURN(r.val_loss, number(j, "val_loss", where));
    }
    if (!j.contains("step_ms")) continue;
    ZT_ASSIGN_OR_RETURN(const double step_ms, number(j, "step_ms", where));
    ZT_ASSIGN_OR_RETURN(const double tokens_per_s, number(j, "tokens_per_s", where));
    ZT_ASSIGN_OR_RETURN(r.loss, number(j, "loss", where));
    r.loss_diverged = j.contains("loss") && j["loss"].is_null();
    r.step_ms.push_back(step_ms);
    r.tokens_per_s.push_back(tokens_per_s);
    if (j.contains("trace") && j["trace"].is_object()) {  // a traced step (zerotrain.trace)
      const json& t = j["trace"];
      ZT_ASSIGN_OR_RETURN(const double comm, number(t, "exposed_comm_ms", where));
      ZT_ASSIGN_OR_RETURN(const double copy, number(t, "exposed_copy_ms", where));
      ZT_ASSIGN_OR_RETURN(const double opt, number(t, "exposed_optimizer_ms", where));
      r.exposed_comm_ms.push_back(comm);
      r.exposed_offload_ms.push_back(copy + opt);
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

absl::StatusOr<std::string> compare_table(const CompareOptions& o) {
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
                    ms(median(r.exposed_offload_ms)),
                    r.loss_diverged ? "nan" : loss(r.loss), loss(r.val_loss)});
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

}  // namespace

absl::StatusOr<std::string> compare_runs(const CompareOptions& o) {
  try {
    return compare_table(o);
  } catch (const nlohmann::json::exception& e) {  // a run.json key of the wrong type
    return absl::InvalidArgumentError(
        absl::StrCat("compare: a run.json holds a value of the wrong type (", e.what(),
                     "); was it written by `zerotrain train`?"));
  }
}

}  // namespace zt
