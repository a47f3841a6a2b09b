// Fuzz entry point for what `kubectl accelpool` reads from the apiserver:
// every Node and unfinished Pod of the cluster (their annotations written by
// device plugins and the extender, the rest by anyone who may create pods)
// and the pod `explain` is asked about. Input: one JSON object {"nodes":
// [...], "pods": [...], "pod": {...}, "policy": "...", "namespaces": {name:
// {label: value}}}; each member optional. Builds the view, then the nodes,
// pods and per-node reports and the explain report, and prints each as the
// command does (JSON, indented). A node the view lists must have a report; a
// report must be an object with text; nothing may throw. A broken invariant
// aborts. The libFuzzer target and the corpus replay test call it.
//
// Thread-safety: pure function.
#ifndef ACCELPOOL_CTL_FUZZ_FUZZ_ENTRY_H_
#define ACCELPOOL_CTL_FUZZ_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::ctl::fuzz {

// 1 when the input held a pod to explain and explain answered, else 0.
int FuzzClusterReports(const uint8_t* data, size_t size);

}  // namespace accelpool::ctl::fuzz

#endif  // ACCELPOOL_CTL_FUZZ_FUZZ_ENTRY_H_
