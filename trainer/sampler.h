// Text sampling from a trained model: autoregressive, temperature and top-k (llm.c samples
// with temperature 1 from the full distribution; top-k 0 keeps that), decoded with the
// transformer's KV cache; and the `zerotrain sample` command.
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/tokenizer.h"
#include "model/transformer.h"
#include "zero/comm.h"
#include "zero/engine.h"

namespace zt {

// Draws a token id from logits (V) scaled by 1/temperature, restricted to the top_k most
// likely ids when top_k > 0, then to the smallest set of most likely ids whose probability
// reaches top_p when top_p < 1 (nucleus sampling, Holtzman et al. 2020, as transformers'
// TopPLogitsWarper); temperature <= 0 is greedy (argmax).
int sample_token(std::span<const float> logits, float temperature, int top_k, float top_p,
                 std::mt19937_64& rng);

// The sampling flags' ranges, as train and sample both check them: top_k >= 0, temperature
// finite and >= 0, top_p in (0, 1]. Error (InvalidArgument) naming the flag.
absl::Status check_sampling(float temperature, int top_k, float top_p);

struct SampleOptions {
  std::string prompt;  // text the sample continues, after the tokenizer's BOS (if it has one)
  int tokens = 128;    // at most this many; the tokenizer's EOS ends the sample early
  float temperature = 0.8f;
  int top_k = 50;
  uint64_t seed = 1337;
  int window = 256;   // the model's T for this sample: the KV cache holds at most this many
  float top_p = 1.f;  // nucleus sampling (1: off)
};

// Generates with KV-cache decoding (Transformer::decode: O(T) per token). When the context
// reaches `window`, the cache starts over from the last window / 2 tokens. Every rank calls it
// in lockstep (stage-3 decoding is collective; rank 0's draw is broadcast); `out` (rank 0's
// stdout, or null) receives "sample:\n---\n", the prompt, the tokens, "\n---\n". Needs a
// model built for batch >= 1 and T >= window.
void generate(Transformer& model, Engine& engine, Communicator& comm, const Tokenizer& tok,
              const SampleOptions& s, std::FILE* out);

// `zerotrain sample`: a model from init_from (a Hugging Face directory) or a preset with its
// random initialisation (seed), on the CPU backend with `threads` OpenMP threads (0: all), one
// process; prints the sample to stdout. Errors (exit 2 in main): the model, weights or
// tokenizer cannot be loaded, window outside [1, max_seq_len], a tokenizer larger than the
// model's vocabulary, a tokenizer without BOS and no prompt.
struct SampleCommand {
  std::string model, init_from, tokenizer;
  int64_t max_seq_len = 0;
  int threads = 0;
  std::string device = "auto";  // trainer/device.h
  std::string checkpoint;       // a zerotrain checkpoint (or save_dir) instead of init_from
  // "alpaca" or a template file (data/alpaca.h): the prompt is wrapped as an instruction, as
  // instruction fine-tuning saw it. Empty: the prompt as it is.
  std::string prompt_template;
  SampleOptions sample;
  // --seq_len was given: sample.window is the user's (checked); else 256, or the model's
  // max_seq_len when shorter.
  bool window_given = false;
};
absl::Status run_sample(const SampleCommand& cmd);

}  // namespace zt
