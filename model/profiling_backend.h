// A backend that times every kernel call of another backend and counts its floating-point
// operations, for one step: DeepSpeed's "flops_profiler" ds_config section, per backend op
// instead of per module (docs/benchmarks.md, "Where a step's time goes"). While recording, each
// call is followed by the inner backend's synchronize(), so a GPU's asynchronous kernels are
// timed too (and overlap is lost for that step); otherwise calls pass through untouched.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "model/backend.h"

namespace zt {

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner);

  // One row of the table: an op and its shape, e.g. ("matmul_forward", "N 2048, C 768 -> 2304").
  struct Row {
    int64_t calls = 0;
    double ms = 0;
    double flops = 0;  // multiply-adds count two
  };
  using Table = std::map<std::pair<std::string, std::string>, Row>;
  void set_recording(bool on) { recording_ = on; }
  const Table& table() const { return table_; }
  void clear() { table_.clear(); }
  // The table as text, slowest first: op, shape, calls, ms, share of `step_ms` (the step's wall
  // time; what no op accounts for is the engine, communication and the host), GFLOP, GFLOP/s.
  std::string format(double step_ms) const;

  std::string_view name() const override { return inner_->name(); }
  bool host_addressable() const override { return inner_->host_addressable(); }
  void* stream_handle() const override { return inner_->stream_handle(); }
  DType weight_dtype(DType working) const override { return inner_->weight_dtype(working); }
  DType activation_dtype(DType working) const override { return inner_->activation_dtype(working); }
  DType grad_dtype(DType stored) const override { return inner_->grad_dtype(stored); }
  int logits_row_stride(int V) const override { return inner_->logits_row_stride(V); }
  void matmul_gelu_forward(TensorRef out, TensorRef pre, TensorView inp, TensorView weight,
                           TensorView bias, int N, int C, int OC) override;
  void matmul_dgelu_backward(TensorRef dpre, TensorRef scratch, TensorRef dweight, TensorRef dbias,
                             TensorView dout, TensorView act, TensorView weight, TensorView pre,
                             int N, int C, int OC) override;
  size_t classifier_chunk_bytes() const override { return inner_->classifier_chunk_bytes(); }
  absl::StatusOr<std::string> prepare_attention(DType act, int B, int T, int NH, int KVH,
                                                int hd) override {
    return inner_->prepare_attention(act, B, T, NH, KVH, hd);
  }
  bool pin_host(void* p, size_t bytes) override { return inner_->pin_host(p, bytes); }
  void unpin_host(void* p, size_t bytes) override { inner_->unpin_host(p, bytes); }
  uint64_t copy_to_host_async(void* dst, const void* src, size_t bytes) override {
    return inner_->copy_to_host_async(dst, src, bytes);
  }
  uint64_t copy_to_device_async(void* dst, const void* src, size_t bytes) override {
    return inner_->copy_to_device_async(dst, src, bytes);
  }
  uint64_t copy_to_device_unjoined(void* dst, const void* src, size_t bytes) override {
    return inner_->copy_to_device_unjoined(dst, src, bytes);
  }
  void join_copy(uint64_t ticket) override { inner_->join_copy(ticket); }
  void wait_copy(uint64_t ticket) override { inner_->wait_copy(ticket); }
  // Memory is the inner backend's: its tracker counts every byte (also what it allocates for
  // itself) and its limit applies.
  MemoryTracker& tracker() override { return inner_->tracker(); }
  void set_memory_limit(size_t bytes) override { inner_->set_memory_limit(bytes); }
  size_t memory_limit() const override { return inner_->memory_limit(); }

#include "model/backend_kernels.inc"  // NOLINT: memory and kernel overrides

 private:
  // Runs f; while recording, waits for the device and adds the time to (op, shape).
  template <class F>
  void timed(const char* op, std::string shape, double flops, F&& f);

  std::unique_ptr<Backend> inner_;
  bool recording_ = false;
  Table table_;
};

}  // namespace zt
