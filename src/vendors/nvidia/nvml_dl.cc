// NvmlLibrary over libnvidia-ml loaded with dlopen. The NVML types are in
// nvml_abi.h, the functions are declared here from NVML's public API
// reference; no NVIDIA header is needed to build.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "vendors/dl_library.h"
#include "vendors/driver.h"
#include "vendors/library_util.h"
#include "vendors/nvidia/nvml_abi.h"
#include "vendors/nvidia/nvml_library.h"

namespace accelpool::vendors::nvidia {
namespace {

using abi::kEventXidCritical;
using abi::kMaxNvLinks;
using abi::kNvmlErrorGpuIsLost;
using abi::kNvmlErrorNotFound;
using abi::kNvmlErrorNotSupported;
using abi::kNvmlErrorTimeout;
using abi::kNvmlSuccess;
using abi::nvmlDevice_t;
using abi::nvmlDeviceAttributes_t;
using abi::nvmlEventData_t;
using abi::nvmlEventSet_t;
using abi::nvmlGpuInstance_t;
using abi::nvmlGpuInstanceInfo_t;
using abi::nvmlGpuInstanceProfileInfo_v2_t;
using abi::nvmlMemory_t;
using abi::nvmlPciInfo_t;
using abi::nvmlReturn_t;

constexpr unsigned kAffinityWords = 16;  // 1024 NUMA nodes
constexpr unsigned kMaxDevices = 1024;   // a count above this is garbage
constexpr size_t kMaxErrorText = 256;    // of nvmlErrorString's text

int32_t LowestSetBit(const unsigned long* words, unsigned count) {  // NOLINT(runtime/int)
  constexpr unsigned kBits = 8 * sizeof(words[0]);
  for (unsigned w = 0; w < count; ++w) {
    for (unsigned b = 0; b < kBits; ++b) {
      if ((words[w] >> b) & 1UL) {
        return static_cast<int32_t>(w * kBits + b);
      }
    }
  }
  return -1;
}

class DlNvml : public NvmlLibrary {
 public:
  DlNvml(std::unique_ptr<DlLibrary> lib, std::string prefix, std::string smi,
         std::string sysfs_root)
      : lib_(std::move(lib)),
        prefix_(std::move(prefix)),
        smi_(std::move(smi)),
        sysfs_root_(std::move(sysfs_root)) {}
  ~DlNvml() override {
    if (events_ != nullptr && event_set_free_ != nullptr) {
      event_set_free_(events_);
    }
    if (initialized_ && shutdown_ != nullptr) {
      shutdown_();
    }
  }

  Status Init() override {
    auto init = lib_->Symbol<nvmlReturn_t()>(Sym("Init_v2"));
    if (!init.ok()) {
      return init.status();
    }
    error_string_ = lib_->OptionalSymbol<const char*(nvmlReturn_t)>(Sym("ErrorString"));
    shutdown_ = lib_->OptionalSymbol<nvmlReturn_t()>(Sym("Shutdown"));
    event_set_free_ = lib_->OptionalSymbol<nvmlReturn_t(nvmlEventSet_t)>(Sym("EventSetFree"));
    ACCELPOOL_RETURN_IF_ERROR(Check((*init)(), Sym("Init_v2")));
    initialized_ = true;
    return Status::Ok();
  }

  StatusOr<int32_t> DeviceCount() override {
    auto fn = lib_->Symbol<nvmlReturn_t(unsigned*)>(Sym("DeviceGetCount_v2"));
    if (!fn.ok()) {
      return fn.status();
    }
    unsigned n = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check((*fn)(&n), Sym("DeviceGetCount_v2")));
    // A garbage count would size the handle table and every loop over the
    // GPUs; the other bindings refuse the same (BoundLibrary::CheckedCount).
    if (n > kMaxDevices) {
      return InternalError(Sym("DeviceGetCount_v2") + " reported " + std::to_string(n) +
                           " GPUs; check the driver with " + smi_);
    }
    return static_cast<int32_t>(n);
  }

  StatusOr<NvmlDeviceInfo> DeviceInfo(int32_t index) override {
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    NvmlDeviceInfo info;
    char buf[96] = {};
    auto uuid = lib_->Symbol<nvmlReturn_t(nvmlDevice_t, char*, unsigned)>(Sym("DeviceGetUUID"));
    if (!uuid.ok()) {
      return uuid.status();
    }
    ACCELPOOL_RETURN_IF_ERROR(Check((*uuid)(*h, buf, sizeof(buf)), Sym("DeviceGetUUID")));
    info.uuid = FixedString(buf, sizeof(buf));  // NVML's docs promise a NUL; do not rely on it
    auto name =
        lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, char*, unsigned)>(Sym("DeviceGetName"));
    char nbuf[96] = {};
    if (name != nullptr && name(*h, nbuf, sizeof(nbuf)) == kNvmlSuccess) {
      info.name = FixedString(nbuf, sizeof(nbuf));
    }
    auto mem = lib_->Symbol<nvmlReturn_t(nvmlDevice_t, nvmlMemory_t*)>(Sym("DeviceGetMemoryInfo"));
    if (!mem.ok()) {
      return mem.status();
    }
    nvmlMemory_t m{};
    ACCELPOOL_RETURN_IF_ERROR(Check((*mem)(*h, &m), Sym("DeviceGetMemoryInfo")));
    info.memory_mib = static_cast<int64_t>(m.total / (1024ULL * 1024ULL));
    // _v3 and _v2 fill nvmlPciInfo_t; the first, unversioned call fills the
    // older struct, whose only bus id is the 16 bytes busIdLegacy now holds
    // (the 32-byte busId lies past that struct's end).
    using PciFn = nvmlReturn_t(nvmlDevice_t, nvmlPciInfo_t*);
    bool legacy = false;
    auto pci = lib_->OptionalSymbol<PciFn>(Sym("DeviceGetPciInfo_v3"));
    if (pci == nullptr) {
      pci = lib_->OptionalSymbol<PciFn>(Sym("DeviceGetPciInfo_v2"));
    }
    if (pci == nullptr) {
      pci = lib_->OptionalSymbol<PciFn>(Sym("DeviceGetPciInfo"));
      legacy = true;
    }
    Padded<nvmlPciInfo_t> p;
    if (pci != nullptr && pci(*h, &p.value) == kNvmlSuccess) {
      info.pci_bus = legacy ? FixedString(p.value.busIdLegacy, sizeof(p.value.busIdLegacy))
                            : FixedString(p.value.busId, sizeof(p.value.busId));
    }
    auto minor =
        lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned*)>(Sym("DeviceGetMinorNumber"));
    unsigned mn = 0;
    if (minor != nullptr && minor(*h, &mn) == kNvmlSuccess) {
      info.minor = static_cast<int32_t>(mn);
    }
    // Locality is the nearest CPU memory node: nvmlDeviceGetMemoryAffinity
    // (scope NUMA node), else sysfs. Not nvmlDeviceGetNumaNodeId: it names the
    // GPU's own memory node on platforms where the GPU is one (Grace Hopper),
    // a node without CPUs, and answers "not supported" elsewhere.
    auto affinity = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned, unsigned long*,
                                                      unsigned)>(  // NOLINT
        Sym("DeviceGetMemoryAffinity"));
    unsigned long nodes[kAffinityWords] = {};  // NOLINT(runtime/int)
    if (affinity != nullptr &&
        affinity(*h, kAffinityWords, nodes, abi::kAffinityScopeNode) == kNvmlSuccess) {
      info.numa = LowestSetBit(nodes, kAffinityWords);
    }
    if (info.numa < 0) {
      info.numa = PciNumaNode(info.pci_bus, sysfs_root_);
    }
    auto mig = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned*, unsigned*)>(
        Sym("DeviceGetMigMode"));
    unsigned cur = 0;
    unsigned pending = 0;
    if (mig != nullptr && mig(*h, &cur, &pending) == kNvmlSuccess) {
      info.mig_enabled = cur == 1;
    }
    return info;
  }

  StatusOr<P2PLevel> CommonAncestor(int32_t a, int32_t b) override {
    auto fn = lib_->Symbol<nvmlReturn_t(nvmlDevice_t, nvmlDevice_t, int*)>(
        Sym("DeviceGetTopologyCommonAncestor"));
    if (!fn.ok()) {
      return fn.status();
    }
    StatusOr<nvmlDevice_t> ha = Handle(a);
    StatusOr<nvmlDevice_t> hb = Handle(b);
    if (!ha.ok()) {
      return ha.status();
    }
    if (!hb.ok()) {
      return hb.status();
    }
    int level = 0;
    ACCELPOOL_RETURN_IF_ERROR(
        Check((*fn)(*ha, *hb, &level), Sym("DeviceGetTopologyCommonAncestor")));
    return static_cast<P2PLevel>(level);
  }

  StatusOr<std::vector<NvLinkRemote>> NvLinkRemotes(int32_t index) override {
    std::vector<NvLinkRemote> out;
    auto state = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned, int*)>(
        Sym("DeviceGetNvLinkState"));
    auto remote = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned, nvmlPciInfo_t*)>(
        Sym("DeviceGetNvLinkRemotePciInfo_v2"));
    // Since R450; older drivers leave the peer unknown.
    auto type = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned, int*)>(
        Sym("DeviceGetNvLinkRemoteDeviceType"));
    if (state == nullptr || remote == nullptr) {
      return out;
    }
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    for (unsigned link = 0; link < kMaxNvLinks; ++link) {
      int active = 0;
      if (state(*h, link, &active) != kNvmlSuccess || active == 0) {
        continue;
      }
      nvmlPciInfo_t p{};
      if (remote(*h, link, &p) != kNvmlSuccess) {
        continue;
      }
      p.busId[sizeof(p.busId) - 1] = '\0';
      NvLinkRemote r{p.busId, NvLinkPeer::kUnknown};
      int kind = 0;
      if (type != nullptr && type(*h, link, &kind) == kNvmlSuccess) {
        r.peer = kind == abi::kNvLinkPeerGpu      ? NvLinkPeer::kGpu
                 : kind == abi::kNvLinkPeerSwitch ? NvLinkPeer::kSwitch
                 : kind == abi::kNvLinkPeerIbmNpu ? NvLinkPeer::kCpu
                                                  : NvLinkPeer::kUnknown;
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  StatusOr<XidRegistration> RegisterXidEvents() override {
    auto create = lib_->Symbol<nvmlReturn_t(nvmlEventSet_t*)>(Sym("EventSetCreate"));
    auto reg =
        lib_->Symbol<nvmlReturn_t(nvmlDevice_t, unsigned long long, nvmlEventSet_t)>(  // NOLINT
            Sym("DeviceRegisterEvents"));
    if (!create.ok()) {
      return create.status();
    }
    if (!reg.ok()) {
      return reg.status();
    }
    // A watch that starts again (the device plugin's device check found a
    // changed device set) registers the GPUs there are now on a fresh set,
    // never a GPU twice on one set. Only the watch's own thread uses the set,
    // and the previous watch has ended.
    if (events_ != nullptr && event_set_free_ != nullptr) {
      event_set_free_(events_);
      events_ = nullptr;
    }
    if (events_ == nullptr) {
      if (Status st = Check((*create)(&events_), Sym("EventSetCreate")); !st.ok()) {
        events_ = nullptr;  // not a set to wait on or free
        return st;
      }
    }
    StatusOr<int32_t> n = DeviceCount();
    if (!n.ok()) {
      return n.status();
    }
    // A GPU without event support, or one whose registration fails
    // (NVML_ERROR_UNKNOWN, a GPU that is lost), is left out; the others are
    // still watched. One such GPU must not leave every GPU unwatched.
    XidRegistration out;
    for (int32_t i = 0; i < *n; ++i) {
      StatusOr<nvmlDevice_t> h = Handle(i);
      if (!h.ok()) {
        out.failed.emplace_back(i, h.status().message());
        continue;
      }
      nvmlReturn_t r = (*reg)(*h, kEventXidCritical, events_);
      if (r == kNvmlErrorNotSupported) {
        out.unsupported.push_back(i);
      } else if (Status st = Check(r, Sym("DeviceRegisterEvents")); !st.ok()) {
        out.failed.emplace_back(i, st.message());
      }
    }
    if (*n > 0 && static_cast<int32_t>(out.unsupported.size()) == *n) {
      return UnimplementedError("no GPU supports XID events");
    }
    return out;
  }

  Status RegisterXidEventsFor(int32_t index) override {
    auto reg =
        lib_->Symbol<nvmlReturn_t(nvmlDevice_t, unsigned long long, nvmlEventSet_t)>(  // NOLINT
            Sym("DeviceRegisterEvents"));
    if (!reg.ok()) {
      return reg.status();
    }
    if (events_ == nullptr) {
      return FailedPreconditionError("no XID event set");
    }
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    nvmlReturn_t r = (*reg)(*h, kEventXidCritical, events_);
    if (r == kNvmlErrorNotSupported) {
      return UnimplementedError("GPU " + std::to_string(index) + " has no XID events");
    }
    return Check(r, Sym("DeviceRegisterEvents"));
  }

  StatusOr<std::optional<XidEvent>> WaitXid(int32_t timeout_ms) override {
    auto wait = lib_->Symbol<nvmlReturn_t(nvmlEventSet_t, nvmlEventData_t*, unsigned)>(
        Sym("EventSetWait_v2"));
    if (!wait.ok()) {
      return wait.status();
    }
    nvmlEventData_t data{};
    nvmlReturn_t r = (*wait)(events_, &data, static_cast<unsigned>(timeout_ms));
    if (r == kNvmlErrorTimeout) {
      return std::optional<XidEvent>();
    }
    if (r == kNvmlErrorGpuIsLost) {
      // A GPU fell off the bus; the wait does not say which one.
      XidEvent lost;
      lost.gpu_lost = true;
      return std::optional<XidEvent>(lost);
    }
    ACCELPOOL_RETURN_IF_ERROR(Check(r, Sym("EventSetWait_v2")));
    XidEvent e;
    e.xid = data.eventData;
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i] == data.device) {
        e.device = static_cast<int32_t>(i);
      }
    }
    return std::optional<XidEvent>(e);
  }

  StatusOr<int64_t> MemoryUsedMib(int32_t index) override {
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    constexpr unsigned long long kMib = 1024ULL * 1024ULL;  // NOLINT(runtime/int)
    auto v2 = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, abi::nvmlMemory_v2_t*)>(
        Sym("DeviceGetMemoryInfo_v2"));
    if (v2 != nullptr) {
      abi::nvmlMemory_v2_t m{};
      m.version = abi::kMemoryV2Version;
      if (v2(*h, &m) == kNvmlSuccess) {
        return static_cast<int64_t>(m.used / kMib);
      }
      // A library that has the symbol but not this struct version: the
      // first call below still answers.
    }
    auto mem = lib_->Symbol<nvmlReturn_t(nvmlDevice_t, nvmlMemory_t*)>(Sym("DeviceGetMemoryInfo"));
    if (!mem.ok()) {
      return mem.status();
    }
    nvmlMemory_t m{};
    ACCELPOOL_RETURN_IF_ERROR(Check((*mem)(*h, &m), Sym("DeviceGetMemoryInfo")));
    return static_cast<int64_t>(m.used / kMib);
  }

  StatusOr<NvmlFabric> FabricInfo(int32_t index) override {
    auto v2 = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, abi::nvmlGpuFabricInfo_v2_t*)>(
        Sym("DeviceGetGpuFabricInfoV"));
    auto v1 = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, abi::nvmlGpuFabricInfo_t*)>(
        Sym("DeviceGetGpuFabricInfo"));
    if (v2 == nullptr && v1 == nullptr) {
      return UnimplementedError(Sym("DeviceGetGpuFabricInfoV") + " is not in this library");
    }
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    unsigned char uuid[16] = {};
    nvmlReturn_t status = kNvmlSuccess;
    unsigned clique = 0;
    unsigned char state = abi::kFabricStateNotSupported;
    // Both struct versions carry the same fields under the same names.
    auto take = [&](const auto& f) {
      std::memcpy(uuid, f.clusterUuid, sizeof(uuid));
      status = f.status;
      clique = f.cliqueId;
      state = f.state;
    };
    nvmlReturn_t r = abi::kNvmlErrorNotSupported;
    if (v2 != nullptr) {
      abi::nvmlGpuFabricInfo_v2_t f{};
      f.version = abi::kGpuFabricInfoV2;
      r = v2(*h, &f);
      if (r == kNvmlSuccess) take(f);
    }
    // A library whose V call does not take struct v2 still has the first one.
    if (r != kNvmlSuccess && v1 != nullptr) {
      abi::nvmlGpuFabricInfo_t f{};
      r = v1(*h, &f);
      if (r == kNvmlSuccess) take(f);
    }
    NvmlFabric out;
    if (r == kNvmlErrorNotSupported) {
      return out;  // a GPU without fabric registration
    }
    ACCELPOOL_RETURN_IF_ERROR(Check(r, Sym("DeviceGetGpuFabricInfoV")));
    switch (state) {
      case abi::kFabricStateNotStarted:
        out.state = NvmlFabric::State::kNotStarted;
        break;
      case abi::kFabricStateInProgress:
        out.state = NvmlFabric::State::kInProgress;
        break;
      case abi::kFabricStateCompleted:
        out.state = NvmlFabric::State::kCompleted;
        break;
      default:
        out.state = NvmlFabric::State::kNotSupported;
        return out;
    }
    out.ok = status == kNvmlSuccess;
    if (!out.ok) {
      out.error = Check(status, "fabric registration").message();
    }
    out.clique = clique;
    if (std::any_of(std::begin(uuid), std::end(uuid), [](unsigned char b) { return b != 0; })) {
      static constexpr char kHex[] = "0123456789abcdef";
      for (size_t k = 0; k < sizeof(uuid); ++k) {
        if (k == 4 || k == 6 || k == 8 || k == 10) out.cluster_uuid += '-';
        out.cluster_uuid += kHex[uuid[k] >> 4];
        out.cluster_uuid += kHex[uuid[k] & 0xf];
      }
    }
    return out;
  }

  // Compute and graphics processes: a process in both lists (nvidia-smi's
  // type "C+G") is one process, with the larger figure of the two.
  StatusOr<std::vector<NvmlProcess>> RunningProcesses(int32_t index) override {
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    std::map<uint32_t, int64_t> by_pid;
    bool any = false;
    for (const char* kind : {"Compute", "Graphics"}) {
      StatusOr<bool> listed = ListProcesses(*h, kind, &by_pid);
      if (!listed.ok()) {
        return listed.status();
      }
      any = any || *listed;
    }
    if (!any) {
      return UnimplementedError("this management library has no process queries");
    }
    std::vector<NvmlProcess> out;
    for (const auto& [pid, mib] : by_pid) {
      out.push_back({pid, mib});
    }
    return out;
  }

  // Answers a query, and has no memory rows waiting for a GPU reset: after an
  // uncorrectable ECC error (XID 48, 63, 64, 95) an Ampere or newer GPU marks
  // rows for remapping, which only a reset applies, while it keeps answering.
  // Two NVML calls, not DeviceInfo's eight: discovery runs it on every GPU
  // right after reading DeviceInfo, and the health watch on every unhealthy
  // GPU each turn.
  Status Probe(int32_t index) override {
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    auto mem = lib_->Symbol<nvmlReturn_t(nvmlDevice_t, nvmlMemory_t*)>(Sym("DeviceGetMemoryInfo"));
    if (!mem.ok()) {
      return mem.status();
    }
    nvmlMemory_t m{};
    ACCELPOOL_RETURN_IF_ERROR(Check((*mem)(*h, &m), Sym("DeviceGetMemoryInfo")));
    auto remapped = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned*, unsigned*, unsigned*,
                                                      unsigned*)>(Sym("DeviceGetRemappedRows"));
    unsigned corrected = 0;
    unsigned uncorrected = 0;
    unsigned pending = 0;
    unsigned failed = 0;
    if (remapped != nullptr &&
        remapped(*h, &corrected, &uncorrected, &pending, &failed) == kNvmlSuccess &&
        (pending != 0 || failed != 0)) {
      return FailedPreconditionError(
          std::string(failed != 0 ? "row remapping failed" : "rows are pending remapping") +
          "; reset the GPU (" + smi_ + " -r) or replace it");
    }
    return Status::Ok();
  }

  StatusOr<bool> RetiredPagesPending(int32_t index) override {
    auto pending = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, abi::nvmlEnableState_t*)>(
        Sym("DeviceGetRetiredPagesPendingStatus"));
    if (pending == nullptr) {
      return UnimplementedError(Sym("DeviceGetRetiredPagesPendingStatus") + " is not exported");
    }
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    abi::nvmlEnableState_t state = 0;
    const nvmlReturn_t r = pending(*h, &state);
    if (r == abi::kNvmlErrorNotSupported) {
      return UnimplementedError("GPU " + std::to_string(index) + " has no page retirement");
    }
    ACCELPOOL_RETURN_IF_ERROR(Check(r, Sym("DeviceGetRetiredPagesPendingStatus")));
    return state == abi::kFeatureEnabled;
  }

  StatusOr<std::vector<NvmlMigInfo>> MigDevices(int32_t index) override {
    using Unsigned = nvmlReturn_t(nvmlDevice_t, unsigned*);
    auto max_count = lib_->OptionalSymbol<Unsigned>(Sym("DeviceGetMaxMigDeviceCount"));
    auto by_index = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned, nvmlDevice_t*)>(
        Sym("DeviceGetMigDeviceHandleByIndex"));
    auto uuid =
        lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, char*, unsigned)>(Sym("DeviceGetUUID"));
    auto attributes = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, nvmlDeviceAttributes_t*)>(
        Sym("DeviceGetAttributes_v2"));
    auto gi = lib_->OptionalSymbol<Unsigned>(Sym("DeviceGetGpuInstanceId"));
    auto ci = lib_->OptionalSymbol<Unsigned>(Sym("DeviceGetComputeInstanceId"));
    if (max_count == nullptr || by_index == nullptr || uuid == nullptr || attributes == nullptr ||
        gi == nullptr || ci == nullptr) {
      return UnimplementedError(Sym("DeviceGetMigDeviceHandleByIndex") +
                                " and the MIG queries are missing; a driver of R470 or newer "
                                "reports MIG instances");
    }
    StatusOr<nvmlDevice_t> h = Handle(index);
    if (!h.ok()) {
      return h.status();
    }
    unsigned slots = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check(max_count(*h, &slots), Sym("DeviceGetMaxMigDeviceCount")));
    const std::vector<GiProfile> profiles = GpuInstanceProfiles(*h);
    auto gi_by_id = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned, nvmlGpuInstance_t*)>(
        Sym("DeviceGetGpuInstanceById"));
    auto gi_info = lib_->OptionalSymbol<nvmlReturn_t(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*)>(
        Sym("GpuInstanceGetInfo"));
    std::vector<NvmlMigInfo> out;
    for (unsigned i = 0; i < slots && i < 64; ++i) {
      nvmlDevice_t m = nullptr;
      const nvmlReturn_t r = by_index(*h, i, &m);
      if (r == kNvmlErrorNotFound) {
        continue;  // no MIG device in this slot
      }
      ACCELPOOL_RETURN_IF_ERROR(Check(r, Sym("DeviceGetMigDeviceHandleByIndex")));
      NvmlMigInfo info;
      char buf[96] = {};
      ACCELPOOL_RETURN_IF_ERROR(Check(uuid(m, buf, sizeof(buf)), Sym("DeviceGetUUID")));
      buf[sizeof(buf) - 1] = '\0';
      info.uuid = FixedString(buf, sizeof(buf));  // NVML's docs promise a NUL; do not rely on it
      Padded<nvmlDeviceAttributes_t> a;
      ACCELPOOL_RETURN_IF_ERROR(Check(attributes(m, &a.value), Sym("DeviceGetAttributes_v2")));
      unsigned g = 0;
      unsigned c = 0;
      ACCELPOOL_RETURN_IF_ERROR(Check(gi(m, &g), Sym("DeviceGetGpuInstanceId")));
      ACCELPOOL_RETURN_IF_ERROR(Check(ci(m, &c), Sym("DeviceGetComputeInstanceId")));
      info.gpu_instance = static_cast<int32_t>(g);
      info.compute_instance = static_cast<int32_t>(c);
      info.gpu_slices = static_cast<int32_t>(a.value.gpuInstanceSliceCount);
      info.compute_slices = static_cast<int32_t>(a.value.computeInstanceSliceCount);
      info.memory_mib = static_cast<int64_t>(a.value.memorySizeMB);
      info.multiprocessors = static_cast<int32_t>(a.value.multiprocessorCount);
      // The profile of its GPU instance, by id (exact); else the one profile
      // whose slices, memory and media engines match (a plain profile and its
      // "+gfx" twin do not differ there: then no name, and the caller names
      // the plain profile).
      const GiProfile* profile = nullptr;
      nvmlGpuInstance_t instance = nullptr;
      Padded<nvmlGpuInstanceInfo_t> gi_data;
      if (gi_by_id != nullptr && gi_info != nullptr && !profiles.empty() &&
          gi_by_id(*h, g, &instance) == kNvmlSuccess &&
          gi_info(instance, &gi_data.value) == kNvmlSuccess) {
        for (const GiProfile& p : profiles) {
          if (p.info.id == gi_data.value.profileId) profile = &p;
        }
      }
      if (profile == nullptr) {
        int matches = 0;
        for (const GiProfile& p : profiles) {
          if (p.info.sliceCount == a.value.gpuInstanceSliceCount &&
              p.info.memorySizeMB == a.value.memorySizeMB &&
              p.info.decoderCount == a.value.sharedDecoderCount &&
              p.info.encoderCount == a.value.sharedEncoderCount &&
              p.info.jpegCount == a.value.sharedJpegCount &&
              p.info.ofaCount == a.value.sharedOfaCount) {
            profile = ++matches == 1 ? &p : nullptr;
          }
        }
      }
      if (profile != nullptr && profile->info.sliceCount == a.value.gpuInstanceSliceCount) {
        info.profile_name = profile->name;
      }
      out.push_back(std::move(info));
    }
    return out;
  }

 private:
  struct GiProfile {
    nvmlGpuInstanceProfileInfo_v2_t info;
    std::string name;  // without "MIG "
  };

  // The GPU instance profiles `parent` knows, with their names; empty when
  // the driver has no nvmlDeviceGetGpuInstanceProfileInfoV (before R470).
  std::vector<GiProfile> GpuInstanceProfiles(nvmlDevice_t parent) {
    auto info_v = lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned,
                                                    nvmlGpuInstanceProfileInfo_v2_t*)>(
        Sym("DeviceGetGpuInstanceProfileInfoV"));
    std::vector<GiProfile> out;
    for (unsigned i = 0; info_v != nullptr && i < abi::kMaxGpuInstanceProfiles; ++i) {
      Padded<nvmlGpuInstanceProfileInfo_v2_t> p;
      p.value.version = abi::kGpuInstanceProfileInfoV2;
      if (info_v(parent, i, &p.value) != kNvmlSuccess) {
        continue;  // not on this GPU, or past the driver's profile count
      }
      p.value.name[sizeof(p.value.name) - 1] = '\0';
      std::string name = p.value.name;
      if (name.rfind("MIG ", 0) == 0) name.erase(0, 4);
      out.push_back(GiProfile{p.value, std::move(name)});
    }
    return out;
  }

  // One of the running-process lists ("Compute" or "Graphics") into
  // `by_pid`, from the newest call the library has. false when it has none.
  StatusOr<bool> ListProcesses(nvmlDevice_t h, const char* kind,
                               std::map<uint32_t, int64_t>* by_pid) {
    const std::string base = std::string("DeviceGet") + kind + "RunningProcesses";
    for (const char* suffix : {"_v3", "_v2"}) {
      auto fn =
          lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned*, abi::nvmlProcessInfo_t*)>(
              Sym((base + suffix).c_str()));
      if (fn != nullptr) {
        ACCELPOOL_RETURN_IF_ERROR(FillProcesses(fn, h, Sym((base + suffix).c_str()), by_pid));
        return true;
      }
    }
    auto v1 =
        lib_->OptionalSymbol<nvmlReturn_t(nvmlDevice_t, unsigned*, abi::nvmlProcessInfo_v1_t*)>(
            Sym(base.c_str()));
    if (v1 == nullptr) {
      return false;
    }
    ACCELPOOL_RETURN_IF_ERROR(FillProcesses(v1, h, Sym(base.c_str()), by_pid));
    return true;
  }

  // Calls a process list with a buffer that grows while NVML answers
  // NVML_ERROR_INSUFFICIENT_SIZE (processes may start between two calls).
  template <typename Info>
  Status FillProcesses(nvmlReturn_t (*fn)(nvmlDevice_t, unsigned*, Info*), nvmlDevice_t h,
                       const std::string& call, std::map<uint32_t, int64_t>* by_pid) const {
    constexpr unsigned long long kMib = 1024ULL * 1024ULL;  // NOLINT(runtime/int)
    constexpr size_t kMaxProcesses = 4096;
    std::vector<Info> buf(8);
    for (int attempt = 0; attempt < 4; ++attempt) {
      unsigned n = static_cast<unsigned>(buf.size());
      const nvmlReturn_t r = fn(h, &n, buf.data());
      if (r == abi::kNvmlErrorInsufficientSize) {
        const size_t want = std::max<size_t>(static_cast<size_t>(n) + 16, buf.size() * 2);
        buf.resize(std::min(want, kMaxProcesses));
        continue;
      }
      ACCELPOOL_RETURN_IF_ERROR(Check(r, call));
      for (size_t k = 0; k < std::min<size_t>(n, buf.size()); ++k) {
        const Info& p = buf[k];
        if (p.pid == 0) continue;
        const int64_t mib = p.usedGpuMemory == abi::kValueNotAvailable
                                ? -1
                                : static_cast<int64_t>(p.usedGpuMemory / kMib);
        auto [it, fresh] = by_pid->emplace(p.pid, mib);
        if (!fresh) it->second = std::max(it->second, mib);
      }
      return Status::Ok();
    }
    return UnavailableError(call + ": the process list kept growing between calls (" +
                            std::to_string(buf.size()) + " entries); it is read again next time");
  }

  Status Check(nvmlReturn_t r, const std::string& call) const {
    if (r == kNvmlSuccess) {
      return Status::Ok();
    }
    // The library's text, trusted no further than the rest of its output:
    // a null pointer (an NVML-shaped library without text for this code) or
    // a text with no NUL must not take the process down.
    const char* said = error_string_ != nullptr ? error_string_(r) : nullptr;
    const std::string text =
        said != nullptr ? std::string(said, strnlen(said, kMaxErrorText)) : "error";
    return UnavailableError(call + " failed: " + text + " (code " + std::to_string(r) +
                            "); check the driver with " + smi_);
  }

  StatusOr<nvmlDevice_t> Handle(int32_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    if (index >= 0 && static_cast<size_t>(index) < handles_.size() &&
        handles_[static_cast<size_t>(index)] != nullptr) {
      return handles_[static_cast<size_t>(index)];
    }
    auto fn = lib_->Symbol<nvmlReturn_t(unsigned, nvmlDevice_t*)>(Sym("DeviceGetHandleByIndex_v2"));
    if (!fn.ok()) {
      return fn.status();
    }
    nvmlDevice_t h = nullptr;
    ACCELPOOL_RETURN_IF_ERROR(
        Check((*fn)(static_cast<unsigned>(index), &h), Sym("DeviceGetHandleByIndex_v2")));
    if (handles_.size() <= static_cast<size_t>(index)) {
      handles_.resize(static_cast<size_t>(index) + 1, nullptr);
    }
    handles_[static_cast<size_t>(index)] = h;
    return h;
  }

  std::string Sym(const char* name) const { return prefix_ + name; }

  std::unique_ptr<DlLibrary> lib_;
  const std::string prefix_;  // "nvml", or "hgml" for NVML-shaped libraries
  const std::string smi_;     // the vendor's CLI named in error messages
  const std::string sysfs_root_;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*event_set_free_)(nvmlEventSet_t) = nullptr;
  bool initialized_ = false;
  nvmlEventSet_t events_ = nullptr;

  std::mutex mu_;
  std::vector<nvmlDevice_t> handles_;  // guarded by mu_
};

}  // namespace

StatusOr<NvmlLibraryPtr> NewDlNvmlShaped(const std::vector<std::string>& libraries,
                                         const std::string& prefix, const std::string& smi,
                                         const std::string& sysfs_root) {
  StatusOr<std::unique_ptr<DlLibrary>> lib = DlLibrary::Open(libraries);
  if (!lib.ok()) {
    return lib.status();
  }
  return NvmlLibraryPtr(new DlNvml(std::move(lib).value(), prefix, smi, sysfs_root));
}

StatusOr<NvmlLibraryPtr> NewDlNvml(const std::vector<std::string>& candidates,
                                   const std::string& sysfs_root) {
  return NewDlNvmlShaped(
      candidates.empty() ? TraitsFor(core::Vendor::kNvidia).libraries : candidates, "nvml",
      "nvidia-smi", sysfs_root);
}

}  // namespace accelpool::vendors::nvidia
