// A stand-in for Huawei's libdcmi.so, as one of two products (chosen with
// accelpool_fake_dcmi_product):
//  0  an Atlas 800T A2 as npu-smi info shows it: 8 x 910B3 (20 AI cores,
//     65536 MB HBM, "Memory-Usage 0 / 0" since the chip has no separate
//     DDR), one chip per NPU id 0-7, bus ids C1, C2, 81, 82, 01, 02, 41, 42;
//  1  four Atlas 300I Duo cards (NPU ids 1-4, two 310P3 chips each, 8 AI
//     cores and 24 GB LPDDR4X per chip, the 48 GB card): no HBM, so the HBM
//     query answers DCMI_ERR_CODE_NOT_SUPPORT and the memory-info query
//     carries the DDR; bus ids illustrative;
//  2  the 300I Duo on a driver whose memory-info query is not supported
//     either;
//  3  an Atlas 900 A3 SuperPoD node: 8 NPU ids, two 910C dies each ("910_9392",
//     64 GB HBM per die), in super pod 7 of 48 nodes;
//  4  two Atlas 300I inference cards (NPU ids 2 and 5, four 310 chips each,
//     2 AI cores and 8 GB LPDDR4X per chip, no HBM); bus ids illustrative;
//  5  Atlas 300I Pro cards (NPU ids 0-7, one 310P3 chip each, 8 AI cores and
//     24 GB LPDDR4X, no HBM); bus ids illustrative.
// The configured chip count (accelpool_fake_configure) decides how many of a
// product's cards are present: 4 chips of product 1 are two Duo cards.
// Logic id = physical id = chip position. Super-pod membership answers the
// generic dcmi_get_device_info(DCMI_MAIN_CMD_CHIP_INF, SPOD_INFO) query, as in
// DCMI (there is no dcmi_get_spod_info); products 0-2 are in no super pod
// and answer it "not supported". Structs come from dcmi_abi.h, laid out as in
// the public dcmi_interface_api.h; every call checks its card and device ids
// the way DCMI does.
//
// Processes: dcmi_get_device_resource_info lists those added with
// accelpool_fake_dcmi_process(chip, pid, mib) (chip -1 clears them), or given
// in the environment as ACCELPOOL_FAKE_DCMI_PROCESSES="chip:pid:mib,..." for
// a fake loaded into another process; memory in bytes, as DCMI reports it.
// accelpool_fake_dcmi_resource_mode: 0 as documented, 1 "not supported",
// 2 a process count beyond the documented 32.
//
// accelpool_fake_dcmi_pcie_fails(chip): dcmi_get_device_pcie_info_v2 answers
// that chip (logic id) with an inner error, every other query answering it
// (-1: none fails; -2: every chip is answered "not supported", as drivers
// without the query do).
//
// DCMI is called from one thread at a time by its users; every entry point
// here notes when it is entered while another call is still inside the
// library (accelpool_fake_dcmi_overlaps), so tests can check that a binding
// serialises its calls.
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "fake_control.h"
#include "vendors/ascend/dcmi_abi.h"

using accelpool_fake::CopyString;
using accelpool_fake::Fails;
using accelpool_fake::State;

namespace {

namespace abi = accelpool::vendors::ascend::abi;
using abi::dcmi_chip_info;
using abi::dcmi_get_memory_info_stru;
using abi::dcmi_hbm_info;
using abi::dcmi_pcie_info_all;
using abi::dcmi_proc_mem_info;
using abi::dcmi_spod_info;
constexpr int kOk = abi::kDcmiOk;
constexpr int kInvalidParameter = abi::kDcmiInvalidParameter;
constexpr int kInnerError = abi::kDcmiInnerError;
constexpr int kInvalidDeviceId = abi::kDcmiInvalidDeviceId;
constexpr int kNotSupport = abi::kDcmiNotSupport;

// One product: its cards, chips per card and per-chip values.
struct Product {
  int cards[8];
  int card_count;
  int chips_per_card;
  const char* chip_name;
  unsigned aicore;
  unsigned long long hbm_mb;  // NOLINT(runtime/int) 0: HBM query not supported
  unsigned long long ddr_mb;  // NOLINT(runtime/int)
  int ddr_result;             // what the memory-info query returns
  unsigned pci_device_id;
  unsigned bus[16];
  unsigned super_pod_size;  // 0: not in a super pod
  unsigned super_pod_id;
};

const Product kProducts[] = {
    {{0, 1, 2, 3, 4, 5, 6, 7},
     8,
     1,
     "910B3",
     20,
     65536,
     0,
     kOk,
     0xd802,
     {0xc1, 0xc2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42},
     0,
     0},
    {{1, 2, 3, 4},
     4,
     2,
     "310P3",
     8,
     0,
     24576,
     kOk,
     0xd500,
     {0x03, 0x04, 0x43, 0x44, 0x83, 0x84, 0xc3, 0xc4},
     0,
     0},
    {{1, 2, 3, 4},
     4,
     2,
     "310P3",
     8,
     0,
     0,
     kNotSupport,
     0xd500,
     {0x03, 0x04, 0x43, 0x44, 0x83, 0x84, 0xc3, 0xc4},
     0,
     0},
    {{0, 1, 2, 3, 4, 5, 6, 7},
     8,
     2,
     "910_9392",
     24,
     65536,
     0,
     kOk,
     0xd803,
     {0x9d, 0x9f, 0x99, 0x9b, 0xb9, 0xbb, 0xb5, 0xb7, 0x1d, 0x1f, 0x19, 0x1b, 0x39, 0x3b, 0x35,
      0x37},
     48,
     7},
    {{2, 5},
     2,
     4,
     "310",
     2,
     0,
     8192,
     kOk,
     0xd100,
     {0x03, 0x04, 0x05, 0x06, 0x83, 0x84, 0x85, 0x86},
     0,
     0},
    {{0, 1, 2, 3, 4, 5, 6, 7},
     8,
     1,
     "310P3",
     8,
     0,
     24576,
     kOk,
     0xd500,
     {0x03, 0x04, 0x43, 0x44, 0x83, 0x84, 0xc3, 0xc4},
     0,
     0},
};
constexpr int kProductCount = sizeof(kProducts) / sizeof(kProducts[0]);

const Product* product = &kProducts[0];

// The chip index (0..7, logic and physical id) of (card, device), or -1.
int ChipIndex(int card, int device) {
  if (device < 0 || device >= product->chips_per_card) return -1;
  for (int p = 0; p < product->card_count; ++p) {
    if (product->cards[p] == card) {
      const int i = p * product->chips_per_card + device;
      return i < State().count ? i : -1;
    }
  }
  return -1;
}

void Text(unsigned char* dst, const char* src) {
  CopyString(reinterpret_cast<char*>(dst), 32, src);
}

accelpool_fake::ProcessTable& Processes() {
  static accelpool_fake::ProcessTable table("ACCELPOOL_FAKE_DCMI_PROCESSES");
  return table;
}
int resource_mode = 0;
std::atomic<int> pcie_fails{-1};

std::atomic<int> inside{0};
std::atomic<int> overlaps{0};

// Marks one call as inside the library for its duration (plus a short stay,
// so that two unserialised callers meet).
class InCall {
 public:
  InCall() {
    if (inside.fetch_add(1) > 0) {
      overlaps.fetch_add(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ~InCall() { inside.fetch_sub(1); }
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;
};

}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

extern "C" __attribute__((visibility("default"))) void accelpool_fake_dcmi_process(int chip,
                                                                                   int pid,
                                                                                   int mib) {
  Processes().Add(chip, static_cast<unsigned>(pid), mib);
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_dcmi_resource_mode(int m) {
  resource_mode = m;
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_dcmi_pcie_fails(int chip) {
  pcie_fails = chip;
}

// What dcmi_get_device_num_in_card answers for every card, and what
// dcmi_get_card_num_list answers as the count, for a driver that reports
// garbage (kAsTheProduct: the product's own figures).
constexpr int kAsTheProduct = INT_MIN;
int chips_in_card = kAsTheProduct;
int cards_listed = kAsTheProduct;
extern "C" __attribute__((visibility("default"))) void accelpool_fake_dcmi_chips_in_card(int n) {
  chips_in_card = n;
}
extern "C" __attribute__((visibility("default"))) void accelpool_fake_dcmi_cards_listed(int n) {
  cards_listed = n;
}

extern "C" __attribute__((visibility("default"))) void accelpool_fake_dcmi_product(int p) {
  product = &kProducts[p >= 0 && p < kProductCount ? p : 0];
}

// How many calls were entered while another was inside the library, since
// the last time this was asked.
extern "C" __attribute__((visibility("default"))) int accelpool_fake_dcmi_overlaps() {
  return overlaps.exchange(0);
}

extern "C" {
__attribute__((visibility("default"))) int dcmi_init() {
  InCall in_call;
  return State().init_error;
}
__attribute__((visibility("default"))) int dcmi_get_card_num_list(int* n, int* list, int len) {
  InCall in_call;
  if (n == nullptr || list == nullptr) return kInvalidParameter;
  const int cards = (State().count + product->chips_per_card - 1) / product->chips_per_card;
  *n = cards < product->card_count ? cards : product->card_count;
  for (int p = 0; p < *n && p < len; ++p) {
    list[p] = product->cards[p];
  }
  if (cards_listed != kAsTheProduct) *n = cards_listed;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_num_in_card(int card, int* n) {
  InCall in_call;
  if (ChipIndex(card, 0) < 0) return kInvalidDeviceId;
  *n = chips_in_card != kAsTheProduct ? chips_in_card : product->chips_per_card;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_logic_id(int* logic, int card,
                                                                    int device) {
  InCall in_call;
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  *logic = i;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_phyid_from_logicid(unsigned logic,
                                                                              unsigned* phy) {
  InCall in_call;
  if (static_cast<int>(logic) >= State().count) return kInvalidDeviceId;
  *phy = logic;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_chip_info(int card, int device,
                                                                     dcmi_chip_info* info) {
  InCall in_call;
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  std::memset(info, 0, sizeof(*info));
  Text(info->chip_type, "Ascend");
  Text(info->chip_name, product->chip_name);
  Text(info->chip_ver, "V1");
  info->aicore_cnt = product->aicore;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_hbm_info(int card, int device,
                                                                    dcmi_hbm_info* hbm) {
  InCall in_call;
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  if (Fails(static_cast<unsigned>(i))) return kInnerError;
  if (product->hbm_mb == 0) return kNotSupport;
  std::memset(hbm, 0, sizeof(*hbm));
  hbm->memory_size = product->hbm_mb;
  hbm->freq = 1600;
  hbm->memory_usage = 3378;
  hbm->temp = 38;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_memory_info_v3(
    int card, int device, dcmi_get_memory_info_stru* mem) {
  InCall in_call;
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  if (Fails(static_cast<unsigned>(i))) return kInnerError;
  if (product->ddr_result != kOk) return product->ddr_result;
  std::memset(mem, 0, sizeof(*mem));
  mem->memory_size = product->ddr_mb;
  mem->memory_available = product->ddr_mb;
  mem->hugepagesize = 2048;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_pcie_info_v2(int card, int device,
                                                                        dcmi_pcie_info_all* pci) {
  InCall in_call;
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  if (i == pcie_fails) return kInnerError;
  if (pcie_fails == -2) return kNotSupport;
  std::memset(pci, 0, sizeof(*pci));
  pci->venderid = 0x19e5;
  pci->subvenderid = 0x0200;
  pci->deviceid = product->pci_device_id;
  pci->subdeviceid = 0x0100;
  pci->domain = 0;
  pci->bdf_busid = product->bus[i % 16];
  return kOk;
}
// The generic query; only the super-pod info (DCMI_MAIN_CMD_CHIP_INF,
// DCMI_CHIP_INF_SUB_CMD_SPOD_INFO) is answered, on a super-pod product.
__attribute__((visibility("default"))) int dcmi_get_device_info(int card, int device, int main_cmd,
                                                                unsigned sub_cmd, void* buf,
                                                                unsigned* size) {
  InCall in_call;
  if (ChipIndex(card, device) < 0) return kInvalidDeviceId;
  if (buf == nullptr || size == nullptr) return kInvalidParameter;
  if (main_cmd != abi::kDcmiMainCmdChipInf || sub_cmd != abi::kDcmiChipInfSubCmdSpodInfo ||
      product->super_pod_size == 0) {
    return kNotSupport;
  }
  if (*size < sizeof(dcmi_spod_info)) return kInvalidParameter;
  dcmi_spod_info info;
  std::memset(&info, 0, sizeof(info));
  info.sdid = 0x1000u + static_cast<unsigned>(ChipIndex(card, device));
  info.super_pod_size = product->super_pod_size;
  info.super_pod_id = product->super_pod_id;
  info.server_index = 5;
  std::memcpy(buf, &info, sizeof(info));
  *size = sizeof(info);
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_resource_info(int card, int device,
                                                                         dcmi_proc_mem_info* info,
                                                                         int* num) {
  InCall in_call;
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  if (info == nullptr || num == nullptr) return kInvalidParameter;
  if (Fails(static_cast<unsigned>(i))) return kInnerError;
  if (resource_mode == 1) return kNotSupport;
  int n = 0;
  for (const accelpool_fake::FakeProcess& p : Processes()) {
    if (p.device != i || n >= abi::kDcmiMaxProcesses) continue;
    info[n].proc_id = static_cast<int>(p.pid);
    info[n].proc_mem_usage = static_cast<unsigned long>(p.mib) << 20;  // NOLINT
    ++n;
  }
  *num = resource_mode == 2 ? 1000 : n;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_health(int card, int device,
                                                                  unsigned* health) {
  InCall in_call;
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  *health = i == State().fault_device ? 2 : 0;  // 2: major alarm
  return kOk;
}
}
