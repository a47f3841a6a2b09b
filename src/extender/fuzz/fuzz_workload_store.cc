// libFuzzer target for the learned workload's stored document: clang,
// -DACCELPOOL_FUZZ=ON.
#include <cstddef>
#include <cstdint>

#include "extender/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::extender::fuzz::FuzzWorkloadStore(data, size);
  return 0;
}
