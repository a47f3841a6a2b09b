#include "vendors/fuzz/fuzz_entry.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "core/fit.h"
#include "vendors/fake/inventory_file.h"

namespace accelpool::vendors::fuzz {

int FuzzInventoryFile(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  StatusOr<std::vector<core::NodeInventory>> invs = fake::ParseInventoryFile(text, "node-a");
  if (!invs.ok()) {
    if (invs.status().message().empty()) {
      std::fprintf(stderr, "inventory_file: an error without a reason\n");
      std::abort();
    }
    return 0;
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
    }
  }
  return 1;
}

}  // namespace accelpool::vendors::fuzz
