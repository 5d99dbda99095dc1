// Sampling speed: tokens generated greedily from one start token by full recomputation
// (Transformer::last_logits over the sequence so far, the trainer's sampler before the KV
// cache) and by KV-cache decoding (Transformer::decode), same model, weights and threads,
// alternating rounds; prints milliseconds per token of each and the ratio, and whether both
// picked the same tokens.
//
//   build/benchmarks/sample_bench [--model shakespeare-llama] [--tokens 256] [--rounds 3]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/init.h"
#include "model/transformer.h"
#include "zero/comm.h"
#include "zero/engine.h"

int main(int argc, char** argv) {
  std::string model = "shakespeare-llama";
  int tokens = 256, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--tokens") tokens = std::stoi(v);
    else if (a == "--rounds") rounds = std::stoi(v);
    else {
      std::fprintf(stderr, "error: unknown flag %s (--model --tokens --rounds)\n", a.c_str());
      return 2;
    }
  }
  auto c = zt::preset(model);
  if (!c.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(c.status().message()).c_str());
    return 2;
  }
  auto be = zt::make_cpu_backend(omp_get_max_threads());
  auto comm = zt::make_single_process_communicator();
  zt::Transformer tr(*c, be.get(), 1, tokens);
  zt::Engine engine(tr.layout(), be.get(), comm.get(), zt::EngineOptions{});
  const auto& units = tr.layout().units();
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float> p(units[u].numel);
    zt::init_unit(*c, units[u], (int)u, 1, p);
    engine.set_unit_params((int)u, p);
  }
  std::vector<float> logits(c->vocab_size);
  auto argmax = [&] {
    return (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  using clock = std::chrono::steady_clock;
  std::vector<double> full_ms, cached_ms;
  std::vector<int> full, cached;
  for (int r = 0; r < rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      const bool use_cache = (side == 0) == (r % 2 == 1);
      std::vector<int> seq = {1};
      const auto t0 = clock::now();
      for (int i = 0; i + 1 < tokens; ++i) {
        if (use_cache)
          tr.decode(engine, seq.back(), i, logits.data());
        else
          tr.last_logits(engine, seq.data(), (int)seq.size(), logits.data());
        seq.push_back(argmax());
      }
      const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      (use_cache ? cached_ms : full_ms).push_back(ms / (tokens - 1));
      (use_cache ? cached : full) = seq;
    }
  }
  std::sort(full_ms.begin(), full_ms.end());
  std::sort(cached_ms.begin(), cached_ms.end());
  const double f = full_ms[full_ms.size() / 2], k = cached_ms[cached_ms.size() / 2];
  std::printf("| %s, %d tokens, %d threads | ms per token |\n|---|---:|\n", model.c_str(), tokens,
              omp_get_max_threads());
  std::printf("| full recomputation (last_logits) | %.2f |\n| KV cache (decode) | %.2f |\n", f, k);
  std::printf("\nKV cache: %.1fx faster (median of %d alternating rounds); same tokens: %s\n",
              f / k, rounds, full == cached ? "yes" : "NO");
  return full == cached ? 0 : 1;
}
