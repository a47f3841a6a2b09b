#include "vendors/nvidia/xid.h"

#include <algorithm>

namespace accelpool::vendors::nvidia {

const std::vector<uint64_t>& ApplicationXids() {
  static const std::vector<uint64_t> kXids = {13, 31, 43, 45, 68, 109};
  return kXids;
}

bool IsIgnoredXid(uint64_t xid, const std::vector<uint64_t>& extra) {
  const std::vector<uint64_t>& base = ApplicationXids();
  return std::find(base.begin(), base.end(), xid) != base.end() ||
         std::find(extra.begin(), extra.end(), xid) != extra.end();
}

std::string DescribeXid(uint64_t xid) {
  std::string what;
  switch (xid) {
    case 48:
      what = "double-bit ECC error";
      break;
    case 63:
      what = "row remapping pending";
      break;
    case 64:
      what = "row remapping failed";
      break;
    case 74:
      what = "NVLink error";
      break;
    case 79:
      what = "GPU has fallen off the bus";
      break;
    case 92:
      what = "high single-bit ECC error rate";
      break;
    case 94:
      what = "contained ECC error";
      break;
    case 95:
      what = "uncontained ECC error";
      break;
    default:
      break;
  }
  std::string out = "XID " + std::to_string(xid);
  if (!what.empty()) {
    out += " (" + what + ")";
  }
  return out;
}

}  // namespace accelpool::vendors::nvidia
