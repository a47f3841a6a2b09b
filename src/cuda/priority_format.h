// The byte layout of the priority file (`accelpool-cuda.priority`), through
// which the device plugin holds the kernel launches of low-priority
// containers while a high-priority container shares their GPU and is busy
// (HAMi's `nvidia.com/priority`: 0 high, 1 low).
//
// Who writes what:
// - The device plugin creates the file in the container's state dir at
//   Allocate (header filled, counters and deadlines 0, mode 0666), for every
//   fractional NVIDIA grant, and sets ACCELPOOL_CUDA_PRIORITY=high|low.
// - The shim of a high-priority container adds one to launches[d] (relaxed
//   atomic) for every kernel or graph launch on device d (below).
// - The plugin polls the high-priority containers' counters; while one of
//   them moved recently on a GPU, it writes hold_until_ns[d] (a
//   CLOCK_MONOTONIC deadline a few seconds ahead, renewed each poll) into
//   the files of the low-priority containers on that GPU, d being that GPU's
//   ordinal in each of them; 0 once the high-priority container is idle.
// - The shim of a low-priority container, before each launch on ordinal d,
//   waits while now < hold_until_ns[d]. A deadline further ahead than
//   kMaxHoldAheadNs is ignored (the plugin never writes one: the file is
//   writable by the container, and a clock that is not the plugin's must not
//   hold it for ever); so a plugin that stops renewing lets the container
//   run again within seconds.
//
// Index d is the container's d-th granted device, as its memory caps
// (ACCELPOOL_CUDA_MEMORY_LIMIT_<d>) are numbered; a process whose own
// CUDA_VISIBLE_DEVICES renumbers its GPUs is mapped back by UUID
// (ACCELPOOL_CUDA_DEVICE_UUIDS, ContainerIndex in shim.h). Every field is 8-byte
// aligned and accessed with 8-byte atomics on both sides. The file is
// untrusted on the plugin's side: ReadPriorityFile-style readers must accept
// any bytes.
//
// Thread-safety: pure definitions.
#ifndef ACCELPOOL_CUDA_PRIORITY_FORMAT_H_
#define ACCELPOOL_CUDA_PRIORITY_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "cuda/config.h"

namespace accelpool::cuda {

inline constexpr char kPriorityFileName[] = "accelpool-cuda.priority";
inline constexpr uint64_t kPriorityMagic = 0x4150434450524931ULL;  // "APCDPRI1"
inline constexpr uint32_t kPriorityLayoutVersion = 1;
// A deadline further ahead than this is not a hold (see above).
inline constexpr uint64_t kMaxHoldAheadNs = 60ULL * 1000 * 1000 * 1000;

struct PriorityLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  uint64_t launches[kMaxDevices];       // high-priority shims count launches here
  uint64_t hold_until_ns[kMaxDevices];  // the plugin's deadlines for low-priority shims
};

static_assert(offsetof(PriorityLayout, launches) % 8 == 0);
static_assert(offsetof(PriorityLayout, hold_until_ns) % 8 == 0);

inline constexpr size_t kPriorityFileSize = sizeof(PriorityLayout);

// Offsets of the per-ordinal fields, for pread/pwrite from outside.
inline constexpr size_t LaunchesOffset(int ordinal) {
  return offsetof(PriorityLayout, launches) + sizeof(uint64_t) * static_cast<size_t>(ordinal);
}
inline constexpr size_t HoldOffset(int ordinal) {
  return offsetof(PriorityLayout, hold_until_ns) + sizeof(uint64_t) * static_cast<size_t>(ordinal);
}

// Whether a deadline read from the file holds a launch at CLOCK_MONOTONIC
// time `now_ns`.
inline constexpr bool HoldsAt(uint64_t hold_until_ns, uint64_t now_ns) {
  return hold_until_ns > now_ns && hold_until_ns - now_ns <= kMaxHoldAheadNs;
}

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_PRIORITY_FORMAT_H_
