// The run's configuration, resolved once: the ds_config with the flags that double its zerotrain
// keys merged in, so everything after reads one value from one place (train, and the estimate
// subcommand for what it shares). A flag and its key may both be given only when they agree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "trainer/ds_config.h"

namespace zt {

// The flags of the same names as zerotrain keys; each default means "not given".
struct KeyFlags {
  std::string attention;                // --attention ("": not given)
  int64_t device_memory_limit = 0;      // --device_memory_limit, bytes (0: not given)
  int64_t host_memory_limit = 0;        // --host_memory_limit, bytes (0: not given)
  bool gradient_checkpointing = false;  // --gradient_checkpointing (only turns it on)
  std::string save_dir;                 // --save_dir ("": not given)
  int64_t save_interval = -1;           // --save_interval (-1: not given)
  int64_t keep_last = -1;               // --keep_last (-1: not given)
  int64_t optimizer_threads = 0;        // --optimizer_threads (0: not given)
};

// Parses the ds_config `text` (read from `path`) for `world` ranks as parse_ds_config does, and
// merges `flags` into its zerotrain block: each key then holds the flag's value, the key's, or
// both's when they agree (attention "auto" when neither is given; save_dir compared as a
// canonical path). Adds a notice when activation_checkpointing is configured but off.
// Errors: the ds_config's; a flag and its key that disagree (InvalidArgument, naming both).
absl::StatusOr<DsConfig> resolve_run_config(std::string_view text, int world,
                                            const std::string& path, const KeyFlags& flags);

}  // namespace zt
