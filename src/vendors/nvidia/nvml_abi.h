// The few NVML types and codes accelpool uses, laid out as in NVML's public
// API reference (nvml.h), so that no NVIDIA header is needed to build. One
// definition for the dlopen binding (nvml_dl.cc) and the test stand-in
// (testlibs/fake_nvidia_ml.cc), so that both speak the same layout.
#ifndef ACCELPOOL_VENDORS_NVIDIA_NVML_ABI_H_
#define ACCELPOOL_VENDORS_NVIDIA_NVML_ABI_H_

namespace accelpool::vendors::nvidia::abi {

using nvmlReturn_t = int;
using nvmlDevice_t = struct NvmlDeviceOpaque*;
using nvmlEventSet_t = struct NvmlEventSetOpaque*;
using nvmlGpuInstance_t = struct NvmlGpuInstanceOpaque*;

constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInvalidArgument = 2;
constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;
constexpr nvmlReturn_t kNvmlErrorNoPermission = 4;
constexpr nvmlReturn_t kNvmlErrorNotFound = 6;
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
constexpr nvmlReturn_t kNvmlErrorTimeout = 10;
constexpr nvmlReturn_t kNvmlErrorGpuIsLost = 15;
constexpr unsigned long long kEventXidCritical = 0x8ULL;  // NOLINT(runtime/int)
constexpr unsigned kMaxNvLinks = 18;                       // NVML_NVLINK_MAX_LINKS
// nvmlIntNvLinkDeviceType_t: what an NVLink's far end is.
constexpr int kNvLinkPeerGpu = 0x00;                       // NVML_NVLINK_DEVICE_TYPE_GPU
constexpr int kNvLinkPeerIbmNpu = 0x01;                    // NVML_NVLINK_DEVICE_TYPE_IBMNPU
constexpr int kNvLinkPeerSwitch = 0x02;                    // NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr unsigned kAffinityScopeNode = 0;                 // NVML_AFFINITY_SCOPE_NODE
// nvmlEnableState_t, an enum: NVML_FEATURE_DISABLED 0, NVML_FEATURE_ENABLED 1.
using nvmlEnableState_t = int;
constexpr nvmlEnableState_t kFeatureEnabled = 1;

struct nvmlMemory_t {
  unsigned long long total;  // NOLINT(runtime/int)
  unsigned long long free;   // NOLINT(runtime/int)
  unsigned long long used;   // NOLINT(runtime/int)
};

// nvmlMemory_v2_t, as nvmlDeviceGetMemoryInfo_v2 fills it: `used` is what
// processes hold, without the memory the driver reserves (which the first
// call folds into its `used`). `version` is set by the caller.
struct nvmlMemory_v2_t {
  unsigned version;
  unsigned long long total;     // NOLINT(runtime/int)
  unsigned long long reserved;  // NOLINT(runtime/int)
  unsigned long long free;      // NOLINT(runtime/int)
  unsigned long long used;      // NOLINT(runtime/int)
};
// nvmlMemory_v2: NVML_STRUCT_VERSION(Memory, 2), the struct's size with the
// version in the top byte.
constexpr unsigned kMemoryV2Version = static_cast<unsigned>(sizeof(nvmlMemory_v2_t)) | (2U << 24);

// A process on a GPU, as nvmlDeviceGet{Compute,Graphics}RunningProcesses
// (the first calls, without suffix) fill it.
struct nvmlProcessInfo_v1_t {
  unsigned pid;
  unsigned long long usedGpuMemory;  // NOLINT(runtime/int) bytes, or kValueNotAvailable
};
// As the _v2 and _v3 calls fill it (nvmlProcessInfo_t in nvml.h): the MIG
// instance ids follow (not read: only whole GPUs are asked).
struct nvmlProcessInfo_t {
  unsigned pid;
  unsigned long long usedGpuMemory;  // NOLINT(runtime/int)
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
};
// NVML_VALUE_NOT_AVAILABLE: the driver cannot say (usedGpuMemory).
constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NOLINT(runtime/int)

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};

// nvmlDeviceAttributes_t as nvmlDeviceGetAttributes_v2 fills it.
struct nvmlDeviceAttributes_t {
  unsigned multiprocessorCount;
  unsigned sharedCopyEngineCount;
  unsigned sharedDecoderCount;
  unsigned sharedEncoderCount;
  unsigned sharedJpegCount;
  unsigned sharedOfaCount;
  unsigned gpuInstanceSliceCount;
  unsigned computeInstanceSliceCount;
  unsigned long long memorySizeMB;  // NOLINT(runtime/int)
};

// nvmlGpuInstanceProfileInfo_v2_t, as nvmlDeviceGetGpuInstanceProfileInfoV
// fills it for one GPU instance profile (indexed 0 .. NVML's profile count:
// NVML_GPU_INSTANCE_PROFILE_1_SLICE, ..._1_SLICE_REV1 (+me), ...). `version`
// is set by the caller to kGpuInstanceProfileInfoV2. `name` is NVIDIA's
// profile name, "MIG 1g.18gb+me".
struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned version;
  unsigned id;  // the profile id nvmlGpuInstanceGetInfo reports
  unsigned isP2pSupported;
  unsigned sliceCount;
  unsigned instanceCount;
  unsigned multiprocessorCount;
  unsigned copyEngineCount;
  unsigned decoderCount;
  unsigned encoderCount;
  unsigned jpegCount;
  unsigned ofaCount;
  unsigned long long memorySizeMB;  // NOLINT(runtime/int)
  char name[96];
};
// NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2): the size, and 2 in the top byte.
constexpr unsigned kGpuInstanceProfileInfoV2 =
    static_cast<unsigned>(sizeof(nvmlGpuInstanceProfileInfo_v2_t)) | (2U << 24);
// Profile indices nvmlDeviceGetGpuInstanceProfileInfoV is asked for: NVML's
// enum has grown with each architecture (17 in R575); higher ones answer
// NVML_ERROR_INVALID_ARGUMENT and are skipped.
constexpr unsigned kMaxGpuInstanceProfiles = 32;

struct nvmlGpuInstancePlacement_t {
  unsigned start;
  unsigned size;
};

// nvmlGpuInstanceInfo_t, as nvmlGpuInstanceGetInfo fills it.
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned id;
  unsigned profileId;
  nvmlGpuInstancePlacement_t placement;
};

// NVML_GPU_FABRIC_STATE_*: how far a GPU's registration with the NVLink
// fabric (multi-node NVLink: GB200/GB300 NVL72) has come.
constexpr unsigned char kFabricStateNotSupported = 0;
constexpr unsigned char kFabricStateNotStarted = 1;
constexpr unsigned char kFabricStateInProgress = 2;
constexpr unsigned char kFabricStateCompleted = 3;

// nvmlGpuFabricInfo_t, as the first call (nvmlDeviceGetGpuFabricInfo) fills it.
struct nvmlGpuFabricInfo_t {
  unsigned char clusterUuid[16];  // NVML_GPU_FABRIC_UUID_LEN
  nvmlReturn_t status;            // meaningful only when state is "completed"
  unsigned cliqueId;
  unsigned char state;  // nvmlGpuFabricState_t
};

// nvmlGpuFabricInfo_v2_t, as nvmlDeviceGetGpuFabricInfoV fills it; the
// caller sets `version` to kGpuFabricInfoV2.
struct nvmlGpuFabricInfo_v2_t {
  unsigned version;
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned cliqueId;
  unsigned char state;
  unsigned healthMask;
};
// NVML_STRUCT_VERSION(GpuFabricInfo, 2): 0x02000024.
constexpr unsigned kGpuFabricInfoV2 =
    static_cast<unsigned>(sizeof(nvmlGpuFabricInfo_v2_t)) | (2U << 24);
static_assert(kGpuFabricInfoV2 == 0x02000024U, "nvmlGpuFabricInfo_v2_t is 36 bytes in nvml.h");

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;  // NOLINT(runtime/int)
  unsigned long long eventData;  // NOLINT(runtime/int)
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
};

}  // namespace accelpool::vendors::nvidia::abi

#endif  // ACCELPOOL_VENDORS_NVIDIA_NVML_ABI_H_
