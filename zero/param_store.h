// Where stage 3 keeps a rank's parameter shards between gathers (ZeRO-Infinity, Rajbhandari et
// al. SC21, Section 5: parameter offload; DeepSpeed's zero_optimization.offload_param). Without
// offload the engine keeps each shard in device memory and uses no store. With one, the device
// holds a sharded unit only while it is gathered: gather() loads this rank's shard from the
// store into its slice of the gathered buffer and all-gathers in place, and step() writes the
// updated shard (working dtype) back through begin_write / end_write. The stores themselves
// (host memory, NVMe) are in offload/param_offload.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/memory.h"
#include "zero/offload_device.h"

namespace zt {

class ParamStore {
 public:
  virtual ~ParamStore() = default;

  // Registers the next offloaded shard (handles 0, 1, ... in order) of `bytes` bytes, in host
  // memory or (on_drive) in a file on the drive, as the partition plan placed it
  // (zero/partition.h ParamHome; a store without a drive takes on_drive false only).
  virtual int add(size_t bytes, bool on_drive) = 0;
  // Elements of shards this store keeps in host memory before the rest go to the drive, the
  // plan's PartitionOptions::param_host_elems: all (INT64_MAX) without a drive.
  virtual int64_t host_elems() const = 0;
  // Queues shard h's copy into device memory at device_dst (its bytes) on the backend's copy
  // stream and returns its ticket (Backend::copy_to_device_async): kernels queued after the
  // call see the shard; a host reader of device_dst waits for the ticket first. Throws
  // std::runtime_error when the drive cannot be read.
  virtual uint64_t load(int h, void* device_dst) = 0;
  // Host memory receiving shard h's new value (its bytes, any alignment the caller needs for
  // 16-bit or fp32 elements); end_write(h) stores it (NVMe: writes it out; throws
  // std::runtime_error with the OS error when the write fails).
  virtual void* begin_write(int h) = 0;
  virtual void end_write(int h) = 0;
  // Reading ahead (DeepSpeed's NVMe parameter swapper does it too). Where shard h is now. The
  // answer depends only on the calls made so far, never on how far a read has got, so every
  // rank making the same calls gets the same answers (the stage-3 prefetcher starts collectives
  // by them).
  enum class Place { kHost, kReading, kDrive };
  virtual Place place(int /*h*/) const { return Place::kHost; }
  // Whether shard h's read ahead has landed. Depends on timing: for one rank's decisions only.
  virtual bool read_done(int /*h*/) const { return true; }
  // Whether this store reads ahead at all (a drive, the option on, enough buffers).
  virtual bool reads_ahead() const { return false; }
  // A hint that load(h) comes soon: shard h starts moving drive -> host memory now, in the
  // background, or stays where it is until then. False when no buffer is left for it: stop
  // hinting until a load.
  virtual bool prefetch(int /*h*/) { return false; }
  // Forgets which buffers were read ahead, so they may be reused for a new order (their reads go
  // on, and a load of their shard still waits for its own): a new pass, or the predicted order
  // broke.
  virtual void forget_reads_ahead() {}

  // Host memory (kParams: resident shards, kPinnedHost: swap buffers) and bytes on the drive
  // (kNvme), by category.
  virtual const MemoryTracker& host_tracker() const = 0;
  // Bytes copied host -> device by load() since construction.
  virtual int64_t bytes_to_device() const = 0;
  // Bytes read from and written to the drive since construction (0 without one).
  virtual int64_t nvme_bytes_read() const { return 0; }
  virtual int64_t nvme_bytes_written() const { return 0; }
  // Time spent loading shards (param_in_ms) and waiting for the drive, since construction.
  virtual OffloadTimes times() const = 0;
};

}  // namespace zt
