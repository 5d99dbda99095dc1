// Files that must not outlive the process (NVMe swap directories): removed by their owner
// normally, and by this registry when the process is ended by SIGTERM / SIGINT or a
// multi-rank abort, where no destructor runs. Async-signal-safe on the removal side.
#pragma once

namespace zt {

// Registers a directory whose files are named prefix0, prefix1, ... (at most `count()` of them,
// updated through set_cleanup_count). Returns a slot (>= 0), or -1 when the registry is full
// (the owner still removes its files normally). Installs the signal handlers on first use.
int register_cleanup_dir(const char* dir, const char* prefix);
void set_cleanup_count(int slot, int count);
void unregister_cleanup_dir(int slot);
// Removes every registered directory's files and the directories (async-signal-safe).
void run_cleanups();

}  // namespace zt
