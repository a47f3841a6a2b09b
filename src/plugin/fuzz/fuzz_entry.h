// Fuzz entry for the device plugin's pod side: pod objects as the watch
// delivers them (PodSync::Apply / Forget into an AssignmentStore) and kubelet's
// Allocate and GetPreferredAllocation calls against them, on a fixed node
// (the fake backend: two NVIDIA GPUs of 10 slots, an Ascend 910C x16). The
// libFuzzer target in this folder and the seed replay test call it.
//
// Input: one event per line, "<op><json>":
//   p  a pod added or changed          P  a pod deleted
//   s  a pod added or changed, its accelpool.io/assignment first signed by the
//      harness (as the extender would) for its uid on node-a
//   k  {} from here on the plugin checks signatures (--assignment-key-dir)
//   a  {"resource": R, "ids": [[slot ids of one container], ...]}  (Allocate)
//   g  {"resource": R, "requests": [{"available": [...], "must": [...],
//       "size": N}, ...]}                                    (GetPreferredAllocation)
//   v  {"<ns>/<name>": {"<container>": [resources it holds devices of], ...}, ...}
//      kubelet's pod-resources view from here on (before the first: the API
//      cannot be read), asked when several pods could be calling
//   h  {"processes": [{"pid": N, "used_mib": M, "comm": "...", "cgroup": "..."}, ...]}
//      processes holding memory on GPU-a, as the host's /proc shows them: the
//      foreign memory check names them (ReadProcessOwner, PodKeyOfUid,
//      NameHolders) and describes the change, and looks through them (on
//      GPU-a and GPU-b) for pods using a device they were not granted
//      (UngrantedUses)
// A line whose JSON does not parse, or an unknown op, is skipped.
//
// Aborts when an answer breaks the protocol: an Allocate answer for a
// container that the store does not then hold as allocated, or whose
// assignment names another count of devices of that resource than kubelet
// sent; a preferred set with ids kubelet did not offer, more than it asked
// for, or without an id it must include; an Allocate answer for a pod whose
// latest version was refused (with signatures on: unsigned, forged or
// edited); a holder whose command is not printable ASCII or whose pod uid
// is not a lower-case uid, a description that is not valid UTF-8 or
// longer than an Event's 1024 bytes; an ungranted use by a pod not named or
// granted the device, or one reported twice while it lasts. After the events every pod seen is
// deleted, and it aborts unless the store is empty, no pod is named by its
// uid any more, and every state dir made for an Allocate is gone again. Returns the
// number of containers Allocate answered.
//
// Thread-safety: not thread-safe (one fixture per process, as libFuzzer runs).
#ifndef ACCELPOOL_PLUGIN_FUZZ_FUZZ_ENTRY_H_
#define ACCELPOOL_PLUGIN_FUZZ_FUZZ_ENTRY_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::plugin::fuzz {

int FuzzNodePods(const uint8_t* data, size_t size);

}  // namespace accelpool::plugin::fuzz

#endif  // ACCELPOOL_PLUGIN_FUZZ_FUZZ_ENTRY_H_
