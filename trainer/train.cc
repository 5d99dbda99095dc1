#include "trainer/train.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "common/timer.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/hf_weights.h"
#include "model/init.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "trainer/ds_config.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/sampler.h"
#include "zero/engine.h"

namespace zt {
namespace {

// Everything a run builds before its first step; validated up front so that bad input
// fails before any work.
struct Run {
  DsConfig ds;
  ModelConfig model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<DataLoader> train, val;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<Engine> engine;
  int B = 0, T = 0, gas = 1;
};

absl::Status init_params(const TrainOptions& opt, Run& r) {
  const ParamLayout& layout = r.transformer->layout();
  std::vector<float> host;
  if (opt.init_from.empty()) {
    for (int u = 0; u < layout.num_units(); ++u) {
      host.resize(layout.units()[u].numel);
      init_unit(r.model, layout.units()[u], u, opt.seed, host);
      r.engine->set_unit_params(u, host);
    }
    return absl::OkStatus();
  }
  ZT_ASSIGN_OR_RETURN(SafeTensorsModel ckpt, open_hf_model_dir(opt.init_from));
  const HfTensorReader reader = reader_of(ckpt);
  for (int u = 0; u < layout.num_units(); ++u) {
    host.resize(layout.units()[u].numel);
    ZT_RETURN_IF_ERROR(load_hf_unit(reader, r.model, layout, u, host));
    r.engine->set_unit_params(u, host);
  }
  return absl::OkStatus();
}

absl::StatusOr<Run> setup(const TrainOptions& opt) {
  Run r;
  if (opt.deepspeed.empty())
    return absl::InvalidArgumentError("--deepspeed is required: pass a ds_config.json "
                                      "(examples in configs/ds/)");
  ZT_ASSIGN_OR_RETURN(r.ds, load_ds_config(opt.deepspeed, /*world_size=*/1));
  if (!opt.init_from.empty()) {
    const std::string path = opt.init_from + "/config.json";
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
      return absl::NotFoundError(absl::StrCat("--init_from: cannot read '", path,
                                              "'; pass a Hugging Face model directory"));
    std::string text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
    ZT_ASSIGN_OR_RETURN(r.model, config_from_hf_json(text, path));
  } else {
    ZT_ASSIGN_OR_RETURN(r.model, preset(opt.model));
  }
  ZT_RETURN_IF_ERROR(validate(r.model));
  r.B = static_cast<int>(r.ds.batch.train_micro_batch_size_per_gpu);
  r.gas = static_cast<int>(r.ds.batch.gradient_accumulation_steps);
  r.T = opt.seq_len;
  if (r.T < 1 || (r.model.is_gpt2() && r.T > r.model.max_seq_len))
    return absl::InvalidArgumentError(absl::StrCat("--seq_len ", r.T, " must be in [1, ",
                                                   r.model.max_seq_len, "] for this model"));
  if (opt.steps < 1) return absl::InvalidArgumentError("--steps must be at least 1");
  if (!opt.tokenizer.empty()) {
    ZT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(opt.tokenizer));
    if (tok.vocab_size() > r.model.vocab_size)
      return absl::InvalidArgumentError(absl::StrCat(
          "the tokenizer '", opt.tokenizer, "' has ", tok.vocab_size(),
          " tokens but the model's vocabulary has only ", r.model.vocab_size,
          "; use a model whose vocab_size is at least the tokenizer's"));
    r.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  }
  if (opt.train_data.empty())
    return absl::InvalidArgumentError("--train_data is required: a glob of token shards "
                                      "written by `zerotrain prepare` or llm.c");
  DataLoaderOptions lo;
  lo.pattern = opt.train_data;
  lo.B = r.B;
  lo.T = r.T;
  lo.seed = opt.seed;
  lo.shuffle = opt.shuffle;
  lo.vocab_size = r.model.vocab_size;
  ZT_ASSIGN_OR_RETURN(DataLoader train, DataLoader::open(lo));
  r.train = std::make_unique<DataLoader>(std::move(train));
  if (!opt.val_data.empty()) {
    lo.pattern = opt.val_data;
    lo.shuffle = false;
    ZT_ASSIGN_OR_RETURN(DataLoader val, DataLoader::open(lo));
    r.val = std::make_unique<DataLoader>(std::move(val));
  }
  r.backend = make_cpu_backend(opt.threads);
  r.transformer = std::make_unique<Transformer>(r.model, r.backend.get(), r.B, r.T);
  EngineOptions eo;
  if (r.ds.bf16.enabled) eo.param_dtype = eo.grad_dtype = DType::kBF16;
  eo.adam.beta1 = static_cast<float>(r.ds.optimizer.beta1);
  eo.adam.beta2 = static_cast<float>(r.ds.optimizer.beta2);
  eo.adam.eps = static_cast<float>(r.ds.optimizer.eps);
  eo.adam.weight_decay = static_cast<float>(r.ds.optimizer.weight_decay);
  eo.adam.adam_w_mode = r.ds.optimizer.adam_w_mode;
  eo.adam.bias_correction = r.ds.optimizer.bias_correction;
  eo.gradient_clipping = static_cast<float>(r.ds.gradient_clipping);
  r.engine = std::make_unique<Engine>(r.transformer->layout(), r.backend.get(), eo);
  ZT_RETURN_IF_ERROR(init_params(opt, r));
  return r;
}

double evaluate(Run& r, int batches) {
  r.val->reset();
  const int n = static_cast<int>(std::min<int64_t>(batches, r.val->num_batches_per_epoch()));
  std::vector<int> x((size_t)r.B * r.T), y((size_t)r.B * r.T);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    r.val->next_batch(x.data(), y.data());
    sum += r.transformer->forward(*r.engine, x.data(), y.data(), r.B, r.T, 0.f).loss;
  }
  return n > 0 ? sum / n : NAN;
}

void print_sample(const TrainOptions& opt, Run& r) {
  if (opt.sample_tokens <= 0 || !r.tokenizer) return;
  std::vector<int> ctx = {r.tokenizer->bos_id()};
  if (!opt.sample_prompt.empty()) {
    std::vector<int> p = r.tokenizer->encode(opt.sample_prompt);
    ctx.insert(ctx.end(), p.begin(), p.end());
  }
  std::mt19937_64 rng(opt.seed);
  std::vector<float> logits(r.model.vocab_size);
  std::printf("sample:\n---\n%s", opt.sample_prompt.c_str());
  for (int i = 0; i < opt.sample_tokens; ++i) {
    const int T = std::min<int>(static_cast<int>(ctx.size()), r.T);
    r.transformer->last_logits(*r.engine, ctx.data() + ctx.size() - T, T, logits.data());
    const int next = sample_token(logits, opt.temperature, opt.top_k, rng);
    if (next == r.tokenizer->eos_id()) break;
    ctx.push_back(next);
    std::printf("%s", r.tokenizer->decode_token(next).c_str());
    std::fflush(stdout);
  }
  std::printf("\n---\n");
}

}  // namespace

absl::Status run_train(const TrainOptions& opt) {
  ZT_ASSIGN_OR_RETURN(Run r, setup(opt));
  ZT_ASSIGN_OR_RETURN(MetricsWriter metrics, MetricsWriter::open(opt.run_dir));
  const ParamLayout& layout = r.transformer->layout();
  const int64_t tokens_per_step = (int64_t)r.B * r.T * r.gas;
  std::printf("model %s: %s parameters, %d units | micro-batch %d x %d tokens, "
              "gradient accumulation %d, %lld tokens/step | %s, %d threads | %s\n",
              opt.init_from.empty() ? opt.model.c_str() : opt.init_from.c_str(),
              absl::StrFormat("%.2fM", layout.total_numel() / 1e6).c_str(), layout.num_units(),
              r.B, r.T, r.gas, (long long)tokens_per_step,
              r.ds.bf16.enabled ? "bf16" : "fp32", omp_get_max_threads(),
              absl::StrCat("train ", r.train->num_tokens(), " tokens").c_str());
  auto validate_now = [&](int64_t step) {
    if (!r.val) return;
    const double vl = evaluate(r, opt.val_batches);
    std::printf("step %lld | val loss %.4f\n", (long long)step, vl);
    metrics.write({{"step", step}, {"val_loss", vl}});
  };
  validate_now(0);
  std::vector<int> x((size_t)r.B * r.T), y((size_t)r.B * r.T);
  Timer run_timer;
  double loop_ms = 0;
  for (int64_t step = 1; step <= opt.steps; ++step) {
    Timer t;
    double fwd_ms = 0, bwd_ms = 0, loss = 0;
    for (int micro = 0; micro < r.gas; ++micro) {
      r.train->next_batch(x.data(), y.data());
      Timer tf;
      loss += r.transformer->forward(*r.engine, x.data(), y.data(), r.B, r.T, 1.f / r.gas).loss;
      fwd_ms += tf.ms();
      Timer tb;
      r.transformer->backward(*r.engine);
      bwd_ms += tb.ms();
    }
    loss /= r.gas;
    // DeepSpeed's schedulers count optimizer steps from 0.
    const double lr = lr_at(r.ds.scheduler, r.ds.optimizer.lr, step - 1);
    Timer to;
    const StepStats st = r.engine->step(static_cast<float>(lr));
    const double opt_ms = to.ms();
    const double ms = t.ms();
    loop_ms += ms;
    const double tok_s = tokens_per_step / (ms / 1e3);
    const double eta = loop_ms / step * (opt.steps - step) / 1e3;
    std::printf("step %4lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f ms | %.0f tok/s | "
                "ETA %s\n",
                (long long)step, (long long)opt.steps, loss, lr, st.grad_norm, ms, tok_s,
                format_duration(eta).c_str());
    if (r.ds.wall_clock_breakdown && step % r.ds.steps_per_print == 0)
      std::printf("  time (ms) | forward %.1f | backward %.1f | optimizer %.1f\n", fwd_ms,
                  bwd_ms, opt_ms);
    std::fflush(stdout);
    metrics.write({{"step", step},
                   {"loss", loss},
                   {"lr", lr},
                   {"grad_norm", st.grad_norm},
                   {"step_ms", ms},
                   {"tokens_per_s", tok_s},
                   {"forward_ms", fwd_ms},
                   {"backward_ms", bwd_ms},
                   {"optimizer_ms", opt_ms}});
    if (!std::isfinite(loss))
      return absl::InternalError(absl::StrCat("loss became ", loss, " at step ", step,
                                              "; lower the learning rate or enable clipping"));
    if (opt.val_every > 0 && step % opt.val_every == 0 && step != opt.steps) validate_now(step);
  }
  validate_now(opt.steps);
  std::printf("trained %lld steps in %s (%.0f tok/s)\n", (long long)opt.steps,
              format_duration(run_timer.ms() / 1e3).c_str(),
              tokens_per_step * opt.steps / (loop_ms / 1e3));
  print_sample(opt, r);
  return absl::OkStatus();
}

}  // namespace zt
