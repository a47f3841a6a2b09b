// libFuzzer target for the pod_request codec; see fuzz_entry.h.
#include <cstddef>
#include <cstdint>

#include "api/fuzz/fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  accelpool::api::fuzz::FuzzPodRequest(data, size);
  return 0;
}
