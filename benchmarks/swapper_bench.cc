// NVMe swapper throughput: writes then reads `bytes` through offload/nvme_swapper.h (io_uring,
// O_DIRECT) in one file, `reps` times, and prints the median GB/s of each as JSON.
// benchmarks/swapper_vs_fio.py runs it beside fio with the same file system, block size and
// queue depth.
//
//   build/benchmarks/swapper_bench --dir /local_nvme --bytes 1073741824 --block_size 1048576 \
//       --queue_depth 8 --reps 3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "offload/nvme_swapper.h"

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  size_t bytes = size_t{1} << 30;
  zt::AioOptions aio;
  int reps = 3;
  bool fixed = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--dir") dir = v;
    else if (a == "--bytes") bytes = std::stoull(v);
    else if (a == "--block_size") aio.block_size = std::stoll(v);
    else if (a == "--queue_depth") aio.queue_depth = std::stoll(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--fixed_buffers")
      fixed = v != "0";
    else {
      std::fprintf(stderr,
                   "error: unknown flag %s (--dir --bytes --block_size --queue_depth "
                   "--reps --fixed_buffers)\n",
                   a.c_str());
      return 2;
    }
  }
  bytes = (bytes + zt::NvmeSwapper::kAlign - 1) / zt::NvmeSwapper::kAlign * zt::NvmeSwapper::kAlign;
  auto s = zt::NvmeSwapper::open(dir, aio);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.status().message()).c_str());
    return 2;
  }
  auto h = (*s)->create(bytes);
  if (!h.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(h.status().message()).c_str());
    return 2;
  }
  void* buf = std::aligned_alloc(zt::NvmeSwapper::kAlign, bytes);
  std::memset(buf, 0x5a, bytes);
  if (fixed) (*s)->register_buffer(buf, bytes);  // as the offload's windows are
  auto timed = [&](bool write) {
    std::vector<double> gbs;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status st = write ? (*s)->write(*h, buf, bytes, 0) : (*s)->read(*h, buf, bytes, 0);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
        std::exit(2);
      }
      gbs.push_back(bytes / sec / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    return gbs[gbs.size() / 2];
  };
  const double w = timed(true), r = timed(false);
  std::printf(
      "{\"bytes\": %zu, \"block_size\": %lld, \"queue_depth\": %lld, \"direct_io\": %s, "
      "\"registered_bytes\": %lld, \"write_GBps\": %.3f, \"read_GBps\": %.3f}\n",
      bytes, (long long)aio.block_size, (long long)aio.queue_depth,
      (*s)->direct_io() ? "true" : "false", (long long)(*s)->registered_bytes(), w, r);
  s->reset();  // the swapper first: it may hold buf registered
  std::free(buf);
  return 0;
}
