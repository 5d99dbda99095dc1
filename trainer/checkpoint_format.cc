// Reading the checkpoint format (checkpoint.h): the parts that need no engine, shared by
// resume, export and sample, and fuzzed on their own (tests/fuzz).
#include "trainer/checkpoint_format.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file.h"
#include "common/json.h"
#include "common/progress.h"
#include "common/status.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// One rank file being read unit by unit, its CRC accumulated.
struct RankFile {
  std::FILE* f = nullptr;
  std::string path;
  uint64_t bytes = 0, read = 0;
  uint32_t crc = 0;
  uLong running = crc32(0L, Z_NULL, 0);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  RankFile() = default;
  RankFile(const RankFile&) = delete;
  RankFile& operator=(const RankFile&) = delete;
  ~RankFile() {
    if (f) std::fclose(f);
  }
};

constexpr char kMetaCrcKey[] = "\n \"meta_crc32\": \"";  // the field as dump(1) writes it
constexpr char kZeroCrc[] = "00000000";

uint32_t crc_of(std::string_view text) {
  return (uint32_t)crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()),
                           text.size());
}

std::string crc_hex(uint32_t crc) { return absl::StrFormat("%08x", crc); }

}  // namespace

std::string sealed_meta_text(nlohmann::json meta) {
  meta["meta_crc32"] = kZeroCrc;
  std::string text = meta.dump(1) + "\n";
  const size_t at = text.find(kMetaCrcKey) + std::strlen(kMetaCrcKey);
  text.replace(at, 8, crc_hex(crc_of(text)));
  return text;
}

std::string latest_text(const std::string& tag) {
  return absl::StrCat(tag, " ", crc_hex(crc_of(tag)), "\n");
}

std::string checkpoint_tag(int64_t step) { return absl::StrFormat("step_%08d", step); }

// The step of a save directory named step_NNNNNNNN (8 digits or more), or -1.
int64_t checkpoint_step(const std::string& name) {
  if (name.size() < 13 || name.size() > 23 || name.rfind("step_", 0) != 0) return -1;
  int64_t v = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

absl::StatusOr<std::optional<std::string>> find_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "meta.json", ec)) return std::optional<std::string>(dir);
  const fs::path latest = fs::path(dir) / "latest";
  if (!fs::exists(latest, ec)) {
    // Saves without a `latest` (deleted, lost in a copy, or a first save killed between its
    // rename and `latest`): the newest complete one, not a fresh start that would train from
    // step 0 over them.
    std::optional<std::string> newest;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (checkpoint_step(name) >= 0 && fs::exists(e.path() / "meta.json", ec) &&
          (!newest || checkpoint_step(name) > checkpoint_step(fs::path(*newest).filename())))
        newest = e.path().string();
    }
    return newest;
  }
  ZT_ASSIGN_OR_RETURN(std::string text, read_file(latest.string(), "checkpoint pointer"));
  // "TAG CRC" (version 2) or "TAG" (version 1, or written by hand to pick a save), with or
  // without the newline: anything else is damage.
  if (!text.empty() && text.back() == '\n') text.pop_back();
  std::string tag = text.substr(0, text.find(' '));
  const bool v1 = text == tag;
  if (!v1 && text + "\n" != latest_text(tag))
    return absl::DataLossError(absl::StrCat(
        "'", latest.string(), "' fails its checksum (corrupt): it should read \"step_NNNNNNNN ",
        "CRC\"; resume from a save directory in '", dir, "' (--resume_from DIR/step_NNNNNNNN)"));
  const fs::path target = fs::path(dir) / tag;
  const fs::path aside = fs::path(dir) / (".old_" + tag);  // a re-save of this step was cut short
  if (checkpoint_step(tag) >= 0 && !fs::exists(target / "meta.json", ec) &&
      fs::exists(aside / "meta.json", ec))
    return std::optional<std::string>(aside.string());
  if (checkpoint_step(tag) < 0 || !fs::exists(target / "meta.json", ec))
    return absl::NotFoundError(absl::StrCat("'", latest.string(), "' names '", tag,
                                            "', which is not a complete checkpoint in '", dir,
                                            "'"));
  return std::optional<std::string>(target.string());
}

absl::StatusOr<std::string> require_checkpoint(const std::string& dir, const std::string& flag) {
  ZT_ASSIGN_OR_RETURN(const std::optional<std::string> found, find_checkpoint(dir));
  std::error_code ec;
  if (!found && !std::filesystem::exists(dir, ec))
    return absl::NotFoundError(absl::StrCat(flag, " '", dir, "' does not exist"));
  if (!found)
    return absl::NotFoundError(absl::StrCat(
        flag, " '", dir, "' holds no checkpoint (no meta.json, no latest)",
        std::filesystem::exists(std::filesystem::path(dir) / "config.json", ec)
            ? "; it looks like a Hugging Face model directory: load it with --init_from"
            : ""));
  return *found;
}

absl::StatusOr<ModelConfig> checkpoint_model(const nlohmann::json& meta, const std::string& dir) {
  if (!meta.contains("info") || !meta["info"].is_object() || !meta["info"].contains("model_config"))
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", dir, "' records no model_config in meta.json info"));
  return config_from_hf_json(meta["info"]["model_config"].dump(), dir + "/meta.json model_config");
}

absl::StatusOr<nlohmann::json> read_checkpoint_meta(const std::string& dir) {
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  ZT_ASSIGN_OR_RETURN(const std::string text, read_file(meta_path, "checkpoint metadata"));
  ZT_ASSIGN_OR_RETURN(nlohmann::json meta, parse_json(text, meta_path, 16));
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint metadata '", meta_path,
                                            "' fails its checksum (", why,
                                            "); use an earlier save, or re-save from a run"));
  };
  // The checksum first, whenever the file has one, so that no field it covers (the version
  // above all) can switch it off: the CRC-32 of the exact bytes, its own value read as zeros.
  const bool sealed = meta.is_object() && meta.contains("meta_crc32");
  if (sealed) {
    const size_t key = text.find(kMetaCrcKey);
    const size_t at = key == std::string::npos ? key : key + std::strlen(kMetaCrcKey);
    if (at == std::string::npos || at + 8 > text.size()) return corrupt("its field is damaged");
    std::string zeroed = text;
    zeroed.replace(at, 8, kZeroCrc);
    if (meta["meta_crc32"] != crc_hex(crc_of(zeroed))) return corrupt("corrupt or edited");
  }
  if (!meta.is_object() || !meta.contains("format") || meta["format"] != "zerotrain-checkpoint" ||
      !meta.contains("version") || !meta["version"].is_number_integer())
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint metadata '", meta_path,
                     "': not a zerotrain checkpoint (unreadable JSON or "
                     "no \"format\")"));
  const int64_t version = meta["version"].get<int64_t>();
  if (version < 1 || version > kCheckpointFormatVersion)
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint metadata '", meta_path, "': format version ", version,
                     ", this build reads 1 to ", kCheckpointFormatVersion));
  // Version 2 is always sealed and version 1 never: anything else is damage.
  if ((version >= 2) != sealed)
    return corrupt(sealed ? "version 1 with a checksum" : "no meta_crc32 field");
  return meta;
}

bool checkpoint_meta_checked(const nlohmann::json& meta) { return meta.value("version", 0) >= 2; }

std::string unchecked_meta_notice(const std::string& dir) {
  return absl::StrCat("notice: checkpoint '", dir,
                      "' was written before meta.json had a checksum (format version 1): its "
                      "metadata is read unchecked (the rank files' CRC-32s are still checked)");
}

absl::StatusOr<std::vector<std::string>> checkpoint_state_names(const nlohmann::json& meta) {
  if (!meta.contains("optimizer_states")) return std::vector<std::string>{"exp_avg", "exp_avg_sq"};
  const nlohmann::json& names = meta["optimizer_states"];
  bool ok = names.is_array() && names.size() <= (size_t)kMaxOptimizerStates;
  std::vector<std::string> out;
  for (size_t i = 0; ok && i < names.size(); ++i) {
    ok = names[i].is_string();
    if (ok) out.push_back(names[i].get<std::string>());
  }
  if (!ok)
    return absl::InvalidArgumentError(absl::StrCat("checkpoint metadata: optimizer_states ",
                                                   names.dump(), " is not a list of at most ",
                                                   kMaxOptimizerStates, " state names"));
  return out;
}

absl::Status read_checkpoint(const std::string& dir, const nlohmann::json& meta,
                             const ParamLayout& layout, const UnitStateFn& fn, bool report) {
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint metadata '", meta_path, "': ", why));
  };
  absl::StatusOr<std::vector<std::string>> names = checkpoint_state_names(meta);
  if (!names.ok()) return bad(std::string(names.status().message()));
  const size_t arrays = 1 + names->size();  // the master, then the states
  try {
    const nlohmann::json& units = meta.at("units");
    const int U = layout.num_units();
    if (!units.is_array() || (int)units.size() != U)
      return bad(absl::StrCat(units.size(), " units, this model has ", U));
    for (int u = 0; u < U; ++u)
      if (units[u].at("numel").get<uint64_t>() != layout.units()[u].numel)
        return bad(absl::StrCat("unit ", u, " has ", units[u].at("numel").get<uint64_t>(),
                                " elements, this model's has ", layout.units()[u].numel));
    std::vector<RankFile> files(meta.at("ranks").size());
    for (size_t r = 0; r < files.size(); ++r) {
      const nlohmann::json& e = meta["ranks"][r];
      RankFile& f = files[r];
      const std::string name = e.at("file").get<std::string>();
      if (name.find('/') != std::string::npos || name == ".." || name.empty())
        return bad(absl::StrCat("rank file name '", name, "' is not a file in the checkpoint"));
      f.path = (fs::path(dir) / name).string();
      f.bytes = e.at("bytes").get<uint64_t>();
      f.crc = e.at("crc32").get<uint32_t>();
      for (const auto& range : e.at("ranges")) {
        const uint64_t b = range.at(0).get<uint64_t>(), en = range.at(1).get<uint64_t>();
        if (f.ranges.size() >= (size_t)U || b > en || en > layout.units()[f.ranges.size()].numel)
          return bad(absl::StrCat("rank file ", r, " has an out-of-range slice"));
        f.ranges.push_back({b, en});
      }
      if ((int)f.ranges.size() != U)
        return bad(absl::StrCat("rank file ", r, " lists ", f.ranges.size(), " units"));
      uint64_t expect = 0;
      for (const auto& [b, e2] : f.ranges) expect += arrays * 4 * (e2 - b);
      if (expect != f.bytes)
        return bad(absl::StrCat("rank file ", r, " records ", f.bytes, " bytes for ", expect,
                                " bytes of slices"));
      std::error_code ec;
      const auto size = fs::file_size(f.path, ec);
      if (ec || size != f.bytes)
        return absl::DataLossError(
            absl::StrCat("checkpoint file '", f.path, "' ",
                         ec ? "is missing"
                            : absl::StrCat("has ", size, " bytes, ", f.bytes,
                                           " recorded: truncated or replaced")));
      f.f = std::fopen(f.path.c_str(), "rb");
      if (!f.f)
        return absl::DataLossError(
            absl::StrCat("cannot read '", f.path, "': ", std::strerror(errno)));
    }
    for (int u = 0; u < U; ++u) {  // the slices of each unit tile it exactly
      std::vector<std::pair<uint64_t, uint64_t>> slices;
      for (const RankFile& f : files)
        if (f.ranges[u].first < f.ranges[u].second) slices.push_back(f.ranges[u]);
      std::sort(slices.begin(), slices.end());
      uint64_t next = 0;
      bool tiled = true;
      for (const auto& [b, e] : slices) {
        tiled = tiled && b == next;
        next = e;
      }
      if (!tiled || next != layout.units()[u].numel)
        return bad(absl::StrCat("the saved slices of unit ", u, " (", layout.units()[u].name,
                                ") do not cover it exactly once"));
    }
    // Unit by unit: the whole master and states assembled from every file's slice, then
    // handed on; each file is read front to back.
    std::vector<std::vector<float>> whole(arrays);
    std::vector<std::span<const float>> states(arrays - 1);
    int64_t total = 0;
    for (const RankFile& f : files) total += (int64_t)f.bytes;
    Progress progress("reading checkpoint " + dir, total, report);
    for (int u = 0; u < U; ++u) {
      const size_t numel = layout.units()[u].numel;
      for (std::vector<float>& a : whole) a.assign(numel, 0.f);
      for (RankFile& f : files) {
        const auto [b, e] = f.ranges[u];
        const size_t n = e - b;
        if (n == 0) continue;
        for (std::vector<float>& w : whole) {
          std::vector<float>* a = &w;
          if (std::fread(a->data() + b, 4, n, f.f) != n)
            return absl::DataLossError(
                absl::StrCat("checkpoint file '", f.path, "' ends early: truncated"));
          f.running = crc32_z(f.running, reinterpret_cast<const Bytef*>(a->data() + b), n * 4);
          f.read += n * 4;
        }
      }
      for (size_t i = 1; i < arrays; ++i) states[i - 1] = whole[i];
      ZT_RETURN_IF_ERROR(fn(u, whole[0], states));
      progress.add((int64_t)(arrays * numel * 4));
    }
    for (const RankFile& f : files)
      if (f.read != f.bytes || (uint32_t)f.running != f.crc)
        return absl::DataLossError(
            absl::StrCat("checkpoint file '", f.path,
                         "' fails its CRC-32 check (corrupt); resume from an "
                         "earlier save (--resume_from DIR)"));
  } catch (const nlohmann::json::exception& e) {
    return bad(absl::StrCat("a field is missing or has the wrong type (", e.what(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace zt
