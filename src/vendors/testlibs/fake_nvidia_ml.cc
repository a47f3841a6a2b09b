// A stand-in for NVIDIA's libnvidia-ml.so.1: an HGX H200 8-GPU board as
// nvidia-smi shows it ("NVIDIA H200", 143771 MiB each, minors 0-7, the PCI
// bus ids of a DGX H200, NUMA 0 for GPUs 0-3 and 1 for 4-7). `nvidia-smi topo
// -m` on that board shows NV18 between every pair: each GPU has 18 active
// NVLinks, all ending on the four NVSwitches (5, 4, 4 and 5 links), none on
// another GPU; the PCIe path is NODE inside a CPU socket and SYS across.
// Device handles point into a static table; the event set is a token.
// Structs come from nvml_abi.h, laid out as in the public nvml.h.
//
// MIG: accelpool_fake_nvml_mig(gpu) (or ACCELPOOL_FAKE_NVML_MIG=<gpu> in the
// environment) puts one GPU in MIG mode with four MIG devices: GPU instances
// 1 (3 slices), 2 (2 slices) and 3 and 4 (1 slice each), one compute instance
// each, with memory inside each profile's share of the GPU (3g.71gb,
// 2g.35gb, 1g.18gb, 1g.18gb+me on an H200). MIG handles point into a second
// table. The GPU instance profiles (nvmlDeviceGetGpuInstanceProfileInfoV,
// indexed as NVML's enum) are an H200's (ids and names as `nvidia-smi mig
// -lgip` lists them; media engines as NVIDIA's MIG guide gives them for
// Hopper: +me adds the OFA), plus a "+gfx" twin of 1g.18gb at Blackwell's
// index 10 whose engines equal the plain profile's, so that engines alone
// cannot name it. accelpool_fake_nvml_mig_access(level) takes rights away:
// 1, an unprivileged caller (nvmlDeviceGetGpuInstanceById answers
// NVML_ERROR_NO_PERMISSION); 0, a driver before R470 (no profile
// information either).
//
// Memory: every GPU has 512 MiB reserved by the driver and what
// accelpool_fake_nvml_used(gpu, mib) says processes hold (0 at first).
// nvmlDeviceGetMemoryInfo folds the reserve into `used`;
// nvmlDeviceGetMemoryInfo_v2 (absent from the old-driver build) reports it
// apart, and refuses a struct version other than nvmlMemory_v2.
//
// Processes: accelpool_fake_nvml_process(gpu, pid, mib, graphics) adds one
// (mib -1: NVML_VALUE_NOT_AVAILABLE; gpu -1 clears them all), listed by
// nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3 (24-byte entries) or,
// in the old-driver build, only the first calls (16-byte entries); a buffer
// too small gets NVML_ERROR_INSUFFICIENT_SIZE with the count needed.
//
// NVLink fabric: nvmlDeviceGetGpuFabricInfoV and the first call (absent
// from the old-driver build) answer as a single-node NVSwitch board does:
// registration "completed", status success, an all-zero cluster UUID, clique
// 0. accelpool_fake_nvml_fabric(state, status, clique, odd_gpu) makes it a
// multi-node NVLink tray instead: a cluster UUID of 00 11 22 ... ff when
// clique >= 0, every GPU in that clique but `odd_gpu` (-1: none), which is in
// clique + 1 (or ACCELPOOL_FAKE_NVML_FABRIC="state,status,clique,odd_gpu" in
// the environment). accelpool_fake_nvml_fabric_v1_only(1) makes the V call refuse
// struct v2 (NVML_ERROR_ARGUMENT_VERSION_MISMATCH), as a library built for
// another struct version would.
//
// NUMA: on an x86 HGX board the driver names each GPU's nearest memory node
// through nvmlDeviceGetMemoryAffinity, and nvmlDeviceGetNumaNodeId answers
// "not supported" (the GPU is not a NUMA node itself). accelpool_fake_nvml_numa
// switches to a driver that says neither (0), or to a coherent platform (2,
// Grace Hopper style) where nvmlDeviceGetNumaNodeId names the GPU's own memory
// node (8 + index), which holds no CPUs.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "fake_control.h"
#include "vendors/nvidia/nvml_abi.h"

using accelpool_fake::CopyString;
using accelpool_fake::Fails;
using accelpool_fake::State;
using accelpool_fake::Valid;

namespace {

using accelpool::vendors::nvidia::abi::nvmlDevice_t;
using accelpool::vendors::nvidia::abi::nvmlDeviceAttributes_t;
using accelpool::vendors::nvidia::abi::nvmlEventData_t;
using accelpool::vendors::nvidia::abi::nvmlGpuInstanceInfo_t;
using accelpool::vendors::nvidia::abi::nvmlGpuInstanceProfileInfo_v2_t;
using accelpool::vendors::nvidia::abi::nvmlMemory_t;
using accelpool::vendors::nvidia::abi::nvmlPciInfo_t;
constexpr int kSuccess = accelpool::vendors::nvidia::abi::kNvmlSuccess;
constexpr int kInvalidArgument = accelpool::vendors::nvidia::abi::kNvmlErrorInvalidArgument;
constexpr int kNotSupported = accelpool::vendors::nvidia::abi::kNvmlErrorNotSupported;
constexpr int kNotFound = accelpool::vendors::nvidia::abi::kNvmlErrorNotFound;
constexpr int kNoPermission = accelpool::vendors::nvidia::abi::kNvmlErrorNoPermission;
constexpr int kArgumentVersionMismatch = 25;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
constexpr int kTimeout = accelpool::vendors::nvidia::abi::kNvmlErrorTimeout;
constexpr int kGpuIsLost = accelpool::vendors::nvidia::abi::kNvmlErrorGpuIsLost;
constexpr unsigned kMaxLinks = accelpool::vendors::nvidia::abi::kMaxNvLinks;
constexpr unsigned long long kXidCritical =  // NOLINT(runtime/int)
    accelpool::vendors::nvidia::abi::kEventXidCritical;

const unsigned kGpuBus[8] = {0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf};
// The four NVSwitches, and which one each of a GPU's 18 links ends on.
const unsigned kSwitchBus[4] = {0x05, 0x06, 0x07, 0x08};
unsigned SwitchOfLink(unsigned link) { return link < 5 ? 0 : link < 9 ? 1 : link < 13 ? 2 : 3; }

int gpus[64];
int mig_handles[4];  // the MIG devices of the GPU in MIG mode
struct MigRow {
  unsigned gi, ci, gi_slices, ci_slices, sms;
  unsigned long long mib;  // NOLINT(runtime/int)
  unsigned profile_id, decoders, jpegs, ofas;
};
const MigRow kMig[4] = {{1, 0, 3, 3, 60, 71424, 9, 3, 3, 0},
                        {2, 0, 2, 2, 32, 33280, 14, 2, 2, 0},
                        {3, 0, 1, 1, 16, 16384, 19, 1, 1, 0},
                        {4, 0, 1, 1, 16, 16384, 20, 1, 1, 1}};
struct GiProfileRow {
  unsigned index, id, slices, sms;
  unsigned long long mib;  // NOLINT(runtime/int)
  unsigned decoders, jpegs, ofas;
  const char* name;
};
const GiProfileRow kGiProfiles[] = {
    {0, 19, 1, 16, 16384, 1, 1, 0, "MIG 1g.18gb"},
    {1, 14, 2, 32, 33280, 2, 2, 0, "MIG 2g.35gb"},
    {2, 9, 3, 60, 71424, 3, 3, 0, "MIG 3g.71gb"},
    {3, 5, 4, 64, 71424, 4, 4, 0, "MIG 4g.71gb"},
    {4, 0, 7, 132, 143360, 7, 7, 1, "MIG 7g.141gb"},
    {7, 20, 1, 16, 16384, 1, 1, 1, "MIG 1g.18gb+me"},
    {9, 15, 1, 16, 33280, 1, 1, 0, "MIG 1g.35gb"},
    {10, 47, 1, 16, 16384, 1, 1, 0, "MIG 1g.18gb+gfx"},
};
constexpr unsigned kGiProfileCount = 17;  // NVML_GPU_INSTANCE_PROFILE_COUNT in R575
int gi_handles[8];                        // GPU instance handles, by GPU instance id
std::atomic<int> mig_access{2};
int mig_gpu = [] {
  const char* g = std::getenv("ACCELPOOL_FAKE_NVML_MIG");
  return g != nullptr ? std::atoi(g) : -1;
}();
// Event sets: live between nvmlEventSetCreate and nvmlEventSetFree. NVML does
// not document registering a GPU twice on one set; the fake refuses it, so
// the binding is held to one registration per GPU per set.
struct FakeEventSet {
  bool live = false;
  unsigned long long registered = 0;  // NOLINT(runtime/int) bit per GPU
};
FakeEventSet event_sets[4];
FakeEventSet* LiveSet(void* set) {
  for (FakeEventSet& s : event_sets) {
    if (&s == set && s.live) return &s;
  }
  return nullptr;
}
std::atomic<int> numa_mode{1};       // 0 driver says nothing, 1 x86 (affinity only), 2 coherent
std::atomic<bool> wait_lost{false};  // nvmlEventSetWait_v2 answers NVML_ERROR_GPU_IS_LOST
std::atomic<unsigned long long> fault_xid{79};  // NOLINT(runtime/int) what the faulty GPU reports
std::atomic<int> remap_pending{-1};        // this GPU has rows pending remapping (needs a reset)
std::atomic<int> retire_pending{-2};  // this GPU has a page pending retirement; -2: not supported
std::atomic<int> name_calls{0};            // nvmlDeviceGetName calls since the last reset
std::atomic<bool> unterminated{false};     // the UUID and the name fill the buffer with no NUL
std::atomic<bool> null_error_text{false};  // nvmlErrorString of an unknown code is a null pointer
std::atomic<unsigned> events_unsupported{
    0};  // bit per GPU: nvmlDeviceRegisterEvents says NOT_SUPPORTED
std::atomic<unsigned> events_failing{0};  // bit per GPU: nvmlDeviceRegisterEvents fails
std::atomic<int> events_error{0};         // with this code
std::atomic<int> event_set_error{0};      // nvmlEventSetCreate answers this code (0: succeeds)

// What GetUUID and GetName write: `s`, or with `unterminated` `s` and then
// 'x' up to the very end of the buffer, with no NUL anywhere.
void WriteText(char* dst, unsigned n, const char* s) {
  CopyString(dst, n, s);
  if (unterminated && n > 0) {
    const size_t len = std::strlen(dst);
    std::memset(dst + len, 'x', n - len);
  }
}

bool ToMig(const void* h, unsigned* k) {
  const int* p = static_cast<const int*>(h);
  if (p < mig_handles || p >= mig_handles + 4 || mig_gpu < 0) return false;
  *k = static_cast<unsigned>(p - mig_handles);
  return true;
}

bool ToIndex(const void* h, unsigned* i) {
  const int* p = static_cast<const int*>(h);
  if (p < gpus || p >= gpus + 64) return false;
  *i = static_cast<unsigned>(p - gpus);
  return Valid(*i);
}

void FillPci(nvmlPciInfo_t* p, unsigned bus, unsigned device_id) {
  std::memset(p, 0, sizeof(*p));
  p->domain = 0;
  p->bus = bus;
  p->device = 0;
  p->pciDeviceId = device_id;
  p->pciSubSystemId = 0x18ff10de;
  std::snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "0000:%02X:00.0", bus);
  std::snprintf(p->busId, sizeof(p->busId), "00000000:%02X:00.0", bus);
}

}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

static unsigned long long used_mib[64];  // NOLINT(runtime/int) by processes, per GPU
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_used(int gpu, int mib) {
  if (gpu >= 0 && gpu < 64) used_mib[gpu] = static_cast<unsigned long long>(mib);  // NOLINT
}

struct FakeProcess {
  int gpu;
  unsigned pid;
  int mib;
  int graphics;
};
static FakeProcess processes[32];
static int process_count = 0;
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_process(int gpu,
                                                                                   unsigned pid,
                                                                                   int mib,
                                                                                   int graphics) {
  if (gpu < 0) {
    process_count = 0;
  } else if (process_count < 32) {
    processes[process_count++] = {gpu, pid, mib, graphics};
  }
}

// Fills `infos` with GPU i's processes of one kind, as NVML does.
template <typename Info>
static int ListFakeProcesses(unsigned i, int graphics, unsigned* count, Info* infos) {
  unsigned n = 0;
  for (int k = 0; k < process_count; ++k) {
    if (processes[k].gpu == static_cast<int>(i) && processes[k].graphics == graphics) ++n;
  }
  if (*count < n) {
    *count = n;
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  unsigned w = 0;
  for (int k = 0; k < process_count; ++k) {
    const FakeProcess& p = processes[k];
    if (p.gpu != static_cast<int>(i) || p.graphics != graphics) continue;
    std::memset(&infos[w], 0, sizeof(Info));
    infos[w].pid = p.pid;
    infos[w].usedGpuMemory =
        p.mib < 0 ? ~0ULL : static_cast<unsigned long long>(p.mib) << 20;  // NOLINT
    ++w;
  }
  *count = n;
  return 0;
}

// ACCELPOOL_FAKE_NVML_FABRIC="<state>,<status>,<clique>,<odd_gpu>" sets the
// same at load, for a plugin binary run on the fake.
struct FabricSetting {
  int state = 3;    // NVML_GPU_FABRIC_STATE_COMPLETED
  int status = 0;   // NVML_SUCCESS
  int clique = -1;  // -1: zero cluster UUID, clique 0
  int odd_gpu = -1;
};
static FabricSetting FabricFromEnv() {
  FabricSetting f;
  const char* e = std::getenv("ACCELPOOL_FAKE_NVML_FABRIC");
  if (e != nullptr) {
    FabricSetting read;
    if (std::sscanf(e, "%d,%d,%d,%d", &read.state, &read.status, &read.clique, &read.odd_gpu) ==
        4) {
      f = read;
    }
  }
  return f;
}
static const FabricSetting kFabricAtLoad = FabricFromEnv();
static std::atomic<int> fabric_state{kFabricAtLoad.state};
static std::atomic<int> fabric_status{kFabricAtLoad.status};
static std::atomic<int> fabric_clique{kFabricAtLoad.clique};
static std::atomic<int> fabric_odd_gpu{kFabricAtLoad.odd_gpu};
static std::atomic<bool> fabric_v1_only{false};
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_fabric(int state,
                                                                                  int status,
                                                                                  int clique,
                                                                                  int odd_gpu) {
  fabric_state = state;
  fabric_status = status;
  fabric_clique = clique;
  fabric_odd_gpu = odd_gpu;
}
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_fabric_v1_only(int on) {
  fabric_v1_only = on != 0;
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_numa(int mode) {
  numa_mode = mode;
}

// The GPU in MIG mode (-1: none).
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_mig(int gpu) {
  mig_gpu = gpu;
}

// 2: every MIG query; 1: no GPU instance handles; 0: no profile information.
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_mig_access(int level) {
  mig_access = level;
}

// How many times nvmlDeviceGetName ran since the last call (which resets it):
// the full per-GPU read, as against the health query.
extern "C" __attribute__((visibility("default"))) int accelpool_fake_nvml_name_calls() {
  return name_calls.exchange(0);
}
// 1: nvmlDeviceGetUUID and nvmlDeviceGetName fill the caller's buffer whole,
// with no terminating NUL.
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_unterminated(int on) {
  unterminated = on != 0;
}
// 1: nvmlErrorString has no text for the codes it does not know (a null
// pointer, as an NVML-shaped library may answer).
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_null_error_text(int on) {
  null_error_text = on != 0;
}
// GPUs (a bit each) whose event registration answers NVML_ERROR_NOT_SUPPORTED.
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_events_unsupported(
    unsigned mask) {
  events_unsupported = mask;
}
// GPUs (a bit each) whose event registration answers `code` (999
// NVML_ERROR_UNKNOWN, 15 NVML_ERROR_GPU_IS_LOST); 0 clears.
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_events_error(
    unsigned mask, int code) {
  events_failing = mask;
  events_error = code;
}
// nvmlEventSetCreate answers `code` (0: succeeds again).
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_event_set_error(
    int code) {
  event_set_error = code;
}
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_wait_lost(int lost) {
  wait_lost = lost != 0;
}

// The XID the faulty device reports (79 unless set), and the GPU whose
// nvmlDeviceGetRemappedRows says rows are pending remapping (-1: none).
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_xid(int xid,
                                                                               int pending) {
  fault_xid = static_cast<unsigned long long>(xid);  // NOLINT(runtime/int)
  remap_pending = pending;
}

// Page retirement (before Ampere): the GPU with a page pending retirement
// (-1: none; -2: nvmlDeviceGetRetiredPagesPendingStatus answers NOT_SUPPORTED).
extern "C" __attribute__((visibility("default"))) void accelpool_fake_nvml_retire(int pending) {
  retire_pending = pending;
}

extern "C" {
__attribute__((visibility("default"))) int nvmlInit_v2() { return State().init_error; }
__attribute__((visibility("default"))) int nvmlShutdown() { return kSuccess; }
__attribute__((visibility("default"))) const char* nvmlErrorString(int r) {
  switch (r) {
    case kSuccess:
      return "Success";
    case kInvalidArgument:
      return "Invalid Argument";
    case kNotSupported:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    case kTimeout:
      return "Timeout";
    case kGpuIsLost:
      return "GPU is lost";
    default:
      return null_error_text ? nullptr : "Unknown Error";
  }
}
__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = static_cast<unsigned>(State().count);
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) {
  if (!Valid(i) || i >= 64) return kInvalidArgument;
  *h = &gpus[i];
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUUID(void* h, char* uuid, unsigned n) {
  unsigned i = 0;
  char s[96];
  if (ToMig(h, &i)) {
    std::snprintf(s, sizeof(s), "MIG-5d2c8e1f-7a3b-4c6d-9e0f-%02x%010x", mig_gpu, i);
    CopyString(uuid, n, s);
    return kSuccess;
  }
  if (!ToIndex(h, &i)) return kInvalidArgument;
  std::snprintf(s, sizeof(s), "GPU-9c1e5b7a-2d4f-4a8e-b6c3-1f0e8d2a40%02x", i);
  WriteText(uuid, n, s);
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetName(void* h, char* name, unsigned n) {
  unsigned i = 0;
  ++name_calls;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  WriteText(name, n, "NVIDIA H200");
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void* h, nvmlMemory_t* m) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  if (Fails(i)) return kGpuIsLost;
  m->total = 143771ULL << 20;
  m->used = (512ULL + used_mib[i]) << 20;
  m->free = m->total - m->used;
  return kSuccess;
}
#ifndef ACCELPOOL_FAKE_NVML_V1_PCI
__attribute__((visibility("default"))) int nvmlDeviceGetComputeRunningProcesses_v3(
    void* h, unsigned* count, accelpool::vendors::nvidia::abi::nvmlProcessInfo_t* infos) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  if (Fails(i)) return kGpuIsLost;
  return ListFakeProcesses(i, 0, count, infos);
}
__attribute__((visibility("default"))) int nvmlDeviceGetGraphicsRunningProcesses_v3(
    void* h, unsigned* count, accelpool::vendors::nvidia::abi::nvmlProcessInfo_t* infos) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  if (Fails(i)) return kGpuIsLost;
  return ListFakeProcesses(i, 1, count, infos);
}
#else
__attribute__((visibility("default"))) int nvmlDeviceGetComputeRunningProcesses(
    void* h, unsigned* count, accelpool::vendors::nvidia::abi::nvmlProcessInfo_v1_t* infos) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  return ListFakeProcesses(i, 0, count, infos);
}
__attribute__((visibility("default"))) int nvmlDeviceGetGraphicsRunningProcesses(
    void* h, unsigned* count, accelpool::vendors::nvidia::abi::nvmlProcessInfo_v1_t* infos) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  return ListFakeProcesses(i, 1, count, infos);
}
#endif
#ifndef ACCELPOOL_FAKE_NVML_V1_PCI
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo_v2(
    void* h, accelpool::vendors::nvidia::abi::nvmlMemory_v2_t* m) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  if (Fails(i)) return kGpuIsLost;
  if (m->version != accelpool::vendors::nvidia::abi::kMemoryV2Version) {
    return kArgumentVersionMismatch;
  }
  m->total = 143771ULL << 20;
  m->reserved = 512ULL << 20;
  m->used = used_mib[i] << 20;
  m->free = m->total - m->reserved - m->used;
  return kSuccess;
}
#endif
#ifndef ACCELPOOL_FAKE_NVML_V1_PCI
__attribute__((visibility("default"))) int nvmlDeviceGetPciInfo_v3(void* h, nvmlPciInfo_t* p) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  FillPci(p, kGpuBus[i % 8], 0x233510de);
  return kSuccess;
}
#else
// Built as fake_nvidia_ml_v1: a driver that exports only the first
// nvmlDeviceGetPciInfo, whose struct (nvml.h before the _v2 struct) starts
// with a 16-byte busId in the legacy spelling and ends in four reserved
// words where the newer struct has its 32-byte busId.
struct PciInfoV1 {
  char busId[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  unsigned reserved0, reserved1, reserved2, reserved3;
};
__attribute__((visibility("default"))) int nvmlDeviceGetPciInfo(void* h, PciInfoV1* p) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  std::memset(p, 0, sizeof(*p));
  p->bus = kGpuBus[i % 8];
  p->pciDeviceId = 0x233510de;
  std::snprintf(p->busId, sizeof(p->busId), "0000:%02X:00.0", p->bus);
  return kSuccess;
}
#endif
__attribute__((visibility("default"))) int nvmlDeviceGetMinorNumber(void* h, unsigned* minor) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  *minor = i;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetNumaNodeId(void* h, unsigned* node) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  if (numa_mode != 2) return kNotSupported;
  *node = 8 + i;  // the GPU's own memory node on a coherent platform
  return kSuccess;
}
// NVML_AFFINITY_SCOPE_NODE (0): the NUMA nodes nearest to the GPU, as a bitmask.
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryAffinity(
    void* h, unsigned size, unsigned long* set, unsigned scope) {  // NOLINT(runtime/int)
  unsigned i = 0;
  if (!ToIndex(h, &i) || set == nullptr || size == 0) return kInvalidArgument;
  if (numa_mode == 0 || scope != 0) return kNotSupported;
  std::memset(set, 0, size * sizeof(*set));
  set[0] = 1UL << (i < 4 ? 0 : 1);
  return kSuccess;
}
// Row remapping (Ampere and newer): an uncorrectable error marks rows for
// remapping, which takes effect at the next GPU reset.
__attribute__((visibility("default"))) int nvmlDeviceGetRemappedRows(void* h, unsigned* corr,
                                                                     unsigned* unc,
                                                                     unsigned* pending,
                                                                     unsigned* failure) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  const bool p = static_cast<int>(i) == remap_pending;
  *corr = 0;
  *unc = p ? 1 : 0;
  *pending = p ? 1 : 0;
  *failure = 0;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetRetiredPagesPendingStatus(void* h,
                                                                                  int* pending) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  if (retire_pending == -2) return kNotSupported;
  *pending = static_cast<int>(i) == retire_pending ? 1 : 0;
  return kSuccess;
}
#ifndef ACCELPOOL_FAKE_NVML_V1_PCI
// Fills the fabric fields of GPU i (both struct versions share them).
static void FakeFabric(unsigned i, unsigned char* uuid, int* status, unsigned* clique,
                       unsigned char* state) {
  const int c = fabric_clique;
  std::memset(uuid, 0, 16);
  if (c >= 0) {
    for (unsigned k = 0; k < 16; ++k) uuid[k] = static_cast<unsigned char>(k * 0x11);
  }
  *status = fabric_status;
  *clique = c < 0 ? 0 : static_cast<unsigned>(c) + (static_cast<int>(i) == fabric_odd_gpu ? 1 : 0);
  *state = static_cast<unsigned char>(fabric_state.load());
}
__attribute__((visibility("default"))) int nvmlDeviceGetGpuFabricInfo(
    void* h, accelpool::vendors::nvidia::abi::nvmlGpuFabricInfo_t* f) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || f == nullptr) return kInvalidArgument;
  std::memset(f, 0, sizeof(*f));
  FakeFabric(i, f->clusterUuid, &f->status, &f->cliqueId, &f->state);
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetGpuFabricInfoV(
    void* h, accelpool::vendors::nvidia::abi::nvmlGpuFabricInfo_v2_t* f) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || f == nullptr) return kInvalidArgument;
  if (fabric_v1_only || f->version != accelpool::vendors::nvidia::abi::kGpuFabricInfoV2) {
    return kArgumentVersionMismatch;
  }
  const unsigned version = f->version;
  std::memset(f, 0, sizeof(*f));
  f->version = version;
  FakeFabric(i, f->clusterUuid, &f->status, &f->cliqueId, &f->state);
  return kSuccess;
}
#endif
__attribute__((visibility("default"))) int nvmlDeviceGetMigMode(void* h, unsigned* current,
                                                                unsigned* pending) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  *current = static_cast<int>(i) == mig_gpu ? 1 : 0;
  *pending = *current;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMaxMigDeviceCount(void* h,
                                                                          unsigned* count) {
  unsigned i = 0;
  if (!ToIndex(h, &i)) return kInvalidArgument;
  *count = static_cast<int>(i) == mig_gpu ? 7 : 0;
  return kSuccess;
}
// Slots 0-3 hold MIG devices, 4-6 are empty.
__attribute__((visibility("default"))) int nvmlDeviceGetMigDeviceHandleByIndex(void* h,
                                                                               unsigned index,
                                                                               void** mig) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || static_cast<int>(i) != mig_gpu || index >= 7) return kInvalidArgument;
  if (index >= 4) return kNotFound;
  *mig = &mig_handles[index];
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetAttributes_v2(void* h,
                                                                      nvmlDeviceAttributes_t* a) {
  unsigned k = 0;
  if (!ToMig(h, &k)) return kNotSupported;
  std::memset(a, 0, sizeof(*a));
  a->multiprocessorCount = kMig[k].sms;
  a->gpuInstanceSliceCount = kMig[k].gi_slices;
  a->computeInstanceSliceCount = kMig[k].ci_slices;
  a->memorySizeMB = kMig[k].mib;
  a->sharedCopyEngineCount = kMig[k].gi_slices;
  a->sharedDecoderCount = kMig[k].decoders;
  a->sharedJpegCount = kMig[k].jpegs;
  a->sharedOfaCount = kMig[k].ofas;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetGpuInstanceProfileInfoV(
    void* h, unsigned profile, nvmlGpuInstanceProfileInfo_v2_t* info) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || info == nullptr || profile >= kGiProfileCount) return kInvalidArgument;
  if (mig_access < 1) return kNotSupported;
  if (info->version != accelpool::vendors::nvidia::abi::kGpuInstanceProfileInfoV2) {
    return kArgumentVersionMismatch;
  }
  for (const GiProfileRow& r : kGiProfiles) {
    if (r.index != profile) continue;
    const unsigned version = info->version;
    std::memset(info, 0, sizeof(*info));
    info->version = version;
    info->id = r.id;
    info->sliceCount = r.slices;
    info->instanceCount = 7 / r.slices;
    info->multiprocessorCount = r.sms;
    info->copyEngineCount = r.slices;
    info->decoderCount = r.decoders;
    info->jpegCount = r.jpegs;
    info->ofaCount = r.ofas;
    info->memorySizeMB = r.mib;
    CopyString(info->name, sizeof(info->name), r.name);
    return kSuccess;
  }
  return kNotSupported;  // a profile this GPU does not have
}
__attribute__((visibility("default"))) int nvmlDeviceGetGpuInstanceById(void* h, unsigned id,
                                                                        void** instance) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || instance == nullptr) return kInvalidArgument;
  if (static_cast<int>(i) != mig_gpu) return kNotSupported;
  if (mig_access < 2) return kNoPermission;
  for (const MigRow& r : kMig) {
    if (r.gi == id) {
      *instance = &gi_handles[id];
      return kSuccess;
    }
  }
  return kNotFound;
}
__attribute__((visibility("default"))) int nvmlGpuInstanceGetInfo(void* instance,
                                                                  nvmlGpuInstanceInfo_t* info) {
  const int* p = static_cast<const int*>(instance);
  if (p < gi_handles || p >= gi_handles + 8 || info == nullptr || mig_gpu < 0) {
    return kInvalidArgument;
  }
  const unsigned id = static_cast<unsigned>(p - gi_handles);
  for (const MigRow& r : kMig) {
    if (r.gi != id) continue;
    std::memset(info, 0, sizeof(*info));
    info->device = reinterpret_cast<nvmlDevice_t>(&gpus[mig_gpu]);
    info->id = id;
    info->profileId = r.profile_id;
    info->placement.size = r.gi_slices;
    return kSuccess;
  }
  return kInvalidArgument;
}
__attribute__((visibility("default"))) int nvmlDeviceGetGpuInstanceId(void* h, unsigned* id) {
  unsigned k = 0;
  if (!ToMig(h, &k)) return kNotSupported;
  *id = kMig[k].gi;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetComputeInstanceId(void* h, unsigned* id) {
  unsigned k = 0;
  if (!ToMig(h, &k)) return kNotSupported;
  *id = kMig[k].ci;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetTopologyCommonAncestor(void* a, void* b,
                                                                               int* level) {
  unsigned i = 0;
  unsigned j = 0;
  if (!ToIndex(a, &i) || !ToIndex(b, &j)) return kInvalidArgument;
  *level = (i < 4) == (j < 4) ? 40 : 50;  // NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_SYSTEM
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetNvLinkState(void* h, unsigned link,
                                                                    int* active) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || link >= kMaxLinks) return kInvalidArgument;
  *active = 1;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* h,
                                                                               unsigned link,
                                                                               nvmlPciInfo_t* p) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || link >= kMaxLinks) return kInvalidArgument;
  FillPci(p, kSwitchBus[SwitchOfLink(link)], 0x22a310de);
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetNvLinkRemoteDeviceType(void* h,
                                                                               unsigned link,
                                                                               int* type) {
  unsigned i = 0;
  if (!ToIndex(h, &i) || link >= kMaxLinks) return kInvalidArgument;
  *type = accelpool::vendors::nvidia::abi::kNvLinkPeerSwitch;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlEventSetCreate(void** set) {
  if (event_set_error != 0) return event_set_error;
  for (FakeEventSet& s : event_sets) {
    if (!s.live) {
      s = FakeEventSet{true, 0};
      *set = &s;
      return kSuccess;
    }
  }
  return kInvalidArgument;  // the fake's sets are used up: a set that is never freed
}
__attribute__((visibility("default"))) int nvmlDeviceRegisterEvents(
    void* h, unsigned long long types, void* set) {  // NOLINT(runtime/int)
  unsigned i = 0;
  FakeEventSet* s = LiveSet(set);
  if (!ToIndex(h, &i) || s == nullptr || (s->registered >> i & 1) != 0) return kInvalidArgument;
  if ((types & kXidCritical) == 0 || (events_unsupported >> i & 1u) != 0) return kNotSupported;
  if ((events_failing >> i & 1u) != 0) return events_error;
  s->registered |= 1ULL << i;
  return kSuccess;
}
// A faulty device reports XID 79 (fallen off the bus; see
// accelpool_fake_nvml_xid) on every wait.
__attribute__((visibility("default"))) int nvmlEventSetWait_v2(void* set, nvmlEventData_t* data,
                                                               unsigned timeout_ms) {
  if (LiveSet(set) == nullptr) return kInvalidArgument;
  if (wait_lost) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return kGpuIsLost;
  }
  const int fault = State().fault_device;
  // Events come only from GPUs registered on the set.
  if (fault >= 0 && Valid(static_cast<unsigned>(fault)) &&
      (LiveSet(set)->registered >> fault & 1) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::memset(data, 0, sizeof(*data));
    data->device = reinterpret_cast<nvmlDevice_t>(&gpus[fault]);
    data->eventType = kXidCritical;
    data->eventData = fault_xid;
    data->gpuInstanceId = 0xffffffffu;
    data->computeInstanceId = 0xffffffffu;
    return kSuccess;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  return kTimeout;
}
__attribute__((visibility("default"))) int nvmlEventSetFree(void* set) {
  FakeEventSet* s = LiveSet(set);
  if (s == nullptr) return kInvalidArgument;
  s->live = false;
  return kSuccess;
}
}
