#include "vendors/library_util.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

namespace accelpool::vendors {

std::string NormalizePciBus(std::string_view bus) {
  unsigned domain = 0;
  unsigned b = 0;
  unsigned dev = 0;
  unsigned fn = 0;
  const std::string s(bus);
  for (char c : s) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex && c != ':' && c != '.') {
      return "";
    }
  }
  char tail = 0;
  if (std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &domain, &b, &dev, &fn, &tail) != 4) {
    domain = 0;
    if (std::sscanf(s.c_str(), "%x:%x.%x%c", &b, &dev, &fn, &tail) != 3) {
      return "";
    }
  }
  if (domain > 0xffff || b > 0xff || dev > 0x1f || fn > 0x7) {
    return "";
  }
  char out[16];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", domain, b, dev, fn);
  return out;
}

int32_t PciNumaNode(const std::string& pci_bus, const std::string& sysfs_root) {
  const std::string bus = NormalizePciBus(pci_bus);
  if (bus.empty()) {
    return -1;
  }
  std::ifstream in(sysfs_root + "/bus/pci/devices/" + bus + "/numa_node");
  int node = -1;
  if (!(in >> node) || node < 0) {
    return -1;
  }
  return node;
}

std::vector<std::string> PciDrmNodes(const std::string& pci_bus, const std::string& sysfs_root) {
  const std::string bus = NormalizePciBus(pci_bus);
  if (bus.empty()) {
    return {};
  }
  std::vector<std::pair<int, std::string>> found;  // (order, path)
  std::error_code ec;
  // Stepped with an error code: a readdir that fails part way ends the
  // listing (what was read is used) instead of throwing out of discovery.
  for (std::filesystem::directory_iterator
           it(std::filesystem::path(sysfs_root) / "bus/pci/devices" / bus / "drm", ec),
       end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const auto& [prefix, order] : {std::pair<std::string_view, int>{"card", 0},
                                        std::pair<std::string_view, int>{"renderD", 1}}) {
      if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
        found.emplace_back(order, "/dev/dri/" + name);
      }
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [order, path] : found) {
    out.push_back(std::move(path));
  }
  return out;
}

std::string FixedString(const char* buf, size_t size) {
  size_t n = 0;
  while (n < size && buf[n] != '\0') {
    ++n;
  }
  return std::string(buf, n);
}

Status VendorCallError(std::string_view call, std::string_view library, int64_t code,
                       std::string_view hint) {
  return UnavailableError(std::string(call) + " failed with " + std::string(library) + " status " +
                          std::to_string(code) + "; " + std::string(hint));
}

int32_t FirstSetBit(const uint32_t* words, size_t count) {
  for (size_t w = 0; w < count; ++w) {
    for (int32_t b = 0; b < 32; ++b) {
      if ((words[w] >> b) & 1u) {
        return static_cast<int32_t>(w * 32) + b;
      }
    }
  }
  return -1;
}

LinkKind LinkKindForLevel(PcieLevel level) {
  switch (level) {
    case PcieLevel::kInternal:
      return LinkKind::kVendorLink;  // two devices on one board
    case PcieLevel::kSingle:
    case PcieLevel::kMultiple:
      return LinkKind::kPcieSwitch;
    case PcieLevel::kHostBridge:
      return LinkKind::kPcieHostBridge;
    case PcieLevel::kNode:
      return LinkKind::kSameNuma;
    case PcieLevel::kSystem:
      return LinkKind::kCrossNuma;
  }
  return LinkKind::kUnknown;
}

Status BoundLibrary::Ready() const {
  if (ready_) return Status::Ok();
  return FailedPreconditionError(std::string(name_) + " is not initialized; call Init first");
}

Status BoundLibrary::Check(int64_t code, const char* call) const {
  return code == 0 ? Status::Ok() : VendorCallError(call, name_, code, hint_);
}

StatusOr<int32_t> BoundLibrary::CheckedCount(uint64_t n, const char* call) const {
  if (n > 1024) {
    return Broken(std::string(call) + " reported " + std::to_string(n) + " devices");
  }
  return static_cast<int32_t>(n);
}

Status BoundLibrary::Broken(const std::string& what) const {
  return InternalError(what + "; " + hint_);
}

StatusOr<bool> BoundLibrary::HealthyIfMemoryReads(int32_t index) {
  StatusOr<int64_t> used = MemoryUsedMib(index);
  if (!used.ok()) {
    return used.status();
  }
  return true;
}

}  // namespace accelpool::vendors
