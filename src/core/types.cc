#include "core/types.h"

#include <algorithm>
#include <array>

namespace accelpool::core {

namespace {
struct VendorRow {
  Vendor vendor;
  std::string_view name;
};
constexpr std::array<VendorRow, 11> kVendors = {{
    {Vendor::kUnknown, "unknown"},
    {Vendor::kNvidia, "nvidia"},
    {Vendor::kAscend, "ascend"},
    {Vendor::kKunlunxin, "kunlunxin"},
    {Vendor::kMetax, "metax"},
    {Vendor::kMthreads, "mthreads"},
    {Vendor::kThead, "thead"},
    {Vendor::kCambricon, "cambricon"},
    {Vendor::kHygon, "hygon"},
    {Vendor::kIluvatar, "iluvatar"},
    {Vendor::kEnflame, "enflame"},
}};
}  // namespace

std::string_view VendorName(Vendor v) {
  for (const auto& row : kVendors) {
    if (row.vendor == v) return row.name;
  }
  return "unknown";
}

std::optional<Vendor> ParseVendor(std::string_view name) {
  for (const auto& row : kVendors) {
    if (row.vendor != Vendor::kUnknown && row.name == name) return row.vendor;
  }
  return std::nullopt;
}

const std::vector<Vendor>& AllVendors() {
  static const std::vector<Vendor>* const kAll = [] {
    auto* v = new std::vector<Vendor>();
    for (const auto& row : kVendors) {
      if (row.vendor != Vendor::kUnknown) v->push_back(row.vendor);
    }
    return v;
  }();
  return *kAll;
}

int32_t NodeInventory::LinkScore(int32_t a, int32_t b) const {
  const size_t n = devices.size();
  if (topology.links.size() != n * n || a < 0 || b < 0 || static_cast<size_t>(a) >= n ||
      static_cast<size_t>(b) >= n) {
    return 0;
  }
  return topology.links[static_cast<size_t>(a) * n + static_cast<size_t>(b)];
}

}  // namespace accelpool::core
