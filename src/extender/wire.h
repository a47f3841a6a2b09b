// The JSON of kube-scheduler's extender API (k8s.io/kube-scheduler/extender/v1).
//
// The Go types carry no json tags, so keys are the Go field names
// (PascalCase). Decoding follows encoding/json: an exact key wins, otherwise a
// case-insensitive match is taken; unknown keys are ignored (and reported in
// `unknown_keys` so the caller can log them); null is accepted wherever Go has
// a pointer, slice or map. Encoding writes exactly the field names
// kube-scheduler reads. Pods and nodes stay raw JSON here: the pod adapter in
// src/api turns a pod into a core::PodRequest.
//
// Every decoder returns kInvalidArgument with a message naming the field and
// what was expected; none throws. Decoders refuse documents nested deeper than
// kMaxJsonDepth and bodies larger than the caller's limit before parsing.
//
// Thread-safety: plain values and pure functions.
#ifndef ACCELPOOL_EXTENDER_WIRE_H_
#define ACCELPOOL_EXTENDER_WIRE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace accelpool::extender {

using Json = nlohmann::json;

// kube-scheduler's MaxExtenderPriority.
inline constexpr int64_t kMaxExtenderPriority = 10;
// Deeper documents are refused before parsing (no real pod comes near it).
inline constexpr int kMaxJsonDepth = 100;

// Parses `body` into JSON. kInvalidArgument for an empty, truncated, invalid
// or too deeply nested document; the message says where it broke.
StatusOr<Json> ParseJson(std::string_view body);

// Go-style field lookup: exact key first, then case-insensitive. nullptr when
// absent. REQUIRES: obj.is_object().
const Json* FindField(const Json& obj, std::string_view key);

// ExtenderArgs: the body of /filter and /prioritize.
struct ExtenderArgs {
  Json pod;                                    // the v1.Pod; null when absent
  std::optional<std::vector<Json>> nodes;      // Nodes.Items (nodeCacheCapable: false)
  std::optional<std::vector<std::string>> node_names;  // NodeNames (nodeCacheCapable: true)
  std::vector<std::string> unknown_keys;

  // Names of the candidate nodes, from NodeNames or from Nodes.Items[].metadata.name.
  std::vector<std::string> CandidateNames() const;
};
StatusOr<ExtenderArgs> DecodeExtenderArgs(std::string_view body);

// ExtenderFilterResult. When the request carried NodeNames the answer carries
// NodeNames; when it carried Nodes the answer carries Nodes (the passing items,
// unchanged).
struct FilterResult {
  std::optional<std::vector<Json>> nodes;
  std::optional<std::vector<std::string>> node_names;
  std::map<std::string, std::string> failed_nodes;
  std::map<std::string, std::string> failed_and_unresolvable;
  std::string error;
};
std::string EncodeFilterResult(const FilterResult& r);
StatusOr<FilterResult> DecodeFilterResult(std::string_view body);  // for tests and tools

// HostPriority / HostPriorityList.
struct HostPriority {
  std::string host;
  int64_t score = 0;  // 0..kMaxExtenderPriority
  friend bool operator==(const HostPriority&, const HostPriority&) = default;
};
std::string EncodeHostPriorityList(const std::vector<HostPriority>& list);
StatusOr<std::vector<HostPriority>> DecodeHostPriorityList(std::string_view body);

// ExtenderBindingArgs / ExtenderBindingResult.
struct BindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
  std::vector<std::string> unknown_keys;
};
StatusOr<BindingArgs> DecodeBindingArgs(std::string_view body);
std::string EncodeBindingResult(std::string_view error);

// ExtenderPreemptionArgs / ExtenderPreemptionResult. Victims are identified by
// UID; full victim pods (NodeNameToVictims) are reduced to their UIDs.
struct MetaVictims {
  std::vector<std::string> pod_uids;
  int64_t num_pdb_violations = 0;
  friend bool operator==(const MetaVictims&, const MetaVictims&) = default;
};
struct PreemptionArgs {
  Json pod;
  std::map<std::string, MetaVictims> victims;  // node -> victims
  std::vector<std::string> unknown_keys;
};
StatusOr<PreemptionArgs> DecodePreemptionArgs(std::string_view body);
std::string EncodePreemptionResult(const std::map<std::string, MetaVictims>& victims);

// {"Error": "..."}: the body sent with a non-200 answer.
std::string EncodeErrorBody(std::string_view error);

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_WIRE_H_
