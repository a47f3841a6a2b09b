// Builders shared by the core's tests: MakeNode, MakeRequest, Pod.
#ifndef ACCELPOOL_CORE_TEST_UTIL_H_
#define ACCELPOOL_CORE_TEST_UTIL_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/fit.h"
#include "core/profiles.h"
#include "core/types.h"
#include "core/usage.h"

namespace accelpool::core::testing {

// A node of a named profile; aborts the test binary on an unknown profile.
inline NodeInventory MakeNode(const std::string& profile, const std::string& name = "n1") {
  StatusOr<NodeInventory> inv = MakeProfileNode(profile, name);
  if (!inv.ok()) {
    std::fprintf(stderr, "MakeNode: %s\n", inv.status().ToString().c_str());
    std::abort();
  }
  return *inv;
}

inline DeviceRequest Whole(Vendor v, int32_t count, std::string name = "main") {
  DeviceRequest r;
  r.container = std::move(name);
  r.vendor = v;
  r.count = count;
  return r;
}

inline DeviceRequest Share(Vendor v, int32_t count, int64_t mem_mib, int32_t compute,
                           std::string name = "main") {
  DeviceRequest r = Whole(v, count, std::move(name));
  r.memory_mib = mem_mib;
  r.compute = compute;
  return r;
}

inline PodRequest Pod(std::vector<DeviceRequest> containers) { return PodRequest{std::move(containers), {}}; }

// Device indices of the first container's grants, ascending.
inline std::vector<int32_t> Devices(const FitResult& r, size_t container = 0) {
  std::vector<int32_t> out;
  if (container < r.placement.containers.size()) {
    for (const auto& g : r.placement.containers[container].grants) out.push_back(g.device);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Marks devices as held whole by someone else.
inline NodeUsage Busy(const NodeInventory& inv, const std::vector<int32_t>& devices) {
  NodeUsage u = NodeUsage::Empty(inv);
  for (int32_t d : devices) {
    auto& du = u.devices[static_cast<size_t>(d)];
    du.shares = 1;
    du.exclusive = true;
    du.memory_mib = inv.devices[static_cast<size_t>(d)].memory_mib;
    du.compute = kComputeWhole;
  }
  return u;
}

}  // namespace accelpool::core::testing

#endif  // ACCELPOOL_CORE_TEST_UTIL_H_
