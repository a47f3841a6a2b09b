// libFuzzer target for the assignment codec; see fuzz_entry.h.
#include <cstddef>
#include <cstdint>

#include "api/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::api::fuzz::FuzzAssignment(data, size);
  return 0;
}
