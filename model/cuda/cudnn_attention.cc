// cuDNN's SDPA forward and backward (cudnn_attention.h), through the cuDNN frontend's graph
// API with cuDNN loaded at run time (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: every cuDNN call
// goes through a symbol looked up in the library open() loads). Built only with the CUDA
// toolkit and the frontend's headers (model/CMakeLists.txt); cudnn_absent.cc otherwise.
#include "model/cuda/cudnn_attention.h"

#include <cuda_runtime.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <unordered_map>

#include "common/status.h"
#include "model/backend.h"

// The library handle the frontend's shim looks symbols up in (it declares, we define).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace zt {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Tensor ids in the graphs and their variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

absl::Status check(const fe::error_object& e, const char* step, const AttentionShape& s) {
  if (e.is_good()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cuDNN attention (", std::string(dtype_name(s.dtype)), ", B ", s.B, ", T ", s.T,
                   ", NH ", s.NH, ", KVH ", s.KVH, ", hd ", s.hd, "): ", step, ": ", e.err_msg,
                   "; use --attention flash"));
}

// Strides (elements) of q, k and v heads in qkv, and of the (B,T,NH*hd) out and dout, as
// cuDNN's (b, h, t, d) dims read them: no transposes.
std::vector<int64_t> qkv_strides(const AttentionShape& s) {
  const int64_t W = (int64_t)(s.NH + 2 * s.KVH) * s.hd;
  return {s.T * W, s.hd, W, 1};
}
// The q, k and v heads' starts in a (B,T,(NH+2*KVH)*hd) tensor laid out as qkv: its own, or
// its gradient dqkv.
std::array<void*, 3> qkv_heads(const void* qkv, const AttentionShape& s) {
  char* q = static_cast<char*>(const_cast<void*>(qkv));
  const size_t head = (size_t)s.hd * dtype_size(s.dtype);
  return {q, q + s.NH * head, q + (s.NH + s.KVH) * head};
}
std::vector<int64_t> out_strides(const AttentionShape& s) {
  const int64_t W = (int64_t)s.NH * s.hd;
  return {s.T * W, s.hd, W, 1};
}

class CudnnAttentionImpl final : public CudnnAttention {
 public:
  CudnnAttentionImpl(Backend* be, cudnnHandle_t handle, std::string version)
      : be_(be), handle_(handle), version_(std::move(version)) {}
  ~CudnnAttentionImpl() override {
    if (workspace_) be_->free(workspace_, workspace_bytes_, MemCategory::kWorkspace);
    graphs_.clear();
    try {
      fe::detail::destroy_handle(handle_);
    } catch (const std::exception&) {  // nothing to do about it on the way out
    }
  }

  std::string version() const override { return version_; }

  absl::Status prepare(const AttentionShape& s, size_t max_workspace) override {
    if (graphs_.count(s)) return absl::OkStatus();
    if (s.dtype != DType::kBF16 && s.dtype != DType::kF16)
      return absl::FailedPreconditionError(absl::StrCat(
          "cuDNN attention runs on bf16 or fp16 activations, not ",
          std::string(dtype_name(s.dtype)),
          "; use --attention flash (or auto), or a 16-bit dtype (\"bf16\": {\"enabled\": true})"));
    Graphs g;
    int64_t bytes = 0;
    try {  // the shim throws when a symbol is missing
      ZT_ASSIGN_OR_RETURN(g.fwd, build_forward(s));
      ZT_ASSIGN_OR_RETURN(g.bwd, build_backward(s));
      for (const auto* graph : {&g.fwd, &g.bwd}) {
        int64_t b = 0;
        ZT_RETURN_IF_ERROR(check((*graph)->get_workspace_size(b), "workspace size", s));
        bytes = std::max(bytes, b);
      }
    } catch (const std::exception& e) {
      return absl::FailedPreconditionError(absl::StrCat("cuDNN attention: ", e.what()));
    }
    if ((size_t)bytes > max_workspace)
      return absl::FailedPreconditionError(absl::StrCat(
          "cuDNN attention needs ", bytes >> 20, " MiB of workspace at B ", s.B, ", T ", s.T,
          ", NH ", s.NH, " (its deterministic backward keeps B x NH x T x T), more than the ",
          max_workspace >> 20, " MiB allowed; use --attention flash"));
    grow_workspace((size_t)bytes);
    graphs_.emplace(s, std::move(g));
    return absl::OkStatus();
  }

  void forward(void* out, float* lse, const void* qkv, const AttentionShape& s) override {
    const auto [q, k, v] = qkv_heads(qkv, s);
    std::unordered_map<int64_t, void*> pack = {{kQ, q}, {kK, k}, {kV, v}, {kO, out}, {kStats, lse}};
    execute(*graphs(s).fwd, pack, "forward", s);
  }

  void backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                const AttentionShape& s) override {
    const auto [q, k, v] = qkv_heads(qkv, s);
    const auto [dq, dk, dv] = qkv_heads(dqkv, s);
    std::unordered_map<int64_t, void*> pack = {{kQ, q},
                                               {kK, k},
                                               {kV, v},
                                               {kO, const_cast<void*>(out)},
                                               {kDO, const_cast<void*>(dout)},
                                               {kStats, const_cast<float*>(lse)},
                                               {kDQ, dq},
                                               {kDK, dk},
                                               {kDV, dv}};
    execute(*graphs(s).bwd, pack, "backward", s);
  }

 private:
  struct Graphs {
    std::shared_ptr<fe::graph::Graph> fwd, bwd;
  };

  std::shared_ptr<fe::graph::Graph> new_graph(const AttentionShape& s) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(s.dtype == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
  }
  static TensorPtr input(fe::graph::Graph& g, const char* name, Uid uid, int heads,
                         std::vector<int64_t> strides, const AttentionShape& s) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({s.B, heads, s.T, s.hd})
                        .set_stride(std::move(strides)));
  }
  static void stats_layout(fe::graph::Tensor_attributes& t, const AttentionShape& s) {
    t.set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.B, s.NH, s.T, 1})
        .set_stride({(int64_t)s.NH * s.T, s.T, 1, 1});
  }
  // Validates, lowers, picks cuDNN's heuristic's first supported engine and builds its plan.
  absl::Status finish(fe::graph::Graph& g, const AttentionShape& s) {
    ZT_RETURN_IF_ERROR(check(g.validate(), "validate", s));
    ZT_RETURN_IF_ERROR(check(g.build_operation_graph(handle_), "operation graph", s));
    ZT_RETURN_IF_ERROR(check(g.create_execution_plans({fe::HeurMode_t::A}), "heuristics", s));
    ZT_RETURN_IF_ERROR(check(g.check_support(handle_), "support", s));
    return check(g.build_plans(handle_), "plans", s);
  }

  absl::StatusOr<std::shared_ptr<fe::graph::Graph>> build_forward(const AttentionShape& s) {
    auto g = new_graph(s);
    TensorPtr Q = input(*g, "Q", kQ, s.NH, qkv_strides(s), s);
    TensorPtr K = input(*g, "K", kK, s.KVH, qkv_strides(s), s);
    TensorPtr V = input(*g, "V", kV, s.KVH, qkv_strides(s), s);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("sdpa")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(1.f / std::sqrt((float)s.hd));
    auto [O, stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(kO).set_dim({s.B, s.NH, s.T, s.hd}).set_stride(out_strides(s));
    stats->set_output(true);
    stats_layout(*stats, s);
    ZT_RETURN_IF_ERROR(finish(*g, s));
    return g;
  }

  absl::StatusOr<std::shared_ptr<fe::graph::Graph>> build_backward(const AttentionShape& s) {
    auto g = new_graph(s);
    TensorPtr Q = input(*g, "Q", kQ, s.NH, qkv_strides(s), s);
    TensorPtr K = input(*g, "K", kK, s.KVH, qkv_strides(s), s);
    TensorPtr V = input(*g, "V", kV, s.KVH, qkv_strides(s), s);
    TensorPtr O = input(*g, "O", kO, s.NH, out_strides(s), s);
    TensorPtr dO = input(*g, "dO", kDO, s.NH, out_strides(s), s);
    TensorPtr stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats"));
    stats_layout(*stats, s);
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("sdpa_backward")
                    .set_causal_mask(true)
                    .set_deterministic_algorithm(true)
                    .set_attn_scale(1.f / std::sqrt((float)s.hd));
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
    dQ->set_output(true).set_uid(kDQ).set_dim({s.B, s.NH, s.T, s.hd}).set_stride(qkv_strides(s));
    dK->set_output(true).set_uid(kDK).set_dim({s.B, s.KVH, s.T, s.hd}).set_stride(qkv_strides(s));
    dV->set_output(true).set_uid(kDV).set_dim({s.B, s.KVH, s.T, s.hd}).set_stride(qkv_strides(s));
    ZT_RETURN_IF_ERROR(finish(*g, s));
    return g;
  }

  void grow_workspace(size_t bytes) {
    if (bytes <= workspace_bytes_) return;
    if (workspace_) be_->free(workspace_, workspace_bytes_, MemCategory::kWorkspace);
    workspace_ = be_->alloc(bytes, MemCategory::kWorkspace);
    workspace_bytes_ = bytes;
  }

  // The graphs of s; prepare(s) came first (CudaBackend::cudnn_runs).
  const Graphs& graphs(const AttentionShape& s) {
    const auto it = graphs_.find(s);
    if (it == graphs_.end()) fail(absl::InternalError("cuDNN attention: graphs not prepared"));
    return it->second;
  }

  void execute(const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack,
               const char* what, const AttentionShape& s) {
    try {
      const absl::Status st = check(g.execute(handle_, pack, workspace_), what, s);
      if (!st.ok()) fail(st);
    } catch (const std::exception& e) {
      fail(absl::InternalError(absl::StrCat("cuDNN attention ", what, ": ", e.what())));
    }
  }

  // A failure inside a step: the kernels' interface has no Status (as a CUDA error there).
  [[noreturn]] static void fail(const absl::Status& st) {
    std::fprintf(stderr, "zerotrain: %s\n", std::string(st.message()).c_str());
    std::abort();
  }

  Backend* be_;
  cudnnHandle_t handle_;
  std::string version_;
  std::map<AttentionShape, Graphs> graphs_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

// "cuDNN 9.10.2" of cudnnGetVersion's 91002.
std::string cudnn_version_text(size_t v) {
  return absl::StrCat("cuDNN ", v / 10000, ".", v % 10000 / 100, ".", v % 100);
}

// Loads libcudnn.so.9 once into the frontend's handle; the loader's message when it cannot.
absl::Status load_cudnn() {
  if (cudnn_frontend::cudnn_dlhandle) return absl::OkStatus();
  dlerror();
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(why ? why : "libcudnn.so.9 not found");
  }
  cudnn_frontend::cudnn_dlhandle = lib;
  return absl::OkStatus();
}

}  // namespace

std::string cudnn_library_report() {
  if (const absl::Status s = load_cudnn(); !s.ok())
    return absl::StrCat("cuDNN not found: ", s.message());
  using GetVersion = size_t (*)();
  auto get = reinterpret_cast<GetVersion>(dlsym(cudnn_frontend::cudnn_dlhandle, "cudnnGetVersion"));
  if (!get) return "libcudnn.so.9 loaded, without cudnnGetVersion";
  return cudnn_version_text(get()) + " (libcudnn.so.9)";
}

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::open(Backend* be, void* stream) {
  if (const absl::Status s = load_cudnn(); !s.ok())
    return absl::FailedPreconditionError(absl::StrCat(
        "cuDNN 9 could not be loaded (", s.message(),
        "): install cuDNN 9 for CUDA 13 (NVIDIA's cudnn9-cuda-13 package, or pip's "
        "nvidia-cudnn-cu13) and put the folder holding libcudnn.so.9 on LD_LIBRARY_PATH, or "
        "use --attention flash"));
  // The frontend opens the CUDA runtime itself, trying libcudart.so.12 before .13: name ours,
  // unless the user did (its own variable), so that a CUDA 12 runtime on the path stays out.
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", /*overwrite=*/0);
  cudnnHandle_t handle = nullptr;
  std::string version;
  try {
    const size_t v = fe::detail::get_backend_version();
    if (v < 90000)
      return absl::FailedPreconditionError(
          absl::StrCat("cuDNN attention needs cuDNN 9 or newer; found version ", v));
    version = cudnn_version_text(v);
    if (const cudnnStatus_t st = fe::detail::create_handle(&handle); st != CUDNN_STATUS_SUCCESS)
      return absl::FailedPreconditionError(
          absl::StrCat("cuDNN attention: cudnnCreate failed: ", fe::detail::get_error_string(st)));
    if (const cudnnStatus_t st = fe::detail::set_stream(handle, static_cast<cudaStream_t>(stream));
        st != CUDNN_STATUS_SUCCESS) {
      fe::detail::destroy_handle(handle);
      return absl::FailedPreconditionError(absl::StrCat("cuDNN attention: cudnnSetStream failed: ",
                                                        fe::detail::get_error_string(st)));
    }
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat("cuDNN attention: ", e.what()));
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttentionImpl(be, handle, std::move(version)));
}

}  // namespace zt
