// Fuzz entry points, one per extender handler. Each feeds arbitrary bytes as
// the request body to the same Handlers / Webhook the server uses (over a
// small fixed cluster) and aborts when the answer is not a well-formed reply:
// an HTTP status other than 200/400, or a body that is not JSON. The libFuzzer
// targets in this folder and the seed replay test call these.
//
// Thread-safety: not thread-safe (one fixture per process, as libFuzzer runs).
#ifndef ACCELPOOL_EXTENDER_FUZZ_FUZZ_ENTRY_H_
#define ACCELPOOL_EXTENDER_FUZZ_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::extender::fuzz {

// Each returns the HTTP status of the reply.
int FuzzFilter(const uint8_t* data, size_t size);
int FuzzPrioritize(const uint8_t* data, size_t size);
int FuzzBind(const uint8_t* data, size_t size);
int FuzzPreempt(const uint8_t* data, size_t size);
int FuzzMutate(const uint8_t* data, size_t size);

}  // namespace accelpool::extender::fuzz

#endif  // ACCELPOOL_EXTENDER_FUZZ_FUZZ_ENTRY_H_
