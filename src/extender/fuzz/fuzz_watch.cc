// libFuzzer target for the watch side (CacheFeeder over a fresh Cache): clang,
// -DACCELPOOL_FUZZ=ON.
#include <cstddef>
#include <cstdint>

#include "extender/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::extender::fuzz::FuzzWatch(data, size);
  return 0;
}
