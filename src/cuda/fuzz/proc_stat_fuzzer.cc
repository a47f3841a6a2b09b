// libFuzzer target for the shim's /proc/<pid>/stat reader; see fuzz_entry.h.
#include <cstddef>
#include <cstdint>

#include "cuda/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::cuda::fuzz::FuzzProcStat(data, size);
  return 0;
}
