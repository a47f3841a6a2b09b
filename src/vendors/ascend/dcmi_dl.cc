// DcmiLibrary over libdcmi.so loaded with dlopen. The DCMI structs and
// functions used are declared here from the DCMI API reference; buffers are
// over-allocated so that a newer driver's larger struct cannot overrun them.
// The PCI bus (the chip's id) comes from dcmi_get_device_pcie_info_v2; a
// driver that exports it but fails it for a chip fails that chip's query,
// as any other per-chip error. Only a driver without it names its chips by
// physical id (NPU-phy<N>).
// The super-pod id is optional: DCMI publishes it only through the generic
// dcmi_get_device_info(card, device, DCMI_MAIN_CMD_CHIP_INF,
// DCMI_CHIP_INF_SUB_CMD_SPOD_INFO, ...) query, which chips outside a super pod
// (and older drivers) answer with an error.
//
// Every DCMI call is made under one lock: DCMI is not documented as safe to
// call from several threads at once, and discovery and the health poller
// run on different threads.
//
// Memory: HBM from dcmi_get_device_hbm_info. Chips without HBM (the 310P
// series carries LPDDR) answer that call with DCMI_ERR_CODE_NOT_SUPPORT, or
// with 0 MB; their memory then comes from dcmi_get_device_memory_info_v3.
//
// Processes: dcmi_get_device_resource_info lists the processes using a chip
// (host PIDs, at most 32) and the memory each holds, in bytes: what the chip's
// own OS keeps for the process and what it allocated. HBM in use
// (dcmi_hbm_info::memory_usage) is not used for foreign memory: it includes
// the memory the chip's firmware and OS reserve at boot, several GiB that no
// process holds.
#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <string>

#include "vendors/ascend/dcmi_abi.h"
#include "vendors/ascend/dcmi_library.h"
#include "vendors/dl_library.h"
#include "vendors/driver.h"
#include "vendors/library_util.h"

namespace accelpool::vendors::ascend {
namespace {

using abi::dcmi_chip_info;
using abi::dcmi_get_memory_info_stru;
using abi::dcmi_hbm_info;
using abi::dcmi_pcie_info_all;
using abi::dcmi_proc_mem_info;
using abi::dcmi_spod_info;
using abi::kDcmiChipInfSubCmdSpodInfo;
using abi::kDcmiMainCmdChipInf;
using abi::kDcmiMaxProcesses;
using abi::kDcmiNotSupport;

constexpr int kMaxChipsPerCard = 64;  // a count above this is garbage

std::string Text(const unsigned char* p, size_t n) {
  return std::string(reinterpret_cast<const char*>(p),
                     strnlen(reinterpret_cast<const char*>(p), n));
}

class DlDcmi : public DcmiLibrary {
 public:
  DlDcmi(std::unique_ptr<DlLibrary> lib, std::string sysfs_root)
      : lib_(std::move(lib)), sysfs_root_(std::move(sysfs_root)) {}

  Status Init() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto init = lib_->Symbol<int()>("dcmi_init");
    if (!init.ok()) {
      return init.status();
    }
    return Check((*init)(), "dcmi_init");
  }

  StatusOr<std::vector<DcmiChipId>> Chips() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto cards = lib_->Symbol<int(int*, int*, int)>("dcmi_get_card_num_list");
    auto per_card = lib_->Symbol<int(int, int*)>("dcmi_get_device_num_in_card");
    if (!cards.ok()) {
      return cards.status();
    }
    if (!per_card.ok()) {
      return per_card.status();
    }
    int n = 0;
    int list[64] = {};
    ACCELPOOL_RETURN_IF_ERROR(Check((*cards)(&n, list, 64), "dcmi_get_card_num_list"));
    // A count past the list it filled, or below zero, is not a node's cards:
    // answering with fewer (or no) NPUs would withdraw them from service as
    // if they had gone.
    if (n < 0 || n > 64) {
      return InternalError("dcmi_get_card_num_list reported " + std::to_string(n) +
                           " cards; check the NPU driver with npu-smi info");
    }
    std::vector<DcmiChipId> out;
    for (int i = 0; i < n; ++i) {
      int devices = 0;
      ACCELPOOL_RETURN_IF_ERROR(
          Check((*per_card)(list[i], &devices), "dcmi_get_device_num_in_card"));
      // A card carries a few chips (two on a 300I Duo); a garbage count would
      // make millions of chip ids, each queried in turn, and a negative one
      // would drop the card's chips.
      if (devices < 0 || devices > kMaxChipsPerCard) {
        return InternalError("dcmi_get_device_num_in_card reported " + std::to_string(devices) +
                             " chips on card " + std::to_string(list[i]) +
                             "; check the NPU driver with npu-smi info");
      }
      for (int d = 0; d < devices; ++d) {
        out.push_back({list[i], d});
      }
    }
    return out;
  }

  StatusOr<DcmiDeviceInfo> Info(const DcmiChipId& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    DcmiDeviceInfo info;
    auto logic = lib_->Symbol<int(int*, int, int)>("dcmi_get_device_logic_id");
    auto phy = lib_->Symbol<int(unsigned, unsigned*)>("dcmi_get_device_phyid_from_logicid");
    auto chip = lib_->Symbol<int(int, int, dcmi_chip_info*)>("dcmi_get_device_chip_info");
    for (const Status& st : {logic.status(), phy.status(), chip.status()}) {
      ACCELPOOL_RETURN_IF_ERROR(st);
    }
    int logic_id = -1;
    ACCELPOOL_RETURN_IF_ERROR(
        Check((*logic)(&logic_id, c.card, c.device), "dcmi_get_device_logic_id"));
    unsigned phy_id = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check((*phy)(static_cast<unsigned>(logic_id), &phy_id),
                                    "dcmi_get_device_phyid_from_logicid"));
    info.logic_id = logic_id;
    info.phy_id = static_cast<int32_t>(phy_id);
    Padded<dcmi_chip_info> ci;
    ACCELPOOL_RETURN_IF_ERROR(
        Check((*chip)(c.card, c.device, &ci.value), "dcmi_get_device_chip_info"));
    info.chip_name = Text(ci.value.chip_name, sizeof(ci.value.chip_name));
    info.aicore = static_cast<int32_t>(ci.value.aicore_cnt);
    StatusOr<int64_t> memory = MemoryMib(c);
    if (!memory.ok()) {
      return memory.status();
    }
    info.memory_mib = *memory;
    auto pcie =
        lib_->OptionalSymbol<int(int, int, dcmi_pcie_info_all*)>("dcmi_get_device_pcie_info_v2");
    Padded<dcmi_pcie_info_all> pi;
    // The bus is the chip's id: a driver that has the query but fails it for
    // this chip has not told us the id, and "NPU-phy<N>" in its place would
    // rename a served chip. Only a driver without the query, or one that
    // answers "not supported" (a lasting answer, as npu-smi takes it), gets
    // that id.
    const int pcie_rc = pcie != nullptr ? pcie(c.card, c.device, &pi.value) : kDcmiNotSupport;
    if (pcie_rc != kDcmiNotSupport) {
      ACCELPOOL_RETURN_IF_ERROR(Check(pcie_rc, "dcmi_get_device_pcie_info_v2"));
      char bus[32];
      snprintf(bus, sizeof(bus), "%04x:%02x:%02x.%x", static_cast<unsigned>(pi.value.domain),
               pi.value.bdf_busid, pi.value.bdf_deviceid, pi.value.bdf_funcid);
      info.pci_bus = bus;
      info.numa = PciNumaNode(info.pci_bus, sysfs_root_);
    }
    auto device_info = lib_->OptionalSymbol<int(int, int, int, unsigned, void*, unsigned*)>(
        "dcmi_get_device_info");
    Padded<dcmi_spod_info> si;
    unsigned size = sizeof(si.value);
    if (device_info != nullptr &&
        device_info(c.card, c.device, kDcmiMainCmdChipInf, kDcmiChipInfSubCmdSpodInfo, &si.value,
                    &size) == 0 &&
        si.value.super_pod_size != 0) {
      info.super_pod_id = std::to_string(si.value.super_pod_id);
    }
    return info;
  }

  StatusOr<std::vector<ProcessMemory>> Processes(const DcmiChipId& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto fn = lib_->OptionalSymbol<int(int, int, dcmi_proc_mem_info*, int*)>(
        "dcmi_get_device_resource_info");
    if (fn == nullptr) {
      return UnimplementedError(lib_->path() +
                                ": dcmi_get_device_resource_info is not exported, so the "
                                "processes on each NPU cannot be listed; update the NPU driver");
    }
    // Twice the documented most, so that a driver listing more cannot overrun.
    std::array<dcmi_proc_mem_info, 2 * kDcmiMaxProcesses> list{};
    int n = 0;
    const int r = fn(c.card, c.device, list.data(), &n);
    if (r == kDcmiNotSupport) {
      return UnimplementedError(
          "dcmi_get_device_resource_info is not supported on this NPU (DCMI code -8255), so its "
          "processes cannot be listed; npu-smi info -t proc-mem lists them on the node");
    }
    ACCELPOOL_RETURN_IF_ERROR(Check(r, "dcmi_get_device_resource_info"));
    if (n < 0 || n > static_cast<int>(list.size())) {
      return InternalError("dcmi_get_device_resource_info reports " + std::to_string(n) +
                           " processes on one NPU (at most " + std::to_string(kDcmiMaxProcesses) +
                           " are documented); check the NPU driver with npu-smi info");
    }
    constexpr unsigned long kMib = 1024UL * 1024UL;  // NOLINT(runtime/int)
    std::vector<ProcessMemory> out;
    for (int i = 0; i < n; ++i) {
      if (list[static_cast<size_t>(i)].proc_id <= 0) continue;  // not a process
      out.push_back({list[static_cast<size_t>(i)].proc_id,
                     static_cast<int64_t>(list[static_cast<size_t>(i)].proc_mem_usage / kMib)});
    }
    return out;
  }

  StatusOr<uint32_t> Health(const DcmiChipId& c) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto fn = lib_->Symbol<int(int, int, unsigned*)>("dcmi_get_device_health");
    if (!fn.ok()) {
      return fn.status();
    }
    unsigned h = 0;
    ACCELPOOL_RETURN_IF_ERROR(Check((*fn)(c.card, c.device, &h), "dcmi_get_device_health"));
    return static_cast<uint32_t>(h);
  }

 private:
  // HBM, else (not supported, or 0 MB) the memory-info call; see the top.
  StatusOr<int64_t> MemoryMib(const DcmiChipId& c) {
    auto hbm = lib_->OptionalSymbol<int(int, int, dcmi_hbm_info*)>("dcmi_get_device_hbm_info");
    auto mem = lib_->OptionalSymbol<int(int, int, dcmi_get_memory_info_stru*)>(
        "dcmi_get_device_memory_info_v3");
    std::string hbm_said = "is not exported";
    if (hbm != nullptr) {
      Padded<dcmi_hbm_info> hi;
      const int r = hbm(c.card, c.device, &hi.value);
      if (r == 0 && hi.value.memory_size > 0) {
        return static_cast<int64_t>(hi.value.memory_size);
      }
      if (r != 0 && r != kDcmiNotSupport) {
        return Check(r, "dcmi_get_device_hbm_info");
      }
      hbm_said = r == 0 ? "reports 0 MB" : "is not supported";
    }
    if (mem == nullptr) {
      return UnimplementedError(lib_->path() + ": dcmi_get_device_hbm_info " + hbm_said +
                                " and dcmi_get_device_memory_info_v3 is not exported; update "
                                "the NPU driver to a version that has it");
    }
    Padded<dcmi_get_memory_info_stru> mi;
    const int r = mem(c.card, c.device, &mi.value);
    if (r == kDcmiNotSupport) {
      return UnimplementedError("neither dcmi_get_device_hbm_info (" + hbm_said +
                                ") nor dcmi_get_device_memory_info_v3 (not supported) reports "
                                "this NPU's memory; check the NPU driver with npu-smi info");
    }
    ACCELPOOL_RETURN_IF_ERROR(Check(r, "dcmi_get_device_memory_info_v3"));
    if (mi.value.memory_size == 0) {
      return InternalError(
          "dcmi_get_device_hbm_info " + hbm_said +
          " and dcmi_get_device_memory_info_v3 reports 0 MB; check the NPU driver with npu-smi "
          "info");
    }
    return static_cast<int64_t>(mi.value.memory_size);
  }

  static Status Check(int r, const char* call) {
    if (r == 0) {
      return Status::Ok();
    }
    return UnavailableError(std::string(call) + " failed with DCMI code " + std::to_string(r) +
                            "; check the NPU driver with npu-smi info");
  }

  std::unique_ptr<DlLibrary> lib_;
  const std::string sysfs_root_;
  std::mutex mu_;  // held for every DCMI call
};

}  // namespace

StatusOr<DcmiLibraryPtr> NewDlDcmi(const std::vector<std::string>& candidates,
                                   const std::string& sysfs_root) {
  return OpenBinding<DlDcmi, DcmiLibraryPtr>(core::Vendor::kAscend, candidates, sysfs_root);
}

}  // namespace accelpool::vendors::ascend
