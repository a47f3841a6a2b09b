// Reading a container's enforcement accounting from outside the container:
// the device plugin's view of how much memory the processes of a fractional
// NVIDIA container hold on each device, as libaccelpool-cuda counts it
// (src/cuda/region_format.h), for the per-container usage metrics.
//
// The region file lives in a dir the container writes: it may be missing (no
// CUDA process yet), replaced by a symlink, a FIFO or a file of any size, or
// hold any bytes. The reader never follows a link, never blocks on a FIFO,
// reads exactly one layout's worth of bytes and takes no lock. It tests each
// marked slot's liveness lock (F_GETLK), so a process that died without
// cleanup drops out of the figures at once, not when the container's other
// processes next reclaim its slot.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_PLUGIN_CONTAINER_USAGE_H_
#define ACCELPOOL_PLUGIN_CONTAINER_USAGE_H_

#include <string>

#include "common/status.h"
#include "cuda/region_format.h"

namespace accelpool::plugin {

// The region in `state_dir` (the dir mounted at ACCELPOOL_CUDA_STATE_DIR).
// kNotFound: no region yet (no process has used CUDA). kFailedPrecondition:
// the entry is not a regular file, or its size or header is not this
// layout's (another library version, or tampering); the message says which.
// kUnavailable: it could not be read.
// `why` (optional) names the failure for metrics, without parsing messages.
enum class RegionReadFailure { kNone, kMissing, kNotRegular, kLayout, kIo };
StatusOr<cuda::RegionUsage> ReadRegionFile(const std::string& state_dir,
                                           RegionReadFailure* why = nullptr);

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_CONTAINER_USAGE_H_
