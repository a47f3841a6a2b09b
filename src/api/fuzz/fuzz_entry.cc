#include "api/fuzz/fuzz_entry.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "api/assignment_codec.h"
#include "api/inventory_codec.h"
#include "api/pod_request.h"

namespace accelpool::api::fuzz {

namespace {

std::string_view View(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// A broken round trip is a codec bug: stop loudly so the fuzzer records it.
void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

int FuzzInventory(const uint8_t* data, size_t size) {
  auto doc = ParseInventory(View(data, size), "fuzz-node");
  if (!doc.ok()) return 0;
  const std::string again = SerializeInventory(*doc);
  auto reparsed = ParseInventory(again, "fuzz-node");
  Check(reparsed.ok());
  Check(SerializeInventory(*reparsed) == again);
  return 1;
}

int FuzzAssignment(const uint8_t* data, size_t size) {
  int accepted = 0;
  auto a = ParseAssignment(View(data, size));
  if (a.ok()) {
    auto reparsed = ParseAssignment(SerializeAssignment(*a));
    Check(reparsed.ok() && *reparsed == *a);
    // Accepted names are safe to put in a host path (the plugin's state dirs).
    for (const AssignedContainer& c : a->containers) {
      Check(CheckContainerName(c.name).ok() && c.name.find('/') == std::string::npos);
    }
    accepted = 1;
  }
  auto alloc = ParseAllocation(View(data, size));
  if (alloc.ok()) {
    auto reparsed = ParseAllocation(SerializeAllocation(*alloc));
    Check(reparsed.ok() && *reparsed == *alloc);
    accepted = 1;
  }
  auto slot = ParseSlotId(View(data, size));
  if (slot.ok()) {
    auto again = ParseSlotId(SlotId(slot->first, slot->second));
    Check(again.ok() && *again == *slot);
  }
  return accepted;
}

int FuzzPodRequest(const uint8_t* data, size_t size) {
  const std::string_view text = View(data, size);
  nlohmann::json pod = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (pod.is_discarded()) return 0;
  auto r = ParsePodRequest(pod);
  if (!r.ok()) {
    Check(!r.status().message().empty());
    return 0;
  }
  Check(r->origins.size() == r->request.containers.size());
  for (const auto& c : r->request.containers) {
    Check(c.count > 0 && c.memory_mib >= 0 && c.compute >= 0 && c.compute <= 1000 &&
          c.memory_percent >= 0 && c.memory_percent <= 100);
  }
  return 1;
}

}  // namespace accelpool::api::fuzz
