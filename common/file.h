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

// A file written for keeps: every write checked, fsync before close, errors (Internal unless
// said) naming the path and the system's reason (ENOSPC, EFBIG, EIO...). The destructor of an
// unclosed writer closes it and removes the file (an error path leaves no partial file).
class FileWriter {
 public:
  static absl::StatusOr<FileWriter> create(const std::string& path);
  FileWriter(FileWriter&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }
  FileWriter& operator=(FileWriter&&) = delete;
  ~FileWriter();
  absl::Status write(const void* data, size_t bytes);
  absl::Status close();  // fsync, then close
  const std::string& path() const { return path_; }

 private:
  FileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

// Writes `bytes` to path through path + ".tmp", fsynced and renamed over path, then fsyncs the
// directory: a reader sees the old file or the new one, never a torn one.
absl::Status write_file_atomic(const std::string& path, std::string_view bytes);
// fsync of a directory, so renames and new entries in it survive a crash.
absl::Status fsync_dir(const std::string& dir);

}  // namespace zt

namespace zt {

// JSON nested deeper than max_depth arrays/objects is an error (InvalidArgument naming
// `where`); checked on the raw text before parsing, since recursive parsing and walking of
// adversarially deep input can overflow the stack. Strings are skipped correctly.
absl::Status check_json_nesting(std::string_view text, int max_depth, const std::string& where);

}  // namespace zt
