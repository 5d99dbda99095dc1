// The run's identity (what every rank and a resumed save must share) and the directories it
// claims (trainer/run.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status.h"
#include "trainer/checkpoint.h"
#include "trainer/run.h"
#include "zero/comm.h"

namespace zt {

nlohmann::json model_identity(const ModelConfig& m) {
  nlohmann::json j;
  for_each_field(m, [&](const char* name, auto value, bool) { j[name] = value; });
  return j;
}

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
                   m.n_head,      m.n_kv_head,  m.hidden,         m.intermediate,
                   m.norm_eps,    m.rope_theta, m.tied_embeddings};
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

absl::Status claim_dirs(const TrainOptions& opt, Run& r) {
  const ZerotrainConfig& z = r.ds.zerotrain;
  namespace fs = std::filesystem;
  const std::string what = opt.save_dir.empty() ? "zerotrain.save_dir" : "--save_dir";
  if (!z.save_dir.empty()) ZT_RETURN_IF_ERROR(ensure_writable_dir(z.save_dir, what));
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
  if (z.save_dir.empty() || opt.resume || !opt.resume_from.empty()) return absl::OkStatus();
  const auto found = find_checkpoint(z.save_dir);
  if (found.ok() && !*found) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what, " '", z.save_dir, "' already holds saves of an earlier run",
                   found.ok() ? absl::StrCat(" (newest: ", **found, ")") : "",
                   ": pass --resume to continue it, or give another ", what,
                   " (or remove them) to start from step 0"));
}

bool nothing_to_train(const TrainOptions& opt, const Run& r) {
  return r.start_step == opt.steps && !r.resave && r.ended;
}

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

}  // namespace zt
