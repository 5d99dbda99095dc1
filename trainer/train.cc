#include "trainer/train.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fault.h"
#include "common/file.h"
#include "common/status.h"
#include "common/timer.h"
#include "common/trace.h"
#include "model/hf_weights.h"
#include "model/init.h"
#include "model/transformer.h"
#include "trainer/checkpoint.h"
#include "trainer/device.h"
#include "trainer/engine_options.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/reports.h"
#include "trainer/run.h"
#include "trainer/sampler.h"
#include "zero/comm.h"
#include "zero/comm_logger.h"
#include "zero/mpi_comm.h"
#include "zero/offload_device.h"

namespace zt {
namespace {

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
    for (const auto& s : r.sinks) ZT_RETURN_IF_ERROR(s->validation(step, vl));
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
    for (const auto& s : r.sinks) ZT_RETURN_IF_ERROR(s->step(rec));
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
