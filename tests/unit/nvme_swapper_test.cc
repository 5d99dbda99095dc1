// The NVMe swapper: bytes written come back, in block_size requests with several in flight,
// at any 4 KiB-aligned offset; the private directory (0700) holds no visible file (they are
// unlinked once open) and is gone after the swapper; a missing or unusable nvme_path is an
// error naming it; without io_uring (refused, or the memlock limit) pread/pwrite threads move
// the same bytes; stale swap directories of killed runs are removed.
#include "offload/nvme_swapper.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

struct Aligned {
  explicit Aligned(size_t bytes)
      : p(static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))),
        n(bytes) {}
  ~Aligned() { std::free(p); }
  uint8_t* p;
  size_t n;
};

class NvmeSwapperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("zt_nvme_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(NvmeSwapperTest, RoundTripsManyBlocksInFlight) {
  std::string swap_dir;
  {
    auto s = NvmeSwapper::open(dir_.string(), {.block_size = 8192, .queue_depth = 3});
    ASSERT_TRUE(s.ok()) << s.status();
    swap_dir = (*s)->directory();
    struct stat st;
    ASSERT_EQ(::stat(swap_dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    const size_t bytes = 5 * 4096 * 7;  // 17.5 requests of 8 KiB
    auto h = (*s)->create(2 * bytes);
    ASSERT_TRUE(h.ok()) << h.status();
    // Swap files are unlinked as soon as they are open: nothing to leave behind, whatever
    // ends the process.
    EXPECT_TRUE(fs::is_empty(swap_dir));
    Aligned out(bytes), in(bytes);
    for (size_t i = 0; i < bytes; ++i) out.p[i] = (uint8_t)(i * 131 + 7);
    ASSERT_TRUE((*s)->write(*h, out.p, bytes, bytes).ok());  // the second half of the file
    ASSERT_TRUE((*s)->read(*h, in.p, bytes, bytes).ok());
    EXPECT_EQ(std::memcmp(in.p, out.p, bytes), 0);
    EXPECT_EQ((*s)->bytes_written(), (int64_t)bytes);
    EXPECT_EQ((*s)->bytes_read(), (int64_t)bytes);
    auto bad = (*s)->read(*h, in.p + 1, 4096, 0);  // O_DIRECT needs aligned buffers
    EXPECT_FALSE(bad.ok());
  }
  EXPECT_FALSE(fs::exists(swap_dir)) << "swap files outlived the swapper";
}

// aio.single_submit (DeepSpeed's aio key): each request goes to the kernel in its own
// io_uring_submit, instead of the requests queued being submitted together. 16 requests of
// 4 KiB with queue_depth 4, written then read: 32 submissions; batched, the first 4 of each
// transfer share one, so fewer. The bytes moved are the same.
TEST_F(NvmeSwapperTest, SingleSubmitSubmitsEachRequestAlone) {
  const size_t bytes = 16 * 4096;
  Aligned out(bytes), in(bytes);
  for (size_t i = 0; i < bytes; ++i) out.p[i] = (uint8_t)(i * 29 + 3);
  int64_t counts[2] = {0, 0};
  for (bool single : {false, true}) {
    auto s = NvmeSwapper::open(dir_.string(),
                               {.block_size = 4096, .queue_depth = 4, .single_submit = single});
    ASSERT_TRUE(s.ok()) << s.status();
    if (!(*s)->uses_io_uring()) GTEST_SKIP() << "io_uring is refused here: no submissions";
    auto h = (*s)->create(bytes);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE((*s)->write(*h, out.p, bytes, 0).ok());
    ASSERT_TRUE((*s)->read(*h, in.p, bytes, 0).ok());
    EXPECT_EQ(std::memcmp(in.p, out.p, bytes), 0) << "single_submit " << single;
    counts[single] = (*s)->submissions();
  }
  EXPECT_EQ(counts[1], 2 * 16) << "one submission per request, write and read";
  EXPECT_LT(counts[0], 2 * 16) << "batched requests share submissions";
}

// Fixed buffers and registered files change how requests name their memory and file, not what
// they move: a transfer half inside a registered window (its requests fixed or plain by where
// they fall), and a file created after transfers began (a new slot in the file table).
TEST_F(NvmeSwapperTest, RegisteredBuffersAndLateFilesMoveTheSameBytes) {
  const size_t bytes = 12 * 4096;
  Aligned out(bytes), in(bytes);  // registered: they outlive the swapper
  auto s = NvmeSwapper::open(dir_.string(), {.block_size = 8192, .queue_depth = 4});
  ASSERT_TRUE(s.ok()) << s.status();
  for (size_t i = 0; i < bytes; ++i) out.p[i] = (uint8_t)(i * 37 + 11);
  (*s)->register_buffer(out.p, bytes / 2);  // the first six pages only
  (*s)->register_buffer(in.p, bytes);
  auto h = (*s)->create(bytes);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE((*s)->write(*h, out.p, bytes, 0).ok());
  ASSERT_TRUE((*s)->read(*h, in.p, bytes, 0).ok());
  EXPECT_EQ(std::memcmp(in.p, out.p, bytes), 0);
  auto late = (*s)->create(bytes);
  ASSERT_TRUE(late.ok()) << late.status();
  std::memset(in.p, 0, bytes);
  ASSERT_TRUE((*s)->write(*late, out.p + 4096, bytes - 4096, 0).ok());
  ASSERT_TRUE((*s)->read(*late, in.p, bytes - 4096, 0).ok());
  EXPECT_EQ(std::memcmp(in.p, out.p + 4096, bytes - 4096), 0);
  // Where the kernel has io_uring's sparse tables (Linux 5.19+) and the memlock limit allows,
  // both windows are registered; under a low limit only the first, elsewhere none; the bytes
  // move all the same.
  const int64_t r = (*s)->registered_bytes();
  EXPECT_TRUE(r == 0 || r == (int64_t)bytes / 2 || r == (int64_t)(bytes * 3 / 2)) << r;
}

TEST_F(NvmeSwapperTest, UnusablePathsAreErrorsNamingThem) {
  auto missing = NvmeSwapper::open((dir_ / "absent").string(), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("absent"), std::string::npos);
  std::ofstream(dir_ / "file") << "x";
  auto not_dir = NvmeSwapper::open((dir_ / "file").string(), {});
  ASSERT_FALSE(not_dir.ok());
  EXPECT_NE(std::string(not_dir.status().message()).find("not an existing directory"),
            std::string::npos);
  EXPECT_FALSE(NvmeSwapper::open("", {}).ok());
}

// Without io_uring (ZEROTRAIN_NO_IO_URING, as where it is refused): the pread/pwrite threads
// move the same bytes, in whole and short blocks at any aligned offset.
TEST_F(NvmeSwapperTest, WithoutIoUringThreadsMoveTheSameBytes) {
  ::setenv("ZEROTRAIN_NO_IO_URING", "1", 1);
  auto s = NvmeSwapper::open(dir_.string(), {.block_size = 8192, .queue_depth = 4});
  ::unsetenv("ZEROTRAIN_NO_IO_URING");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE((*s)->uses_io_uring());
  const size_t bytes = 4096 * 9;  // 4.5 blocks: three threads' worth and a short one
  auto h = (*s)->create(2 * bytes);
  ASSERT_TRUE(h.ok()) << h.status();
  Aligned out(bytes), in(bytes);
  for (size_t i = 0; i < bytes; ++i) out.p[i] = (uint8_t)(i * 29 + 3);
  ASSERT_TRUE((*s)->write(*h, out.p, bytes, 4096).ok());
  ASSERT_TRUE((*s)->read(*h, in.p, bytes, 4096).ok());
  EXPECT_EQ(std::memcmp(in.p, out.p, bytes), 0);
  EXPECT_EQ((*s)->bytes_written(), (int64_t)bytes);
  EXPECT_FALSE((*s)->read(*h, in.p, 4096, 2 * bytes).ok()) << "a read past the end";
}

// Under a small locked-memory limit (RLIMIT_MEMLOCK of 4 KiB, as for a user in a default
// container) io_uring_setup fails with ENOMEM where the kernel charges rings to that limit
// (Linux 6.x here): the swapper still opens, warns once naming the limit and its value, and moves
// bytes. In a child process, as an unprivileged user when run as root (root's CAP_IPC_LOCK
// ignores the limit). Skips where io_uring is refused anyway, where the kernel does not charge
// rings to the limit (5.12-6.x kernels that count them in the memory cgroup), or where the child
// cannot drop root (a rootless user namespace).
TEST_F(NvmeSwapperTest, SmallMemlockLimitFallsBackNamingIt) {
  {
    auto plain = NvmeSwapper::open(dir_.string(), {});
    ASSERT_TRUE(plain.ok()) << plain.status();
    if (!(*plain)->uses_io_uring()) GTEST_SKIP() << "io_uring is refused here whatever the limit";
  }
  fs::permissions(dir_, fs::perms::all);
  const std::string log = (dir_ / "stderr.txt").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::setvbuf(stderr, nullptr, _IONBF, 0);  // _exit flushes nothing
    const rlimit small{4096, 4096};
    if (::setrlimit(RLIMIT_MEMLOCK, &small) != 0) _exit(10);
    if (::getuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) _exit(11);
    auto s = NvmeSwapper::open(dir_.string(), {.block_size = 8192, .queue_depth = 8});
    if (!s.ok()) {
      std::fprintf(stderr, "open: %s\n", std::string(s.status().message()).c_str());
      _exit(12);
    }
    if ((*s)->uses_io_uring()) _exit(20);  // the kernel did not charge the ring to the limit
    Aligned out(8192), in(8192);
    for (size_t i = 0; i < 8192; ++i) out.p[i] = (uint8_t)i;
    auto h = (*s)->create(8192);
    if (!h.ok() || !(*s)->write(*h, out.p, 8192, 0).ok() || !(*s)->read(*h, in.p, 8192, 0).ok())
      _exit(13);
    _exit(std::memcmp(in.p, out.p, 8192) == 0 ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::ifstream f(log);
  const std::string err((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 11) GTEST_SKIP() << "cannot drop root to test the limit";
  if (WEXITSTATUS(status) == 20) GTEST_SKIP() << "this kernel does not charge rings to memlock";
  ASSERT_EQ(WEXITSTATUS(status), 0) << err;
  EXPECT_NE(err.find("RLIMIT_MEMLOCK is 4 KiB"), std::string::npos) << err;
  EXPECT_NE(err.find("ulimit -l"), std::string::npos) << err;
}

// A swap directory left by a run killed with SIGKILL (empty, its files unlinked, no one holding
// its lock) is removed by the next swapper on the same nvme_path; one a live swapper holds, one
// with files in it, and one made in the last seconds (not locked yet) stay.
TEST_F(NvmeSwapperTest, StaleSwapDirectoriesAreRemoved) {
  const fs::path stale = dir_ / "zerotrain_swap_dead01", full = dir_ / "zerotrain_swap_full01";
  fs::create_directories(stale);
  fs::create_directories(full);
  std::ofstream(full / "keep") << "x";
  const fs::path fresh = dir_ / "zerotrain_swap_new001";  // just made by another swapper
  fs::create_directories(fresh);
  const timespec old[2] = {{std::time(nullptr) - 3600, 0}, {std::time(nullptr) - 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, stale.c_str(), old, 0), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, full.c_str(), old, 0), 0);
  auto live = NvmeSwapper::open(dir_.string(), {});
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(full));
  EXPECT_TRUE(fs::exists(fresh)) << "removed a directory younger than a swapper's locking";
  const std::string held = (*live)->directory();
  ASSERT_EQ(::utimensat(AT_FDCWD, held.c_str(), old, 0), 0);
  auto second = NvmeSwapper::open(dir_.string(), {});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(fs::exists(held)) << "removed a live swapper's directory";
}

}  // namespace
}  // namespace zt
