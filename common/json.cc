#include "common/json.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status.h"

namespace zt {

absl::StatusOr<nlohmann::json> parse_json(std::string_view text, const std::string& where,
                                          int max_depth) {
  ZT_RETURN_IF_ERROR(check_json_nesting(text, max_depth, where));
  using json = nlohmann::json;
  // The containers open at this point of the parse: an object's keys so far and its current
  // key, or an array's current index.
  struct Frame {
    bool object;
    std::string key;
    size_t index = 0;
    std::set<std::string> keys;
  };
  std::vector<Frame> stack;
  std::string duplicate;  // the first repeated key's path
  auto path = [&] {
    std::string p;
    for (const Frame& f : stack)
      p += f.object ? absl::StrCat(p.empty() ? "" : ".", f.key) : absl::StrCat("[", f.index, "]");
    return p;
  };
  auto value_done = [&] {
    if (!stack.empty() && !stack.back().object) ++stack.back().index;
  };
  const json::parser_callback_t track = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: stack.push_back({true, "", 0, {}}); break;
      case json::parse_event_t::array_start: stack.push_back({false, "", 0, {}}); break;
      case json::parse_event_t::key:
        if (!stack.empty()) {
          Frame& f = stack.back();
          f.key = parsed.get<std::string>();
          if (!f.keys.insert(f.key).second && duplicate.empty()) duplicate = path();
        }
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        value_done();
        break;
      case json::parse_event_t::value: value_done(); break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, track);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": malformed JSON: ", e.what()));
  }
  if (!duplicate.empty())
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", duplicate, ": given twice"));
  return j;
}

}  // namespace zt
