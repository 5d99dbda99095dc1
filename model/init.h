// Random initialisation for training from scratch, as GPT-2 / llm.c: matrices and embeddings
// N(0, 0.02^2); residual output projections (attn_out.w, fc_out.w) N(0, (0.02/sqrt(2L))^2)
// (GPT-2 paper, section 2.3; we apply it to LLaMA too, where HF uses plain N(0, 0.02^2));
// norm weights 1; biases 0.
#pragma once

#include <cstdint>
#include <span>

#include "model/config.h"
#include "model/layout.h"

namespace zt {

// Fills unit u's fp32 values (layout order, numel elements), in parallel (OpenMP). Deterministic
// in (seed, u), independent of other units and of the thread count, so every rank initialises
// any unit identically.
void init_unit(const ModelConfig& c, const Unit& unit, int u, uint64_t seed, std::span<float> out);

}  // namespace zt
