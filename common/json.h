// JSON read from files zerotrain is given (ds_config, config.json, safetensors headers and
// indexes, Alpaca data, templates, checkpoint metadata): one parser for all of them, so every
// reader refuses what DeepSpeed refuses ("Duplicate keys in DeepSpeed config") instead of
// nlohmann's default of keeping the last value of a key given twice.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace zt {

// Parses `text` (from `where`, a file name for messages). Errors (InvalidArgument):
//   "<where>: nested deeper than <max_depth> levels" (checked before parsing);
//   "<where>: malformed JSON: <parser's message, with line and column>";
//   "<where>: <path>: given twice", path as zero_optimization.stage or ranks[0].file, for the
//   first key repeated within one object, at any depth.
absl::StatusOr<nlohmann::json> parse_json(std::string_view text, const std::string& where,
                                          int max_depth = 64);

}  // namespace zt
