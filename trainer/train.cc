#include "trainer/train.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fault.h"
#include "common/file.h"
#include "common/status.h"
#include "common/timer.h"
#include "common/trace.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/hf_weights.h"
#include "model/init.h"
#include "model/profiling_backend.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "trainer/checkpoint.h"
#include "trainer/device.h"
#include "trainer/ds_config.h"
#include "trainer/engine_options.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/model_source.h"
#include "trainer/reports.h"
#include "trainer/run_config.h"
#include "trainer/sampler.h"
#include "zero/comm.h"
#include "zero/comm_logger.h"
#include "zero/engine.h"
#include "zero/mpi_comm.h"
#include "zero/offload_device.h"

namespace zt {
namespace {

// Everything a run builds before its first step; validated up front so that bad input
// fails before any work.
struct Run {
  // comms_logger: what comm's collectives took (declared first: destroyed after comm).
  std::unique_ptr<CommLogger> comms_log;
  // The MPI communicator NCCL bootstraps over, kept while comm is NCCL (else null).
  std::unique_ptr<Communicator> host_comm;
  // Collectives on the backend's memory (MPI, single-process, or NCCL); host scalars too.
  std::unique_ptr<Communicator> comm;
  std::string ds_text;  // the ds_config file as read (fingerprinted across ranks)
  DsConfig ds;
  ModelConfig model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<DataLoader> train, val;
  std::unique_ptr<Backend> backend;
  ProfilingBackend* profiler = nullptr;  // backend itself, with flops_profiler.enabled
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<Engine> engine;
  // Built by setup_model, handed to the engine by setup_engine.
  std::unique_ptr<OptimizerState> optimizer;
  std::unique_ptr<ParamStore> params;
  std::optional<MetricsWriter> metrics;  // rank 0 only
  std::unique_ptr<MetricsSink> csv;      // rank 0, csv_monitor.enabled
  std::unique_ptr<MetricsSink> tensorboard;  // rank 0, tensorboard.enabled
  // Rank 0: save_dir, run_dir and the monitors' folders are this run's alone.
  DirLock save_lock, run_lock, csv_lock, tensorboard_lock;
  int B = 0, T = 0, gas = 1;
  std::string attention;  // what runs it (Backend::prepare_attention)
  bool param_read_ahead = true;  // TrainOptions::param_read_ahead
  int64_t start_step = 0;  // steps already done (a resumed run)
  bool resave = false;     // resumed at --steps into another save_dir: save again, train nothing
  // Resumed at --steps: metrics.jsonl records the end of training (rank 0 reads it in
  // setup_resume, train_loop tells every rank).
  bool ended = false;
};

// The model's configuration, each field named (a mismatch on resume names the field).
nlohmann::json model_identity(const ModelConfig& m) {
  nlohmann::json j;
  for_each_field(m, [&](const char* name, auto value, bool) { j[name] = value; });
  return j;
}

// What a resumed run must share with the save (trainer/checkpoint.h): the model, the data
// order, the global batch and the resolved ds_config values that change the numbers. Not the
// world size, the stage, offload or the micro-batch split, which a resume may change. Flattened
// ("ds_config/optimizer/params/lr", "model/hidden") so a mismatch names the field.
// `format_version` 1: the identity those saves recorded (the ds_config's text, not its resolved
// values; the model as an unlabelled array), so they still resume.
nlohmann::json resume_identity(const TrainOptions& opt, const Run& r, int format_version) {
  const ModelConfig& m = r.model;
  nlohmann::json id = {{"seq_len", opt.seq_len},
                       {"global_batch", (int64_t)r.B * r.gas * r.comm->world_size()},
                       {"seed", opt.seed},
                       {"shuffle", opt.shuffle},
                       {"train_tokens", r.train->num_tokens()}};
  nlohmann::json ds;
  if (format_version >= 2) {
    const nlohmann::json model = model_identity(m);
    for (const auto& [key, value] : model.items()) id["model/" + key] = value;
    ds = numeric_ds_config(r.ds);
  } else {
    // Frozen as version 1 wrote it (not for_each_field, which grows with the model).
    id["model"] = {(int)m.family, m.vocab_size, m.max_seq_len,    m.n_layer,
                   m.n_head,    m.n_kv_head,  m.hidden,         m.intermediate,
                   m.norm_eps,  m.rope_theta, m.tied_embeddings};
    ds = nlohmann::json::parse(r.ds_text, nullptr, false);
    if (ds.is_object())
      for (const char* k :
           {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu",
            "gradient_accumulation_steps", "zerotrain", "steps_per_print", "wall_clock_breakdown",
            "activation_checkpointing", "aio", "comms_logger", "flops_profiler", "tensorboard",
            "wandb", "csv_monitor", "memory_breakdown", "dump_state"})
        ds.erase(k);
  }
  const nlohmann::json flat = ds.flatten();
  for (const auto& [key, value] : flat.items()) id["ds_config" + key] = value;
  return id;
}

// The resolved save keys (trainer/run_config.h) against --resume and --resume_from.
absl::Status check_saves(const TrainOptions& opt, const ZerotrainConfig& z) {
  if (opt.resume && !opt.resume_from.empty())
    return absl::InvalidArgumentError(
        "give --resume (from --save_dir's latest) or --resume_from DIR, not both");
  if (opt.resume && z.save_dir.empty() && opt.resume_from.empty())
    return absl::InvalidArgumentError(
        "--resume continues from --save_dir's latest save: give --save_dir (or "
        "zerotrain.save_dir), or --resume_from DIR");
  if ((z.save_interval > 0 || z.keep_last > 0) && z.save_dir.empty())
    return absl::InvalidArgumentError(
        "save_interval and keep_last need a --save_dir (or zerotrain.save_dir) to save into");
  return absl::OkStatus();
}

// The directories a run writes, claimed before step 1 rather than found wanting at the first
// save: save_dir created and writable on every rank (each writes its file there) and holding no
// earlier run's saves unless this run resumes (a forgotten --resume would train from step 0
// over them, and keep_last delete them); on rank 0, save_dir, run_dir and the enabled monitors'
// folders (csv_monitor's and tensorboard's output_path/job_name: two runs from one ds_config
// would rewrite each other's CSV files) locked for this run alone (common/file.h DirLock).
absl::Status claim_dirs(const TrainOptions& opt, Run& r) {
  const ZerotrainConfig& z = r.ds.zerotrain;
  namespace fs = std::filesystem;
  const std::string what = opt.save_dir.empty() ? "zerotrain.save_dir" : "--save_dir";
  if (!z.save_dir.empty())
    ZT_RETURN_IF_ERROR(ensure_writable_dir(z.save_dir, what));
  if (r.comm->rank() == 0) {  // first: another run in them is the reason to name
    const MonitorConfig &csv = r.ds.csv_monitor, &tb = r.ds.tensorboard;
    std::vector<std::tuple<std::string, std::string, DirLock*>> dirs = {
        {z.save_dir, what, &r.save_lock}, {opt.run_dir, "--run_dir", &r.run_lock}};
    if (csv.enabled)
      dirs.emplace_back(csv.dir(), "csv_monitor folder (output_path/job_name)", &r.csv_lock);
    if (tb.enabled)
      dirs.emplace_back(tb.dir(), "tensorboard folder (output_path/job_name)", &r.tensorboard_lock);
    std::vector<fs::path> locked;  // one lock a directory, whatever roles it plays
    std::error_code ec;
    for (const auto& [dir, name, lock] : dirs) {
      if (dir.empty()) continue;
      if (lock != &r.save_lock) ZT_RETURN_IF_ERROR(ensure_writable_dir(dir, name));
      const fs::path canonical = fs::weakly_canonical(dir, ec);
      if (std::find(locked.begin(), locked.end(), canonical) != locked.end()) continue;
      locked.push_back(canonical);
      std::string warning;
      ZT_ASSIGN_OR_RETURN(*lock, DirLock::acquire(dir, name, process_owner_line(), &warning));
      if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
    }
  }
  if (z.save_dir.empty() || opt.resume || !opt.resume_from.empty())
    return absl::OkStatus();
  const auto found = find_checkpoint(z.save_dir);
  if (found.ok() && !*found) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what, " '", z.save_dir, "' already holds saves of an earlier run",
                   found.ok() ? absl::StrCat(" (newest: ", **found, ")") : "",
                   ": pass --resume to continue it, or give another ", what,
                   " (or remove them) to start from step 0"));
}

// A finished job relaunched with --resume: the save is at --steps, is not to be re-saved
// elsewhere, and the log records the end of training (MetricsWriter::ended). Such a run writes
// nothing (no log line, no report). One killed between its last save and that record does the
// end again instead (the final validation, the reports, the sample), once.
bool nothing_to_train(const TrainOptions& opt, const Run& r) {
  return r.start_step == opt.steps && !r.resave && r.ended;
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
        "without training, give --steps ", st.step, " and a different --save_dir)"));
  r.start_step = st.step;
  if (r.comm->rank() == 0 && st.step == opt.steps && !r.resave)  // a finished job relaunched
    std::printf("the checkpoint '%s' is at --steps (%lld): nothing to train\n", dir->c_str(),
                (long long)st.step);
  else if (r.comm->rank() == 0)
    std::printf("resumed from '%s' at step %lld\n", dir->c_str(), (long long)st.step);
  std::fflush(stdout);  // a log follower (or a pipe) sees it now
  return absl::OkStatus();
}

// flops_profiler: rank 0's table for `step` (step_ms long) on stdout, and into output_file.
absl::Status report_profile(Run& r, int64_t step, double step_ms) {
  r.profiler->set_recording(false);
  if (r.comm->rank() != 0) return absl::OkStatus();
  const std::string table =
      absl::StrCat("flops profile of step ", step, " (rank 0; every op waited for):\n",
                   r.profiler->format(step_ms));
  std::fputs(table.c_str(), stdout);
  const std::string& file = r.ds.flops_profiler.output_file;
  return file.empty() ? absl::OkStatus() : write_file_atomic(file, table);
}

// Saves after `step` when due (every save_interval steps, and at the last step).
absl::Status maybe_save(const TrainOptions& opt, Run& r, int64_t step) {
  const ZerotrainConfig& z = r.ds.zerotrain;
  if (z.save_dir.empty()) return absl::OkStatus();
  if (step != opt.steps &&
      (z.save_interval <= 0 || step % z.save_interval != 0))
    return absl::OkStatus();
  const TrainingState st{step, r.engine->steps_taken(), r.train->state(),
                         r.engine->loss_scaler_state()};
  const nlohmann::json info = {
      {"world_size", r.comm->world_size()},
      {"stage", r.ds.zero.stage},
      {"device", r.backend->name()},
      {"ds_config", r.ds_text},
      {"model_config", nlohmann::json::parse(hf_config_json(r.model, "float32", -1, -1))}};
  ZT_RETURN_IF_ERROR(save_checkpoint(z.save_dir, z.keep_last, st,
                                     resume_identity(opt, r, kCheckpointFormatVersion), info,
                                     *r.engine, r.transformer->layout(), *r.comm));
  if (r.comm->rank() == 0)
    std::printf("saved %s/step_%08lld\n", z.save_dir.c_str(), (long long)step);
  std::fflush(stdout);
  return absl::OkStatus();
}

// What every rank must agree on before training, since it decides the sequence of collectives:
// the whole ds_config (canonical JSON: parsed, keys sorted), the model, and the recipe.
std::string fingerprint(const TrainOptions& opt, const Run& r) {
  const nlohmann::json j = {
      {"ds_config", nlohmann::json::parse(r.ds_text, nullptr, /*allow_exceptions=*/false)},
      {"device", r.backend ? r.backend->name() : ""},
      {"attention", r.ds.zerotrain.attention},
      {"model", model_identity(r.model)},
      {"recipe",
       {opt.seq_len, opt.steps, opt.val_every, opt.val_sequences, opt.val_data.empty(),
        opt.sample_tokens, opt.sample_prompt, opt.temperature, opt.top_k, opt.seed, opt.shuffle,
        opt.tokenizer.empty(), opt.init_from.empty()}},
      {"checkpoints",
       {r.ds.zerotrain.save_dir, r.ds.zerotrain.save_interval, r.ds.zerotrain.keep_last, opt.resume,
        opt.resume_from}}};
  return j.dump();
}

// Every rank reads the same data: the same number of shards, each of the same size and CRC-32
// (and its loss mask's), or an error on every rank naming the first shard that differs, the
// ranks that disagree with rank 0 and what this rank read. Paths may differ (a node's own
// mount). One collective when they agree; one a shard, to name it, when they do not.
absl::Status check_same_data(Communicator& comm, const DataLoader& data, const std::string& flag) {
  const std::vector<DataLoader::ShardIdentity> ids = data.identity();
  std::string all = absl::StrCat(ids.size(), " shards");
  for (const auto& id : ids) absl::StrAppend(&all, "\n", id.what);
  if (check_same_on_all_ranks(comm, flag, all).ok()) return absl::OkStatus();
  ZT_RETURN_IF_ERROR(check_same_on_all_ranks(
      comm, absl::StrCat("number of token shards matching ", flag, " (", ids.size(), " here)"),
      absl::StrCat(ids.size())));
  for (const auto& id : ids) {
    const absl::Status st = check_same_on_all_ranks(comm, "token shard", id.what);
    if (!st.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", id.path, "' (here: ", id.what, "): ", st.message()));
  }
  return absl::InternalError("ranks disagree on their data, but on no shard");
}

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

// Inputs, data and the backend: everything a rank can fail on alone, before any collective.
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
      return absl::InvalidArgumentError(absl::StrCat(
          "zerotrain.trace.output_path '", trace.output_path, "' cannot be written (",
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
  return claim_dirs(opt, r);
}

// The dtype r's backend keeps activations in for its working dtype (Backend::activation_dtype).
DType activation_dtype(const Run& r) {
  return r.backend->activation_dtype(engine_options(r.ds).param_dtype);
}

// The model and where its optimizer state and parameter shards live, on the backend of r:
// everything of the model that can fail on one rank alone (memory, a drive), before the engine,
// whose construction may be collective (node-shared parameters).
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

// A host category's peak bytes on this rank, as memory_report and host_memory_limit count
// them: the engine's (offloaded states and buffers) and the Transformer's (cpu_checkpointing).
size_t host_peak_bytes(const Run& r, MemCategory c) {
  return r.engine->host_bytes(c, /*peak=*/true) + r.transformer->host_tracker().peak(c);
}

// zerotrain.host_memory_limit against the host categories (model states, offload buffers and
// cpu_checkpointing's checkpoints; not NVMe), at their peaks, as memory_report counts them;
// collective, so every rank stops together. Checked after set-up and after each step rather
// than at each allocation. At set-up a category counts the larger of what it holds and what
// the estimator predicts the run will hold: what comes at the first step (pinned staging) and
// at the first delayed parameter update (its host snapshots, after the warm-up steps) is
// refused before any step trains.
absl::Status check_host_memory_limit(Run& r, bool at_setup = false) {
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
      delayed ? " and the delayed parameter update's host snapshots of the owned gradients and "
                "weights, taken after its warm-up steps"
              : "",
      "); `zerotrain estimate --host_memory` says what fits, or raise the limit",
      delayed ? ", or turn off zerotrain.delayed_param_update" : ""));
}

// The ZeRO engine on r's model, communicator and state, and its initial weights. Resuming is a
// phase of its own: with node-shared parameters every rank writes whole units, so the
// checkpoint's values must not be written while another rank may still write the initial ones
// (the agreement between the phases orders them).
absl::Status setup_engine(const TrainOptions& opt, Run& r) {
  ZT_RETURN_IF_ERROR(  // collective
      prefixed(check_zeropp(engine_options(r.ds).zero.zeropp, *r.comm), opt.deepspeed));
  r.engine =
      std::make_unique<Engine>(r.transformer->layout(), r.backend.get(), r.comm.get(),
                               engine_options(r.ds), std::move(r.optimizer), std::move(r.params));
  if (r.comm->rank() == 0) {
    ZT_ASSIGN_OR_RETURN(MetricsWriter m, MetricsWriter::open(opt.run_dir));
    r.metrics.emplace(std::move(m));
  }
  ZT_RETURN_IF_ERROR(load_initial_params(r.model, r.transformer->layout(), opt.init_from, opt.seed,
                                         *r.engine, r.comm->rank() == 0));
  return check_host_memory_limit(r, /*at_setup=*/true);
}

absl::Status setup_resume(const TrainOptions& opt, Run& r) {
  ZT_RETURN_IF_ERROR(resume(opt, r));
  const bool at_end = r.start_step == opt.steps && r.start_step > 0;
  if (r.metrics && at_end && !r.resave) {
    r.ended = r.metrics->ended(opt.steps);
    if (!r.ended)
      std::printf(
          "the log records no end of training (killed after the last save?): "
          "running the final validation, reports and sample\n");
  }
  // A resumed run continues its log; a run from step 0 (also --resume with no save yet) starts
  // a new one.
  if (!r.metrics || nothing_to_train(opt, r)) return absl::OkStatus();
  const int64_t resumed = r.start_step > 0 ? r.start_step : -1;
  ZT_RETURN_IF_ERROR(r.metrics->begin(resumed, at_end));
  const MonitorConfig &csv = r.ds.csv_monitor, &tb = r.ds.tensorboard;
  const int64_t batch = r.ds.batch.train_batch_size;
  if (csv.enabled) {
    ZT_ASSIGN_OR_RETURN(r.csv, make_csv_sink(csv.dir(), batch, r.ds.fp16.enabled,
                                             r.ds.wall_clock_breakdown, resumed));
  }
  if (tb.enabled) {
    ZT_ASSIGN_OR_RETURN(r.tensorboard, make_tensorboard_sink(tb.dir(), batch, r.ds.fp16.enabled,
                                                             r.ds.wall_clock_breakdown));
  }
  return absl::OkStatus();
}

// The validation loss: the mean -log p over every trained target of the first `sequences`
// sequences of the validation shards (all of them when fewer), so the set and its weighting
// depend on the data alone, never on the micro-batch or the ranks. Each rank takes the rows of
// its micro-batches in the training stream's interleaving; a pass's rows past the set are
// padding that the loss ignores (targets -1), so every rank runs the same number of passes.
double evaluate(Run& r, int64_t sequences) {
  const int64_t n = std::min(sequences, r.val->num_sequences());
  const int64_t B = r.B, T = r.T, W = r.comm->world_size(), rank = r.comm->rank();
  std::vector<int> x((size_t)(B * T)), y(x.size());
  std::vector<int> pos(r.val->packed() ? x.size() : 0);
  int* positions = pos.empty() ? nullptr : pos.data();
  double v[2] = {0, 0};  // the sum of -log p, the trained targets
  for (int64_t pass = 0; pass * W * B < n; ++pass) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t i = (pass * W + rank) * B + b;
      int* p = positions ? positions + b * T : nullptr;
      if (i < n) {
        r.val->read_sequence(i, &x[b * T], &y[b * T], p);
        continue;
      }
      std::fill_n(&x[b * T], T, 0);
      std::fill_n(&y[b * T], T, -1);
      if (p) std::iota(p, p + T, 0);
    }
    r.engine->begin_pass();
    const Transformer::LossResult l =
        r.transformer->forward(*r.engine, x.data(), y.data(), r.B, r.T, 0.f, positions);
    v[0] += l.sum;
    v[1] += l.num_valid;
  }
  r.engine->drop_gathered();
  r.comm->all_reduce_scalars(v, 2, ScalarOp::kSum);
  return v[1] > 0 ? v[0] / v[1] : NAN;
}

// The end-of-training sample (trainer/sampler.h): every rank in lockstep, rank 0 prints.
void print_sample(const TrainOptions& opt, Run& r) {
  if (opt.sample_tokens <= 0 || !r.tokenizer) return;
  const SampleOptions s{
      opt.sample_prompt, opt.sample_tokens, opt.temperature, opt.top_k, opt.seed, r.T, opt.top_p};
  generate(*r.transformer, *r.engine, *r.comm, *r.tokenizer, s,
           r.comm->rank() == 0 ? stdout : nullptr);
}

// run.json in the run directory (rank 0; collective for the peaks): what `zerotrain compare`
// puts beside the run's metrics.jsonl. The model and data identity (compare refuses runs of
// different ones), the layout (stage, offload, micro-batch, T, ranks, dtype, device), and the
// peaks over ranks: device memory (the tracker's high-water mark) and host memory (the
// process's maximum resident set, getrusage).
absl::Status write_run_summary(const TrainOptions& opt, Run& r) {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  double peaks[2] = {(double)r.backend->tracker().peak_total(), (double)ru.ru_maxrss * 1024.0};
  r.comm->all_reduce_scalars(peaks, 2, ScalarOp::kMax);
  if (r.comm->rank() != 0 || opt.run_dir.empty()) return absl::OkStatus();
  const ZeroConfig& z = r.ds.zero;
  const nlohmann::json j = {
      {"model", opt.init_from.empty() ? opt.model : opt.init_from},
      {"model_config", model_identity(r.model)},
      {"train_data", opt.train_data},
      {"train_tokens", r.train->num_tokens()},
      {"packed", r.train->packed()},
      {"stage", z.stage},
      {"offload_optimizer", std::string(offload_device_name(z.offload_optimizer.device))},
      {"offload_param", std::string(offload_device_name(z.offload_param.device))},
      {"delayed_param_update", r.ds.zerotrain.delayed_param_update},
      {"dtype", r.ds.bf16.enabled   ? "bf16"
                : r.ds.fp16.enabled ? "fp16"
                                    : "fp32"},
      {"micro_batch", r.B},
      {"seq_len", r.T},
      {"gradient_accumulation", r.gas},
      {"world_size", r.comm->world_size()},
      {"device", std::string(r.backend->name())},
      {"device_memory_limit", (int64_t)r.backend->memory_limit()},
      {"host_memory_limit", r.ds.zerotrain.host_memory_limit},
      {"steps", opt.steps},
      {"peak_device_bytes", (int64_t)peaks[0]},
      {"peak_host_bytes", (int64_t)peaks[1]}};
  return write_json(opt.run_dir, "run.json", j);
}

absl::Status write_reports(const TrainOptions& opt, Run& r, MemorySnapshot& mem,
                           const std::vector<CommStats>& comm_steps,
                           const std::vector<OffloadTraffic>& offload_steps) {
  const int rank = r.comm->rank();
  const ParamLayout& layout = r.transformer->layout();
  if (opt.memory_report) {
    for (size_t c = 0; c < kNumMemCategories; ++c)
      mem.peak[c] = r.backend->tracker().peak(static_cast<MemCategory>(c));
    mem.device_peak = (int64_t)r.backend->tracker().peak_total();
    const EstimateInput in = estimate_input(r.ds, r.model, r.comm->world_size(),
                                            r.comm->local_size(), r.B, r.T, r.backend.get());
    for (size_t c = 0; c < kNumMemCategories; ++c) {  // offload, and cpu_checkpointing
      const MemCategory cat = static_cast<MemCategory>(c);
      mem.host_peak[c] = host_peak_bytes(r, cat);
    }
    ZT_ASSIGN_OR_RETURN(MemoryEstimate predicted, estimate_memory(in));
    // Node-shared parameters: each rank still counts the whole working copy, the node holds one.
    nlohmann::json report = memory_report(mem, in, predicted, rank);
    report["node_shared_params"] = r.engine->node_shared();
    ZT_RETURN_IF_ERROR(
        write_json(opt.run_dir, absl::StrCat("memory_report_rank", rank, ".json"), report));
  }
  ZT_RETURN_IF_ERROR(write_run_summary(opt, r));
  if (r.comms_log && rank == 0)  // DeepSpeed's log_summary, of rank 0's collectives
    std::printf("comms_logger summary (rank 0):\n%s", r.comms_log->summary().c_str());
  if (r.ds.zerotrain.trace.enabled)  // each rank its own file
    ZT_RETURN_IF_ERROR(Tracer::instance().write(r.ds.zerotrain.trace.output_path));
  if (opt.comm_report) {
    // Node-shared parameters: a barrier, not an all-gather, publishes the updated working copy.
    nlohmann::json report = comm_report(comm_steps, offload_steps, (int64_t)layout.total_numel(),
                                        r.ds.zero.stage, r.comm->world_size(), rank);
    report["node_shared_params"] = r.engine->node_shared();
    ZT_RETURN_IF_ERROR(
        write_json(opt.run_dir, absl::StrCat("comm_report_rank", rank, ".json"), report));
  }
  return absl::OkStatus();
}

// f() with exceptions (out of memory above all) turned into a Status. Past the device-memory
// limit the message adds what the estimator says would fit.
template <class F>
absl::Status guarded(const Run& r, F&& f) {
  try {
    return f();
  } catch (const DeviceMemoryLimitExceeded& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(e.what(), ". ",
                     fit_suggestion(r.ds, r.model, r.comm->world_size(), r.comm->local_size(),
                                    r.B, r.T, (int64_t)r.backend->memory_limit(),
                                    r.backend.get())));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "out of memory allocating the model, optimizer or activations; reduce --seq_len or "
        "train_micro_batch_size_per_gpu, use a higher ZeRO stage, or a smaller model");
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

absl::Status train_loop(const TrainOptions& opt, Run& r);

}  // namespace

absl::Status run_train(const TrainOptions& opt) {
  Run r;
  ZT_ASSIGN_OR_RETURN(r.comm, make_host_communicator());
  // Every rank validates the same inputs; they agree before any collective of the run, so a
  // rank that failed (say, a file missing on its node) never leaves the others waiting.
  auto agree = [&r](const absl::Status& st) {
    return agree_on_all_ranks(*r.comm, st, "during setup");
  };
  ZT_RETURN_IF_ERROR(agree(guarded(r, [&] { return setup_inputs(opt, r); })));
  r.comm->set_wait_limits(r.ds.zerotrain.collective_report_interval,
                          r.ds.zerotrain.collective_timeout);
  ZT_RETURN_IF_ERROR(
      check_same_on_all_ranks(*r.comm, "device, model, ds_config and recipe", fingerprint(opt, r)));
  ZT_RETURN_IF_ERROR(check_same_data(*r.comm, *r.train, "--train_data"));
  if (r.val) ZT_RETURN_IF_ERROR(check_same_data(*r.comm, *r.val, "--val_data"));
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> device_comm,
                      make_device_communicator(*r.comm, *r.backend));
  if (device_comm) {
    r.host_comm = std::move(r.comm);
    r.comm = std::move(device_comm);
  }
  if (r.ds.comms_logger) {
    const int rank = r.comm->rank();
    r.comms_log = std::make_unique<CommLogger>(r.ds.comms_logger_options, r.comm->world_size(),
                                               rank, rank == 0 ? stdout : nullptr);
    r.comm->set_logger(r.comms_log.get());
    if (rank == 0 && !r.comm->logs_collectives())
      std::fprintf(stderr,
                   "notice: comms_logger: this communicator (NCCL, or one rank) does not time "
                   "its collectives yet; the summary will be empty\n");
  }
  ZT_RETURN_IF_ERROR(agree(guarded(r, [&] { return setup_model(r); })));
  // auto may resolve differently where a node lacks cuDNN: one attention for every rank.
  ZT_RETURN_IF_ERROR(check_same_on_all_ranks(*r.comm, "attention", r.attention));
  ZT_RETURN_IF_ERROR(agree(guarded(r, [&] { return setup_engine(opt, r); })));
  ZT_RETURN_IF_ERROR(agree(guarded(r, [&] { return setup_resume(opt, r); })));
  // Every rank resumed the same save (a save_dir that is not shared would differ by node).
  ZT_RETURN_IF_ERROR(check_same_on_all_ranks(*r.comm, "checkpoint to resume from",
                                             absl::StrCat("step ", r.start_step)));
  // From here collectives are in flight: a rank that stopped alone would leave the others
  // waiting in one, so an error on any rank ends them all.
  const absl::Status result = guarded(r, [&] { return train_loop(opt, r); });
  if (!result.ok() && r.comm->world_size() > 1)
    abort_all_ranks(kUserErrorExitCode, std::string(result.message()));
  return result;
}

namespace {

// One optimizer step: the micro-batches' forward and backward, the engine's step at the
// scheduled learning rate. The loss and its gradient are the mean over the global batch's
// trained targets (every micro-batch of every rank): with a loss mask the micro-batches hold
// different counts, so the step first reads its micro-batches and agrees on the total (one
// scalar all-reduce; without a mask the count is B*T*G*W and nothing is exchanged). What it
// measured comes back (step_ms covers the micro-batches and the step; the caller adds the rest
// of its record). x and y hold G*B*T ints (G = gradient accumulation steps).
absl::StatusOr<StepRecord> train_step(Run& r, int64_t step, std::vector<int>& x,
                                      std::vector<int>& y) {
  StepRecord s;
  s.step = step;
  Timer t;
  const OffloadTimes offload_t0 = r.engine->offload_times();
  r.engine->reset_comm_wait();
  const size_t BT = (size_t)r.B * r.T;
  std::vector<int> pos(r.train->packed() ? x.size() : 0);  // packed rows: positions per example
  int* positions = pos.empty() ? nullptr : pos.data();
  double trained = 0;  // the global batch's trained targets
  for (int micro = 0; micro < r.gas; ++micro) {
    r.train->next_batch(&x[micro * BT], &y[micro * BT], positions ? positions + micro * BT : nullptr);
    trained += std::count_if(&y[micro * BT], &y[(micro + 1) * BT], [](int v) { return v >= 0; });
  }
  const int W = r.comm->world_size();
  double loss_wait_ms = 0;
  if (r.train->masked() && W > 1) {
    Timer tc;
    r.comm->all_reduce_scalars(&trained, 1, ScalarOp::kSum);
    loss_wait_ms += tc.ms();
  } else {
    trained *= W;
  }
  // Each rank's gradient is averaged over the ranks (the engine's mean) and the micro-batches
  // (the seed's 1/G), so each micro-batch divides by the mean count per micro-batch and rank.
  const double denominator = trained > 0 ? trained / ((double)W * r.gas) : 1.0;
  TracedStep traced(step);
  for (int micro = 0; micro < r.gas; ++micro) {
    r.engine->begin_pass();
    r.engine->set_gradient_accumulation_boundary(micro == r.gas - 1);
    Timer tf;
    // The seed gradient carries the fp16 loss scale and the accumulation average.
    const float seed = static_cast<float>(r.engine->loss_scale() / r.gas);
    s.loss += r.transformer
                  ->forward(*r.engine, &x[micro * BT], &y[micro * BT], r.B, r.T, seed,
                            positions ? positions + micro * BT : nullptr, denominator)
                  .sum;
    s.forward_ms += tf.ms();
    Timer tb;
    r.transformer->backward(*r.engine);
    s.backward_ms += tb.ms();
  }
  if (W > 1) {  // the sum over ranks
    Timer tl;
    r.comm->all_reduce_scalars(&s.loss, 1, ScalarOp::kSum);
    loss_wait_ms += tl.ms();
    trace_elapsed(Track::kCompute, "wait for communication", loss_wait_ms);
  }
  s.loss = trained > 0 ? s.loss / trained : 0.0;
  // DeepSpeed's schedulers count applied optimizer steps from 0 (fp16 skips do not count).
  const OptimizerConfig& o = r.ds.optimizer;
  s.lr = lr_at(r.ds.scheduler, o.lr, r.engine->steps_taken());
  Timer to;
  // A second parameter group's rate (Muon's AdamW half) comes from the engine's rule.
  ZT_ASSIGN_OR_RETURN(const StepStats st, r.engine->step(static_cast<float>(s.lr)));
  s.optimizer_ms = to.ms();
  s.grad_norm = st.grad_norm;
  s.loss_scale = st.loss_scale;
  s.skipped = st.skipped;
  s.next_loss_scale = r.engine->loss_scale();
  s.comm_wait_ms = r.engine->comm_wait_ms() + loss_wait_ms;
  s.recompute_ms = r.transformer->recompute_ms();
  r.transformer->reset_recompute_ms();
  if (r.engine->offloaded()) s.offload = r.engine->offload_times() - offload_t0;
  if (const TraceSummary ts = traced.end(); ts.step > 0) s.trace = ts;
  s.step_ms = t.ms();
  return s;
}

absl::Status train_loop(const TrainOptions& opt, Run& r) {
  const bool root = r.comm->rank() == 0;
  // Rank 0's sinks: the console, metrics.jsonl.
  std::vector<std::unique_ptr<MetricsSink>> own;
  std::vector<MetricsSink*> sinks;
  if (root) {
    const DsConfig& ds = r.ds;
    own.push_back(make_console_sink(
        ds.wall_clock_breakdown ? ds.steps_per_print : 0,
        ds.activation_checkpointing.profile && ds.zerotrain.gradient_checkpointing));
    sinks.push_back(own.back().get());
  }
  if (r.metrics) sinks.push_back(&*r.metrics);
  if (r.csv) sinks.push_back(r.csv.get());
  if (r.tensorboard) sinks.push_back(r.tensorboard.get());
  const ParamLayout& layout = r.transformer->layout();
  const int64_t tokens_per_step = (int64_t)r.B * r.T * r.gas * r.comm->world_size();
  if (root)
    std::printf(
        "model %s: %s parameters, %d units | micro-batch %d x %d tokens, "
        "gradient accumulation %d, %d rank(s), ZeRO stage %d, %lld tokens/step | %s on %s, %d "
        "thread%s, attention %s | %s\n",
        opt.init_from.empty() ? opt.model.c_str() : opt.init_from.c_str(),
        absl::StrFormat("%.2fM", layout.total_numel() / 1e6).c_str(), layout.num_units(), r.B, r.T,
        r.gas, r.comm->world_size(), r.ds.zero.stage, (long long)tokens_per_step,
        r.ds.bf16.enabled   ? "bf16"
        : r.ds.fp16.enabled ? "fp16"
                            : "fp32",
        std::string(r.backend->name()).c_str(), omp_get_max_threads(),
        omp_get_max_threads() == 1 ? "" : "s", r.attention.c_str(),
        absl::StrCat("train ", r.train->num_tokens(), " tokens").c_str());
  if (r.start_step == opt.steps && !r.resave) {  // whether rank 0's log records the end
    double ended = r.ended ? 1 : 0;
    r.comm->all_reduce_scalars(&ended, 1, ScalarOp::kMax);
    r.ended = ended > 0;
  }
  if (nothing_to_train(opt, r)) return absl::OkStatus();
  auto validate_now = [&](int64_t step) {
    if (!r.val) return absl::OkStatus();
    const double vl = evaluate(r, opt.val_sequences);
    for (MetricsSink* s : sinks) ZT_RETURN_IF_ERROR(s->validation(step, vl));
    return absl::OkStatus();
  };
  if (r.start_step == 0) ZT_RETURN_IF_ERROR(validate_now(0));
  std::vector<int> x((size_t)r.gas * r.B * r.T), y(x.size());
  std::vector<CommStats> comm_steps;
  std::vector<OffloadTraffic> offload_steps;
  MemorySnapshot mem;
  Timer run_timer;
  double loop_ms = 0;
  const int64_t profile_step = r.ds.flops_profiler.profile_step;
  if (root && r.profiler && (profile_step <= r.start_step || profile_step > opt.steps))
    std::fprintf(stderr,
                 "notice: flops_profiler.profile_step %lld is not among this run's steps "
                 "(%lld to %lld): no profile\n",
                 (long long)profile_step, (long long)r.start_step + 1, (long long)opt.steps);
  const ZerotrainConfig::Trace& trace = r.ds.zerotrain.trace;
  if (root && trace.enabled && (trace.last_step <= r.start_step || trace.first_step > opt.steps))
    std::fprintf(stderr,
                 "notice: trace steps %lld to %lld are not among this run's steps "
                 "(%lld to %lld): no trace\n",
                 (long long)trace.first_step, (long long)trace.last_step,
                 (long long)r.start_step + 1, (long long)opt.steps);
  for (int64_t step = r.start_step + 1; step <= opt.steps; ++step) {
    const bool profiling = r.profiler && step == profile_step;
    if (profiling) r.profiler->set_recording(true);
    Timer t;
    const CommStats comm_before = r.comm->stats();
    const OffloadTraffic offload_before{r.engine->bytes_to_host(), r.engine->bytes_to_device()};
    ZT_ASSIGN_OR_RETURN(StepRecord rec, train_step(r, step, x, y));
    ZT_RETURN_IF_ERROR(check_host_memory_limit(r));
    comm_steps.push_back(comm_delta(r.comm->stats(), comm_before));
    offload_steps.push_back({r.engine->bytes_to_host() - offload_before.to_host,
                             r.engine->bytes_to_device() - offload_before.to_device});
    if (step == r.start_step + 1)
      for (size_t c = 0; c < kNumMemCategories; ++c)
        mem.persistent[c] = r.backend->tracker().current(static_cast<MemCategory>(c));
    if (step == r.start_step + 1)
      for (size_t c = 0; c < kNumMemCategories; ++c) {
        const MemCategory cat = static_cast<MemCategory>(c);
        mem.host_persistent[c] =
            r.engine->host_bytes(cat) + r.transformer->host_tracker().current(cat);
      }
    const double ms = t.ms();
    loop_ms += ms;
    if (profiling) ZT_RETURN_IF_ERROR(report_profile(r, step, ms));
    rec.steps = opt.steps;
    rec.step_ms = ms;
    rec.tokens_per_s = tokens_per_step / (ms / 1e3);
    rec.eta_s = loop_ms / (step - r.start_step) * (opt.steps - step) / 1e3;
    for (MetricsSink* s : sinks) ZT_RETURN_IF_ERROR(s->step(rec));
    const double loss = rec.loss;
    if (!std::isfinite(loss))
      return absl::InternalError(absl::StrCat("loss became ", loss, " at step ", step,
                                              "; lower the learning rate, enable "
                                              "gradient_clipping, or check the data"));
    if (opt.val_every > 0 && step % opt.val_every == 0 && step != opt.steps)
      ZT_RETURN_IF_ERROR(validate_now(step));
    ZT_RETURN_IF_ERROR(maybe_save(opt, r, step));
  }
  if (r.resave) ZT_RETURN_IF_ERROR(maybe_save(opt, r, opt.steps));
  fault_point("train.before_end");    // saved at --steps, the end of training not yet done
  r.engine->finish_update();  // the last step's update, if it ran in the background
  ZT_RETURN_IF_ERROR(validate_now(opt.steps));
  ZT_RETURN_IF_ERROR(write_reports(opt, r, mem, comm_steps, offload_steps));
  if (root && opt.steps > r.start_step)
    std::printf("trained %lld steps in %s (%.0f tok/s)\n", (long long)(opt.steps - r.start_step),
                format_duration(run_timer.ms() / 1e3).c_str(),
                tokens_per_step * (opt.steps - r.start_step) / (loop_ms / 1e3));
  print_sample(opt, r);
  // Progress lines and the sample went to stdout: a redirect onto a full disk is an error too.
  if (root && (std::fflush(stdout) != 0 || std::ferror(stdout)))
    return absl::InternalError(
        absl::StrCat("cannot write to standard output: ", std::strerror(errno ? errno : EIO)));
  // The end is done: a relaunch with --resume finds it logged and writes nothing.
  if (r.metrics) ZT_RETURN_IF_ERROR(r.metrics->end_of_training(opt.steps));
  return absl::OkStatus();
}

}  // namespace
}  // namespace zt
