// One training run's state and the phases that build it, shared by the files of `zerotrain
// train`: its identity and directories (trainer/run_identity.cc), its set-up
// (trainer/run_setup.cc) and its loop (trainer/train.cc). Internal to trainer/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/file.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/profiling_backend.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"
#include "trainer/ds_config.h"
#include "trainer/metrics.h"
#include "trainer/train.h"
#include "zero/comm.h"
#include "zero/comm_logger.h"
#include "zero/engine.h"

namespace zt {

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
  EngineOptions eo;  // engine_options(ds), once ds is final (setup_inputs)
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
  // Rank 0's metrics sinks, in the order a step reaches them (build_sinks): the console,
  // metrics.jsonl (metrics points at it), the enabled monitors.
  std::vector<std::unique_ptr<MetricsSink>> sinks;
  MetricsWriter* metrics = nullptr;
  // Rank 0: save_dir, run_dir and the monitors' folders are this run's alone.
  DirLock save_lock, run_lock, csv_lock, tensorboard_lock;
  int B = 0, T = 0, gas = 1;
  std::string attention;         // what runs it (Backend::prepare_attention)
  bool param_read_ahead = true;  // TrainOptions::param_read_ahead
  int64_t start_step = 0;        // steps already done (a resumed run)
  bool resave = false;  // resumed at --steps into another save_dir: save again, train nothing
  // Resumed at --steps: metrics.jsonl records the end of training (rank 0 reads it in
  // setup_resume, train_loop tells every rank).
  bool ended = false;
};

// ---- the run's identity and directories (trainer/run_identity.cc) ----

// The model's configuration, each field named (a mismatch on resume names the field).
nlohmann::json model_identity(const ModelConfig& m);

// What a resumed run must share with the save (trainer/checkpoint.h): the model, the data
// order, the global batch and the resolved ds_config values that change the numbers. Not the
// world size, the stage, offload or the micro-batch split, which a resume may change. Flattened
// ("ds_config/optimizer/params/lr", "model/hidden") so a mismatch names the field.
// `format_version` 1: the identity those saves recorded (the ds_config's text, not its resolved
// values; the model as an unlabelled array), so they still resume.
nlohmann::json resume_identity(const TrainOptions& opt, const Run& r, int format_version);

// The resolved save keys (trainer/run_config.h) against --resume and --resume_from.
absl::Status check_saves(const TrainOptions& opt, const ZerotrainConfig& z);

// The directories a run writes, claimed before step 1 rather than found wanting at the first
// save: save_dir created and writable on every rank (each writes its file there) and holding no
// earlier run's saves unless this run resumes (a forgotten --resume would train from step 0
// over them, and keep_last delete them); on rank 0, save_dir, run_dir and the enabled monitors'
// folders (csv_monitor's and tensorboard's output_path/job_name: two runs from one ds_config
// would rewrite each other's CSV files) locked for this run alone (common/file.h DirLock).
absl::Status claim_dirs(const TrainOptions& opt, Run& r);

// A finished job relaunched with --resume: the save is at --steps, is not to be re-saved
// elsewhere, and the log records the end of training (MetricsWriter::ended). Such a run writes
// nothing (no log line, no report). One killed between its last save and that record does the
// end again instead (the final validation, the reports, the sample), once.
bool nothing_to_train(const TrainOptions& opt, const Run& r);

// What every rank must agree on before training, since it decides the sequence of collectives:
// the whole ds_config (canonical JSON: parsed, keys sorted), the model, and the recipe.
std::string fingerprint(const TrainOptions& opt, const Run& r);

// Every rank reads the same data: the same number of shards, each of the same size and CRC-32
// (and its loss mask's), or an error on every rank naming the first shard that differs, the
// ranks that disagree with rank 0 and what this rank read. Paths may differ (a node's own
// mount). One collective when they agree; one a shard, to name it, when they do not.
absl::Status check_same_data(Communicator& comm, const DataLoader& data, const std::string& flag);

// ---- set-up, phase by phase; every rank agrees on each phase's outcome (trainer/run_setup.cc)
// ----

// Inputs, data and the backend: everything a rank can fail on alone, before any collective.
absl::Status setup_inputs(const TrainOptions& opt, Run& r);

// The dtype r's backend keeps activations in for its working dtype (Backend::activation_dtype).
DType activation_dtype(const Run& r);

// The model and where its optimizer state and parameter shards live, on the backend of r:
// everything of the model that can fail on one rank alone (memory, a drive), before the engine,
// whose construction may be collective (node-shared parameters).
absl::Status setup_model(Run& r);

// A host category's peak bytes on this rank, as memory_report and host_memory_limit count
// them: the engine's (offloaded states and buffers) and the Transformer's (cpu_checkpointing).
size_t host_peak_bytes(const Run& r, MemCategory c);

// zerotrain.host_memory_limit against the host categories (model states, offload buffers and
// cpu_checkpointing's checkpoints; not NVMe), at their peaks, as memory_report counts them;
// collective, so every rank stops together. Checked after set-up and after each step rather
// than at each allocation. At set-up a category counts the larger of what it holds and what
// the estimator predicts the run will hold: what comes at the first step (pinned staging) and
// at the first delayed parameter update (its second host gradients, after the warm-up steps) is
// refused before any step trains.
absl::Status check_host_memory_limit(Run& r, bool at_setup = false);

// The ZeRO engine on r's model, communicator and state, and its initial weights. Resuming is a
// phase of its own: with node-shared parameters every rank writes whole units, so the
// checkpoint's values must not be written while another rank may still write the initial ones
// (the agreement between the phases orders them).
absl::Status setup_engine(const TrainOptions& opt, Run& r);

absl::Status setup_resume(const TrainOptions& opt, Run& r);

}  // namespace zt
