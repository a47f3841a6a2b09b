// The device plugin's side of the priority file (`accelpool-cuda.priority`,
// layout in cuda/priority_format.h) in a fractional NVIDIA container's state
// dir: made at Allocate, then read (the launch counters of high-priority
// containers) and written (the hold deadlines of low-priority ones) by
// PriorityWatch.
//
// The state dir is writable by the container, so the file is untrusted: it
// is opened without following links and without blocking, must be a regular
// file of the layout's size with its header, and is accessed with
// pread/pwrite only (a mapping would fault if the container truncated the
// file). Values are read whole but not atomically: a counter read while the
// shim adds to it may be torn, which at worst makes one poll see activity.
//
// Thread-safety: pure functions over the filesystem.
#ifndef ACCELPOOL_PLUGIN_PRIORITY_FILE_H_
#define ACCELPOOL_PLUGIN_PRIORITY_FILE_H_

#include <cstdint>
#include <string>

#include "common/status.h"

namespace accelpool::plugin {

// <state_dir>/accelpool-cuda.priority.
std::string PriorityFilePath(const std::string& state_dir);

// Makes the priority file in `state_dir` (mode 0666, header filled, counters
// and deadlines zero). One that is already there with a valid header and
// size is kept as it is (a container already running maps it: kubelet's
// Allocate again after a restart); anything else there is replaced through
// a rename. kUnavailable naming the path and the reason.
Status EnsurePriorityFile(const std::string& state_dir);

// The launch counter of CUDA ordinal `ordinal` (0 <= ordinal < kMaxDevices).
// kNotFound when the file is missing; kFailedPrecondition when it is not a
// regular file or not of the layout; kUnavailable on I/O errors.
StatusOr<uint64_t> ReadLaunches(const std::string& state_dir, int ordinal);

// Writes the hold deadline of CUDA ordinal `ordinal` (CLOCK_MONOTONIC ns; 0
// releases). Errors as ReadLaunches.
Status WriteHold(const std::string& state_dir, int ordinal, uint64_t hold_until_ns);

// The hold deadline now in the file, for tests and diagnostics.
StatusOr<uint64_t> ReadHold(const std::string& state_dir, int ordinal);

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_PRIORITY_FILE_H_
