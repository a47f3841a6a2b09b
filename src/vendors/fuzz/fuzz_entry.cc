#include "vendors/fuzz/fuzz_entry.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "core/fit.h"
#include "vendors/ascend/vnpu.h"
#include "vendors/fake/inventory_file.h"

namespace accelpool::vendors::fuzz {

namespace {

// A share of any size on an Ascend device from the file is either refused with
// a reason or served as one of the chip's own templates, large enough for it.
void CheckVnpu(const core::Device& d, size_t salt) {
  const std::vector<ascend::VnpuTemplate> templates =
      ascend::VnpuTemplates(d.model, d.compute_units, d.memory_mib);
  for (int64_t mib : {int64_t{1}, int64_t{8192}, int64_t{16384}, d.memory_mib / 3,
                      static_cast<int64_t>(salt % 70000), d.memory_mib}) {
    GrantedDevice g{d, mib, 0, false};
    StatusOr<ContainerSpec> spec = ascend::VnpuContainerSpec({g}, d.index);
    if (!spec.ok()) {
      if (spec.status().message().empty()) {
        std::fprintf(stderr, "inventory_file: a vNPU refusal without a reason\n");
        std::abort();
      }
      continue;
    }
    const std::string& name = spec->env.at("ASCEND_VNPU_SPECS");
    bool found = false;
    for (const ascend::VnpuTemplate& t : templates) {
      found = found || (t.name == name && t.memory_mib >= mib);
    }
    if (!found || !spec->devices.empty()) {
      std::fprintf(stderr, "inventory_file: %s MiB on %s served as %s\n",
                   std::to_string(mib).c_str(), d.model.c_str(), name.c_str());
      std::abort();
    }
  }
}

}  // namespace

int FuzzInventoryFile(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fake::MemoryUse use;
  StatusOr<std::vector<core::NodeInventory>> invs = fake::ParseInventoryFile(text, "node-a", &use);
  const std::map<std::string, int64_t>& used = use.used;
  if (!invs.ok()) {
    if (invs.status().message().empty()) {
      std::fprintf(stderr, "inventory_file: an error without a reason\n");
      std::abort();
    }
    if (!used.empty() || !use.processes.empty()) {
      std::fprintf(stderr, "inventory_file: memory in use reported for a file refused\n");
      std::abort();
    }
    return 0;
  }
  // Memory in use is reported for every whole device, within its memory, and
  // for nothing else.
  size_t whole = 0;
  for (const core::NodeInventory& inv : *invs) {
    for (const core::Device& d : inv.devices) {
      if (!d.partition.empty()) continue;
      ++whole;
      const auto it = used.find(d.id);
      if (it == used.end() || it->second < 0 || it->second > d.memory_mib) {
        std::fprintf(stderr, "inventory_file: memory in use of %s missing or out of range\n",
                     d.id.c_str());
        std::abort();
      }
      const auto procs = use.processes.find(d.id);
      if (procs == use.processes.end()) {
        std::fprintf(stderr, "inventory_file: no process list for %s\n", d.id.c_str());
        std::abort();
      }
      std::set<int64_t> pids;
      for (const ProcessMemory& p : procs->second) {
        if (p.pid < 1 || !pids.insert(p.pid).second || p.used_mib < -1 ||
            p.used_mib > d.memory_mib) {
          std::fprintf(stderr, "inventory_file: a process of %s out of range or twice\n",
                       d.id.c_str());
          std::abort();
        }
      }
    }
  }
  if (used.size() != whole || use.processes.size() != whole) {
    std::fprintf(stderr, "inventory_file: memory in use reported for a partition\n");
    std::abort();
  }
  std::set<std::string> ids;
  for (const core::NodeInventory& inv : *invs) {
    if (Status st = core::ValidateInventory(inv); !st.ok()) {
      std::fprintf(stderr, "inventory_file: parsed an inventory the core refuses: %s\n",
                   st.ToString().c_str());
      std::abort();
    }
    for (const core::Device& d : inv.devices) {
      if (!ids.insert(d.id).second) {
        std::fprintf(stderr, "inventory_file: device id %s twice on the node\n", d.id.c_str());
        std::abort();
      }
      if (inv.vendor == core::Vendor::kAscend) {
        CheckVnpu(d, size);
      }
    }
  }
  return 1;
}

}  // namespace accelpool::vendors::fuzz
