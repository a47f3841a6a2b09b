// Signed assignments: the extender signs each accelpool.io/assignment it
// binds with a key shared with the device plugins, and a device plugin given
// the key refuses an assignment whose signature does not verify. Anyone who
// may edit a pod but cannot read the key's Secret (a tenant, where the
// chart's admission policy is missing or off) can then neither forge an
// assignment nor change one between the bind and kubelet's Allocate.
//
// Signature (annotation accelpool.io/assignment-signature):
//   v1.<key id>.<base64url, no padding, of HMAC-SHA256(key, message)>
//   message = "accelpool.io/assignment v1\n" <pod uid> "\n" <node> "\n"
//             <the assignment annotation's exact text>
// Binding the pod uid and the node stops a signed assignment from being
// copied onto another pod or read on another node.
//
// Keys come from a directory (the chart mounts a Secret there): the file
// "signing" holds the id new signatures use; every other file whose name is a
// key id (1-32 of [a-z0-9-]) holds one key of at least 32 bytes (its text,
// trailing whitespace dropped). Rotation: add the new key, let it reach every
// node, then point "signing" at it; drop the old one once the pods bound with
// it are admitted (docs/operations.md, "Rotating the assignment key").
//
// Thread-safety: the free functions are pure; AssignmentKeyRing is safe to use
// from any thread.
#ifndef ACCELPOOL_API_ASSIGNMENT_SIGNATURE_H_
#define ACCELPOOL_API_ASSIGNMENT_SIGNATURE_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace accelpool::api {

inline constexpr const char* kAssignmentSignatureAnnotation = "accelpool.io/assignment-signature";
// On the Node, written by the device plugin: the ids of the keys it verifies
// with, sorted, comma-separated ("k1,k2"); absent when it checks no signature.
inline constexpr const char* kAssignmentKeysAnnotation = "accelpool.io/assignment-keys";
// On the extender's leader Lease, written by the leader at each renewal: the
// id of the key it signs with.
inline constexpr const char* kLeaseSigningKeyAnnotation = "accelpool.io/assignment-signing-key";

// The smallest key, in bytes.
inline constexpr size_t kMinSigningKeyBytes = 32;

struct SigningKeys {
  std::string signing;                      // id of the key new signatures use
  std::map<std::string, std::string> keys;  // key id -> key bytes
};

// A key set from a directory's files (name -> content). Files whose name is
// neither "signing" nor a key id (the dot-entries of a Secret volume, say) are
// ignored. kInvalidArgument with a reason when "signing" is missing or names
// no key, or a key is too short.
StatusOr<SigningKeys> ParseSigningKeys(const std::map<std::string, std::string>& files);

// The signature of `assignment` (the annotation's text) for pod `uid` on
// `node`, with the signing key. kInvalidArgument when uid or node is empty.
StatusOr<std::string> SignAssignment(const SigningKeys& keys, std::string_view uid,
                                     std::string_view node, std::string_view assignment);

// Ok when `signature` is a signature of exactly `assignment` for pod `uid` on
// `node` by one of the keys. kPermissionDenied (missing, malformed, or not
// matching: the assignment was written or changed by someone without the
// key) or kNotFound (signed with a key id this set does not have) otherwise;
// the message says which. The comparison takes the same time wherever the
// bytes differ.
Status VerifyAssignment(const SigningKeys& keys, std::string_view uid, std::string_view node,
                        std::string_view assignment, std::string_view signature);

// Kubelet may still admit the pod, and so call Allocate for it: phase Pending
// (or unset), not being deleted, no container status yet (kubelet allocates
// every container's devices at admission, before it reports any status).
// Only such pods' signatures are checked (an admitted pod's assignment is
// used for no more Allocate calls), and a key may be dropped once no such
// pod is signed with it.
bool AwaitsAdmission(const nlohmann::json& pod);

// The key id a signature names ("" when it is not a v1 signature).
std::string SignatureKeyId(std::string_view signature);

// Reads a key directory (no subdirectories are followed).
StatusOr<SigningKeys> LoadSigningKeys(const std::string& dir);

// The keys of one directory, re-read at most once per interval (a Secret
// volume is updated in place by kubelet) and, for a signature with a key id
// the ring does not have, at once (at most once a second by default). A failed re-read
// keeps the keys read before and is reported by LastError.
class AssignmentKeyRing {
 public:
  // Reads `dir` now; an error when it has no usable key set.
  // `unknown_key_reread` is the least time between two re-reads for
  // signatures with an unknown key id.
  static StatusOr<std::unique_ptr<AssignmentKeyRing>> Open(
      std::string dir, std::chrono::seconds reload_interval = std::chrono::seconds(30),
      std::chrono::milliseconds unknown_key_reread = std::chrono::milliseconds(1000));

  StatusOr<std::string> Sign(std::string_view uid, std::string_view node,
                             std::string_view assignment);
  Status Verify(std::string_view uid, std::string_view node, std::string_view assignment,
                std::string_view signature);

  // Called (outside the ring's lock) after each re-read that failed; set it
  // before the ring is shared.
  void OnReloadError(std::function<void(const Status&)> f) { on_reload_error_ = std::move(f); }

  const std::string& dir() const { return dir_; }
  // The id new signatures use, and the last re-read's error (Ok when fine).
  std::string SigningKeyId() const;
  // The ids of the keys held, sorted, after a re-read when the last read is
  // older than the interval (the device plugin publishes them on its Node,
  // so a key rotation can see when a new key has reached every node).
  std::vector<std::string> KeyIds();
  // SigningKeyId after a re-read when the last read is older than the
  // interval (the extender reports it on its leader Lease).
  std::string CurrentSigningKeyId();
  Status LastError() const;

 private:
  AssignmentKeyRing(std::string dir, std::chrono::seconds interval,
                    std::chrono::milliseconds unknown_key_reread, SigningKeys keys);
  // Re-reads when the last read is older than `max_age`; returns the keys.
  std::shared_ptr<const SigningKeys> Current(std::chrono::steady_clock::duration max_age);

  const std::string dir_;
  const std::chrono::seconds interval_;
  const std::chrono::milliseconds unknown_key_reread_;
  std::function<void(const Status&)> on_reload_error_;
  mutable std::mutex mu_;
  std::shared_ptr<const SigningKeys> keys_;        // guarded by mu_
  std::chrono::steady_clock::time_point read_at_;  // guarded by mu_
  Status last_error_;                              // guarded by mu_
};

}  // namespace accelpool::api

#endif  // ACCELPOOL_API_ASSIGNMENT_SIGNATURE_H_
