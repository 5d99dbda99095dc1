#include "trainer/sampler.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/alpaca.h"
#include "trainer/checkpoint.h"
#include "trainer/device.h"
#include "trainer/model_source.h"

namespace zt {

int sample_token(std::span<const float> logits, float temperature, int top_k, float top_p,
                 std::mt19937_64& rng) {
  const int V = static_cast<int>(logits.size());
  if (temperature <= 0.f)
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  int k = (top_k > 0 && top_k < V) ? top_k : V;
  auto more_likely = [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k < V || top_p < 1.f) std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), more_likely);
  float maxv = -INFINITY;
  for (int i = 0; i < k; ++i) maxv = std::max(maxv, logits[ids[i]]);
  std::vector<double> p(k);
  for (int i = 0; i < k; ++i) p[i] = std::exp((logits[ids[i]] - maxv) / temperature);
  if (top_p < 1.f) {  // keep the most likely ids up to cumulative probability top_p
    const double total = std::accumulate(p.begin(), p.end(), 0.0);
    double cum = 0;
    int keep = 0;
    while (keep < k && cum < top_p * total) cum += p[keep++];
    p.resize(std::max(keep, 1));
  }
  std::discrete_distribution<int> d(p.begin(), p.end());
  return ids[d(rng)];
}

void generate(Transformer& model, Engine& engine, Communicator& comm, const Tokenizer& tok,
              const SampleOptions& s, std::FILE* out) {
  std::vector<int> ctx;
  if (tok.bos_id() >= 0) ctx.push_back(tok.bos_id());
  const std::vector<int> prompt = tok.encode(s.prompt);
  ctx.insert(ctx.end(), prompt.begin(), prompt.end());
  if (ctx.empty()) {
    if (out)
      std::fprintf(out,
                   "sample: skipped (the tokenizer has no BOS: give a prompt, or beside a "
                   "tokenizer.json the model's config.json with its bos_token_id)\n");
    return;
  }
  std::mt19937_64 rng(s.seed);
  std::vector<float> logits(model.config().vocab_size);
  if (out && !tok.note().empty()) std::fprintf(out, "note: %s\n", tok.note().c_str());
  if (out) std::fprintf(out, "sample:\n---\n%s", s.prompt.c_str());
  int pos = 0;
  auto feed = [&](int token) {
    engine.begin_pass();
    model.decode(engine, token, pos++, logits.data());
  };
  auto refill = [&](size_t keep) {  // the window slides by halves
    pos = 0;
    for (size_t i = ctx.size() - std::min(keep, ctx.size()); i < ctx.size(); ++i) feed(ctx[i]);
  };
  refill((size_t)s.window);
  for (int i = 0; i < s.tokens; ++i) {
    // Ranks must agree on when to stop: rank 0's token, through a host scalar sum (token ids
    // are exact in a double; broadcast would move device memory).
    double chosen =
        comm.rank() == 0 ? sample_token(logits, s.temperature, s.top_k, s.top_p, rng) : 0;
    comm.all_reduce_scalars(&chosen, 1, ScalarOp::kSum);
    const int next = static_cast<int>(chosen);
    if (next == tok.eos_id()) break;
    ctx.push_back(next);
    if (out) {
      std::fprintf(out, "%s", tok.decode_token(next).c_str());
      std::fflush(out);
    }
    if (i + 1 == s.tokens) break;
    if (pos == s.window)
      refill((size_t)std::max(1, s.window / 2));
    else
      feed(next);
  }
  model.release_cache();
  if (out) std::fprintf(out, "\n---\n");
}

absl::Status check_sampling(float temperature, int top_k, float top_p) {
  if (!(top_p > 0.f && top_p <= 1.f))
    return absl::InvalidArgumentError("--top_p must be in (0, 1] (1: off)");
  if (top_k < 0)
    return absl::InvalidArgumentError("--top_k must be >= 0 (0: sample from every token)");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    return absl::InvalidArgumentError("--temperature must be a finite number >= 0 (0: greedy)");
  return absl::OkStatus();
}

absl::Status run_sample(const SampleCommand& cmd) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError(m); };
  SampleOptions s = cmd.sample;
  // A Hugging Face directory (a zerotrain export with --tokenizer, a downloaded model) may carry
  // its own: Tokenizer::load takes the directory.
  std::string tokenizer = cmd.tokenizer;
  std::error_code ec;
  const std::filesystem::path from(cmd.init_from);
  if (tokenizer.empty() && !cmd.init_from.empty())
    for (const char* name : kTokenizerFiles)
      if (std::filesystem::exists(from / name, ec)) tokenizer = cmd.init_from;
  if (tokenizer.empty())
    return bad(
        "sample needs --tokenizer (a sentencepiece .model, or a tokenizer.json to print the "
        "tokens of a prompt-less sample) to encode the prompt and print the tokens (an "
        "--init_from directory holding either provides it)");
  ZT_ASSIGN_OR_RETURN(const Device device, parse_device(cmd.device));
  if (!cmd.prompt_template.empty()) {
    PromptTemplate t = alpaca_template();
    if (cmd.prompt_template != "alpaca") {
      ZT_ASSIGN_OR_RETURN(t, load_template(cmd.prompt_template));
    }
    s.prompt = format_prompt(t, InstructionExample{s.prompt, "", ""});
  }
  if (s.tokens < 1) return bad("--sample_tokens must be at least 1 for sample");
  ZT_RETURN_IF_ERROR(check_sampling(s.temperature, s.top_k, s.top_p));
  if (cmd.threads < 0 || cmd.threads > 1024)
    return bad(absl::StrCat("--threads ", cmd.threads, " must be in [0, 1024] (0: all cores)"));
  // The model: a zerotrain checkpoint (its recorded config and master weights), else --init_from
  // or the preset.
  std::optional<std::string> ckpt;
  nlohmann::json meta;
  ModelConfig c;
  if (!cmd.checkpoint.empty()) {
    if (!cmd.init_from.empty()) return bad("give --checkpoint or --init_from for sample, not both");
    ZT_ASSIGN_OR_RETURN(ckpt, require_checkpoint(cmd.checkpoint, "--checkpoint"));
    ZT_ASSIGN_OR_RETURN(meta, read_checkpoint_meta(*ckpt));
    if (!checkpoint_meta_checked(meta))
      std::fprintf(stderr, "%s\n", unchecked_meta_notice(*ckpt).c_str());
    ZT_ASSIGN_OR_RETURN(c, checkpoint_model(meta, *ckpt));
    ZT_RETURN_IF_ERROR(set_max_seq_len(c, cmd.max_seq_len, *ckpt));
    ZT_RETURN_IF_ERROR(check_same_model(cmd.model, c, "--checkpoint '" + cmd.checkpoint + "'"));
  } else {
    ZT_ASSIGN_OR_RETURN(c, resolve_model(cmd.model, cmd.init_from, cmd.max_seq_len));
  }
  // The KV cache and the model's buffers are sized by the window: --seq_len's default, 256,
  // unless the model is shorter (a long-context model's full length could be hundreds of GB).
  if (!cmd.window_given) s.window = std::min(256, c.max_seq_len);
  ZT_RETURN_IF_ERROR(check_seq_len(c, s.window, "--seq_len"));
  ZT_ASSIGN_OR_RETURN(const Tokenizer tok, load_tokenizer_for(tokenizer, c));
  if (!s.prompt.empty()) ZT_RETURN_IF_ERROR(tok.check_encodes("sample's --prompt"));
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be,
                      make_backend(device, 0, 1, cmd.threads, AttentionImpl::kFlash));
  // The decode step runs on our attention kernels (head sizes up to 128 on a GPU).
  ZT_RETURN_IF_ERROR(
      be->prepare_attention(DType::kF32, 1, s.window, c.n_head, c.n_kv_head, c.head_dim())
          .status());
  auto comm = make_single_process_communicator(be.get());
  Transformer model(c, be.get(), 1, s.window);
  Engine engine(model.layout(), be.get(), comm.get(), EngineOptions{});
  if (ckpt) {
    ZT_RETURN_IF_ERROR(read_checkpoint(
        *ckpt, meta, model.layout(),
        [&](int u, std::span<const float> master, std::span<const std::span<const float>>) {
          engine.set_unit_params(u, master);
          return absl::OkStatus();
        }));
  } else {
    ZT_RETURN_IF_ERROR(
        load_initial_params(c, model.layout(), cmd.init_from, s.seed, engine, /*report=*/true));
  }
  generate(model, engine, *comm, tok, s, stdout);
  if (std::fflush(stdout) != 0 || std::ferror(stdout))  // e.g. redirected onto a full disk
    return absl::InternalError(absl::StrCat("cannot write the sample to standard output: ",
                                            std::strerror(errno ? errno : EIO)));
  return absl::OkStatus();
}

}  // namespace zt
