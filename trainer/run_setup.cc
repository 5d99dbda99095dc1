// The run's set-up, phase by phase (trainer/run.h): inputs, data and the backend; the model
// and where its state lives; the engine and its initial weights; a resumed save and the
// metrics sinks.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/memory.h"
#include "common/status.h"
#include "common/trace.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/profiling_backend.h"
#include "model/transformer.h"
#include "trainer/checkpoint.h"
#include "trainer/device.h"
#include "trainer/ds_config.h"
#include "trainer/engine_options.h"
#include "trainer/metrics.h"
#include "trainer/model_source.h"
#include "trainer/run.h"
#include "trainer/run_config.h"
#include "trainer/sampler.h"
#include "zero/comm.h"
#include "zero/engine.h"
#include "zero/estimator.h"
#include "zero/zeropp.h"

namespace zt {
namespace {

// Ranges of the recipe flags (absl checks only their types).
absl::Status check_options(const TrainOptions& opt, const ModelConfig& m) {
  auto bad = [](const std::string& msg) { return absl::InvalidArgumentError(msg); };
  ZT_RETURN_IF_ERROR(check_seq_len(m, opt.seq_len, "--seq_len"));
  if (opt.steps < 1) return bad("--steps must be at least 1");
  if (opt.val_every < 0) return bad("--val_every must be >= 0 (0: validate at start and end)");
  if (opt.val_sequences < 1) return bad("--val_sequences must be at least 1");
  if (opt.sample_tokens < 0) return bad("--sample_tokens must be >= 0 (0: no sample)");
  ZT_RETURN_IF_ERROR(check_sampling(opt.temperature, opt.top_k, opt.top_p));
  if (opt.threads < 0 || opt.threads > 1024)
    return bad(absl::StrCat("--threads ", opt.threads,
                            " must be in [0, 1024] (0: the cores of "
                            "this node divided by the ranks on it)"));
  if (!opt.sample_prompt.empty() && opt.tokenizer.empty())
    return bad("--sample_prompt needs --tokenizer to encode it");
  return absl::OkStatus();
}

// --resume / --resume_from: the checkpoint's weights, moments and positions replace the
// initial ones. Not collective (the caller agrees the outcome).
absl::Status resume(const TrainOptions& opt, Run& r) {
  if (!opt.resume && opt.resume_from.empty()) return absl::OkStatus();
  const std::string where = opt.resume_from.empty() ? r.ds.zerotrain.save_dir : opt.resume_from;
  std::optional<std::string> dir;
  if (!opt.resume_from.empty()) {  // a save must be there
    ZT_ASSIGN_OR_RETURN(dir, require_checkpoint(where, "--resume_from"));
  } else {  // --resume: none yet is a fresh start (a job's first launch)
    ZT_ASSIGN_OR_RETURN(dir, find_checkpoint(where));
  }
  if (!dir) {
    if (r.comm->rank() == 0)
      std::fprintf(stderr, "notice: no checkpoint in '%s' yet: starting from step 0\n",
                   where.c_str());
    return absl::OkStatus();
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  if (r.comm->rank() == 0 && *dir != where && !fs::exists(fs::path(where) / "latest", ec))
    std::fprintf(stderr, "notice: '%s' has no 'latest': resuming from its newest save '%s'\n",
                 where.c_str(), dir->c_str());
  ZT_ASSIGN_OR_RETURN(const TrainingState st,
                      load_checkpoint(
                          *dir, [&](int version) { return resume_identity(opt, r, version); },
                          *r.engine, r.transformer->layout(), r.comm->rank() == 0));
  if (!st.meta_checked && r.comm->rank() == 0)
    std::fprintf(stderr, "%s\n", unchecked_meta_notice(*dir).c_str());
  ZT_RETURN_IF_ERROR(r.train->restore(st.data));
  // --steps equal to the save's step with another --save_dir: nothing to train, the state is
  // saved again as this run lays it out (world size, stage): resharding without training.
  // (Compared as canonical paths: a trailing slash, a relative path or a link names the same.)
  r.resave = st.step == opt.steps && !r.ds.zerotrain.save_dir.empty() &&
             fs::weakly_canonical(r.ds.zerotrain.save_dir, ec) !=
                 fs::weakly_canonical(*dir, ec).parent_path();
  if (st.step > opt.steps)
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint '", *dir, "' is at step ", st.step, ", and --steps is ", opt.steps,
        ": raise --steps to train further (or, to save it again for this world size and stage "
        "without training, give --steps ",
        st.step, " and a different --save_dir)"));
  r.start_step = st.step;
  if (r.comm->rank() == 0 && st.step == opt.steps && !r.resave)  // a finished job relaunched
    std::printf("the checkpoint '%s' is at --steps (%lld): nothing to train\n", dir->c_str(),
                (long long)st.step);
  else if (r.comm->rank() == 0)
    std::printf("resumed from '%s' at step %lld\n", dir->c_str(), (long long)st.step);
  std::fflush(stdout);  // a log follower (or a pipe) sees it now
  return absl::OkStatus();
}

// Rank 0's metrics sinks, built here alone, in the order a step reaches them: the console's
// progress lines, metrics.jsonl (begun), then the enabled monitors (csv_monitor, tensorboard).
// resumed: the step a resumed run continues after (-1: a new run).
absl::Status build_sinks(Run& r, MetricsWriter metrics, int64_t resumed) {
  const DsConfig& ds = r.ds;
  r.sinks.push_back(make_console_sink(
      ds.wall_clock_breakdown ? ds.steps_per_print : 0,
      ds.activation_checkpointing.profile && ds.zerotrain.gradient_checkpointing));
  auto file = std::make_unique<MetricsWriter>(std::move(metrics));
  r.metrics = file.get();
  r.sinks.push_back(std::move(file));
  const MonitorConfig &csv = ds.csv_monitor, &tb = ds.tensorboard;
  const int64_t batch = ds.batch.train_batch_size;
  if (csv.enabled) {
    ZT_ASSIGN_OR_RETURN(
        std::unique_ptr<MetricsSink> s,
        make_csv_sink(csv.dir(), batch, ds.fp16.enabled, ds.wall_clock_breakdown, resumed));
    r.sinks.push_back(std::move(s));
  }
  if (tb.enabled) {
    ZT_ASSIGN_OR_RETURN(
        std::unique_ptr<MetricsSink> s,
        make_tensorboard_sink(tb.dir(), batch, ds.fp16.enabled, ds.wall_clock_breakdown));
    r.sinks.push_back(std::move(s));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status setup_inputs(const TrainOptions& opt, Run& r) {
  // A flag's value first, before files are read: a typo is reported as itself.
  ZT_ASSIGN_OR_RETURN(const Device device, parse_device(opt.device));
  if (!opt.attention.empty()) ZT_RETURN_IF_ERROR(parse_attention(opt.attention).status());
  r.param_read_ahead = opt.param_read_ahead;
  if (opt.deepspeed.empty())
    return absl::InvalidArgumentError(
        "--deepspeed is required: pass a ds_config.json "
        "(examples in configs/ds/)");
  ZT_ASSIGN_OR_RETURN(r.ds_text, read_file(opt.deepspeed, "the DeepSpeed config (--deepspeed)"));
  ZT_ASSIGN_OR_RETURN(r.ds,
                      resolve_run_config(r.ds_text, r.comm->world_size(), opt.deepspeed,
                                         {.attention = opt.attention,
                                          .device_memory_limit = opt.device_memory_limit,
                                          .host_memory_limit = opt.host_memory_limit,
                                          .gradient_checkpointing = opt.gradient_checkpointing,
                                          .save_dir = opt.save_dir,
                                          .save_interval = opt.save_interval,
                                          .keep_last = opt.keep_last,
                                          .optimizer_threads = opt.optimizer_threads}));
  ZT_RETURN_IF_ERROR(check_saves(opt, r.ds.zerotrain));
  if (r.comm->rank() == 0)
    for (const std::string& n : r.ds.notices) std::fprintf(stderr, "%s\n", n.c_str());
  ZerotrainConfig::Trace& trace = r.ds.zerotrain.trace;
  if (opt.trace_first > 0 && trace.enabled &&
      (trace.first_step != opt.trace_first || trace.last_step != opt.trace_last))
    return absl::InvalidArgumentError(absl::StrCat(
        "--trace_steps ", opt.trace_first, ",", opt.trace_last, " and zerotrain.trace.steps [",
        trace.first_step, ", ", trace.last_step, "] disagree; give one, or both equal"));
  if (opt.trace_first > 0) trace = {true, opt.trace_first, opt.trace_last, trace.output_path};
  if (trace.enabled) {
    if (trace.output_path.empty()) trace.output_path = opt.run_dir;
    // Checked now, not after training: the trace is written at the end.
    std::error_code ec;
    std::filesystem::create_directories(trace.output_path, ec);
    if (ec || ::access(trace.output_path.c_str(), W_OK) != 0)
      return absl::InvalidArgumentError(
          absl::StrCat("zerotrain.trace.output_path '", trace.output_path, "' cannot be written (",
                       ec ? ec.message() : std::strerror(errno), "); give a writable directory"));
    Tracer::instance().configure(r.comm->rank(), trace.first_step, trace.last_step);
  }
  ZT_ASSIGN_OR_RETURN(r.model, resolve_model(opt.model, opt.init_from, opt.max_seq_len));
  r.B = static_cast<int>(r.ds.batch.train_micro_batch_size_per_gpu);
  r.gas = static_cast<int>(r.ds.batch.gradient_accumulation_steps);
  r.T = opt.seq_len;
  ZT_RETURN_IF_ERROR(check_options(opt, r.model));
  const SchedulerConfig& sc = r.ds.scheduler;
  if ((sc.type == SchedulerType::kWarmupDecayLR || sc.type == SchedulerType::kWarmupCosineLR) &&
      sc.total_num_steps < sc.warmup_num_steps && r.comm->rank() == 0)
    std::fprintf(stderr,
                 "warning: scheduler.params.total_num_steps %lld < warmup_num_steps %lld: "
                 "the learning rate decays to its minimum right after warm-up\n",
                 (long long)sc.total_num_steps, (long long)sc.warmup_num_steps);
  if (!opt.tokenizer.empty()) {
    ZT_ASSIGN_OR_RETURN(Tokenizer tok, load_tokenizer_for(opt.tokenizer, r.model));
    if (!opt.sample_prompt.empty()) ZT_RETURN_IF_ERROR(tok.check_encodes("--sample_prompt"));
    r.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  }
  if (opt.train_data.empty())
    return absl::InvalidArgumentError(
        "--train_data is required: a glob of token shards "
        "written by `zerotrain prepare` or llm.c");
  DataLoaderOptions lo;
  lo.pattern = opt.train_data;
  lo.B = r.B;
  lo.T = r.T;
  lo.rank = r.comm->rank();
  lo.world_size = r.comm->world_size();
  lo.micro_batches_per_step = r.gas;
  lo.seed = opt.seed;
  lo.shuffle = opt.shuffle;
  lo.vocab_size = r.model.vocab_size;
  ZT_ASSIGN_OR_RETURN(DataLoader train, DataLoader::open(lo));
  r.train = std::make_unique<DataLoader>(std::move(train));
  if (!opt.val_data.empty()) {
    // Read by sequence (evaluate): one sequence is enough, whatever the batch and the ranks.
    lo.pattern = opt.val_data;
    lo.shuffle = false;
    lo.B = 1;
    lo.rank = 0;
    lo.world_size = 1;
    lo.micro_batches_per_step = 1;
    ZT_ASSIGN_OR_RETURN(DataLoader val, DataLoader::open(lo));
    r.val = std::make_unique<DataLoader>(std::move(val));
  }
  // Ranks on one node share its cores (docs/architecture.md "Rules of thumb"); an offloaded
  // optimizer's update off the training thread gets threads of its own.
  ZerotrainConfig& z = r.ds.zerotrain;
  const bool off_thread = update_runs_off_the_training_thread(r.ds);
  const ThreadSplit split =
      split_threads(std::max(1, omp_get_num_procs() / r.comm->local_size()), device, off_thread,
                    opt.threads, (int)z.optimizer_threads);
  const int threads = split.compute;
  z.optimizer_threads = split.optimizer;
  ZT_ASSIGN_OR_RETURN(const AttentionImpl attention, parse_attention(r.ds.zerotrain.attention));
  ZT_ASSIGN_OR_RETURN(r.backend, make_backend(device, r.comm->local_rank(), r.comm->local_size(),
                                              threads, attention));
  if (r.ds.flops_profiler.enabled) {  // times every op of profile_step
    const std::string& file = r.ds.flops_profiler.output_file;
    const std::filesystem::path dir = std::filesystem::path(file).parent_path();
    if (!file.empty() && ::access(dir.empty() ? "." : dir.c_str(), W_OK) != 0)
      return absl::InvalidArgumentError(
          absl::StrCat("flops_profiler.output_file '", file, "': cannot write into '",
                       dir.empty() ? "." : dir.string(), "' (", std::strerror(errno),
                       "); give a path in a writable directory, or null for stdout only"));
    auto p = std::make_unique<ProfilingBackend>(std::move(r.backend));
    r.profiler = p.get();
    r.backend = std::move(p);
  }
  r.backend->set_memory_limit((size_t)r.ds.zerotrain.device_memory_limit);
  r.eo = engine_options(r.ds);  // ds is final
  return claim_dirs(opt, r);
}

DType activation_dtype(const Run& r) { return r.backend->activation_dtype(r.eo.param_dtype); }

absl::Status setup_model(Run& r) {
  ZT_ASSIGN_OR_RETURN(const int every, checkpoint_every(r.ds, r.model));
  r.transformer = std::make_unique<Transformer>(r.model, r.backend.get(), r.B, r.T, every,
                                                r.ds.activation_checkpointing.cpu_checkpointing,
                                                activation_dtype(r));
  const ModelConfig& m = r.model;
  ZT_ASSIGN_OR_RETURN(r.attention,
                      r.backend->prepare_attention(activation_dtype(r), r.B, r.T, m.n_head,
                                                   m.n_kv_head, m.head_dim()));
  // Packed rows (prepare --pack) run on our attention kernels, whatever runs whole rows: the
  // cuDNN graphs here are plain causal. Ours take head sizes up to 128.
  if (r.train->packed() || (r.val && r.val->packed())) {
    if (m.head_dim() > 128)
      return absl::InvalidArgumentError(absl::StrCat(
          "packed rows (prepare --pack) need head_dim <= 128 (our attention kernels); this "
          "model's is ",
          m.head_dim(), ": prepare the data without --pack"));
    if (r.attention.rfind("cuDNN", 0) == 0) r.attention += " (packed rows: flash)";
  }
  ZT_ASSIGN_OR_RETURN(r.optimizer, optimizer_state(r.ds, r.backend.get()));
  ZT_ASSIGN_OR_RETURN(r.params, param_store(r.ds, r.model, r.comm->world_size(), r.backend.get(),
                                            r.param_read_ahead));
  return absl::OkStatus();
}

size_t host_peak_bytes(const Run& r, MemCategory c) {
  return r.engine->host_bytes(c, /*peak=*/true) + r.transformer->host_tracker().peak(c);
}

absl::Status check_host_memory_limit(Run& r, bool at_setup) {
  const int64_t limit = r.ds.zerotrain.host_memory_limit;
  if (limit <= 0) return absl::OkStatus();
  std::optional<MemoryEstimate> predicted;
  if (at_setup) {
    ZT_ASSIGN_OR_RETURN(predicted, estimate_memory(estimate_input(
                                       r.ds, r.model, r.comm->world_size(), r.comm->local_size(),
                                       r.B, r.T, r.backend.get())));
  }
  std::string in_use;
  double peak = 0;
  for (size_t k = 0; k < kNumMemCategories; ++k) {
    const auto c = static_cast<MemCategory>(k);
    const size_t held = c == MemCategory::kNvme ? 0 : host_peak_bytes(r, c);
    const size_t b = predicted && c != MemCategory::kNvme
                         ? std::max<size_t>(held, (size_t)std::max<int64_t>(predicted->hst(c), 0))
                         : held;
    if (b == 0) continue;
    peak += (double)b;
    absl::StrAppend(&in_use, in_use.empty() ? "" : ", ", std::string(mem_category_name(c)), " ",
                    format_bytes((int64_t)b));
  }
  double worst[1] = {peak};
  r.comm->all_reduce_scalars(worst, 1, ScalarOp::kMax);
  if (worst[0] <= (double)limit) return absl::OkStatus();
  const bool delayed = predicted && r.ds.zerotrain.delayed_param_update;
  return absl::InvalidArgumentError(absl::StrCat(
      "host memory limit ", format_bytes(limit), " exceeded: a rank ",
      predicted ? "will hold " : "holds ", format_bytes((int64_t)worst[0]),
      " of model states and offload buffers at its peak (rank ", r.comm->rank(), ": ", in_use,
      predicted ? "; predicted at set-up, with the first step's staging" : "",
      delayed ? " and the delayed parameter update's second buffers of the owned gradients "
                "and (off the CPU backend, or over several ranks) weights"
              : "",
      "); `zerotrain estimate --host_memory` says what fits, or raise the limit",
      delayed ? ", or turn off zerotrain.delayed_param_update" : ""));
}

absl::Status setup_engine(const TrainOptions& opt, Run& r) {
  ZT_RETURN_IF_ERROR(  // collective
      prefixed(check_zeropp(r.eo.zero.zeropp, *r.comm), opt.deepspeed));
  r.engine = std::make_unique<Engine>(r.transformer->layout(), r.backend.get(), r.comm.get(), r.eo,
                                      std::move(r.optimizer), std::move(r.params));
  ZT_RETURN_IF_ERROR(load_initial_params(r.model, r.transformer->layout(), opt.init_from, opt.seed,
                                         *r.engine, r.comm->rank() == 0));
  return check_host_memory_limit(r, /*at_setup=*/true);
}

absl::Status setup_resume(const TrainOptions& opt, Run& r) {
  ZT_RETURN_IF_ERROR(resume(opt, r));
  if (r.comm->rank() != 0) return absl::OkStatus();
  ZT_ASSIGN_OR_RETURN(MetricsWriter metrics, MetricsWriter::open(opt.run_dir));
  const bool at_end = r.start_step == opt.steps && r.start_step > 0;
  if (at_end && !r.resave) {
    r.ended = metrics.ended(opt.steps);
    if (!r.ended)
      std::printf(
          "the log records no end of training (killed after the last save?): "
          "running the final validation, reports and sample\n");
  }
  if (nothing_to_train(opt, r)) return absl::OkStatus();
  // A resumed run continues its log; a run from step 0 (also --resume with no save yet) starts
  // a new one.
  const int64_t resumed = r.start_step > 0 ? r.start_step : -1;
  ZT_RETURN_IF_ERROR(metrics.begin(resumed, at_end));
  return build_sinks(r, std::move(metrics), resumed);
}

}  // namespace zt
