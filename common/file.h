// Whole-file reads with the error messages every caller wants.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zt {

// The bytes of the regular file at `path`. Errors (NotFound / InvalidArgument) name `what`
// (e.g. "DeepSpeed config") and the path and say whether it is missing, a directory, or
// unreadable (with the system's reason).
absl::StatusOr<std::string> read_file(const std::string& path, const std::string& what);

}  // namespace zt

namespace zt {

// JSON nested deeper than max_depth arrays/objects is an error (InvalidArgument naming
// `where`); checked on the raw text before parsing, since recursive parsing and walking of
// adversarially deep input can overflow the stack. Strings are skipped correctly.
absl::Status check_json_nesting(std::string_view text, int max_depth, const std::string& where);

}  // namespace zt
