// Checkpoints (docs/checkpoints.md): one directory per save, written so that a killed save never
// replaces a good one, and read back at any world size and ZeRO stage.
//
//   SAVE_DIR/.lock                 the run lock (common/file.h DirLock): one run per SAVE_DIR
//   SAVE_DIR/latest                the tag of the newest complete save and its CRC-32
//                                  ("step_00000100 8d3f1a2c\n"; version 1: the tag alone)
//   SAVE_DIR/step_00000100/        one save
//     meta.json                    step, identity (what must match to resume), layout, files,
//                                  and the CRC-32 of its own bytes (meta_crc32)
//     rank_00000.bin ...           per rank, for each unit it saves (Engine::saved_range, in
//                                  unit order): fp32 master, Adam m, Adam v of those elements
//
// A save writes into SAVE_DIR/.tmp_step_..., every file fsynced; after every rank reported
// success rank 0 writes meta.json (with each file's size and CRC-32), renames the directory
// into place, fsyncs SAVE_DIR and only then replaces `latest` (write, fsync, rename). keep_last
// deletes older saves after that. The working (16-bit) parameters are not saved: they are the
// master rounded, as after every step (so a run with the delayed parameter update resumes
// with its pending update applied: not bit for bit).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "data/loader.h"
#include "model/layout.h"
#include "trainer/checkpoint_format.h"
#include "zero/comm.h"
#include "zero/engine.h"
#include "zero/loss_scaler.h"

namespace zt {

// What a checkpoint records beside the weights and moments, to continue where it stopped.
struct TrainingState {
  int64_t step = 0;        // trainer steps completed
  int64_t adam_steps = 0;  // Engine::steps_taken (fp16 skips do not count)
  DataLoaderState data;    // the global stream's position (data/loader.h)
  std::optional<LossScaler::State> loss_scaler;
  bool meta_checked = true;  // load_checkpoint: false for a version 1 save (no meta checksum)
};

// Saves the engine's state and `st` as SAVE_DIR/step_<st.step>, then points `latest` at it and
// keeps the newest keep_last saves (0: all). `identity`: the fields a resume must match (model,
// dtypes, batch, optimizer...); `info`: recorded, not checked (world size, stage, ds_config).
// Collective (every rank calls; no rank waits forever on another's failure): every rank fails or
// succeeds together, a failing rank with its error, the others with Aborted. Errors name the
// file and the system's reason; `latest` and earlier saves are untouched on any error. A
// pending delayed parameter update is published first, so a run with DPU that saves goes on
// from current weights (not bit for bit with one that does not save).
absl::Status save_checkpoint(const std::string& save_dir, int64_t keep_last,
                             const TrainingState& st, const nlohmann::json& identity,
                             const nlohmann::json& info, Engine& engine, const ParamLayout& layout,
                             Communicator& comm);

// Loads the checkpoint in `dir` into `engine` (any world size and stage: each rank keeps its
// slice) and returns its TrainingState. Checks first meta.json's checksum, then that
// identity(the save's format version) equals the saved identity (error naming each field that
// differs, both values), that every file has its recorded size,
// and while reading, each file's CRC-32 (error naming the file). Not collective; the caller
// agrees the outcome across ranks. `report`: a progress line on stderr (rank 0).
absl::StatusOr<TrainingState> load_checkpoint(
    const std::string& dir, const std::function<nlohmann::json(int format_version)>& identity,
    Engine& engine, const ParamLayout& layout, bool report = false);

}  // namespace zt
