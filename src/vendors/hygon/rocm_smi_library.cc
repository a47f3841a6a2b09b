// ROCm SMI functions used, declared from its public API reference:
// rsmi_init, rsmi_num_monitor_devices, rsmi_dev_name_get,
// rsmi_dev_unique_id_get, rsmi_dev_memory_total_get (VRAM = 0),
// rsmi_dev_pci_id_get, rsmi_topo_get_numa_node_number,
// rsmi_dev_drm_render_minor_get, rsmi_topo_get_link_type (1 PCIe, 2 XGMI),
// rsmi_dev_busy_percent_get (as the "answers" probe).
#include "vendors/hygon/rocm_smi_library.h"

#include <cinttypes>
#include <cstdio>

#include "vendors/dl_library.h"

namespace accelpool::vendors::hygon {
namespace {

using rsmi_status_t = int;

class RocmSmi : public DeviceLibrary {
 public:
  explicit RocmSmi(std::unique_ptr<DlLibrary> lib) : lib_(std::move(lib)) {}

  std::string_view LibraryName() const override { return "ROCm SMI"; }

  Status Init() override {
    auto init = lib_->Symbol<rsmi_status_t(uint64_t)>("rsmi_init");
    if (!init.ok()) {
      return init.status();
    }
    return Check((*init)(0), "rsmi_init");
  }

  StatusOr<int32_t> Count() override {
    auto fn = lib_->Symbol<rsmi_status_t(uint32_t*)>("rsmi_num_monitor_devices");
    if (!fn.ok()) {
      return fn.status();
    }
    uint32_t n = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check((*fn)(&n), "rsmi_num_monitor_devices"));
    return static_cast<int32_t>(n);
  }

  StatusOr<LibraryDevice> Device(int32_t index) override {
    const auto i = static_cast<uint32_t>(index);
    LibraryDevice d;
    auto name = lib_->OptionalSymbol<rsmi_status_t(uint32_t, char*, size_t)>("rsmi_dev_name_get");
    char buf[128] = {};
    if (name != nullptr && name(i, buf, sizeof(buf)) == 0) {
      d.name = buf;
    }
    auto uid = lib_->OptionalSymbol<rsmi_status_t(uint32_t, uint64_t*)>("rsmi_dev_unique_id_get");
    uint64_t id = 0;
    if (uid != nullptr && uid(i, &id) == 0 && id != 0) {
      char s[32];
      snprintf(s, sizeof(s), "DCU-%016" PRIx64, id);
      d.uuid = s;
    }
    auto mem = lib_->Symbol<rsmi_status_t(uint32_t, int, uint64_t*)>("rsmi_dev_memory_total_get");
    if (!mem.ok()) {
      return mem.status();
    }
    uint64_t bytes = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check((*mem)(i, 0, &bytes), "rsmi_dev_memory_total_get"));
    d.memory_mib = static_cast<int64_t>(bytes >> 20);
    auto pci = lib_->Symbol<rsmi_status_t(uint32_t, uint64_t*)>("rsmi_dev_pci_id_get");
    if (!pci.ok()) {
      return pci.status();
    }
    uint64_t bdf = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check((*pci)(i, &bdf), "rsmi_dev_pci_id_get"));
    d.pci_bus = BdfFromId(bdf);
    auto numa =
        lib_->OptionalSymbol<rsmi_status_t(uint32_t, uint32_t*)>("rsmi_topo_get_numa_node_number");
    uint32_t node = 0;
    if (numa != nullptr && numa(i, &node) == 0) {
      d.numa = static_cast<int32_t>(node);
    }
    auto minor =
        lib_->OptionalSymbol<rsmi_status_t(uint32_t, uint32_t*)>("rsmi_dev_drm_render_minor_get");
    uint32_t render = 0;
    if (minor != nullptr && minor(i, &render) == 0 && render >= 128) {
      d.minor = static_cast<int32_t>(render - 128);  // /dev/dri/card<N> pairs renderD<128+N>
    }
    return d;
  }

  StatusOr<LinkKind> Link(int32_t a, int32_t b) override {
    auto fn = lib_->OptionalSymbol<rsmi_status_t(uint32_t, uint32_t, uint64_t*, int*)>(
        "rsmi_topo_get_link_type");
    if (fn == nullptr) {
      return UnimplementedError("rsmi_topo_get_link_type is not exported");
    }
    uint64_t hops = 0;
    int type = 0;
    ACCELPOOL_RETURN_IF_ERROR(
        Check(fn(static_cast<uint32_t>(a), static_cast<uint32_t>(b), &hops, &type),
              "rsmi_topo_get_link_type"));
    if (type == 2) {
      return LinkKind::kVendorLink;
    }
    if (type == 1) {
      return hops <= 2 ? LinkKind::kPcieSwitch : LinkKind::kPcieHostBridge;
    }
    return LinkKind::kUnknown;
  }

  StatusOr<bool> Healthy(int32_t index) override {
    auto fn = lib_->Symbol<rsmi_status_t(uint32_t, uint32_t*)>("rsmi_dev_busy_percent_get");
    if (!fn.ok()) {
      return fn.status();
    }
    uint32_t busy = 0;
    ACCELPOOL_RETURN_IF_ERROR(
        Check((*fn)(static_cast<uint32_t>(index), &busy), "rsmi_dev_busy_percent_get"));
    return true;
  }

 private:
  static Status Check(rsmi_status_t r, const char* call) {
    if (r == 0) {
      return Status::Ok();
    }
    return UnavailableError(std::string(call) + " failed with ROCm SMI status " +
                            std::to_string(r) + "; check the DCU driver with hy-smi");
  }

  std::unique_ptr<DlLibrary> lib_;
};

}  // namespace

std::string BdfFromId(uint64_t bdfid) {
  char s[32];
  snprintf(s, sizeof(s), "%04x:%02x:%02x.%x", static_cast<unsigned>((bdfid >> 32) & 0xffff),
           static_cast<unsigned>((bdfid >> 8) & 0xff), static_cast<unsigned>((bdfid >> 3) & 0x1f),
           static_cast<unsigned>(bdfid & 0x7));
  return s;
}

StatusOr<DeviceLibraryPtr> NewRocmSmiLibrary() {
  StatusOr<std::unique_ptr<DlLibrary>> lib = DlLibrary::Open(
      {"librocm_smi64.so", "librocm_smi64.so.1", "/opt/hyhal/lib/librocm_smi64.so"});
  if (!lib.ok()) {
    return lib.status();
  }
  return DeviceLibraryPtr(new RocmSmi(std::move(lib).value()));
}

}  // namespace accelpool::vendors::hygon
