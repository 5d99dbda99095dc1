#include "trainer/run_config.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/memory.h"
#include "common/status.h"

namespace zt {
namespace {

absl::Status clash(const std::string& path, const std::string& name, const std::string& flag,
                   const std::string& key) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, " ", flag, " and ", path,
                                                 ": zerotrain.", name, " ", key,
                                                 " disagree; give one of them, or the same "
                                                 "value in both"));
}

// The same directory however written: relative or absolute, through links, with "./" or a
// trailing slash (weakly_canonical keeps a trailing slash of a path that does not exist yet).
bool same_dir(const std::string& a, const std::string& b) {
  auto canonical = [](const std::string& p) {
    std::error_code ec;
    std::filesystem::path c = std::filesystem::weakly_canonical(p, ec);
    return c.has_filename() ? c : c.parent_path();
  };
  return canonical(a) == canonical(b);
}

}  // namespace

absl::StatusOr<DsConfig> resolve_run_config(std::string_view text, int world,
                                            const std::string& path, const KeyFlags& f) {
  ZT_ASSIGN_OR_RETURN(DsConfig ds, parse_ds_config(text, world, path));
  ZerotrainConfig& z = ds.zerotrain;
  if (!f.attention.empty() && !z.attention.empty() && f.attention != z.attention)
    return clash(path, "attention", f.attention, z.attention);
  if (!f.attention.empty()) z.attention = f.attention;
  if (z.attention.empty()) z.attention = "auto";
  if (f.device_memory_limit > 0 && z.device_memory_limit > 0 &&
      f.device_memory_limit != z.device_memory_limit)
    return clash(path, "device_memory_limit", format_bytes(f.device_memory_limit),
                 format_bytes(z.device_memory_limit));
  if (f.device_memory_limit > 0) z.device_memory_limit = f.device_memory_limit;
  if (f.host_memory_limit > 0 && z.host_memory_limit > 0 &&
      f.host_memory_limit != z.host_memory_limit)
    return clash(path, "host_memory_limit", format_bytes(f.host_memory_limit),
                 format_bytes(z.host_memory_limit));
  if (f.host_memory_limit > 0) z.host_memory_limit = f.host_memory_limit;
  if (f.gradient_checkpointing) z.gradient_checkpointing = true;
  if (ds.activation_checkpointing.given && !z.gradient_checkpointing)
    ds.notices.push_back(
        "notice: activation_checkpointing is configured but checkpointing is off; pass "
        "--gradient_checkpointing or set zerotrain.gradient_checkpointing to use it");
  if (!f.save_dir.empty() && !z.save_dir.empty() && !same_dir(f.save_dir, z.save_dir))
    return clash(path, "save_dir", f.save_dir, z.save_dir);
  if (!f.save_dir.empty()) z.save_dir = f.save_dir;
  if (f.save_interval >= 0 && z.save_interval > 0 && f.save_interval != z.save_interval)
    return clash(path, "save_interval", absl::StrCat(f.save_interval),
                 absl::StrCat(z.save_interval));
  if (f.save_interval >= 0) z.save_interval = f.save_interval;
  if (f.keep_last >= 0 && z.keep_last > 0 && f.keep_last != z.keep_last)
    return clash(path, "keep_last", absl::StrCat(f.keep_last), absl::StrCat(z.keep_last));
  if (f.keep_last >= 0) z.keep_last = f.keep_last;
  if (f.optimizer_threads > 0 && z.optimizer_threads > 0 &&
      f.optimizer_threads != z.optimizer_threads)
    return clash(path, "optimizer_threads", absl::StrCat(f.optimizer_threads),
                 absl::StrCat(z.optimizer_threads));
  if (f.optimizer_threads > 0) z.optimizer_threads = f.optimizer_threads;
  return ds;
}

}  // namespace zt
