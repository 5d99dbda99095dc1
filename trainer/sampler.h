// Text sampling from a trained model: autoregressive, temperature and top-k (llm.c samples
// with temperature 1 from the full distribution; top-k 0 keeps that).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace zt {

// Draws a token id from logits (V) scaled by 1/temperature, restricted to the top_k most
// likely ids when top_k > 0; temperature <= 0 is greedy (argmax).
int sample_token(std::span<const float> logits, float temperature, int top_k, std::mt19937_64& rng);

}  // namespace zt
