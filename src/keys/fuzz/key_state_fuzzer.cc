// libFuzzer target for what accelpool-keys reads from the apiserver (see
// fuzz_entry.h): clang, -DACCELPOOL_FUZZ=ON (scripts/fuzz.sh; seeds in
// fuzz/corpus/key_state).
#include <cstddef>
#include <cstdint>

#include "keys/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::keys::fuzz::FuzzKeyState(data, size);
  return 0;
}
