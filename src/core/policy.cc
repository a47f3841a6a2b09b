#include "core/policy.h"

#include <algorithm>
#include <cmath>

#include "core/select.h"
#include "core/usage.h"

#if __has_include("core/frag.h")
#include "core/frag.h"
#define ACCELPOOL_HAVE_FRAG 1
#endif

namespace accelpool::core {

namespace {

double DeviceFill(const Device& d, const DeviceUsage& u) {
  if (u.exclusive) return 1.0;
  const double mem = d.memory_mib > 0 ? static_cast<double>(u.memory_mib) / d.memory_mib : 0.0;
  const double cmp = static_cast<double>(u.compute) / kComputeWhole;
  const double share = u.shares > 0 && d.max_shares <= 1 ? 1.0 : 0.0;
  return std::min(1.0, std::max({mem, cmp, share}));
}

// The part of a device a placement strands: it took a device no one held and
// every share slot of it (a share of a one-slot chip holds all of it), so what
// its holders do not use is lost to everyone. Taking the last slot of a device
// already shared is how packing ends, and costs nothing here.
double Stranded(const Device& d, const DeviceUsage& before, const DeviceUsage& u) {
  if (before.shares > 0 || u.exclusive || u.shares < std::max(1, d.max_shares)) return 0.0;
  const double mem = d.memory_mib > 0 ? static_cast<double>(u.memory_mib) / d.memory_mib : 0.0;
  const double cmp = static_cast<double>(u.compute) / kComputeWhole;
  return 1.0 - std::min(1.0, std::max(mem, cmp));
}

// What binpack counts for one device: its fill after the placement, less
// twice what the placement strands on it.
double PackValue(const Device& d, const DeviceUsage& before, const DeviceUsage& after) {
  return DeviceFill(d, after) - 2.0 * Stranded(d, before, after);
}

constexpr DeviceUsage kUnused{};

// `value(device, usage before, usage after)` summed over the grants of `p`,
// one grant at a time.
template <typename F>
double PerGrant(const NodeInventory& inv, const NodeUsage& usage, const Placement& p, F value) {
  double v = 0;
  for (const auto& c : p.containers) {
    for (const Grant& g : c.grants) {
      const size_t d = static_cast<size_t>(g.device);
      if (d >= inv.devices.size()) continue;
      const DeviceUsage& before = d < usage.devices.size() ? usage.devices[d] : kUnused;
      DeviceUsage u = before;
      u.memory_mib += g.memory_mib;
      u.compute += g.compute;
      u.shares += 1;
      u.exclusive = u.exclusive || g.exclusive;
      v += value(inv.devices[d], before, u);
    }
  }
  return v;
}

// `value(device, usage before, usage after)` averaged over the node's devices.
template <typename F>
double MeanAfter(const NodeInventory& inv, const NodeUsage& usage, const Placement& placement,
                 F value) {
  if (inv.devices.empty()) return 0.0;
  // No copy of the usage: only devices named by a grant change.
  double sum = 0;
  for (size_t i = 0; i < inv.devices.size(); ++i) {
    const DeviceUsage& before = i < usage.devices.size() ? usage.devices[i] : kUnused;
    DeviceUsage u = before;
    for (const auto& c : placement.containers) {
      for (const Grant& g : c.grants) {
        if (static_cast<size_t>(g.device) != i) continue;
        u.memory_mib += g.memory_mib;
        u.compute += g.compute;
        u.shares += 1;
        u.exclusive = u.exclusive || g.exclusive;
      }
    }
    sum += value(inv.devices[i], before, u);
  }
  return sum / static_cast<double>(inv.devices.size());
}

// Binpack at device level: prefer the devices that are fullest after the
// placement, so whole devices stay free for whole-device requests; a share
// that takes the last slot of an untouched device loses what it strands.
double PackedDevices(const NodeInventory& inv, const NodeUsage& usage, const Placement& p) {
  return PerGrant(inv, usage, p, [](const Device& d, const DeviceUsage& b, const DeviceUsage& a) {
    return PackValue(d, b, a);
  });
}

// Spread at device level: prefer the emptiest devices after the placement,
// and those it strands nothing on.
double SpreadDevices(const NodeInventory& inv, const NodeUsage& usage, const Placement& p) {
  return PerGrant(inv, usage, p, [](const Device& d, const DeviceUsage& b, const DeviceUsage& a) {
    return -DeviceFill(d, a) - Stranded(d, b, a);
  });
}

int32_t ToScore(double x) {
  return static_cast<int32_t>(std::lround(std::clamp(x, 0.0, 1.0) * 100.0));
}

class BinpackPolicy final : public Policy {
 public:
  // Policy:
  std::string_view Name() const override { return "binpack"; }
  // A share that takes the last slot of a device counts what it uses and
  // loses what it strands, so a share goes to a device with slots to spare
  // before it takes a one-slot device whole.
  double PlacementValue(const NodeInventory& inv, const NodeUsage& usage,
                        const Placement& p) const override {
    return PackedDevices(inv, usage, p);
  }
  int32_t NodeScore(const NodeInventory& inv, const NodeUsage& usage,
                    const Placement& p) const override {
    return ToScore(
        MeanAfter(inv, usage, p, [](const Device& d, const DeviceUsage& b, const DeviceUsage& a) {
          return PackValue(d, b, a);
        }));
  }
};

class SpreadPolicy final : public Policy {
 public:
  // Policy:
  std::string_view Name() const override { return "spread"; }
  double PlacementValue(const NodeInventory& inv, const NodeUsage& usage,
                        const Placement& p) const override {
    return SpreadDevices(inv, usage, p);
  }
  int32_t NodeScore(const NodeInventory& inv, const NodeUsage& usage,
                    const Placement& p) const override {
    return ToScore(1.0 - UtilisationAfter(inv, usage, p));
  }
};

// Link quality of the chosen sets: mean pair affinity relative to the best
// pair on the node, 1.0 for single-device containers.
double LinkQuality(const NodeInventory& inv, const Placement& p) {
  const size_t n = inv.devices.size();
  int32_t best_pair = 0;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      best_pair = std::max(best_pair, internal::Affinity(inv, static_cast<int32_t>(a),
                                                         static_cast<int32_t>(b)));
    }
  }
  double sum = 0;
  int count = 0;
  for (const auto& c : p.containers) {
    if (c.grants.size() < 2) {
      sum += 1.0;
      ++count;
      continue;
    }
    double pairs = 0, total = 0;
    for (size_t i = 0; i < c.grants.size(); ++i) {
      for (size_t j = i + 1; j < c.grants.size(); ++j) {
        total += internal::Affinity(inv, c.grants[i].device, c.grants[j].device);
        pairs += 1;
      }
    }
    sum += best_pair > 0 ? total / (pairs * best_pair) : 1.0;
    ++count;
  }
  return count > 0 ? sum / count : 1.0;
}

class TopologyPolicy final : public Policy {
 public:
  // Policy:
  std::string_view Name() const override { return "topology"; }
  double PlacementValue(const NodeInventory& inv, const NodeUsage& usage,
                        const Placement& p) const override {
    return LinkQuality(inv, p) * 1000.0 + PackedDevices(inv, usage, p);
  }
  // The fill part is binpack's: a share that takes an untouched device's
  // only slot is charged what it strands, so it goes to a node with a device
  // that has slots to spare first (as binpack and spread do).
  int32_t NodeScore(const NodeInventory& inv, const NodeUsage& usage,
                    const Placement& p) const override {
    const double fill =
        MeanAfter(inv, usage, p, [](const Device& d, const DeviceUsage& b, const DeviceUsage& a) {
          return PackValue(d, b, a);
        });
    return ToScore(0.6 * LinkQuality(inv, p) + 0.4 * fill);
  }
};

}  // namespace

double UtilisationAfter(const NodeInventory& inv, const NodeUsage& usage,
                        const Placement& placement) {
  return MeanAfter(inv, usage, placement,
                   [](const Device& d, const DeviceUsage& /*before*/, const DeviceUsage& after) {
                     return DeviceFill(d, after);
                   });
}

const Policy& DefaultPolicy() {
  static const BinpackPolicy kBinpack;
  return kBinpack;
}

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> kNames = {"binpack", "spread", "topology",
                                                  "fragmentation", "accelpool"};
  return kNames;
}

StatusOr<PolicyPtr> MakePolicy(std::string_view name, const PolicyContext& ctx) {
  if (name == "binpack") return PolicyPtr(std::make_unique<BinpackPolicy>());
  if (name == "spread") return PolicyPtr(std::make_unique<SpreadPolicy>());
  if (name == "topology") return PolicyPtr(std::make_unique<TopologyPolicy>());
#ifdef ACCELPOOL_HAVE_FRAG
  if (name == "fragmentation") return MakeFragmentationPolicy(ctx);
  if (name == "accelpool") return MakeAccelpoolPolicy(ctx);
#endif
  std::string valid;
  for (const auto& n : PolicyNames()) valid += (valid.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown scheduling policy \"" + std::string(name) +
                              "\"; use one of: " + valid);
}

}  // namespace accelpool::core
