// The four calls the transformer makes at unit boundaries (docs/architecture.md "ZeRO engine"). The
// ZeRO engine (zero/engine.h) implements them per stage; the model never knows where parameters
// live or how gradients are reduced.
#pragma once

#include "common/dtype.h"

namespace zt {

class UnitEngine {
 public:
  virtual ~UnitEngine() = default;
  // The parameters of `unit` (the unit's flat layout, ParamLayout order) on the device, in
  // Backend::weight_dtype (fp32 on the CPU: a 16-bit unit widened once for its many kernel
  // calls, the decoding step's head; the working dtype on a GPU), valid until the matching
  // release(unit).
  // Calls nest: a unit fetched twice needs two releases.
  virtual TensorView fetch(int unit) = 0;
  // The same parameters as stored, in their working dtype (*t: fp32, bf16 or fp16), with no fp32
  // copy made: for kernels that widen what they read as they go (a CPU GEMM a block of the
  // weight's rows at a time, the embedding lookup its rows). Released by release(unit) like
  // fetch().
  virtual const void* fetch_stored(int unit, DType* t) {
    const TensorView v = fetch(unit);
    *t = v.dtype;
    return v.data;
  }
  virtual void release(int unit) = 0;
  // fp32 gradient accumulator of `unit` (same layout) on the device; backward kernels add
  // into it. Valid until reduce_gradients(unit).
  virtual float* grads(int unit) = 0;
  // The same gradient for kernels that add at most one contribution to each element per
  // micro-step (a block's): the stored gradient itself, in its dtype, where the backend's
  // kernels add into that dtype (Backend::grad_dtype) and nothing reduces the micro-step before
  // it is added (a whole unit at stages 0-1), so no fp32 accumulator is zeroed and folded; else
  // grads(unit). Valid until reduce_gradients(unit), which then has nothing to fold.
  virtual TensorRef grads_stored(int unit) { return grads(unit); }
  // The unit's backward for this micro-step is complete: reduce (all-reduce / reduce-scatter)
  // or accumulate its gradients as the stage requires.
  virtual void reduce_gradients(int unit) = 0;
};

}  // namespace zt
