// DeepSpeed's tensorboard monitor (trainer/metrics.h make_tensorboard_sink) against the bytes
// TensorBoard's own writer produces (tests/fixtures/tensorboard_events.bin, made by
// scripts/make_tensorboard_fixture.py with TensorBoard's protos and RecordWriter, as PyTorch's
// SummaryWriter.add_scalar writes them). The run-level check, TensorBoard's reader on a
// training run's files, is tests/monitors/tensorboard_reader_test.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainer/metrics.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

// The rows of scripts/make_tensorboard_fixture.py: two steps at train_batch_size 8 with the
// breakdown, lr 0 at step 1 (a 0.0 is still written), then a validation loss after step 2.
TEST(TensorBoard, WritesTheBytesTensorBoardsOwnWriterWrites) {
  const fs::path dir = fresh_dir("zt_tensorboard");
  auto sink = make_tensorboard_sink(dir.string(), 8, /*fp16=*/false, /*breakdown=*/true,
                                    [] { return 1700000000.25; });
  ASSERT_TRUE(sink.ok()) << sink.status();
  StepRecord s1;
  s1.step = 1, s1.loss = 10.5, s1.lr = 0.0, s1.grad_norm = 2.25, s1.tokens_per_s = 1024;
  s1.forward_ms = 3.5, s1.backward_ms = 7.0, s1.optimizer_ms = 1.25;
  StepRecord s2;
  s2.step = 2, s2.loss = 9.75, s2.lr = 3e-4, s2.grad_norm = 1.5, s2.tokens_per_s = 2048;
  s2.forward_ms = 3.0, s2.backward_ms = 6.5, s2.optimizer_ms = 1.0;
  ASSERT_TRUE((*sink)->step(s1).ok());
  ASSERT_TRUE((*sink)->step(s2).ok());
  ASSERT_TRUE((*sink)->validation(2, 9.625).ok());
  sink->reset();
  std::vector<fs::path> files(fs::directory_iterator(dir), fs::directory_iterator{});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.1700000000.", 0), 0u)
      << files[0];
  const std::string want =
      slurp(std::string(ZT_SOURCE_DIR) + "/tests/fixtures/tensorboard_events.bin");
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(slurp(files[0]) == want) << "the event file differs from TensorBoard's bytes";
  fs::remove_all(dir);
}

TEST(TensorBoard, AnUnwritableOutputPathIsAClearError) {
  const fs::path file = fresh_dir("zt_tensorboard_file");
  std::ofstream(file).put('x');
  auto sink = make_tensorboard_sink((file / "job").string(), 8, false, false);
  ASSERT_FALSE(sink.ok());
  EXPECT_NE(std::string(sink.status().message()).find("tensorboard: cannot create"),
            std::string::npos)
      << sink.status();
  fs::remove(file);
}

}  // namespace
}  // namespace zt
