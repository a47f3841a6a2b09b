// The byte layout of the accounting region file (`accelpool-cuda.region`,
// see shared_region.h), shared by the shim that writes it and the device
// plugin that reads it from outside the container for its usage metrics.
//
// A reader outside the container must not take the region's locks (the
// container can hold them forever) and cannot ask whether a slot's PID lives
// (another PID namespace). It can ask the kernel whether the slot's owner
// still holds its liveness lock: each process that claims a slot also takes
// a POSIX record lock (fcntl F_SETLK) on one byte of the region file,
// LivenessLockOffset(slot), past the end of the data, and marks the slot
// kSlotLockHeld. The kernel drops a process's record locks when it dies
// (SIGKILL included: before it even becomes a zombie) and when it execs (the
// shim's descriptor is close-on-exec, and closing one drops them), and a
// lock held in any PID namespace is seen from any other. ProbeSlotLock tests
// the byte with F_GETLK, which takes nothing. A slot without the mark (a
// filesystem without record locks, or a library before the mark) is counted
// as live. The file is writable by the container: every value is untrusted,
// and ReadRegionUsage accepts any bytes.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_CUDA_REGION_FORMAT_H_
#define ACCELPOOL_CUDA_REGION_FORMAT_H_

#include <fcntl.h>
#include <pthread.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cuda/config.h"
#include "cuda/throttle.h"

namespace accelpool::cuda {

inline constexpr uint64_t kRegionMagic = 0x4150434455415247ULL;  // "APCDUARG"
// 3: the header holds the boot id of the boot that created the region.
inline constexpr uint32_t kRegionLayoutVersion = 3;
inline constexpr int kMaxSlots = 256;
inline constexpr int kMaxExports = 256;

struct SlotRecord {
  int32_t pid;  // 0: free
  // Bit d (d < kMaxDevices): the context reserve is charged on device d.
  // kSlotLockHeld: the owner holds the slot's liveness lock.
  uint32_t ctx_charged_mask;
  uint64_t start_time;
  uint64_t used[kMaxDevices];
};

struct ExportRecord {
  uint64_t key;  // 0: free
  int32_t pid;
  int32_t slot;
  uint64_t start_time;
  uint64_t seq;  // Order of recording, to replace the oldest.
};

struct DeviceBucket {
  pthread_mutex_t mu;
  TokenBucketState state;
};

// /proc/sys/kernel/random/boot_id: 36 characters and a NUL.
inline constexpr size_t kBootIdLen = 40;

struct RegionLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  // The boot that created the region (empty when unreadable then). The state
  // dir outlives a reboot, and its locks would not: a robust mutex held when
  // the node went down keeps a dead owner that no kernel will ever mark as
  // died, and every lock of it would wait for ever. A region of another boot
  // is created afresh (SharedRegion::OpenFile).
  char boot_id[kBootIdLen];
  pthread_mutex_t mu;
  SlotRecord slots[kMaxSlots];
  DeviceBucket buckets[kMaxDevices];
  ExportRecord exports[kMaxExports];
  uint64_t export_seq;
};

inline constexpr uint32_t kSlotLockHeld = 1U << 31;
static_assert(kMaxDevices < 31,
              "the device bits of ctx_charged_mask must leave kSlotLockHeld free");

// The byte of the region file whose record lock says slot `slot` has a live
// owner. Past the end of the data: a lock there never touches what is mapped.
inline off_t LivenessLockOffset(int slot) {
  return static_cast<off_t>(sizeof(RegionLayout)) + static_cast<off_t>(slot);
}

enum class SlotOwner { kUnknown, kLive, kGone };

// Whether a process holds the liveness lock of `slot` on the region file open
// as `fd` (read-only is enough). Takes no lock. kUnknown when the kernel
// does not answer (a filesystem without record locks). A process's own locks
// never conflict with its own test, so it must not probe its own slots.
inline SlotOwner ProbeSlotLock(int fd, int slot) {
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = LivenessLockOffset(slot);
  fl.l_len = 1;
  if (fcntl(fd, F_GETLK, &fl) != 0) {
    return SlotOwner::kUnknown;
  }
  return fl.l_type == F_UNLCK ? SlotOwner::kGone : SlotOwner::kLive;
}

// What the region's bytes say a container holds.
struct RegionUsage {
  uint64_t used_bytes[kMaxDevices] = {};  // per container device index, over live slots
  int32_t processes = 0;                  // slots with a live owner (or one not known gone)
  int32_t gone = 0;                       // slots whose owner dropped its liveness lock
};

// Tells ReadRegionUsage whether the owner of a marked slot still lives;
// ProbeSlotLock on the region's descriptor, outside tests.
using SlotProbe = SlotOwner (*)(int slot, void* ctx);

// Sums the slots of a region read as `len` bytes. False when the bytes are
// not a region of this layout (size, magic, version or recorded size differ).
// With `probe`, a slot marked kSlotLockHeld whose owner `probe` reports gone
// (died or exec'd without cleanup, its slot not yet reclaimed by the
// container's other processes) is counted in `gone`, not in the sums.
// Sums saturate; a slot's counters are read without its lock, so a figure may
// be a moment old, never out of range.
inline bool ReadRegionUsage(const void* data, size_t len, RegionUsage* out,
                            SlotProbe probe = nullptr, void* probe_ctx = nullptr) {
  if (data == nullptr || out == nullptr || len != sizeof(RegionLayout)) {
    return false;
  }
  // Copy the header fields out (the buffer need not be aligned).
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t size = 0;
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::memcpy(&magic, bytes + offsetof(RegionLayout, magic), sizeof(magic));
  std::memcpy(&version, bytes + offsetof(RegionLayout, version), sizeof(version));
  std::memcpy(&size, bytes + offsetof(RegionLayout, size), sizeof(size));
  if (magic != kRegionMagic || version != kRegionLayoutVersion || size != sizeof(RegionLayout)) {
    return false;
  }
  *out = RegionUsage();
  for (int i = 0; i < kMaxSlots; ++i) {
    SlotRecord s;
    std::memcpy(&s, bytes + offsetof(RegionLayout, slots) + sizeof(SlotRecord) * i, sizeof(s));
    if (s.pid == 0) {
      continue;
    }
    if (probe != nullptr && (s.ctx_charged_mask & kSlotLockHeld) != 0 &&
        probe(i, probe_ctx) == SlotOwner::kGone) {
      ++out->gone;
      continue;
    }
    ++out->processes;
    for (int d = 0; d < kMaxDevices; ++d) {
      const uint64_t sum = out->used_bytes[d] + s.used[d];
      out->used_bytes[d] = sum < out->used_bytes[d] ? UINT64_MAX : sum;
    }
  }
  return true;
}

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_REGION_FORMAT_H_
