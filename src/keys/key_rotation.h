// Assignment key rotation (accelpool-keys): the three steps of
// docs/operations.md, "Rotating the assignment key", each taken only once the
// cluster shows it is safe, so no pod is refused for a key its node lacks.
//
//   1. add     a new key to the key Secret; the extender keeps signing with
//              the old one. Done when every Ready node whose device plugin
//              checks signatures lists the new key in its
//              accelpool.io/assignment-keys annotation (the plugin writes it
//              from its mounted Secret, api/assignment_signature.h).
//   2. switch  "signing" to the new key, and note the time on the Secret
//              (annotation accelpool.io/assignment-key-switched-at).
//   3. drop    the old keys, once the extender has surely re-read the Secret
//              (RotationOptions::settle after the switch: kubelet's Secret
//              sync plus the extender's 30 s re-read; and, where its leader
//              Lease reports the key it signs with, once that is the new
//              one) and no pod that kubelet may still admit carries a
//              signature by an old key.
//
// The state lives in the Secret alone, so a rotation that stops (a timeout, a
// killed Job) is resumed where it stands by the next run: a Secret with keys
// besides "signing" that are older than it is at step 3, one with a newer key
// than "signing" at step 2. Every write is a PUT with the Secret's
// resourceVersion: a concurrent edit makes the step re-read and start over.
//
// Thread-safety: a KeyRotation is used from one thread.
#ifndef ACCELPOOL_KEYS_KEY_ROTATION_H_
#define ACCELPOOL_KEYS_KEY_ROTATION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/assignment_signature.h"
#include "common/log.h"
#include "common/status.h"
#include "kube/client.h"

namespace accelpool::keys {

inline constexpr const char* kSwitchedAtAnnotation = "accelpool.io/assignment-key-switched-at";

enum class RotationPhase {
  kSteady,    // one key: nothing under way
  kAdded,     // a key newer than "signing" waits to reach every node (step 1 done)
  kSwitched,  // "signing" is the newest; older keys wait to be dropped (step 2 done)
};
const char* RotationPhaseName(RotationPhase p);

// What the Secret and the cluster show.
struct RotationState {
  api::SigningKeys keys;  // the Secret's key set, checked as the components check it
  std::string resource_version;
  RotationPhase phase = RotationPhase::kSteady;
  std::string newest;       // the key id with the highest number ("k<N>")
  std::string switched_at;  // RFC 3339, from the annotation; "" when absent

  // Nodes whose device plugin checks signatures (accelpool.io/assignment-keys
  // present): node -> its key ids. Ready ones only (a node without a Ready
  // condition counts as Ready); those whose Ready condition is False or
  // Unknown are listed in not_ready (their kubelet admits nothing until it
  // is back, and it refreshes the Secret volume first). The nodes are listed
  // metadata only; the Ready condition is read only for the nodes without
  // the newest key, when they are at most 50 (so not_ready lists only such
  // nodes, and while more lack the key every one of them is waited for).
  std::map<std::string, std::vector<std::string>> node_keys;
  std::vector<std::string> not_ready;
  // Nodes with an accelpool inventory but no key ids: their plugin checks no
  // signature (signing off there) or predates the annotation; a rotation
  // cannot see them and says so.
  std::vector<std::string> unreported;

  // Pods kubelet may still admit whose signature names a key other than
  // "signing" ("ns/name (key k1, node n)"), listed in the kSwitched phase.
  std::vector<std::string> pods_with_old_keys;
  // The key the extender's leader reports signing with (annotation
  // accelpool.io/assignment-signing-key on its Lease), read in the kSwitched
  // phase; "" when there is no live Lease or it reports none (a standalone
  // extender without --leader-elect, or one from before the report). In the
  // chart the active extender writes it with any replica count
  // (--scheduler-lease, extender/leader.h).
  std::string leader_signs;

  // Ready reporting nodes that lack `key`.
  std::vector<std::string> NodesWithout(const std::string& key) const;
};

// The pure parts of KeyRotation::Read, over objects as the apiserver sent
// them (exposed for tests and the key_state fuzz target; a node's
// accelpool.io/assignment-keys is written by the node's own plugin, so by
// whoever controls that node):
// The Secret's key set and phase; kInvalidArgument with the reason when it is
// not an object, a data value is not base64 text, or the key set is broken.
StatusOr<RotationState> StateFromSecret(const nlohmann::json& secret, const std::string& where);
// Adds the nodes' reported key ids (and the unreported nodes). `whole`: the
// objects carry their status, and nodes that are not Ready go to not_ready.
void AddNodes(RotationState& s, const std::vector<nlohmann::json>& nodes, bool whole);
// Adds the pods awaiting admission whose signature names a key other than
// the signing one.
void AddPods(RotationState& s, const std::vector<nlohmann::json>& pods);

// The key id after `keys`' highest "k<N>": "k<N+1>" ("k1" when none has that
// form); "" when N+1 would have more than 18 digits.
std::string NextKeyId(const api::SigningKeys& keys);
// The number of a "k<N>" id (N of 1-18 digits), or -1.
int64_t KeyNumber(const std::string& id);

struct RotationOptions {
  std::string ns;      // the key Secret's namespace
  std::string secret;  // and name
  // Step 1 fails when the new key has not reached every node in this long.
  std::chrono::seconds node_timeout{std::chrono::minutes(15)};
  // Step 3 waits at least this long after the switch (the extender may sign
  // with the old key until kubelet has updated its Secret volume, up to
  // about a minute and a half, and it has re-read it, 30 s).
  std::chrono::seconds settle{std::chrono::minutes(5)};
  // Step 3 fails when pods signed with an old key still wait for admission
  // this long after the switch.
  std::chrono::seconds drain_timeout{std::chrono::minutes(60)};
  std::chrono::seconds poll{std::chrono::seconds(10)};
  // The extender's leader Lease; step 3 also waits until the leader reports
  // signing with the new key. Empty name: not checked.
  std::string lease_ns;
  std::string lease_name;
};

// The clock and the sleep, replaceable in tests.
struct Clock {
  std::function<std::chrono::system_clock::time_point()> now = [] {
    return std::chrono::system_clock::now();
  };
  std::function<void(std::chrono::seconds)> sleep;  // null: std::this_thread::sleep_for
};

// RFC 3339 UTC ("2026-12-01T02:03:04Z") and back; kInvalidArgument on text
// of another form.
std::string FormatTime(std::chrono::system_clock::time_point t);
StatusOr<std::chrono::system_clock::time_point> ParseTime(const std::string& text);

class KeyRotation {
 public:
  KeyRotation(kube::KubeClient* client, RotationOptions options, Logger log, Clock clock = {});

  // Reads the Secret, the nodes and (in the kSwitched phase) the pods.
  // kNotFound when the Secret is missing, kInvalidArgument (with the reason)
  // when its key set is broken, the apiserver's error otherwise.
  StatusOr<RotationState> Read();

  // Rotates to completion: starts a rotation from kSteady, or resumes one
  // under way, and returns once the old keys are dropped. Logs each step and,
  // every poll, what it waits for. kDeadlineExceeded when a wait times out
  // (the message names the nodes or pods and what to do; the Secret stays
  // at the step reached, and a later run resumes it).
  Status Rotate();

 private:
  // One step if it is due now. Returns true when the rotation is complete.
  StatusOr<bool> Step(const RotationState& s);
  Status Write(const RotationState& s, const std::map<std::string, std::string>& set_data,
               const std::vector<std::string>& drop_data, const std::string& switched_at);
  void Sleep();

  kube::KubeClient* const client_;
  const RotationOptions options_;
  const Logger log_;
  const Clock clock_;
  bool started_ = false;  // this run added a key or resumed a rotation (kSteady then means done)
  std::chrono::system_clock::time_point waiting_since_{};
  std::string waiting_for_;  // what waiting_since_ is for
};

}  // namespace accelpool::keys

#endif  // ACCELPOOL_KEYS_KEY_ROTATION_H_
