#include "common/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
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

namespace {
absl::Status os_error(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " '", path, "': ", std::strerror(errno)));
}
}  // namespace

absl::StatusOr<FileWriter> FileWriter::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return os_error("create", path);
  return FileWriter(path, fd);
}

FileWriter::~FileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(path_.c_str());
}

absl::Status FileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return os_error("write", path_);
    }
    p += n;
    bytes -= (size_t)n;
  }
  return absl::OkStatus();
}

absl::Status FileWriter::close() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("'", path_, "' is closed"));
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const absl::Status s = os_error("write (fsync)", path_);
    ::close(fd);
    ::unlink(path_.c_str());
    return s;
  }
  if (::close(fd) != 0) {
    const absl::Status s = os_error("close", path_);
    ::unlink(path_.c_str());
    return s;
  }
  return absl::OkStatus();
}

absl::Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return os_error("open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : os_error("fsync directory", dir);
}

absl::Status write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  {
    auto f = FileWriter::create(tmp);
    if (!f.ok()) return f.status();
    if (absl::Status s = f->write(bytes.data(), bytes.size()); !s.ok()) return s;
    if (absl::Status s = f->close(); !s.ok()) return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status s = os_error("rename to", path);
    ::unlink(tmp.c_str());
    return s;
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return fsync_dir(dir.empty() ? "." : dir);
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

absl::Status ensure_writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", dir, "' cannot be created: ",
                     ec ? ec.message() : std::string("a file of that name is in the way"),
                     "; give a directory this user can create and write"));
  const std::string probe = absl::StrCat(dir, "/.write_test_", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InvalidArgumentError(absl::StrCat(what, " '", dir,
                                                   "' is not writable: ", std::strerror(errno),
                                                   "; give a directory this user can write"));
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

std::string process_owner_line() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::tm utc;
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", ::gmtime_r(&now, &utc));
  return absl::StrCat("pid ", ::getpid(), " on host ", host, ", started ", when);
}

absl::StatusOr<DirLock> DirLock::acquire(const std::string& dir, const std::string& what,
                                         const std::string& owner, std::string* warning) {
  const std::string path = dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EACCES)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot open the lock file '", path, "': ", std::strerror(errno), " (another user's run ",
        "used this ", what, "?); give this run its own ", what));
  if (fd < 0) return os_error("create the lock file", path);
  DirLock lock(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {  // ENOLCK, EOPNOTSUPP: this file system keeps no locks
      *warning = absl::StrCat("warning: ", what, " '", dir, "' is on a file system without file ",
                              "locks (", std::strerror(errno), "): a second run given the same ",
                              what, " is not refused; give each run its own");
      return DirLock();
    }
    std::string holder(512, '\0');
    const ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? (size_t)n : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    return absl::FailedPreconditionError(absl::StrCat(
        what, " '", dir, "' is in use by another run (", holder.empty() ? "unknown" : holder,
        "): two runs writing one directory overwrite each other's files. Wait for it to end ",
        "or stop it, or give this run another ", what));
  }
  struct statfs fs;
  if (::statfs(dir.c_str(), &fs) == 0 && fs.f_type == 0x6969)  // NFS_SUPER_MAGIC
    *warning = absl::StrCat("warning: ", what, " '", dir, "' is on NFS: the lock that keeps a ",
                            "second run out holds across nodes only where the mount honours file ",
                            "locks (not with -o nolock)");
  const std::string line = owner + "\n";
  if (::ftruncate(fd, 0) != 0) return os_error("write the lock file", path);
  const ssize_t n = ::pwrite(fd, line.data(), line.size(), 0);
  if (n < 0) return os_error("write the lock file", path);
  if (n != (ssize_t)line.size())
    return absl::InternalError(
        absl::StrCat("cannot write the lock file '", path, "': a short write (the disk is full?)"));
  return lock;
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

absl::Status append_line(std::FILE* f, const std::string& path, std::string_view line) {
  const long at = std::ftell(f);
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), f) == line.size() && std::fflush(f) == 0)
    return absl::OkStatus();
  const int err = errno ? errno : EIO;
  std::clearerr(f);
  if (at >= 0 && ::ftruncate(fileno(f), at) == 0) std::fseek(f, at, SEEK_SET);  // no torn line
  return absl::InternalError(absl::StrCat("cannot write '", path, "': ", std::strerror(err),
                                          " (it keeps every complete line up to here)"));
}

}  // namespace zt
