// Lion and Adagrad on the CPU, and the dispatch by optimizer (model/cpu/optimizer_step.h).
// Compiled with -ffp-contract=off -O3 (model/CMakeLists.txt): the element loop below is
// vectorised by the compiler at each SIMD level with no fused multiply-add, so every level
// rounds as the scalar functions of model/optimizer_math.h do.
#include "model/cpu/optimizer_step.h"

#include <algorithm>
#include <cstring>

#include "common/parallel.h"
#include "common/simd_kernels.h"
#include "model/cpu/cpu_adam.h"
#include "model/cpu/cpu_backend.h"

namespace zt {
namespace {

constexpr size_t kTile = 8192;  // elements: 8K x (4 + 8 + 8) B of streams, within L2

struct Lion {
  using Coefs = LionCoefs;
  static float element(float p, float g, float& m, const Coefs& c) {
    return lion_element(p, g, m, c);
  }
};
struct Adagrad {
  using Coefs = AdagradCoefs;
  static float element(float p, float g, float& sum, const Coefs& c) {
    return adagrad_element(p, g, sum, c);
  }
};

// One tile of fp32 gradients; inlined into each level's function, which the compiler
// vectorises for that level's registers.
template <class Op>
[[gnu::always_inline]] inline void tile(float* p, const float* g, float* s, size_t n,
                                        const typename Op::Coefs& c) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) p[i] = Op::element(p[i], g[i], s[i], c);
}
template <class Op>
void tile_scalar(float* p, const float* g, float* s, size_t n, const typename Op::Coefs& c) {
  for (size_t i = 0; i < n; ++i) p[i] = Op::element(p[i], g[i], s[i], c);
}
template <class Op>
ZT_TARGET_AVX2 void tile_avx2(float* p, const float* g, float* s, size_t n,
                              const typename Op::Coefs& c) {
  tile<Op>(p, g, s, n, c);
}
template <class Op>
ZT_TARGET_AVX512 void tile_avx512(float* p, const float* g, float* s, size_t n,
                                  const typename Op::Coefs& c) {
  tile<Op>(p, g, s, n, c);
}

template <class Op>
void one_state_step(float* master, void* grad, DType grad_t, float* state, void* out, DType out_t,
                    size_t n, bool zero_grad, const typename Op::Coefs& c, SimdLevel level) {
  using Fn = void (*)(float*, const float*, float*, size_t, const typename Op::Coefs&);
  const Fn fn = level == SimdLevel::kScalar ? tile_scalar<Op>
                : level == SimdLevel::kAvx2 ? tile_avx2<Op>
                                            : tile_avx512<Op>;
  const size_t gb = dtype_size(grad_t);
  for_each_chunk(n, kTile, [&](size_t, size_t begin, size_t end) {
    const size_t k = end - begin;
    char* g = static_cast<char*>(grad) + begin * gb;
    alignas(64) float wide[kTile];  // a 16-bit gradient, widened (exactly)
    const float* gf = reinterpret_cast<const float*>(g);
    if (grad_t != DType::kF32) {
      convert_serial(g, grad_t, wide, DType::kF32, k);
      gf = wide;
    }
    fn(master + begin, gf, state + begin, k, c);
    if (zero_grad) std::memset(g, 0, k * gb);
    if (out)
      convert_serial(master + begin, DType::kF32,
                     static_cast<char*>(out) + begin * dtype_size(out_t), out_t, k);
  });
}

// Muon (model/optimizer_math.h): the matrices' runs element by element (the orthogonalisation
// between the passes costs far more), the other elements' AdamW by CPU Adam.
void muon_step(float* master, void* grad, DType grad_t, float* const* states, void* out,
               DType out_t, size_t n, const OptimizerStep& s, SimdLevel level) {
  const size_t gb = dtype_size(grad_t), ob = dtype_size(out_t);
  const MuonCoefs c = muon_coefs(s);
  const OptimizerStep adam = muon_adam_half(s);
  char* const g = static_cast<char*>(grad);
  char* const o = static_cast<char*>(out);
  for_each_muon_run(s, n, [&](size_t begin, size_t end, bool muon) {
    const size_t k = end - begin;
    char* const gk = g + begin * gb;
    char* const ok = o ? o + begin * ob : nullptr;
    if (!muon) {
      if (s.muon_pass == 1) {
        cpu_adam_step(master + begin, gk, grad_t, states[0] + begin, states[1] + begin, ok, out_t,
                      k, adam, level);
      } else if (ok) {
        convert_serial(master + begin, DType::kF32, ok, out_t, k);
      }
      return;
    }
    for_each_chunk(k, kTile, [&](size_t, size_t b, size_t e) {
      float* const p = master + begin;
      float* const m = states[0] + begin;
      for (size_t i = b; i < e; ++i) {
        const float gi = load_f32(gk, grad_t, i);
        float r;
        if (s.muon_pass == 1) {
          r = muon_momentum_element(gi, m[i], c);  // u, to out
        } else {
          p[i] = muon_apply_element(p[i], gi, c);
          r = p[i];
        }
        if (ok) store_f32(ok, out_t, i, r);
      }
      if (s.muon_pass == 1 && s.zero_grad) std::memset(gk + b * gb, 0, (e - b) * gb);
    });
  });
}

}  // namespace

void cpu_optimizer_step(float* master, void* grad, DType grad_t, float* const* states, void* out,
                        DType out_t, size_t n, const OptimizerStep& s, SimdLevel level) {
  switch (s.kind) {
    case OptimizerKind::kAdamW:
      cpu_adam_step(master, grad, grad_t, states[0], states[1], out, out_t, n, s, level);
      return;
    case OptimizerKind::kLion:
      one_state_step<Lion>(master, grad, grad_t, states[0], out, out_t, n, s.zero_grad,
                           lion_coefs(s), level);
      return;
    case OptimizerKind::kAdagrad:
      one_state_step<Adagrad>(master, grad, grad_t, states[0], out, out_t, n, s.zero_grad,
                              adagrad_coefs(s), level);
      return;
    case OptimizerKind::kMuon:
      muon_step(master, grad, grad_t, states, out, out_t, n, s, level);
      return;
  }
}

void cpu_optimizer_step(float* master, void* grad, DType grad_t, float* const* states, void* out,
                        DType out_t, size_t n, const OptimizerStep& s) {
  cpu_optimizer_step(master, grad, grad_t, states, out, out_t, n, s, cpu_simd_level());
}

void CpuBackend::optimizer_update(float* master, void* grad, DType grad_t, float* const* states,
                                  void* out, DType out_t, size_t n, const OptimizerStep& s) {
  cpu_optimizer_step(master, grad, grad_t, states, out, out_t, n, s);
}

}  // namespace zt
