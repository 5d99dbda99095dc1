// The checkpoint format's reading side (checkpoint.h describes the format): finding a save,
// its metadata, and every unit's saved state. No engine and no collectives, so export and
// sample use it too, and tests/fuzz feeds it hostile metadata under AddressSanitizer.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/optimizer_math.h"

namespace zt {

// Version 2 adds the checksums of meta.json and `latest`; version 1 saves are still read (their
// metadata unchecked, with a notice: checkpoint_meta_checked).
inline constexpr int kCheckpointFormatVersion = 2;
// "step_00000100": the directory name of the save after `step` steps.
std::string checkpoint_tag(int64_t step);
// The step a save directory's name stands for (step_ and 8 or more digits), or -1.
int64_t checkpoint_step(const std::string& name);

// meta.json's text for `meta`: JSON (indent 1) whose top-level "meta_crc32" holds the CRC-32
// (zlib's, 8 hex digits) of the whole text with that field's value written as "00000000", so
// any flipped bit of the file fails read_checkpoint_meta.
std::string sealed_meta_text(nlohmann::json meta);
// The contents of SAVE_DIR/latest naming save `tag`: "TAG CRC\n", CRC the CRC-32 of TAG in 8 hex
// digits (version 1 wrote "TAG\n", still read).
std::string latest_text(const std::string& tag);

// The checkpoint directory `dir` names: dir itself when it holds meta.json, else the save that
// dir/latest points to, else (no latest) dir's newest complete step_* save; nullopt when dir
// holds no save (nothing saved yet). Errors: a `latest`
// naming a save that does not exist.
absl::StatusOr<std::optional<std::string>> find_checkpoint(const std::string& dir);

// find_checkpoint for a flag that needs one: NotFound "FLAG 'DIR' holds no checkpoint (no
// meta.json, no latest)" when there is none.
absl::StatusOr<std::string> require_checkpoint(const std::string& dir, const std::string& flag);

// The model a checkpoint was saved with: its meta.json info.model_config (a Hugging Face
// config.json). Errors name the checkpoint directory `dir`.
absl::StatusOr<ModelConfig> checkpoint_model(const nlohmann::json& meta, const std::string& dir);

// meta.json of the checkpoint in `dir`, parsed, its format and version checked, and (version 2)
// its checksum: DataLoss naming the file when any byte differs from what was written. Errors
// name the file.
absl::StatusOr<nlohmann::json> read_checkpoint_meta(const std::string& dir);
// False for metadata read_checkpoint_meta could not check (a version 1 save, written before
// the checksum): callers print unchecked_meta_notice(dir) once.
bool checkpoint_meta_checked(const nlohmann::json& meta);
std::string unchecked_meta_notice(const std::string& dir);

// The optimizer states a save holds beside each master weight, by name (meta.json's
// "optimizer_states", e.g. ["exp_avg", "exp_avg_sq"] for AdamW, ["exp_avg"] for Lion, ["sum"]
// for Adagrad; a save without the field holds AdamW's two). Errors: not a list of at most
// kMaxOptimizerStates names.
absl::StatusOr<std::vector<std::string>> checkpoint_state_names(const nlohmann::json& meta);

// Reads the saved state of every unit of `layout`, whole (assembled from every rank's slice),
// and calls fn(u, master, states) in unit order, states in checkpoint_state_names' order.
// Checks the metadata against the layout, each file's size before and CRC-32 after reading,
// and that each unit's slices tile it exactly once: errors name the file. fn's error stops the
// reading. With `report`, a progress line on stderr (common/progress.h).
using UnitStateFn = std::function<absl::Status(int u, std::span<const float> master,
                                               std::span<const std::span<const float>> states)>;
absl::Status read_checkpoint(const std::string& dir, const nlohmann::json& meta,
                             const ParamLayout& layout, const UnitStateFn& fn, bool report = true);

}  // namespace zt
