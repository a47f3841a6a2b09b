#include "core/types.h"

#include <algorithm>
#include <array>
#include <cctype>

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

bool ModelMatches(std::string_view model, std::string_view pattern) {
  if (pattern.empty()) return false;
  const auto lower_eq = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  return std::search(model.begin(), model.end(), pattern.begin(), pattern.end(), lower_eq) !=
         model.end();
}

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

namespace {

// Reads 1..max_digits digits not starting with 0; advances `s`.
bool SmallNumber(std::string_view& s, size_t max_digits) {
  size_t n = 0;
  while (n < s.size() && n < max_digits && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || s[0] == '0') return false;
  s.remove_prefix(n);
  return true;
}

bool Take(std::string_view& s, std::string_view lit) {
  if (s.substr(0, lit.size()) != lit) return false;
  s.remove_prefix(lit.size());
  return true;
}

}  // namespace

bool ValidMigProfile(std::string_view p) {
  if (p.empty() || p.size() > 40) return false;
  std::string_view s = p;
  // "<c>c." is present when the digits are followed by 'c'.
  {
    std::string_view probe = s;
    if (SmallNumber(probe, 2) && Take(probe, "c.")) s = probe;
  }
  if (!(SmallNumber(s, 2) && Take(s, "g.") && SmallNumber(s, 4) && Take(s, "gb"))) return false;
  // Attributes: up to three of '.' or '-' and 1..8 lower-case letters
  // ("1g.18gb.me", "1g.24gb-me", "1g.24gb.me.all", "1g.24gb.gfx").
  for (int attributes = 0; !s.empty(); ++attributes) {
    if (attributes == 3 || (s[0] != '.' && s[0] != '-')) return false;
    s.remove_prefix(1);
    size_t n = 0;
    while (n < s.size() && s[n] >= 'a' && s[n] <= 'z') ++n;
    if (n == 0 || n > 8) return false;
    s.remove_prefix(n);
  }
  return true;
}

}  // namespace accelpool::core
