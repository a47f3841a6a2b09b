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
//     either.
// Logic id = physical id = chip position; no super pod. Structs come from
// dcmi_abi.h, laid out as in the public dcmi_interface_api.h; every call
// checks its card and device ids the way DCMI does.
#include <cstring>

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
  unsigned bus[8];
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
     {0xc1, 0xc2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42}},
    {{1, 2, 3, 4},
     4,
     2,
     "310P3",
     8,
     0,
     24576,
     kOk,
     0xd500,
     {0x03, 0x04, 0x43, 0x44, 0x83, 0x84, 0xc3, 0xc4}},
    {{1, 2, 3, 4},
     4,
     2,
     "310P3",
     8,
     0,
     0,
     kNotSupport,
     0xd500,
     {0x03, 0x04, 0x43, 0x44, 0x83, 0x84, 0xc3, 0xc4}},
};

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

}  // namespace

ACCELPOOL_FAKE_CONTROL_EXPORT

extern "C" __attribute__((visibility("default"))) void accelpool_fake_dcmi_product(int p) {
  product = &kProducts[p >= 0 && p < 3 ? p : 0];
}

extern "C" {
__attribute__((visibility("default"))) int dcmi_init() { return State().init_error; }
__attribute__((visibility("default"))) int dcmi_get_card_num_list(int* n, int* list, int len) {
  if (n == nullptr || list == nullptr) return kInvalidParameter;
  const int cards = (State().count + product->chips_per_card - 1) / product->chips_per_card;
  *n = cards < product->card_count ? cards : product->card_count;
  for (int p = 0; p < *n && p < len; ++p) {
    list[p] = product->cards[p];
  }
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_num_in_card(int card, int* n) {
  if (ChipIndex(card, 0) < 0) return kInvalidDeviceId;
  *n = product->chips_per_card;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_logic_id(int* logic, int card,
                                                                    int device) {
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  *logic = i;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_phyid_from_logicid(unsigned logic,
                                                                              unsigned* phy) {
  if (static_cast<int>(logic) >= State().count) return kInvalidDeviceId;
  *phy = logic;
  return kOk;
}
__attribute__((visibility("default"))) int dcmi_get_device_chip_info(int card, int device,
                                                                     dcmi_chip_info* info) {
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
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  std::memset(pci, 0, sizeof(*pci));
  pci->venderid = 0x19e5;
  pci->subvenderid = 0x0200;
  pci->deviceid = product->pci_device_id;
  pci->subdeviceid = 0x0100;
  pci->domain = 0;
  pci->bdf_busid = product->bus[i % 8];
  return kOk;
}
// Not in a super pod: the query is not supported on this product.
__attribute__((visibility("default"))) int dcmi_get_spod_info(int card, int device, void* info) {
  return ChipIndex(card, device) < 0 ? kInvalidDeviceId : kNotSupport;
}
__attribute__((visibility("default"))) int dcmi_get_device_health(int card, int device,
                                                                  unsigned* health) {
  const int i = ChipIndex(card, device);
  if (i < 0) return kInvalidDeviceId;
  *health = i == State().fault_device ? 2 : 0;  // 2: major alarm
  return kOk;
}
}
