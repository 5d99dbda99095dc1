// The four calls the transformer makes at unit boundaries (DESIGN.md "ZeRO engine"). The ZeRO
// engine (zero/engine.h) implements them per stage; the model never knows where parameters
// live or how gradients are reduced.
#pragma once

#include "common/dtype.h"

namespace zt {

class UnitEngine {
 public:
  virtual ~UnitEngine() = default;
  // fp32 parameters of `unit` (the unit's flat layout, ParamLayout order) on the device, valid
  // until the matching release(unit). Calls nest: a unit fetched twice needs two releases.
  virtual const float* fetch(int unit) = 0;
  // The same parameters as stored, in their working dtype (*t: fp32, bf16 or fp16), with no fp32
  // copy made: for callers that read a few rows of a large unit (the embedding lookup). Released
  // by release(unit) like fetch().
  virtual const void* fetch_stored(int unit, DType* t) {
    *t = DType::kF32;
    return fetch(unit);
  }
  virtual void release(int unit) = 0;
  // fp32 gradient accumulator of `unit` (same layout) on the device; backward kernels add
  // into it. Valid until reduce_gradients(unit).
  virtual float* grads(int unit) = 0;
  // The unit's backward for this micro-step is complete: reduce (all-reduce / reduce-scatter)
  // or accumulate its gradients as the stage requires.
  virtual void reduce_gradients(int unit) = 0;
};

}  // namespace zt
