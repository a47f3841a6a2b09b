// AssignmentStore: the assignments of the pods on this node, as the extender
// recorded them (accelpool.io/assignment), and which of their containers the
// plugin has already allocated. It answers the two questions kubelet's calls
// raise: "which pending container do these slot ids belong to?" (Allocate)
// and "which slot ids should kubelet pick for the next container?"
// (GetPreferredAllocation).
//
// Identity rule (docs/protocol.md): slot ids are unique on the node and the
// extender chose them, so the container whose assigned slots are exactly the
// requested ids is the one. Only when no container matches does the store fall
// back to the oldest pending container asking for the same resource and count.
//
// Thread-safety: all methods may be called from any thread (one mutex, never
// held across I/O). Lookups copy what they return.
#ifndef ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_
#define ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/assignment_codec.h"
#include "common/status.h"

namespace accelpool::plugin {

struct PodRef {
  std::string ns;
  std::string name;
  std::string uid;
  std::string created;  // metadata.creationTimestamp (RFC 3339 sorts as text)
  std::string Key() const { return ns + "/" + name; }
};

struct PodAssignment {
  PodRef pod;
  api::Assignment assignment;
  std::set<std::string> allocated;  // containers already allocated
};

// One container's share of an Allocate answer.
struct ContainerMatch {
  PodRef pod;
  api::AssignedContainer container;
  bool by_fallback = false;  // matched by resource + count, not by slot ids
  bool repeat = false;       // the container was allocated before (kubelet retried)
};

class AssignmentStore {
 public:
  // Adds or replaces the pod's assignment, keeping what was allocated when the
  // pod (uid) is the same.
  void Upsert(const PodRef& pod, const api::Assignment& assignment,
              const std::set<std::string>& allocated);
  void Remove(const std::string& uid);
  // Drops every pod whose uid is not in `live` (after a relist).
  void RetainOnly(const std::set<std::string>& live);

  // The container whose `resource` slots equal `slot_ids` (order ignored); a
  // pending container wins over an allocated one. Else the oldest pending
  // container with `resource` and that many devices (by_fallback). kNotFound
  // when neither exists; the message says what to check.
  StatusOr<ContainerMatch> Match(const std::string& resource,
                                 const std::vector<std::string>& slot_ids) const;

  // The slot ids of the oldest pending container of `resource` whose slots
  // number `size`, are all in `available` and include `must_include`.
  std::optional<std::vector<std::string>> Preferred(const std::string& resource,
                                                    const std::set<std::string>& available,
                                                    const std::vector<std::string>& must_include,
                                                    int32_t size) const;

  // Marks containers of the pod allocated; returns every allocated container
  // of the pod afterwards (for the allocation annotation).
  std::vector<std::string> MarkAllocated(const std::string& uid,
                                         const std::vector<std::string>& containers);

  // Every assignment (for usage metrics) and the number of pending containers.
  std::vector<PodAssignment> All() const;
  size_t PendingContainers() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, PodAssignment> pods_;  // by uid; guarded by mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_ASSIGNMENT_STORE_H_
