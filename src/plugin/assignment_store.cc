#include "plugin/assignment_store.h"

#include <algorithm>
#include <tuple>

namespace accelpool::plugin {
namespace {

std::vector<std::string> SortedSlots(const api::AssignedContainer& c) {
  std::vector<std::string> s;
  for (const api::AssignedDevice& d : c.devices) {
    s.push_back(d.slot);
  }
  std::sort(s.begin(), s.end());
  return s;
}

// "a,b,c", at most kMax items and then "... (N more)".
std::string List(const std::vector<std::string>& items) {
  constexpr size_t kMax = 8;
  std::string s;
  for (size_t i = 0; i < items.size() && i < kMax; ++i) {
    s += (i == 0 ? "" : ",") + items[i];
  }
  if (items.size() > kMax) {
    s += ",... (" + std::to_string(items.size() - kMax) + " more)";
  }
  return s;
}

// Pods oldest first (creation time, then namespace/name).
std::vector<const PodAssignment*> Oldest(const std::map<std::string, PodAssignment>& pods) {
  std::vector<const PodAssignment*> v;
  for (const auto& [uid, p] : pods) {
    v.push_back(&p);
  }
  std::sort(v.begin(), v.end(), [](const PodAssignment* a, const PodAssignment* b) {
    return std::tie(a->pod.created, a->pod.ns, a->pod.name) <
           std::tie(b->pod.created, b->pod.ns, b->pod.name);
  });
  return v;
}

// The allocated containers of `p`, in assignment order, each once.
std::vector<std::string> InAssignmentOrder(const PodAssignment& p) {
  std::vector<std::string> out;
  for (const api::AssignedContainer& c : p.assignment.containers) {
    if (p.allocated.count(c.name) && std::find(out.begin(), out.end(), c.name) == out.end()) {
      out.push_back(c.name);
    }
  }
  return out;
}

}  // namespace

void AssignmentStore::UpsertLocked(const PodRef& pod, const api::Assignment& assignment,
                                   const std::set<std::string>& allocated) {
  PodAssignment& p = pods_[pod.uid];
  p.pod = pod;
  p.assignment = assignment;
  p.allocated.insert(allocated.begin(), allocated.end());
}

void AssignmentStore::SetUnassignedLocked(const PodRef& pod,
                                          std::vector<UnassignedRequest> requests) {
  if (requests.empty()) {
    unassigned_.erase(pod.uid);
    return;
  }
  unassigned_[pod.uid] = Unassigned{pod, std::move(requests)};
}

void AssignmentStore::Upsert(const PodRef& pod, const api::Assignment& assignment,
                             const std::set<std::string>& allocated) {
  std::lock_guard<std::mutex> lock(mu_);
  UpsertLocked(pod, assignment, allocated);
}

void AssignmentStore::SetUnassigned(const PodRef& pod, std::vector<UnassignedRequest> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  SetUnassignedLocked(pod, std::move(requests));
}

void AssignmentStore::Replace(const PodRef& pod, const api::Assignment* assignment,
                              const std::set<std::string>& allocated,
                              std::vector<UnassignedRequest> unassigned) {
  std::lock_guard<std::mutex> lock(mu_);
  if (assignment != nullptr) {
    UpsertLocked(pod, *assignment, allocated);
  } else {
    pods_.erase(pod.uid);
  }
  SetUnassignedLocked(pod, std::move(unassigned));
}

void AssignmentStore::Remove(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_.erase(uid);
  unassigned_.erase(uid);
}

void AssignmentStore::RetainPending(const std::set<std::string>& pending) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pods_.begin(); it != pods_.end();) {
    it = pending.count(it->first) || !it->second.allocated.empty() ? std::next(it)
                                                                    : pods_.erase(it);
  }
  for (auto it = unassigned_.begin(); it != unassigned_.end();) {
    it = pending.count(it->first) ? std::next(it) : unassigned_.erase(it);
  }
}

StatusOr<ContainerMatch> AssignmentStore::Match(const std::string& resource,
                                                const std::vector<std::string>& slot_ids,
                                                std::optional<PodRef>* caller) const {
  std::vector<std::string> want = slot_ids;
  std::sort(want.begin(), want.end());
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<ContainerMatch> repeat;
  for (const PodAssignment* p : Oldest(pods_)) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (c.resource != resource || SortedSlots(c) != want) {
        continue;
      }
      bool done = p->allocated.count(c.name) > 0;
      if (!done) {
        return ContainerMatch{p->pod, c, false, false};
      }
      if (!repeat.has_value()) {
        repeat = ContainerMatch{p->pod, c, false, true};
      }
    }
  }
  if (repeat.has_value()) {
    return *repeat;
  }
  // The ids identify nobody: list everyone who could be asking for this many
  // devices of `resource`, and answer only when that is a single container.
  std::vector<ContainerMatch> candidates;
  for (const PodAssignment* p : Oldest(pods_)) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (c.resource == resource && c.devices.size() == slot_ids.size() &&
          p->allocated.count(c.name) == 0) {
        candidates.push_back(ContainerMatch{p->pod, c, true, false});
      }
    }
  }
  std::vector<std::string> unassigned;  // "<ns>/<name>/<container>"
  std::optional<PodRef> unassigned_pod;
  std::set<std::string> unassigned_pods;
  for (const auto& [uid, u] : unassigned_) {
    for (const UnassignedRequest& r : u.requests) {
      if (r.resource == resource &&
          (r.count < 0 || r.count == static_cast<int64_t>(slot_ids.size()))) {
        unassigned.push_back(u.pod.Key() + "/" + r.container);
        unassigned_pods.insert(uid);
        unassigned_pod = u.pod;
      }
    }
  }
  if (candidates.size() == 1 && unassigned.empty()) {
    return candidates.front();
  }
  const std::string asks = std::to_string(slot_ids.size()) + " of " + resource;
  const std::string schedule =
      "pods that ask for " + resource +
      " must be scheduled through the accelpool extender (spec.schedulerName of the accelpool "
      "scheduler profile, accelpool-scheduler by default, which the accelpool webhook sets); "
      "delete the pod and create it again";
  if (candidates.empty() && unassigned_pods.size() == 1) {
    if (caller != nullptr) {
      *caller = unassigned_pod;
    }
    return NotFoundError("pod " + unassigned_pod->Key() + " asks for " + asks +
                         " but has no accelpool assignment for it (" + api::kAssignmentAnnotation +
                         " is missing or was refused); " + schedule);
  }
  if (candidates.empty() && unassigned.empty()) {
    return NotFoundError("no pending assignment on this node names slots [" + List(want) +
                         "] or asks for " + asks +
                         "; was the pod scheduled by the accelpool scheduler profile?");
  }
  std::vector<std::string> pending;
  for (const ContainerMatch& m : candidates) {
    pending.push_back(m.pod.Key() + "/" + m.container.name);
  }
  return AbortedError(
      "slots [" + List(want) + "] name no assignment, and " +
      std::to_string(candidates.size() + unassigned.size()) +
      " containers on this node could be asking for " + asks + " (pending with an assignment: [" +
      List(pending) + "]; without one: [" + List(unassigned) +
      "]); the plugin cannot tell which, and refuses rather than give one pod another pod's "
      "devices. If this pod has no " +
      api::kAssignmentAnnotation + ": " + schedule +
      ". If it has one: delete it and create it again once the other pods have started");
}

std::optional<std::vector<std::string>> AssignmentStore::Preferred(
    const std::string& resource, const std::set<std::string>& available,
    const std::vector<std::string>& must_include, int32_t size) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const PodAssignment* p : Oldest(pods_)) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (c.resource != resource || static_cast<int32_t>(c.devices.size()) != size ||
          p->allocated.count(c.name) > 0) {
        continue;
      }
      std::vector<std::string> slots = SortedSlots(c);
      bool all_available = std::all_of(slots.begin(), slots.end(),
                                       [&](const std::string& s) { return available.count(s); });
      bool includes = std::all_of(must_include.begin(), must_include.end(), [&](const auto& m) {
        return std::binary_search(slots.begin(), slots.end(), m);
      });
      if (all_available && includes) {
        std::vector<std::string> out;
        for (const api::AssignedDevice& d : c.devices) {
          out.push_back(d.slot);
        }
        return out;
      }
    }
  }
  return std::nullopt;
}

std::vector<std::string> AssignmentStore::MarkAllocated(
    const std::string& uid, const std::vector<std::string>& containers) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) {
    return containers;
  }
  it->second.allocated.insert(containers.begin(), containers.end());
  return InAssignmentOrder(it->second);
}

std::vector<std::string> AssignmentStore::AllocatedContainers(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(uid);
  return it == pods_.end() ? std::vector<std::string>() : InAssignmentOrder(it->second);
}

std::vector<PodAssignment> AssignmentStore::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PodAssignment> out;
  for (const auto& [uid, p] : pods_) {
    out.push_back(p);
  }
  return out;
}

size_t AssignmentStore::PendingContainers() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [uid, p] : pods_) {
    for (const api::AssignedContainer& c : p.assignment.containers) {
      n += p.allocated.count(c.name) ? 0 : 1;
    }
  }
  return n;
}

}  // namespace accelpool::plugin
