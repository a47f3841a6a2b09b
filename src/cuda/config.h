// ShimConfig: the env contract of libaccelpool-cuda, parsed once per process.
//
// The device plugin sets these variables in every NVIDIA container; the full
// table with units is in docs/enforcement.md:
//   ACCELPOOL_CUDA_MEMORY_LIMIT_<i>   MiB for visible device i (wins over the next)
//   ACCELPOOL_CUDA_MEMORY_LIMIT       MiB for every visible device
//   ACCELPOOL_CUDA_COMPUTE_LIMIT      percent of a device, 1-100 (100 = no limit)
//   ACCELPOOL_CUDA_STATE_DIR          directory holding the per-container region
//   ACCELPOOL_CUDA_CONTEXT_RESERVE_MIB  MiB charged once per process and device
//   ACCELPOOL_CUDA_DISABLE=1          the shim forwards everything untouched
//   ACCELPOOL_CUDA_LOG_LEVEL          error|warn|info|debug (default warn)
//   ACCELPOOL_CUDA_PRIORITY           high|low: task priority (priority_format.h)
//   ACCELPOOL_CUDA_DEVICE_UUIDS       the container's devices' UUIDs, in index order
// HAMi's CUDA_DEVICE_MEMORY_LIMIT[_<i>] (bytes, or with a k/m/g suffix),
// CUDA_DEVICE_SM_LIMIT (percent, 0 = none) and CUDA_TASK_PRIORITY (0 = high,
// 1 = low) are accepted as lower-precedence aliases. A missing value means
// "no limit". A malformed limit is passed over as if unset: the next
// variable set for it applies (a cap is safer than none), in the order
// ACCELPOOL_CUDA_MEMORY_LIMIT_<i>, ACCELPOOL_CUDA_MEMORY_LIMIT,
// CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_MEMORY_LIMIT for memory, ours
// then HAMi's for compute, and "no limit" where none is left. A malformed
// priority means no task priority and hides its alias. Each malformed
// variable produces exactly one warning naming it, what is used instead,
// and the fix.
//
// The parser is a pure function over an env lookup callback so that tests can
// feed tables of environments. It never allocates: the shim calls it inside
// arbitrary host processes.
//
// Thread-safety: ParseShimConfig is reentrant; a ShimConfig is a plain value.
#ifndef ACCELPOOL_CUDA_CONFIG_H_
#define ACCELPOOL_CUDA_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace accelpool::cuda {

inline constexpr int kMaxDevices = 16;
inline constexpr size_t kMaxPathLen = 512;
// Room for one device id: "GPU-<uuid>" is 40 bytes, an older driver's MIG id
// ("MIG-GPU-<uuid>/<gi>/<ci>") about 50.
inline constexpr size_t kDeviceIdLen = 64;

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Task priority (HAMi's nvidia.com/priority). kNone: no priority behaviour.
// kHigh: launches are counted in the priority file; kLow: launches wait
// while the device plugin holds them there.
enum class Priority : int { kNone = 0, kHigh = 1, kLow = 2 };

struct ShimConfig {
  // ACCELPOOL_CUDA_DISABLE=1: no accounting, no throttling, hooks forward.
  bool disabled = false;
  // Per visible device cap in bytes; 0 = no cap on that device.
  uint64_t memory_limit_bytes[kMaxDevices] = {};
  // Compute share in percent; 0 or 100 = no throttling.
  int compute_percent = 0;
  // Charged once per process and device on its first accounted allocation.
  uint64_t context_reserve_bytes = 0;
  // Empty = no state dir: accounting is per process (one warning is logged
  // by the shim when a limit is active).
  char state_dir[kMaxPathLen] = {};
  LogLevel log_level = LogLevel::kWarn;
  // ACCELPOOL_CUDA_PRIORITY (or CUDA_TASK_PRIORITY); kNone when unset or
  // malformed.
  Priority priority = Priority::kNone;
  // ACCELPOOL_CUDA_DEVICE_UUIDS: the UUID of the container's device i, in the
  // order of its grant (NVIDIA_VISIBLE_DEVICES), by which its caps, compute
  // bucket and region figures are numbered. A process numbers its devices
  // after its own CUDA_VISIBLE_DEVICES, so the shim maps each of its CUDA
  // ordinals (and NVML devices) to an index by UUID. Empty: a CUDA ordinal
  // is taken for the index, as before the list.
  char device_uuids[kMaxDevices][kDeviceIdLen] = {};
  int device_uuid_count = 0;

  bool AnyMemoryLimit() const;
  // The container index of the device `id` ("GPU-..." or "MIG-...",
  // compared without that prefix and case), or -1 when it is not listed.
  int DeviceIndexOf(const char* id) const;
  bool ComputeLimited() const { return !disabled && compute_percent > 0 && compute_percent < 100; }
  bool MemoryLimited(int device) const;
};

// Returns the value of an env variable or nullptr when unset.
using EnvLookup = const char* (*)(void* ctx, const char* name);
// Receives one complete warning line (no trailing newline).
using WarnSink = void (*)(void* ctx, const char* message);

// Parses the contract. Never fails: every bad value is reported through
// `warn` (once per variable) and treated as absent.
ShimConfig ParseShimConfig(EnvLookup lookup, void* lookup_ctx, WarnSink warn, void* warn_ctx);

// The device plugin's limits file: the contract's variables as NAME=VALUE
// lines, as the plugin set them for this container, mounted read-only beside
// the library (<library path>.limits). Where it exists the shim takes the
// contract from it and not from the environment, which the pod can extend
// (envFrom) past what admission sees. Parsed in place into a fixed table: no
// allocation.
struct LimitsFile {
  static constexpr int kMaxEntries = 64;
  static constexpr size_t kMaxBytes = 4096;
  char text[kMaxBytes + 1] = {};
  const char* names[kMaxEntries] = {};
  const char* values[kMaxEntries] = {};
  int count = 0;
};

// Parses the first `len` bytes of f->text (at most kMaxBytes; NULs are
// written at each '=' and line end, a "\r" before the "\n" included). Lines
// without '=' and blank lines are skipped; entries past kMaxEntries are
// dropped. Returns the entry count.
int ParseLimitsFile(LimitsFile* f, size_t len);

// An EnvLookup over a parsed LimitsFile (ctx); the last entry of a name wins.
const char* LimitsFileLookup(void* ctx, const char* name);

// Parses "<digits>" with optional suffix. With `bare_is_mib` a bare number is
// MiB (our contract); otherwise bytes (HAMi's). Suffixes k/K, m/M, g/G with an
// optional trailing "i" or "b"/"B". Spaces, tabs and line ends ("\r", "\n")
// around the value are ignored. Returns nullopt on any malformed input,
// zero, or overflow.
std::optional<uint64_t> ParseMemoryBytes(std::string_view text, bool bare_is_mib);

// Parses a plain non-negative decimal integer no larger than `max`.
std::optional<uint64_t> ParseUnsigned(std::string_view text, uint64_t max);

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_CONFIG_H_
