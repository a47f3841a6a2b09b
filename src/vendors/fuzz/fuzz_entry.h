// Fuzz entry for the fake backend's inventory file (an operator's file; the
// demo and simulated clusters are built from it). Feeds arbitrary bytes to
// ParseInventoryFile and aborts when an error has no reason, or when a parsed
// inventory is one the allocation core would refuse (core::ValidateInventory)
// or repeats a device id on the node. Returns 1 when the file parsed.
// The libFuzzer target and the corpus replay test call it.
#ifndef ACCELPOOL_VENDORS_FUZZ_FUZZ_ENTRY_H_
#define ACCELPOOL_VENDORS_FUZZ_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::vendors::fuzz {

int FuzzInventoryFile(const uint8_t* data, size_t size);

}  // namespace accelpool::vendors::fuzz

#endif  // ACCELPOOL_VENDORS_FUZZ_FUZZ_ENTRY_H_
