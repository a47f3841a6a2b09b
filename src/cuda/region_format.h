// The byte layout of the accounting region file (`accelpool-cuda.region`,
// see shared_region.h), shared by the shim that writes it and the device
// plugin that reads it from outside the container for its usage metrics.
//
// A reader outside the container must not take the region's locks (the
// container can hold them forever) and cannot tell whether a slot's process
// still lives (another PID namespace), so ReadRegionUsage only sums what the
// bytes say. The file is writable by the container: every value is
// untrusted, and the function accepts any bytes.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_CUDA_REGION_FORMAT_H_
#define ACCELPOOL_CUDA_REGION_FORMAT_H_

#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cuda/config.h"
#include "cuda/throttle.h"

namespace accelpool::cuda {

inline constexpr uint64_t kRegionMagic = 0x4150434455415247ULL;  // "APCDUARG"
inline constexpr uint32_t kRegionLayoutVersion = 2;
inline constexpr int kMaxSlots = 256;
inline constexpr int kMaxExports = 256;

struct SlotRecord {
  int32_t pid;  // 0: free
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

struct RegionLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  pthread_mutex_t mu;
  SlotRecord slots[kMaxSlots];
  DeviceBucket buckets[kMaxDevices];
  ExportRecord exports[kMaxExports];
  uint64_t export_seq;
};

// What the region's bytes say a container holds.
struct RegionUsage {
  uint64_t used_bytes[kMaxDevices] = {};  // per CUDA ordinal, summed over slots
  int32_t processes = 0;                  // slots with an owner
};

// Sums the slots of a region read as `len` bytes. False when the bytes are
// not a region of this layout (size, magic, version or recorded size differ).
// Sums saturate; a slot's counters are read without its lock, so a figure may
// be a moment old, never out of range.
inline bool ReadRegionUsage(const void* data, size_t len, RegionUsage* out) {
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
