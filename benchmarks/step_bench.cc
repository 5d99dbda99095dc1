// The optimizer phase of a training step at memory speed: Engine::step() (gradient norm, fp16
// unscale and clipping folded into one factor, AdamW on the master weights, refresh of the
// working copy, stage 2's all-gather, zeroed gradients) in parameters/s, against the Adam
// access-pattern bound (benchmarks/bandwidth.h) measured in the same run on the same threads.
// Where the engine sums the gradient norm in the pass that writes the reduced gradient (in the
// backward), the phase counts what that adds to the pass, measured here on the same elements.
//
//   build/benchmarks/step_bench --model gpt2-124m --dtype bf16
//   mpirun -np 2 build/benchmarks/step_bench --model gpt2-124m --dtype bf16 --stage 2
//   ... --stage 2 --node-shared 1   # one working copy per node, no all-gather (EngineOptions)
//   build/benchmarks/step_bench --model tinyllama-1.1b --layers 2 --dtype fp32   # TinyLlama-shaped
//
// With N ranks each rank updates its shard while the others update theirs, so the figure is
// Ψ / step time, and the bound is N × (shard / pattern time) with every rank streaming at once.
// Prints one JSON line (rank 0).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/bandwidth.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "zero/engine.h"
#include "zero/mpi_comm.h"

namespace zt {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Flags {
  std::string model = "gpt2-124m", dtype = "bf16";
  int layers = -1, stage = 0, steps = 5, threads = 0, node_shared = 0;
};

// The flags as pairs; false (after saying why on stderr) for an unknown one.
bool parse_flags(int argc, char** argv, Flags& f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model")
      f.model = v;
    else if (a == "--dtype")
      f.dtype = v;
    else if (a == "--layers")
      f.layers = std::stoi(v);
    else if (a == "--stage")
      f.stage = std::stoi(v);
    else if (a == "--steps")
      f.steps = std::stoi(v);
    else if (a == "--threads")
      f.threads = std::stoi(v);
    else if (a == "--node-shared")
      f.node_shared = std::stoi(v);
    else {
      std::fprintf(stderr,
                   "error: unknown flag %s (--model --dtype --layers --stage --steps "
                   "--threads --node-shared 0|1)\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The gradient norm's Σ g² is summed in the pass that writes the reduced gradient (the
// backward's, untimed in the step): what that adds to the pass (the slowest rank's), against a
// separate pass as the step made before, on this rank's `g32.size()` owned elements
// (alternating, medians of `steps`).
struct NormCost {
  double fused_s = 0, pass_s = 0;
};
NormCost norm_cost(Backend* be, Communicator* comm, DType gt, const std::vector<float>& g32,
                   int steps) {
  const size_t owned = g32.size();
  DeviceBuffer gw(be, owned * dtype_size(gt), MemCategory::kWorkspace);
  DeviceBuffer gx(be, owned * 4, MemCategory::kWorkspace);
  be->copy_to_device(gx.data(), g32.data(), owned * 4);
  std::vector<double> plain, fused, separate;
  auto timed = [&](auto fn) {  // every rank at once, as in the backward
    comm->barrier();
    const double t0 = now_s();
    fn();
    return now_s() - t0;
  };
  for (int s = 0; s <= steps; ++s) {
    double ss = 0;
    const double a =
        timed([&] { be->scale_add(gw.data(), gt, gx.f32(), 0.5f, false, owned, nullptr); });
    const double b =
        timed([&] { be->scale_add(gw.data(), gt, gx.f32(), 0.5f, false, owned, &ss); });
    const double c = timed([&] { ss += be->sum_squares(gw.data(), gt, owned); });
    if (s > 0) plain.push_back(a), fused.push_back(b), separate.push_back(c);
  }
  NormCost r{std::max(0.0, median(fused) - median(plain)), median(separate)};
  comm->all_reduce_scalars(&r.fused_s, 1, ScalarOp::kMax);
  return r;
}

int run(int argc, char** argv) {
  Flags flags;
  if (!parse_flags(argc, argv, flags)) return 2;
  const std::string& model = flags.model;
  const std::string& dtype = flags.dtype;
  const int layers = flags.layers, stage = flags.stage, steps = flags.steps,
            node_shared = flags.node_shared;
  int threads = flags.threads;
  auto cfg = preset(model);
  auto dt = parse_dtype(dtype);
  if (!cfg.ok() || !dt.ok()) {
    std::fprintf(stderr, "error: %s\n",
                 std::string((cfg.ok() ? dt.status() : cfg.status()).message()).c_str());
    return 2;
  }
  if (layers > 0) cfg->n_layer = layers;
  auto comm = make_host_communicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(comm.status().message()).c_str());
    return 2;
  }
  const int world = (*comm)->world_size(), rank = (*comm)->rank();
  if (threads <= 0) threads = std::max(1, omp_get_num_procs() / world);
  auto be = make_cpu_backend(threads);
  const ParamLayout layout(*cfg);
  EngineOptions eo;
  eo.param_dtype = eo.grad_dtype = *dt;
  eo.zero.stage = stage;
  eo.gradient_clipping = 1.0f;
  eo.optimizer = AdamWParams{.weight_decay = 0.1};
  eo.node_shared_params = node_shared != 0;
  Engine engine(layout, be.get(), comm->get(), eo);

  // Gradients for every unit (untimed: the backward's work, including stage 2's reduce-scatter),
  // where the transformer's backward puts them: a block's into the stored gradient itself at
  // stages 0-1 (the CPU's kernels add into its dtype: Engine::grads_stored), the embedding's and
  // the head's (16-bit; fp32 ones are the accumulator) and every unit's at stage 2 into an fp32
  // accumulator folded in by a pass that also sums the norm. `folded`: the owned elements that
  // pass writes.
  const auto is_block = [&](int u) {
    return u != layout.embedding_unit() && u != layout.head_unit();
  };
  size_t largest = 0, owned = 0, folded = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    largest = std::max(largest, engine.padded_numel(u));
    owned += engine.shard_numel(u);
    if (stage >= 2 || (!is_block(u) && *dt != DType::kF32)) folded += engine.shard_numel(u);
  }
  const std::vector<float> host_grad(largest, 1e-4f);
  auto fill_grads = [&] {
    engine.begin_pass();
    engine.set_gradient_accumulation_boundary(true);
    for (int u = 0; u < layout.num_units(); ++u) {
      const TensorRef g = is_block(u) ? engine.grads_stored(u) : TensorRef(engine.grads(u));
      be->convert(host_grad.data(), DType::kF32, g.data, g.dtype, engine.padded_numel(u));
      engine.reduce_gradients(u);
    }
  };
  // The bound: this rank's owned elements through the Adam pattern, every rank at once.
  std::vector<float> p(owned, 1.f), m(owned, 0.f), v(owned, 0.f), g32(owned, 1e-4f);
  std::vector<uint16_t> g16(owned, 0x3f80), out16(owned);
  const bool bf16 = *dt != DType::kF32;
  // Steps and pattern passes alternate, so a busy moment affects both alike.
  std::vector<double> times, pattern, waits;
  for (int s = 0; s <= steps; ++s) {
    fill_grads();
    (*comm)->barrier();
    engine.reset_comm_wait();
    double t0 = now_s();
    auto st = engine.step(1e-4f);
    const double t = now_s() - t0;
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.status().message()).c_str());
      return 2;
    }
    (*comm)->barrier();
    t0 = now_s();
    bench::adam_pattern(p.data(), m.data(), v.data(), g32.data(), g16.data(), out16.data(), owned,
                        bf16);
    const double tp = now_s() - t0;
    if (s > 0) times.push_back(t), pattern.push_back(tp), waits.push_back(engine.comm_wait_ms());
  }
  const NormCost norm = norm_cost(be.get(), comm->get(), eo.grad_dtype, g32, steps);
  // Each step and the pattern pass right after it form a pair (the slowest rank's times); the
  // ratio is the median of the pairs' ratios, so a slow minute of this shared machine's
  // memory moves both sides of a pair alike.
  (*comm)->all_reduce_scalars(times.data(), (int)times.size(), ScalarOp::kMax);
  (*comm)->all_reduce_scalars(pattern.data(), (int)pattern.size(), ScalarOp::kMax);
  const double norm_fused_s = norm.fused_s;
  // The phase is the step plus, for the elements whose norm the engine sums in the pass that
  // folds the gradient in (`folded`; the step sums the rest), what that adds to the pass.
  const double extra_s = norm_fused_s * (double)folded / (double)owned;
  const double psi = (double)layout.total_numel();
  std::vector<double> ratios, phases;
  for (size_t i = 0; i < times.size(); ++i) {
    phases.push_back(times[i] + extra_s);
    ratios.push_back((psi / phases.back()) / (world * (owned / pattern[i])));
  }
  const double norm_fused_ms = norm_fused_s * 1e3, norm_pass_ms = norm.pass_s * 1e3;
  const double step_s = median(times), pattern_s = median(pattern);
  const double rate = psi / median(phases) / 1e9, bound = world * (owned / pattern_s) / 1e9;
  if (rank == 0)
    std::printf(
        "{\"model\": \"%s\", \"layers\": %d, \"params\": %.0f, \"dtype\": \"%s\", "
        "\"stage\": %d, \"world\": %d, \"threads_per_rank\": %d, \"step_ms\": %.1f, "
        "\"phase_ms\": %.1f, "
        "\"comm_wait_ms\": %.1f, "
        "\"Gparams\": %.4f, \"bound_Gparams\": %.4f, \"of_bound\": %.3f, "
        "\"norm_fused_extra_ms\": %.1f, \"norm_pass_ms\": %.1f, \"folded\": %.3f, "
        "\"node_shared\": %d}\n",
        model.c_str(), cfg->n_layer, psi, dtype.c_str(), stage, world, threads, step_s * 1e3,
        median(phases) * 1e3, median(waits), rate, bound, median(ratios), norm_fused_ms,
        norm_pass_ms, (double)folded / (double)owned, engine.node_shared() ? 1 : 0);
  return 0;
}

}  // namespace
}  // namespace zt

int main(int argc, char** argv) {
  std::unique_ptr<zt::MpiRuntime> mpi;
  if (zt::launched_under_mpi()) {
    auto rt = zt::MpiRuntime::init(&argc, &argv);
    if (!rt.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(rt.status().message()).c_str());
      return 2;
    }
    mpi = std::move(*rt);
  }
  return zt::run(argc, argv);
}
