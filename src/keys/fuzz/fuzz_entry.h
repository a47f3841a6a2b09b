// Fuzz entry point for what accelpool-keys reads from the apiserver: a key
// Secret, Node objects (their accelpool.io/assignment-keys is written by each
// node's own device plugin, so by whoever controls that node) and Pending
// pods. Input: one JSON object {"secret": {...}, "nodes": [...], "pods": [...],
// "plugin_pods": [...], "whole": bool, "skip_not_ready": bool}. A rejected Secret must be
// kInvalidArgument; an accepted one must give a state whose invariants hold (the signing and newest
// keys are held, the phase matches them, nodes and pods are reported consistently); a broken
// invariant aborts. The libFuzzer target and the corpus replay test call it.
//
// Thread-safety: pure function.
#ifndef ACCELPOOL_KEYS_FUZZ_FUZZ_ENTRY_H_
#define ACCELPOOL_KEYS_FUZZ_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::keys::fuzz {

// 1 when the Secret was accepted, 0 when the input was rejected.
int FuzzKeyState(const uint8_t* data, size_t size);

}  // namespace accelpool::keys::fuzz

#endif  // ACCELPOOL_KEYS_FUZZ_FUZZ_ENTRY_H_
