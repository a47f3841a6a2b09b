// Fuzz entry points, one per codec. Each feeds arbitrary bytes to a parser
// and, when it accepts them, checks that serializing and parsing again gives
// the same value; a broken round trip aborts. The libFuzzer targets in this
// folder and the corpus replay test call these.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_API_FUZZ_FUZZ_ENTRY_H_
#define ACCELPOOL_API_FUZZ_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::api::fuzz {

// Each returns 1 when the parser accepted the input, 0 when it rejected it.
int FuzzInventory(const uint8_t* data, size_t size);
int FuzzAssignment(const uint8_t* data, size_t size);
int FuzzPodRequest(const uint8_t* data, size_t size);

}  // namespace accelpool::api::fuzz

#endif  // ACCELPOOL_API_FUZZ_FUZZ_ENTRY_H_
