// Whole-file reads with the error messages every caller wants.
#pragma once

#include <cstdio>
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
// Appends `line` to f (the file at `path`, opened for appending) and flushes it. A failed write
// (ENOSPC, EFBIG, EIO) cuts the file back to where it was, so no torn line is left, and returns
// Internal naming the path and the reason.
absl::Status append_line(std::FILE* f, const std::string& path, std::string_view line);
// fsync of a directory, so renames and new entries in it survive a crash.
absl::Status fsync_dir(const std::string& dir);

// A directory a program uses as its own: created if needed, and checked writable by creating
// and removing a file in it. Errors (InvalidArgument) name `what` (e.g. "--save_dir"), the path
// and the system's reason.
absl::Status ensure_writable_dir(const std::string& dir, const std::string& what);

// One process at a time per directory: an advisory lock (flock) on DIR/.lock, held while the
// object lives. The kernel drops it when the process ends however it ends (SIGKILL too), so a
// crashed run never leaves a stale lock. The file holds its holder's `owner` line (pid, host,
// start time) for the error another process gets. Across nodes it holds where the shared file
// system honours flock (NFSv4 and Lustre, GPFS mounted with locking do; NFS mounted -o nolock
// does not).
class DirLock {
 public:
  // Takes the lock without waiting. Errors: FailedPrecondition "WHAT 'DIR' is in use by another
  // run: OWNER..." when another process holds it; Internal when the lock file cannot be
  // created. Where the file system cannot lock at all, or is NFS (whose locks depend on the
  // mount), returns an unlocked DirLock and sets *warning to a line saying so.
  static absl::StatusOr<DirLock> acquire(const std::string& dir, const std::string& what,
                                         const std::string& owner, std::string* warning);
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock() = default;
  ~DirLock();

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// "pid 1234 on host node7, started 2026-12-02 17:10:04 UTC": this process, for DirLock's owner.
std::string process_owner_line();

}  // namespace zt

namespace zt {

// JSON nested deeper than max_depth arrays/objects is an error (InvalidArgument naming
// `where`); checked on the raw text before parsing, since recursive parsing and walking of
// adversarially deep input can overflow the stack. Strings are skipped correctly.
absl::Status check_json_nesting(std::string_view text, int max_depth, const std::string& where);

}  // namespace zt
