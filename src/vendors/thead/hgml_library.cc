#include "vendors/thead/hgml_library.h"

#include <mutex>
#include <utility>

namespace accelpool::vendors::thead {
namespace {

// HGML's thread safety is not published (NVML's is): every call is made
// under one lock, so discovery and the health poller never overlap in it.
class Hgml : public DeviceLibrary {
 public:
  explicit Hgml(nvidia::NvmlLibraryPtr lib) : lib_(std::move(lib)) {}

  std::string_view LibraryName() const override { return "HGML"; }
  Status Init() override {
    std::lock_guard<std::mutex> lock(mu_);
    return lib_->Init();
  }
  StatusOr<int32_t> Count() override {
    std::lock_guard<std::mutex> lock(mu_);
    return lib_->DeviceCount();
  }
  StatusOr<LibraryDevice> Device(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<nvidia::NvmlDeviceInfo> info = lib_->DeviceInfo(index);
    if (!info.ok()) {
      return info.status();
    }
    LibraryDevice d;
    d.uuid = info->uuid;
    d.name = info->name;
    d.memory_mib = info->memory_mib;
    d.pci_bus = info->pci_bus;
    d.numa = info->numa;
    d.minor = info->minor;
    return d;
  }
  StatusOr<LinkKind> Link(int32_t, int32_t) override {
    return UnimplementedError("PPUs are all joined by ICN; the profile's levels apply");
  }
  StatusOr<bool> Healthy(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    Status st = lib_->Probe(index);
    if (!st.ok()) {
      return st;
    }
    return true;
  }
  // As NVML: hgmlDeviceGetMemoryInfo_v2's used, else the first call's.
  StatusOr<int64_t> MemoryUsedMib(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    return lib_->MemoryUsedMib(index);
  }
  // As NVML: hgmlDevice{Compute,Graphics}RunningProcesses (_v3, _v2, first).
  StatusOr<std::vector<ProcessMemory>> Processes(int32_t index) override {
    std::lock_guard<std::mutex> lock(mu_);
    StatusOr<std::vector<nvidia::NvmlProcess>> procs = lib_->RunningProcesses(index);
    if (!procs.ok()) return procs.status();
    std::vector<ProcessMemory> out;
    for (const nvidia::NvmlProcess& p : *procs) {
      out.push_back({static_cast<int64_t>(p.pid), p.used_mib});
    }
    return out;
  }

 private:
  nvidia::NvmlLibraryPtr lib_;
  std::mutex mu_;  // held for every HGML call
};

}  // namespace

DeviceLibraryPtr HgmlDeviceLibrary(nvidia::NvmlLibraryPtr hgml) {
  return DeviceLibraryPtr(new Hgml(std::move(hgml)));
}

StatusOr<DeviceLibraryPtr> NewHgmlLibrary() {
  StatusOr<nvidia::NvmlLibraryPtr> lib =
      nvidia::NewDlNvmlShaped({"libhgml.so", "libhgml.so.1"}, "hgml", "ppu-smi");
  if (!lib.ok()) {
    return lib.status();
  }
  return HgmlDeviceLibrary(std::move(lib).value());
}

}  // namespace accelpool::vendors::thead
