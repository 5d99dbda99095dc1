// cuDNN's fused attention for the CUDA backend (`--attention cudnn`, or `auto` where cuDNN
// loads): FlashAttention's interface (Backend::attention_forward / attention_backward) run by
// cuDNN 9's SDPA forward and backward graphs, built through cuDNN's frontend, as llm.c's
// cudnn_att.cpp does. cuDNN is loaded at run time (dlopen of libcudnn.so.9), so a binary built
// here runs on a machine without it and `auto` falls back to the flash kernels. It cannot run on
// the CUDA emulation: there, and in a build without the frontend's headers, open() says why.
// Plain C++ (no CUDA types), so the kernels' files include it in both builds.
#pragma once

#include <memory>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace zt {

class Backend;

// One attention problem: qkv (B,T,(NH+2*KVH)*hd) laid out [q heads | k heads | v heads] in a
// 16-bit dtype, causal, scale 1/sqrt(hd); as Backend::attention_forward.
struct AttentionShape {
  DType dtype;
  int B, T, NH, KVH, hd;
  bool operator<(const AttentionShape& o) const {
    return std::tie(dtype, B, T, NH, KVH, hd) < std::tie(o.dtype, o.B, o.T, o.NH, o.KVH, o.hd);
  }
};

class CudnnAttention {
 public:
  virtual ~CudnnAttention() = default;
  // Loads cuDNN 9 and makes a handle whose work runs on `stream` (a cudaStream_t); scratch
  // (cuDNN's workspace) comes from `be`, counted as workspace. Errors (FailedPrecondition):
  // libcudnn.so.9 not found or too old (the loader's message; it searches LD_LIBRARY_PATH), a
  // build without the cuDNN frontend's headers, the emulation.
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> open(Backend* be, void* stream);
  // "cuDNN 9.10.2", the library loaded.
  virtual std::string version() const = 0;
  // Builds the forward and backward graphs of `s` once (the slow part, a few hundred ms) and
  // keeps them, with cuDNN's workspace for them (B·NH·T²·2 bytes on Hopper for the
  // deterministic backward: 192 MiB at GPT-2's 8 x 1024). Error (FailedPrecondition, cuDNN's
  // message) when cuDNN supports them not (a dtype other than bf16 / fp16, hd above 128 or not
  // a multiple of 8, a GPU before Ampere) or the workspace would pass max_workspace bytes.
  virtual absl::Status prepare(const AttentionShape& s, size_t max_workspace) = 0;
  // out (B,T,NH*hd) and lse (B,NH,T; fp32, natural log) as Backend::attention_forward;
  // prepare(s) first (aborts otherwise, or when cuDNN fails at run time).
  virtual void forward(void* out, float* lse, const void* qkv, const AttentionShape& s) = 0;
  // dqkv (B,T,(NH+2*KVH)*hd) = the gradient (written, not added), from dout and out (B,T,NH*hd)
  // and the forward's lse; deterministic (cuDNN's deterministic backward).
  virtual void backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                        const float* lse, const AttentionShape& s) = 0;
};

// The cuDNN this process can load, for `zerotrain --version`: "cuDNN 9.10.2 (libcudnn.so.9)", or
// why there is none ("cuDNN not found: " and the loader's message; "cuDNN not built: " and the
// reason). Loads the library when it is there, as open() would.
std::string cudnn_library_report();

}  // namespace zt
