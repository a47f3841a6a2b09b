// libFuzzer target for the fake backend's inventory file (see fuzz_entry.h):
// clang, -DACCELPOOL_FUZZ=ON.
#include <cstddef>
#include <cstdint>

#include "vendors/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::vendors::fuzz::FuzzInventoryFile(data, size);
  return 0;
}
