// libFuzzer target for what kubectl accelpool reads from the apiserver (see
// fuzz_entry.h): clang, -DACCELPOOL_FUZZ=ON (scripts/fuzz.sh; seeds in
// fuzz/corpus/explain).
#include <cstddef>
#include <cstdint>

#include "ctl/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::ctl::fuzz::FuzzClusterReports(data, size);
  return 0;
}
