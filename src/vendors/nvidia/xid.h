// XID classification for NVIDIA health. Application XIDs (the program did
// something wrong, the GPU is fine) do not make a device unhealthy:
//   13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
//   processing, 45 preemptive cleanup, 68 video processor exception,
//   109 context switch timeout.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_VENDORS_NVIDIA_XID_H_
#define ACCELPOOL_VENDORS_NVIDIA_XID_H_

#include <cstdint>
#include <string>
#include <vector>

namespace accelpool::vendors::nvidia {

// XID 48: a double-bit (uncorrectable) ECC error.
inline constexpr uint64_t kXidDoubleBitEcc = 48;

// The default ignore list above.
const std::vector<uint64_t>& ApplicationXids();

// True when `xid` is in ApplicationXids() or in `extra`.
bool IsIgnoredXid(uint64_t xid, const std::vector<uint64_t>& extra);

// "XID 79 (GPU has fallen off the bus)"; unknown ids get no description.
std::string DescribeXid(uint64_t xid);

}  // namespace accelpool::vendors::nvidia

#endif  // ACCELPOOL_VENDORS_NVIDIA_XID_H_
