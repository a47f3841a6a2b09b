// Assignment key rotation (accelpool-keys): the three steps of
// docs/operations.md, "Rotating the assignment key", each taken only once the
// cluster shows it is safe, so no pod is refused for a key its node lacks.
//
//   1. add     a new key to the key Secret; the extender keeps signing with
//              the old one. Done when every node whose device plugin checks
//              signatures lists the new key in its
//              accelpool.io/assignment-keys annotation (the plugin writes it
//              from its mounted Secret, api/assignment_signature.h). A node
//              counts while a device-plugin pod is bound to it (a stale
//              annotation outlives the plugin), and, unless
//              RotationOptions::skip_not_ready, also while it is not Ready.
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
// killed Job) is resumed where it stands by the next run: one with a newer
// key than "signing" is at step 2; one whose "signing" is a k<N> newer than
// every other key, at step 3. Other key sets of more than one key (ids not of
// the form k<N>, as in a Secret made by hand) are no rotation under way: a
// rotation starts from them, and drops them all at step 3. Every write is a PUT with the Secret's
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
  kSteady,    // nothing under way: one key, or keys no rotation left (see above)
  kAdded,     // a key newer than "signing" waits to reach every node (step 1 done)
  kSwitched,  // "signing" is the newest; older keys wait to be dropped (step 2 done)
};
const char* RotationPhaseName(RotationPhase p);

// What the Secret and the cluster show.
struct RotationState {
  api::SigningKeys keys;  // the Secret's key set, checked as the components check it
  std::string resource_version;
  RotationPhase phase = RotationPhase::kSteady;
  std::string newest;       // the key id with the highest number ("k<N>"); else "signing"
  std::string switched_at;  // RFC 3339, from the annotation; "" when absent

  // The nodes step 1 waits for: those whose device plugin checks signatures
  // (accelpool.io/assignment-keys present) and, as Read finds them, runs
  // there (no_plugin below): node -> its key ids.
  std::map<std::string, std::vector<std::string>> node_keys;
  // Nodes without the newest key whose Ready condition is False or Unknown (a
  // node without the condition counts as Ready). They are in node_keys too,
  // and waited for, unless the nodes are read with skip_not_ready. The nodes
  // are listed metadata only; the Ready condition is read only for the nodes
  // without the newest key, when they are at most 50 (while more lack the
  // key, this stays empty).
  std::vector<std::string> not_ready;
  // Nodes that report key ids but run no device-plugin pod (one bound to the
  // node and not ended, labelled kPluginPodSelector in the Secret's
  // namespace): the annotation outlived the plugin (its DaemonSet left the
  // node, or its vendor was turned off), and nothing there checks a
  // signature. Not in node_keys. Empty when no such pod runs anywhere: then
  // the plugins are not told apart (deployed otherwise), and every
  // reporting node is waited for.
  std::vector<std::string> no_plugin;
  // No device-plugin pod was found at all while nodes report keys.
  bool plugins_unseen = false;
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

  // The nodes waited for that lack `key`.
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
// objects carry their status, and nodes without the newest key that are not
// Ready go to not_ready (and out of node_keys, with `skip_not_ready`).
void AddNodes(RotationState& s, const std::vector<nlohmann::json>& nodes, bool whole,
              bool skip_not_ready);
// Moves the nodes that report keys but run none of `plugin_pods` (device-plugin
// pods, as listed) from node_keys to no_plugin. A pod counts when it is bound
// to a node and has not ended (Pending or Running: a plugin starting, or
// being deleted, may still check signatures). With no such pod at all,
// nothing moves and plugins_unseen is set.
void KeepNodesWithPlugin(RotationState& s, const std::vector<nlohmann::json>& plugin_pods);
// Adds the pods awaiting admission whose signature names a key other than
// the signing one.
void AddPods(RotationState& s, const std::vector<nlohmann::json>& pods);

// The key id after `keys`' highest "k<N>": "k<N+1>" ("k1" when none has that
// form); "" when N+1 would have more than 18 digits.
std::string NextKeyId(const api::SigningKeys& keys);
// The number of a "k<N>" id (N of 1-18 digits), or -1.
int64_t KeyNumber(const std::string& id);

// The label of the device-plugin pods (the chart's DaemonSets), listed in the
// key Secret's namespace: a pod mounts a Secret of its own namespace only.
inline constexpr const char* kPluginPodSelector = "app.kubernetes.io/component=device-plugin";

struct RotationOptions {
  std::string ns;      // the key Secret's namespace
  std::string secret;  // and name
  // Step 1 fails when the new key has not reached every node in this long.
  std::chrono::seconds node_timeout{std::chrono::minutes(15)};
  // Step 1 does not wait for nodes that are not Ready. Off, it does (up to
  // node_timeout): a node back from NotReady admits pods before kubelet has
  // refreshed its plugin's Secret volume (the pod's next sync, a minute or
  // two), and a pod signed with a key its plugin lacks fails admission.
  bool skip_not_ready = false;
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
  // The node lists last logged (logged again when they change).
  std::vector<std::string> logged_no_plugin_, logged_not_ready_;
};

}  // namespace accelpool::keys

#endif  // ACCELPOOL_KEYS_KEY_ROTATION_H_
