// The DCMI types and codes accelpool uses, laid out as in Huawei's public
// dcmi_interface_api.h, so that no Ascend header is needed to build. One
// definition for the dlopen binding (dcmi_dl.cc) and the test stand-in
// (testlibs/fake_dcmi.cc), so that both speak the same layout.
#ifndef ACCELPOOL_VENDORS_ASCEND_DCMI_ABI_H_
#define ACCELPOOL_VENDORS_ASCEND_DCMI_ABI_H_

namespace accelpool::vendors::ascend::abi {

constexpr int kDcmiOk = 0;
constexpr int kDcmiInvalidParameter = -8001;  // DCMI_ERR_CODE_INVALID_PARAMETER
constexpr int kDcmiInnerError = -8005;        // DCMI_ERR_CODE_INNER_ERR
constexpr int kDcmiInvalidDeviceId = -8007;   // DCMI_ERR_CODE_INVALID_DEVICE_ID
constexpr int kDcmiNotSupport = -8255;        // DCMI_ERR_CODE_NOT_SUPPORT

struct dcmi_chip_info {
  unsigned char chip_type[32];
  unsigned char chip_name[32];
  unsigned char chip_ver[32];
  unsigned int aicore_cnt;
};

struct dcmi_hbm_info {
  unsigned long long memory_size;  // NOLINT(runtime/int) MB
  unsigned int freq;
  unsigned long long memory_usage;  // NOLINT(runtime/int)
  int temp;
  unsigned int bandwith_util_rate;
};

struct dcmi_get_memory_info_stru {
  unsigned long long memory_size;       // NOLINT(runtime/int) MB
  unsigned long long memory_available;  // NOLINT(runtime/int) MB
  unsigned int freq;
  unsigned long hugepagesize;     // NOLINT(runtime/int) KB
  unsigned long hugepages_total;  // NOLINT(runtime/int)
  unsigned long hugepages_free;   // NOLINT(runtime/int)
  unsigned int utiliza;
  unsigned char reserve[60];
};

// One process using a chip, from dcmi_get_device_resource_info(card, device,
// proc_info, &proc_num): its PID on the host, and the chip memory it holds in
// bytes (what the chip's OS keeps for it and what it allocated). The caller
// passes room for the documented most, 32 entries.
struct dcmi_proc_mem_info {
  int proc_id;
  unsigned long proc_mem_usage;  // NOLINT(runtime/int) bytes
};
constexpr int kDcmiMaxProcesses = 32;

struct dcmi_pcie_info_all {
  unsigned int venderid;
  unsigned int subvenderid;
  unsigned int deviceid;
  unsigned int subdeviceid;
  int domain;
  unsigned int bdf_busid;
  unsigned int bdf_deviceid;
  unsigned int bdf_funcid;
  unsigned char reserve[32];
};

// Super-pod membership is not a function of its own: it is read with the
// generic dcmi_get_device_info(card, device, DCMI_MAIN_CMD_CHIP_INF,
// DCMI_CHIP_INF_SUB_CMD_SPOD_INFO, buf, &size), which fills this 48-byte struct.
constexpr int kDcmiMainCmdChipInf = 12;             // enum dcmi_main_cmd: DCMI_MAIN_CMD_CHIP_INF
constexpr unsigned kDcmiChipInfSubCmdSpodInfo = 1;  // DCMI_CHIP_INF_SUB_CMD_SPOD_INFO

struct dcmi_spod_info {
  unsigned int sdid;
  unsigned int super_pod_size;
  unsigned int super_pod_id;
  unsigned int server_index;
  unsigned int chassis_id;
  unsigned int super_pod_type;
  unsigned int reserve[6];
};
static_assert(sizeof(dcmi_spod_info) == 48, "dcmi_spod_info is 48 bytes in dcmi_interface_api.h");

}  // namespace accelpool::vendors::ascend::abi

#endif  // ACCELPOOL_VENDORS_ASCEND_DCMI_ABI_H_
