#include "common/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace zt {

absl::StatusOr<std::string> read_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return absl::NotFoundError(absl::StrCat(what, " '", path, "' does not exist"));
  if (!std::filesystem::is_regular_file(st))
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' is not a regular file (a directory?)"));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' cannot be read: ", std::strerror(errno)));
  std::string text;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "': read error"));
  return text;
}

}  // namespace zt

namespace zt {

absl::Status check_json_nesting(std::string_view text, int max_depth, const std::string& where) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return absl::InvalidArgumentError(absl::StrCat(where, ": JSON nested deeper than ",
                                                       max_depth,
                                                       " levels; this cannot be a valid "
                                                       "config"));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return absl::OkStatus();
}

}  // namespace zt
