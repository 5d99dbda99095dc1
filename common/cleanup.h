// Directories and files that must not outlive the process (NVMe swap directories, node-shared
// memory in /dev/shm): removed by their owner normally, and by this registry when the process is
// ended by SIGTERM / SIGINT / SIGHUP or a multi-rank abort, where no destructor runs.
// Async-signal-safe on the removal side.
#pragma once

namespace zt {

// Registers a file, or a directory, to remove (a directory must be empty by then: swap files
// are unlinked as soon as they are opened). Returns a slot (>= 0), or -1 when the registry is full
// (the owner still removes it normally). Installs the signal handlers on first use, except for
// signals the process ignores (nohup); a handler that was there before is called after the cleanup.
int register_cleanup_dir(const char* dir);
void unregister_cleanup_dir(int slot);
// Removes every registered directory (async-signal-safe).
void run_cleanups();

}  // namespace zt
