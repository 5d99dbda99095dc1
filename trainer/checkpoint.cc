// Checkpoint save and load (see checkpoint.h for the format and the guarantees).
#include "trainer/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fault.h"
#include "common/file.h"
#include "common/progress.h"
#include "common/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

std::string rank_file(int r) { return absl::StrFormat("rank_%05d.bin", r); }

// The names of the engine's optimizer states, as meta.json records them.
nlohmann::json state_names(const Engine& engine) {
  const OptimizerInfo& info = optimizer_info(engine.optimizer().kind());
  nlohmann::json names = nlohmann::json::array();
  for (int i = 0; i < info.num_states; ++i) names.push_back(info.state_names[i]);
  return names;
}

// This rank's file: for each unit with a non-empty saved range, master | state 0 | state 1 ...
// (AdamW: master | m | v). Returns its size and CRC-32 (zlib's).
absl::StatusOr<std::pair<uint64_t, uint32_t>> write_rank_file(const std::string& path,
                                                              Engine& engine,
                                                              const ParamLayout& layout,
                                                              bool report) {
  ZT_ASSIGN_OR_RETURN(FileWriter f, FileWriter::create(path));
  uint64_t bytes = 0;
  uLong crc = crc32(0L, Z_NULL, 0);
  const int k = optimizer_info(engine.optimizer().kind()).num_states;
  int64_t total = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto [begin, end] = engine.saved_range(u);
    total += (int64_t)(end - begin) * (1 + k) * 4;
  }
  Progress progress("saving " + path, total, report);
  std::vector<std::vector<float>> arrays(1 + k);
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto [begin, end] = engine.saved_range(u);
    const size_t n = end - begin;
    if (n == 0) continue;
    float* states[kMaxOptimizerStates] = {};
    for (int i = 0; i <= k; ++i) arrays[i].resize(n);
    for (int i = 0; i < k; ++i) states[i] = arrays[1 + i].data();
    engine.get_saved_state(u, arrays[0].data(), states);
    for (const std::vector<float>& a : arrays) {
      ZT_RETURN_IF_ERROR(f.write(a.data(), n * 4));
      crc = crc32_z(crc, reinterpret_cast<const Bytef*>(a.data()), n * 4);
      bytes += n * 4;
      progress.update((int64_t)bytes);
    }
  }
  ZT_RETURN_IF_ERROR(f.close());
  return std::pair<uint64_t, uint32_t>{bytes, static_cast<uint32_t>(crc)};
}

// The saves up to `keep` (the one just made), newest first, beyond keep_last are removed.
// Saves of later steps (another run's, in a save_dir shared after a --resume_from an earlier
// save) are left alone.
void prune(const std::string& save_dir, int64_t keep_last, const std::string& keep) {
  if (keep_last <= 0) return;
  std::vector<std::pair<int64_t, std::string>> saves;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(save_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (checkpoint_step(name) >= 0 && checkpoint_step(name) <= checkpoint_step(keep) &&
        e.is_directory())
      saves.push_back({checkpoint_step(name), name});
  }
  std::sort(saves.rbegin(), saves.rend());
  for (size_t i = (size_t)keep_last; i < saves.size(); ++i)
    if (saves[i].second != keep) {
      fs::remove_all(fs::path(save_dir) / saves[i].second, ec);
      fault_point("save.pruning");  // after removing one old save, before the others
    }
}

// Rank 0, once every rank's file is complete: meta.json, the rename into place, `latest`.
absl::Status publish(const std::string& save_dir, const std::string& tmp, const std::string& tag,
                     const nlohmann::json& meta, int64_t keep_last) {
  ZT_RETURN_IF_ERROR(
      write_file_atomic((fs::path(tmp) / "meta.json").string(), sealed_meta_text(meta)));
  fault_point("save.meta_written");  // a complete save still under its .tmp_ name
  const fs::path final_dir = fs::path(save_dir) / tag;
  const fs::path old = fs::path(save_dir) / (".old_" + tag);
  std::error_code ec;
  fs::remove_all(old, ec);
  // An earlier save of the same step is moved aside (find_checkpoint falls back to it if
  // `latest` names this step and we die before the next rename) and removed once replaced.
  const bool replacing = fs::exists(final_dir, ec);
  if (replacing) {
    fs::rename(final_dir, old, ec);
    if (ec)
      return absl::InternalError(
          absl::StrCat("cannot move aside '", final_dir.string(), "': ", ec.message()));
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    const std::string why = ec.message();
    if (replacing) fs::rename(old, final_dir, ec);
    return absl::InternalError(
        absl::StrCat("cannot rename '", tmp, "' to '", final_dir.string(), "': ", why));
  }
  ZT_RETURN_IF_ERROR(fsync_dir(save_dir));
  fault_point("save.renamed");  // in place, `latest` still naming the previous save
  if (replacing) fs::remove_all(old, ec);
  ZT_RETURN_IF_ERROR(write_file_atomic((fs::path(save_dir) / "latest").string(), latest_text(tag)));
  fault_point("save.latest_written");  // before older saves are pruned
  prune(save_dir, keep_last, tag);
  return absl::OkStatus();
}

}  // namespace

absl::Status save_checkpoint(const std::string& save_dir, int64_t keep_last,
                             const TrainingState& st, const nlohmann::json& identity,
                             const nlohmann::json& info, Engine& engine, const ParamLayout& layout,
                             Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size(), U = layout.num_units();
  const std::string tag = checkpoint_tag(st.step);
  const std::string tmp = (fs::path(save_dir) / (".tmp_" + tag)).string();
  // A pending delayed update is published first, on every rank (it ends in an all-gather),
  // before any rank's I/O can fail alone.
  engine.finish_update();
  absl::Status made = absl::OkStatus();
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(save_dir, ec);
    for (const auto& e : fs::directory_iterator(save_dir, ec))  // left by killed saves
      if (e.path().filename().string().rfind(".tmp_step_", 0) == 0) fs::remove_all(e.path(), ec);
    fs::create_directories(tmp, ec);
    if (ec || !fs::is_directory(tmp))
      made = absl::InternalError(absl::StrCat("cannot create the checkpoint directory '", tmp,
                                              "': ", ec ? ec.message() : "not a directory"));
  }
  ZT_RETURN_IF_ERROR(agree_on_all_ranks(comm, made, "to create the checkpoint directory"));
  // Each rank's file, then (size, crc, ranges) of every rank in one scalar reduction: rank r
  // fills its row of a zeroed table (every value is exact in a double).
  const auto written =
      write_rank_file((fs::path(tmp) / rank_file(rank)).string(), engine, layout, rank == 0);
  fault_point("save.rank_file_written");  // this rank's file whole, no meta.json yet
  const size_t row = 2 + 2 * (size_t)U;
  std::vector<double> table((size_t)world * row, 0.0);
  if (written.ok()) {
    double* mine = table.data() + (size_t)rank * row;
    mine[0] = (double)written->first;
    mine[1] = (double)written->second;
    for (int u = 0; u < U; ++u) {
      const auto [begin, end] = engine.saved_range(u);
      mine[2 + 2 * u] = (double)begin;
      mine[3 + 2 * u] = (double)end;
    }
  }
  const absl::Status wrote = agree_on_all_ranks(
      comm, written.ok() ? absl::OkStatus() : written.status(), "to write its checkpoint file");
  if (!wrote.ok()) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);  // no partial save left
    }
    return wrote;
  }
  comm.all_reduce_scalars(table.data(), (int)table.size(), ScalarOp::kSum);
  absl::Status published = absl::OkStatus();
  if (rank == 0) {
    nlohmann::json meta = {{"format", "zerotrain-checkpoint"},
                           {"version", kCheckpointFormatVersion},
                           {"step", st.step},
                           {"adam_steps", st.adam_steps},
                           {"optimizer_states", state_names(engine)},
                           {"data", {{"epoch", st.data.epoch}, {"position", st.data.position}}},
                           {"identity", identity},
                           {"info", info},
                           {"world_size", world}};
    if (st.loss_scaler) {
      const LossScaler::State& s = *st.loss_scaler;
      meta["loss_scaler"] = {{"scale", s.scale},
                             {"hysteresis_left", s.hysteresis_left},
                             {"iter", s.iter},
                             {"last_overflow", s.last_overflow},
                             {"skipped_steps", s.skipped_steps}};
    }
    for (const Unit& u : layout.units())
      meta["units"].push_back({{"name", u.name}, {"numel", u.numel}});
    for (int r = 0; r < world; ++r) {
      const double* t = table.data() + (size_t)r * row;
      nlohmann::json ranges = nlohmann::json::array();
      for (int u = 0; u < U; ++u)
        ranges.push_back({(uint64_t)t[2 + 2 * u], (uint64_t)t[3 + 2 * u]});
      meta["ranks"].push_back({{"file", rank_file(r)},
                               {"bytes", (uint64_t)t[0]},
                               {"crc32", (uint32_t)t[1]},
                               {"ranges", ranges}});
    }
    published = publish(save_dir, tmp, tag, meta, keep_last);
    if (!published.ok()) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  return agree_on_all_ranks(comm, published, "to publish the checkpoint");
}

namespace {

// The saved identity against this run's: every field that differs, with both values.
absl::Status check_identity(const std::string& dir, const nlohmann::json& saved,
                            const nlohmann::json& now) {
  std::string diff;
  for (const auto& [key, value] : now.items()) {
    const nlohmann::json old = saved.contains(key) ? saved[key] : nlohmann::json();
    if (old != value)
      absl::StrAppend(&diff, diff.empty() ? "" : "; ", key, " was ", old.dump(), ", now ",
                      value.dump());
  }
  for (const auto& [key, value] : saved.items())
    if (!now.contains(key))
      absl::StrAppend(&diff, diff.empty() ? "" : "; ", key, " was ", value.dump(), ", now absent");
  if (diff.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint '", dir, "' does not match this run: ", diff,
      ". Resume with the settings it was saved with (the world size and ZeRO stage may change)"));
}

}  // namespace

absl::StatusOr<TrainingState> load_checkpoint(
    const std::string& dir, const std::function<nlohmann::json(int format_version)>& identity,
    Engine& engine, const ParamLayout& layout, bool report) {
  ZT_ASSIGN_OR_RETURN(const nlohmann::json meta, read_checkpoint_meta(dir));
  TrainingState st;
  st.meta_checked = checkpoint_meta_checked(meta);
  try {
    ZT_RETURN_IF_ERROR(
        check_identity(dir, meta.at("identity"), identity(meta.at("version").get<int>())));
    st.step = meta.at("step").get<int64_t>();
    st.adam_steps = meta.at("adam_steps").get<int64_t>();
    if (st.step < 0 || st.adam_steps < 0 || st.adam_steps > st.step || st.step > (int64_t)1e15)
      return absl::InvalidArgumentError(absl::StrCat("checkpoint metadata in '", dir, "': step ",
                                                     st.step, " and adam_steps ", st.adam_steps,
                                                     " are not a possible pair"));
    st.data = {meta.at("data").at("epoch").get<int64_t>(),
               meta.at("data").at("position").get<int64_t>()};
    if (meta.contains("loss_scaler")) {
      const nlohmann::json& s = meta["loss_scaler"];
      st.loss_scaler =
          LossScaler::State{s.at("scale").get<double>(), s.at("hysteresis_left").get<int>(),
                            s.at("iter").get<int64_t>(), s.at("last_overflow").get<int64_t>(),
                            s.at("skipped_steps").get<int64_t>()};
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint metadata in '", dir,
                                                   "': a field is missing or has the wrong type (",
                                                   e.what(), ")"));
  }
  // The identity matched, so the save is of this optimizer; its states must be this one's.
  ZT_ASSIGN_OR_RETURN(const std::vector<std::string> names, checkpoint_state_names(meta));
  if (nlohmann::json(names) != state_names(engine))
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", dir, "' holds the optimizer states ", nlohmann::json(names).dump(),
        ", this run's optimizer (", optimizer_info(engine.optimizer().kind()).name, ") keeps ",
        state_names(engine).dump(), "; resume with the optimizer it was saved with"));
  ZT_RETURN_IF_ERROR(read_checkpoint(
      dir, meta, layout,
      [&](int u, std::span<const float> master, std::span<const std::span<const float>> states) {
        engine.set_unit_state(u, master, states);
        return absl::OkStatus();
      },
      report));
  engine.set_steps_taken((int)st.adam_steps);
  if (st.loss_scaler) engine.restore_loss_scaler(*st.loss_scaler);
  return st;
}

}  // namespace zt
