// The NVMe parameter store's read-ahead (ParamStore::prefetch): a shard read ahead reaches the
// device with the bytes last written to it, is read from the drive once, a write that lands
// while the read ahead is in flight is what the next load sees, one buffer always stays free
// for loads on demand, and no read ahead happens when it is off or there are under 3 buffers.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "offload/param_offload.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class ParamStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("zt_params_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    be_ = make_cpu_backend(1);
    auto swapper = NvmeSwapper::open(dir_.string(), {.block_size = 8192, .queue_depth = 4});
    ASSERT_TRUE(swapper.ok()) << swapper.status();
    ParamOffloadOptions o;
    o.buffer_count = 3;
    o.max_in_cpu = 0;  // every shard on the drive
    store_ = make_nvme_param_store(be_.get(), o, std::move(*swapper));
    for (int h = 0; h < kShards; ++h) {
      ASSERT_EQ(store_->add(kBytes, /*on_drive=*/true), h);
      write(h, uint8_t(10 * h + 1));
    }
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  void write(int h, uint8_t value) {
    std::memset(store_->begin_write(h), value, kBytes);
    store_->end_write(h);
  }
  // Shard h as the device receives it: every byte, or -1 when they differ.
  int loaded(int h) {
    DeviceBuffer dst(be_.get(), kBytes, MemCategory::kWorkspace);
    be_->wait_copy(store_->load(h, dst.data()));
    std::vector<uint8_t> host(kBytes);
    be_->copy_to_host(host.data(), dst.data(), kBytes);
    for (uint8_t b : host)
      if (b != host[0]) return -1;
    return host[0];
  }

  static constexpr int kShards = 5;
  static constexpr size_t kBytes = 5 * 4096 + 100;  // several requests, the last one short
  fs::path dir_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<ParamStore> store_;
};

TEST_F(ParamStoreTest, ReadAheadLoadsTheLastWrittenBytesOnce) {
  using Place = ParamStore::Place;
  const int64_t file_bytes = 6 * 4096;  // a shard's file: whole 4 KiB blocks
  const int64_t read0 = store_->nvme_bytes_read();
  ASSERT_TRUE(store_->reads_ahead());
  EXPECT_EQ(store_->place(0), Place::kDrive);
  EXPECT_TRUE(store_->prefetch(0));
  EXPECT_EQ(store_->place(0), Place::kReading);
  EXPECT_TRUE(store_->prefetch(0));  // already on its way: nothing more
  EXPECT_EQ(loaded(0), 1);
  EXPECT_EQ(store_->place(0), Place::kHost);
  EXPECT_EQ(store_->nvme_bytes_read() - read0, file_bytes) << "read once, not again at load";
  // Written while its read ahead may still be in flight: the load sees the new bytes.
  EXPECT_TRUE(store_->prefetch(1));
  write(1, 77);
  EXPECT_EQ(loaded(1), 77);
  // Three buffers: two reads ahead at most, the third stays for loads on demand, which never
  // take a buffer read ahead (each shard below is read from the drive once).
  const int64_t read1 = store_->nvme_bytes_read();
  EXPECT_TRUE(store_->prefetch(2));
  EXPECT_TRUE(store_->prefetch(3));
  EXPECT_FALSE(store_->prefetch(4));
  EXPECT_EQ(store_->place(4), Place::kDrive);
  EXPECT_EQ(loaded(1), 77);  // still in its buffer, now the most recently used one
  EXPECT_EQ(loaded(4), 41);
  EXPECT_EQ(loaded(2), 21);
  EXPECT_EQ(loaded(3), 31);
  EXPECT_EQ(store_->nvme_bytes_read() - read1, 3 * file_bytes);
}

TEST_F(ParamStoreTest, NoReadAheadWhenOffOrTooFewBuffers) {
  for (const auto& [count, on] : {std::pair{int64_t{3}, false}, std::pair{int64_t{2}, true}}) {
    auto swapper = NvmeSwapper::open(dir_.string(), {});
    ASSERT_TRUE(swapper.ok()) << swapper.status();
    ParamOffloadOptions o;
    o.buffer_count = count;
    o.max_in_cpu = 0;
    o.read_ahead = on;
    auto store = make_nvme_param_store(be_.get(), o, std::move(*swapper));
    ASSERT_EQ(store->add(kBytes, /*on_drive=*/true), 0);
    EXPECT_FALSE(store->reads_ahead());
    EXPECT_FALSE(store->prefetch(0));
    EXPECT_EQ(store->place(0), ParamStore::Place::kDrive);
  }
}

}  // namespace
}  // namespace zt
