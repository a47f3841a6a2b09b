// Typed helpers over KubeClient for the few writes accelpool makes: pod
// bindings, events, leader-election leases and annotation patches.
//
// Thread-safety: stateless functions; safe from any thread the client allows.
#ifndef ACCELPOOL_KUBE_OBJECTS_H_
#define ACCELPOOL_KUBE_OBJECTS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "kube/client.h"

namespace accelpool::kube {

// POST pods/<pod>/binding {target: Node <node>}; `uid`, when set, is sent as
// a precondition so a re-created pod of the same name is not bound.
// `annotations` ride on the Binding's metadata: the apiserver adds them to the
// pod in the same write that sets spec.nodeName.
// kAborted on conflict (already bound or uid changed), kNotFound when gone.
// `within` bounds the request on both sides (KubeClient::Create).
Status CreatePodBinding(KubeClient& client, const std::string& ns, const std::string& pod,
                        const std::string& node, const std::string& uid,
                        const std::map<std::string, std::string>& annotations = {},
                        std::optional<std::chrono::milliseconds> within = std::nullopt);

// Merge-patches metadata.annotations of a pod or node. A value of nullopt
// removes the key. When `resource_version` is set it is a precondition:
// kAborted when the object changed since.
Status PatchAnnotations(
    KubeClient& client, const Resource& r, const std::string& ns, const std::string& name,
    const std::vector<std::pair<std::string, std::optional<std::string>>>& annotations,
    const std::string& resource_version = "");

struct ObjectRef {
  std::string api_version = "v1";
  std::string kind = "Pod";
  std::string ns;  // "" for cluster-scoped objects
  std::string name;
  std::string uid;
};

enum class EventKind { kNormal, kWarning };

// Records an event about `about` (events.k8s.io/v1; falls back to core/v1
// events when the former is not served). `reporter` is the component name,
// e.g. "accelpool-device-plugin"; `action` e.g. "Allocate". The message is
// sent as EventNote(message).
// `message` as an event's note: valid UTF-8 (each byte that is not part of a
// valid sequence becomes U+FFFD) of at most 1024 bytes, the apiserver's
// limit; a longer one is cut after its last whole character that leaves room
// for "..." and ends with it.
std::string EventNote(std::string_view message);

Status CreateEvent(KubeClient& client, const ObjectRef& about, EventKind kind,
                   const std::string& reason, const std::string& message,
                   const std::string& reporter, const std::string& action);

// A coordination.k8s.io/v1 Lease as leader election uses it.
struct Lease {
  std::string ns, name;
  std::string holder;  // spec.holderIdentity
  int32_t lease_duration_s = 15;
  std::string acquire_time;  // RFC 3339 with microseconds, as the apiserver writes it
  std::string renew_time;
  int32_t transitions = 0;
  std::string resource_version;  // precondition for UpdateLease
  std::map<std::string, std::string> annotations;  // metadata.annotations (string values)
  // The object as read. An update starts from it, so the fields this struct
  // does not carry (labels, owner references, spec.strategy and
  // spec.preferredHolder of coordinated leader election) are written back as
  // they were, not dropped.
  nlohmann::json raw;
};

// kNotFound when no such lease.
StatusOr<Lease> GetLease(KubeClient& client, const std::string& ns, const std::string& name);
// kAlreadyExists when someone created it first.
StatusOr<Lease> CreateLease(KubeClient& client, const Lease& lease);
// PUT with lease.resource_version as precondition; kAborted when another
// writer got there first (re-read and retry).
StatusOr<Lease> UpdateLease(KubeClient& client, const Lease& lease);

// The string at `ptr` in an object read from the apiserver; "" when absent
// or not a string (a field of another type is treated as unset, never thrown).
std::string StringAt(const nlohmann::json& obj, const nlohmann::json::json_pointer& ptr);

// Time formats used in leases: "2026-11-30T02:41:07.123456Z".
std::string FormatMicroTime(std::chrono::system_clock::time_point t);
StatusOr<std::chrono::system_clock::time_point> ParseMicroTime(const std::string& s);

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_OBJECTS_H_
