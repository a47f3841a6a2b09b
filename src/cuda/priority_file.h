// The shim's side of the priority file (priority_format.h): mapping it, and
// how long a held launch sleeps next.
//
// The device plugin creates the file; the shim never creates or resizes it.
// It is the container's own file, so the shim checks what it maps (a
// regular file, not a link, exactly one layout's size, the header) and
// refuses anything else with a one-line reason, never a crash.
//
// Error reporting: like SharedRegion, a caller's char buffer (no libstdc++).
//
// Thread-safety: MapPriorityFile and UnmapPriorityFile are reentrant;
// HoldStepNs is pure. The mapped fields are accessed with 8-byte atomics.
#ifndef ACCELPOOL_CUDA_PRIORITY_FILE_H_
#define ACCELPOOL_CUDA_PRIORITY_FILE_H_

#include <cstddef>
#include <cstdint>

#include "cuda/priority_format.h"

namespace accelpool::cuda {

// A held launch re-reads its deadline at least this often, so a deadline
// the plugin clears or brings forward lets it go within one step.
inline constexpr int64_t kHoldStepNs = 10'000'000;

// Maps `<dir>/accelpool-cuda.priority` read-write and shared. Returns
// nullptr and writes a one-line reason (naming the path and what is wrong
// with it) to `error` when the file is missing, a symbolic link, not a
// regular file, not exactly kPriorityFileSize bytes, or has another magic,
// version or size in its header.
PriorityLayout* MapPriorityFile(const char* dir, char* error, size_t error_len);

// Unmaps what MapPriorityFile returned (tests; the shim keeps its mapping
// for the life of the process).
void UnmapPriorityFile(PriorityLayout* layout);

// How long a launch held by the deadline `hold_until_ns` sleeps at
// CLOCK_MONOTONIC time `now_ns` before it reads the deadline again: 0 when
// the deadline does not hold it (HoldsAt), else the time left, at most
// kHoldStepNs.
int64_t HoldStepNs(uint64_t hold_until_ns, uint64_t now_ns);

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_PRIORITY_FILE_H_
