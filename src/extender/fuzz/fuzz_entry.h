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

// The watch side: node and pod objects as the informers deliver them, fed to
// a fresh Cache through CacheFeeder. One event per line, "<op><json>", op
// n (node added or changed), N (node deleted), r (node read from the
// apiserver), p (pod added or changed), P (pod deleted); a line whose JSON does not parse is
// skipped (the informer never delivers one). Afterwards every pod seen is deleted, and the entry
// aborts unless every node is idle again and no pod holds devices: whatever
// the objects said, nothing may stay booked. Returns the most pods that held
// devices at once.
int FuzzWatch(const uint8_t* data, size_t size);

// The learned workload's stored document (workload_store.h), as a restarted
// extender reads it from its ConfigMap: refused with a reason, or read into
// a state that encodes back to a document reading the same, and restores a
// learner. Aborts otherwise. Returns 1 when the document was read, else 0.
int FuzzWorkloadStore(const uint8_t* data, size_t size);

}  // namespace accelpool::extender::fuzz

#endif  // ACCELPOOL_EXTENDER_FUZZ_FUZZ_ENTRY_H_
