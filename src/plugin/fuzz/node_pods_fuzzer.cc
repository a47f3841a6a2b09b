// libFuzzer target for the device plugin's pod side (see fuzz_entry.h):
// clang, -DACCELPOOL_FUZZ=ON.
#include <cstddef>
#include <cstdint>

#include "plugin/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::plugin::fuzz::FuzzNodePods(data, size);
  return 0;
}
