// The ds_config parser's reader (trainer/ds_config.cc and its sections): one JSON object read
// key by key, remembering the keys its section knows, so any other key is reported with the
// closest known one; and the helpers its error messages use. Internal to trainer/.
#pragma once

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/edit_distance.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "trainer/ds_config.h"

namespace zt::ds {

using json = nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

inline std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : absl::StrCat(parent, ".", key);
}

// A JSON value for an error message, shortened.
inline std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

inline std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

// "string \"yes\"", "number 3", "null": what a wrong value was, for "expected X, got ...".
inline std::string typed(const json& v) {
  return v.is_null() ? "null" : absl::StrCat(type_name(v), " ", show(v));
}

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Closest candidate by edit distance, or "" when none is reasonably close.
inline std::string closest(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const auto& c : candidates) {
    int d = edit_distance(lower(key), lower(c));
    if (d < best_d) best_d = d, best = c;
  }
  int limit = std::max<int>(2, static_cast<int>(key.size()) / 2);
  return best_d <= limit ? best : "";
}

// Reads one JSON object; remembers which keys its section knows.
class ObjectReader {
 public:
  // Errors unless `value` is an object.
  static absl::StatusOr<ObjectReader> make(const std::string* source, const json& value,
                                           std::string path) {
    if (!value.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(*source, ": ",
                                                     path.empty() ? "top level" : path,
                                                     ": expected an object "
                                                     "{...}, got ",
                                                     typed(value)));
    }
    return ObjectReader(source, &value, std::move(path));
  }

  const std::string& path() const { return path_; }
  std::string path_of(const std::string& key) const { return join_path(path_, key); }

  absl::Status error(const std::string& key, const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(*source_, ": ", path_of(key), ": ", msg));
  }

  // The value under one of `names` (first = canonical, others aliases), nullptr if absent.
  // Marks all names known. Two names given at once, or "auto", is an error.
  absl::StatusOr<const json*> raw(std::initializer_list<const char*> names) {
    const json* found = nullptr;
    std::string found_name;
    for (const char* n : names) {
      if (std::find(known_.begin(), known_.end(), n) == known_.end()) known_.emplace_back(n);
      auto it = obj_->find(n);
      if (it == obj_->end()) continue;
      if (found) {
        return error(
            n, absl::StrCat("given together with its alias '", found_name, "'; keep only one"));
      }
      found = &*it;
      found_name = n;
    }
    if (found && found->is_string() && found->get<std::string>() == "auto") {
      return error(found_name,
                   "\"auto\" is a Hugging Face Trainer placeholder that the HF "
                   "integration fills in; zerotrain reads the file as is, so "
                   "give a number (or the value you want) here");
    }
    last_name_ = found ? found_name : *names.begin();
    return found;
  }

  absl::Status get_bool(std::initializer_list<const char*> names, bool* out) {
    ZT_ASSIGN_OR_RETURN(const json* v, raw(names));
    if (!v) return absl::OkStatus();
    if (!v->is_boolean()) return type_error(*v, "a boolean (true or false)");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  // Integer in [lo, hi]; integral floats (5e8) are accepted. Absent or null -> nullopt.
  absl::StatusOr<std::optional<int64_t>> get_opt_int(std::initializer_list<const char*> names,
                                                     int64_t lo, int64_t hi = kInt64Max) {
    ZT_ASSIGN_OR_RETURN(const json* v, raw(names));
    if (!v || v->is_null()) return std::optional<int64_t>();
    int64_t x = 0;
    std::string allowed = hi == kInt64Max ? absl::StrCat("an integer >= ", lo)
                                          : absl::StrCat("an integer in [", lo, ", ", hi, "]");
    if (v->is_number_integer()) {  // signed or unsigned
      if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(kInt64Max)) {
        return error(last_name_,
                     absl::StrCat("value ", show(*v), " is too large; allowed: ", allowed));
      }
      x = v->get<int64_t>();
    } else if (v->is_number_float()) {
      double d = v->get<double>();
      if (!std::isfinite(d) || d != std::floor(d)) {
        return error(last_name_,
                     absl::StrCat("value ", show(*v), " is not an integer; allowed: ", allowed));
      }
      if (d < (double)lo) {
        return error(last_name_,
                     absl::StrCat("value ", show(*v), " is out of range; allowed: ", allowed));
      }
      if (d > (double)hi || d >= 0x1p63) {  // before the cast, which would overflow
        return error(last_name_,
                     absl::StrCat("value ", show(*v), " is too large; allowed: ", allowed));
      }
      x = static_cast<int64_t>(d);
    } else {
      return type_error(*v, allowed);
    }
    if (x < lo || x > hi) {
      return error(last_name_,
                   absl::StrCat("value ", show(*v), " is out of range; allowed: ", allowed));
    }
    return std::optional<int64_t>(x);
  }

  absl::Status get_int(std::initializer_list<const char*> names, int64_t* out, int64_t lo,
                       int64_t hi = kInt64Max) {
    ZT_ASSIGN_OR_RETURN(const json* v, raw(names));
    if (v && v->is_null()) return null_error();
    ZT_ASSIGN_OR_RETURN(std::optional<int64_t> x, get_opt_int(names, lo, hi));
    if (x) *out = *x;
    return absl::OkStatus();
  }

  // Number in [lo, hi] (lo excluded when lo_open). Absent or null -> nullopt.
  absl::StatusOr<std::optional<double>> get_opt_double(std::initializer_list<const char*> names,
                                                       double lo, bool lo_open = false,
                                                       double hi = kInf) {
    ZT_ASSIGN_OR_RETURN(const json* v, raw(names));
    if (!v || v->is_null()) return std::optional<double>();
    std::string allowed = absl::StrCat("a number ", lo_open ? "> " : ">= ", lo);
    if (hi != kInf) absl::StrAppend(&allowed, " and <= ", hi);
    if (!v->is_number()) return type_error(*v, allowed);
    double x = v->get<double>();
    if (!std::isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi) {
      return error(last_name_,
                   absl::StrCat("value ", show(*v), " is out of range; allowed: ", allowed));
    }
    return std::optional<double>(x);
  }

  absl::Status get_double(std::initializer_list<const char*> names, double* out, double lo,
                          bool lo_open = false, double hi = kInf) {
    ZT_ASSIGN_OR_RETURN(const json* v, raw(names));
    if (v && v->is_null()) return null_error();
    ZT_ASSIGN_OR_RETURN(std::optional<double> x, get_opt_double(names, lo, lo_open, hi));
    if (x) *out = *x;
    return absl::OkStatus();
  }

  // A string from `choices` (compared case-insensitively when `fold_case`).
  absl::Status get_choice(std::initializer_list<const char*> names,
                          const std::vector<std::string>& choices, bool fold_case,
                          std::string* out) {
    ZT_ASSIGN_OR_RETURN(const json* v, raw(names));
    if (!v) return absl::OkStatus();
    std::string allowed = absl::StrCat("one of \"", absl::StrJoin(choices, "\", \""), "\"");
    if (!v->is_string()) return type_error(*v, allowed);
    std::string s = v->get<std::string>();
    for (const auto& c : choices) {
      if (fold_case ? lower(c) == lower(s) : c == s) {
        *out = c;
        return absl::OkStatus();
      }
    }
    return error(last_name_,
                 absl::StrCat("value ", show(*v), " is not allowed; allowed: ", allowed));
  }

  absl::Status get_string(std::initializer_list<const char*> names, std::string* out) {
    ZT_ASSIGN_OR_RETURN(const json* v, raw(names));
    if (!v || v->is_null()) return absl::OkStatus();
    if (!v->is_string()) return type_error(*v, "a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

  // A DeepSpeed key this build does not implement: accepted only when absent or equal to
  // DeepSpeed's default `dflt` (no effect then); `dflt` null -> any value is an error.
  void unsupported(const char* name, json dflt = nullptr) {
    unsupported_.emplace_back(name, std::move(dflt));
  }

  // Call after reading every known key: reports the first unknown or unsupported key.
  absl::Status finish() const {
    for (auto it = obj_->begin(); it != obj_->end(); ++it) {
      const std::string& key = it.key();
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      bool is_unsupported = false;
      for (const auto& [name, dflt] : unsupported_) {
        if (name != key) continue;
        is_unsupported = true;
        if (!dflt.is_null() && it.value() == dflt) break;
        std::string hint =
            dflt.is_null()
                ? std::string("remove it")
                : absl::StrCat("remove it or set it to DeepSpeed's default ", dflt.dump());
        return absl::UnimplementedError(absl::StrCat(*source_, ": ", path_of(key),
                                                     ": known DeepSpeed setting, not "
                                                     "implemented in this build; ",
                                                     hint));
      }
      if (is_unsupported) continue;
      std::vector<std::string> candidates = known_;
      for (const auto& u : unsupported_) candidates.push_back(u.first);
      std::string guess = closest(key, candidates);
      std::string msg = "unknown key";
      if (!guess.empty()) absl::StrAppend(&msg, "; did you mean '", guess, "'?");
      absl::StrAppend(&msg, " (valid keys", path_.empty() ? "" : " in ", path_, ": ",
                      absl::StrJoin(known_, ", "), ")");
      return error(key, msg);
    }
    return absl::OkStatus();
  }

 private:
  ObjectReader(const std::string* source, const json* obj, std::string path)
      : source_(source), obj_(obj), path_(std::move(path)) {}

  absl::Status type_error(const json& v, const std::string& allowed) const {
    return error(last_name_, absl::StrCat("expected ", allowed, ", got ", typed(v)));
  }
  absl::Status null_error() const {
    return error(last_name_, "null is not allowed here; give a value or remove the key");
  }

  const std::string* source_;
  const json* obj_;
  std::string path_;
  std::string last_name_;
  std::vector<std::string> known_;
  std::vector<std::pair<std::string, json>> unsupported_;
};

// Sub-object `key` of `r`, or nullptr when absent (null counts as absent).
inline absl::StatusOr<const json*> section(ObjectReader& r,
                                           std::initializer_list<const char*> names) {
  ZT_ASSIGN_OR_RETURN(const json* v, r.raw(names));
  if (v && v->is_null()) return static_cast<const json*>(nullptr);
  return v;
}

// Sections parsed in files of their own (trainer/ds_optimizer.cc); src names the file.
absl::Status parse_optimizer(const std::string& src, const json& v, OptimizerConfig* o);
absl::Status parse_scheduler(const std::string& src, const json& v, SchedulerConfig* s);
}  // namespace zt::ds
