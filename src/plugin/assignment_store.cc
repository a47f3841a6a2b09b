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

// Pods oldest first (creation time, then namespace/name), leaving out pods
// being deleted: every lookup starts here, and such a pod is no caller.
std::vector<const PodAssignment*> Oldest(const std::map<std::string, PodAssignment>& pods) {
  std::vector<const PodAssignment*> v;
  for (const auto& [uid, p] : pods) {
    if (!p.terminating) v.push_back(&p);
  }
  std::sort(v.begin(), v.end(), [](const PodAssignment* a, const PodAssignment* b) {
    return std::tie(a->pod.created, a->pod.ns, a->pod.name) <
           std::tie(b->pod.created, b->pod.ns, b->pod.name);
  });
  return v;
}

// The allocated entries of `p`, in assignment order, then the keys of a
// record that named containers only (whatever their resources).
std::vector<api::AllocatedResource> InAssignmentOrder(const PodAssignment& p) {
  std::vector<api::AllocatedResource> out;
  for (const api::AssignedContainer& c : p.assignment.containers) {
    if (p.allocated.contains({c.name, c.resource})) out.push_back({c.name, c.resource});
  }
  for (const api::AllocatedResource& r : p.allocated) {
    if (r.resource.empty()) out.push_back(r);
  }
  return out;
}

}  // namespace

bool KubeletAdmitting(const KubeletView& kubelet, const PodRef& pod,
                      const api::AssignedContainer& container, const std::string& resource) {
  auto listed = kubelet.find(pod.Key());
  if (listed == kubelet.end()) {
    return false;
  }
  if (container.kind == core::ContainerKind::kInit) {
    return true;
  }
  auto c = listed->second.find(container.name);
  return c == listed->second.end() || c->second.count(resource) == 0;
}

void AssignmentStore::UpsertLocked(const PodRef& pod, const api::Assignment& assignment,
                                   const AllocatedSet& allocated, const AllocatedSet& presumed,
                                   bool terminating) {
  known_[pod.uid] = pod.Key();
  if (TurnedAwayLocked(pod.uid)) {
    return;  // kubelet never admits it again: no candidate
  }
  PodAssignment& p = pods_[pod.uid];
  p.pod = pod;
  p.assignment = assignment;
  p.terminating = terminating;
  p.allocated.insert(allocated.begin(), allocated.end());
  p.presumed.clear();
  for (const api::AllocatedResource& r : presumed) {
    if (!p.allocated.contains(r) && !p.allocated.contains({r.container, ""})) p.presumed.insert(r);
  }
}

void AssignmentStore::SetUnassignedLocked(const PodRef& pod,
                                          std::vector<UnassignedRequest> requests) {
  known_[pod.uid] = pod.Key();
  if (requests.empty() || TurnedAwayLocked(pod.uid)) {
    unassigned_.erase(pod.uid);
    return;
  }
  unassigned_[pod.uid] = Unassigned{pod, std::move(requests)};
}

bool AssignmentStore::TurnedAwayLocked(const std::string& uid) const {
  auto it = turned_away_.find(uid);
  return it != turned_away_.end() && std::chrono::steady_clock::now() - it->second <= kGoneMemory;
}

void AssignmentStore::Upsert(const PodRef& pod, const api::Assignment& assignment,
                             const AllocatedSet& allocated, const AllocatedSet& presumed) {
  std::lock_guard<std::mutex> lock(mu_);
  UpsertLocked(pod, assignment, allocated, presumed);
}

void AssignmentStore::SetUnassigned(const PodRef& pod, std::vector<UnassignedRequest> requests) {
  std::lock_guard<std::mutex> lock(mu_);
  SetUnassignedLocked(pod, std::move(requests));
}

void AssignmentStore::Replace(const PodRef& pod, const api::Assignment* assignment,
                              const AllocatedSet& allocated,
                              std::vector<UnassignedRequest> unassigned,
                              const AllocatedSet& presumed, bool terminating) {
  std::lock_guard<std::mutex> lock(mu_);
  if (assignment != nullptr) {
    UpsertLocked(pod, *assignment, allocated, presumed, terminating);
  } else {
    pods_.erase(pod.uid);
  }
  SetUnassignedLocked(pod, std::move(unassigned));
}

void AssignmentStore::Remove(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_.erase(uid);
  unassigned_.erase(uid);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(gone_, [&](const auto& g) { return now - g.second > kGoneMemory; });
  if (auto it = known_.find(uid); it != known_.end()) {
    gone_[it->second] = now;
    known_.erase(it);
  }
}

void AssignmentStore::SetPodsListed(std::function<bool()> listed) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_listed_ = std::move(listed);
}

bool AssignmentStore::RejectAdmission(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end() || it->second.terminating || !it->second.presumed.empty()) {
    return false;
  }
  pods_.erase(it);
  unassigned_.erase(uid);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(turned_away_, [&](const auto& t) { return now - t.second > kGoneMemory; });
  turned_away_[uid] = now;
  return true;
}

void AssignmentStore::RetainPending(const std::set<std::string>& pending) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pods_.begin(); it != pods_.end();) {
    it = pending.count(it->first) || !it->second.allocated.empty() || !it->second.presumed.empty()
             ? std::next(it)
             : pods_.erase(it);
  }
  for (auto it = unassigned_.begin(); it != unassigned_.end();) {
    it = pending.count(it->first) ? std::next(it) : unassigned_.erase(it);
  }
}

namespace {

// The first container of `p`, in assignment order (kubelet's: init containers
// in spec order, then the regular ones), still waiting for its Allocate that
// asks for `n` devices of `resource`; null when none.
const api::AssignedContainer* PendingOf(const PodAssignment& p, const std::string& resource,
                                        size_t n) {
  for (const api::AssignedContainer& c : p.assignment.containers) {
    if (c.resource == resource && c.devices.size() == n && !Holds(p.allocated, c)) {
      return &c;
    }
  }
  return nullptr;
}

// Whether kubelet may be admitting `p` now, by its view: kubelet adds a pod to
// its pod manager just before admitting it, so a pod it has not reached is not
// in the view; and a container kubelet lists (regular and sidecar ones; it
// does not list plain init containers) that already holds devices of
// `resource` was allocated before.
bool Admitting(const PodAssignment& p, const api::AssignedContainer& pending,
               const std::string& resource, const KubeletView& kubelet) {
  return KubeletAdmitting(kubelet, p.pod, pending, resource);
}

// The pod whose allocated plain init container holds one of `ids`: kubelet
// hands such devices only to later containers of the same pod.
const PodAssignment* ReusedBy(const std::vector<const PodAssignment*>& pods,
                              const std::string& resource, const std::vector<std::string>& ids) {
  for (const PodAssignment* p : pods) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (c.kind != core::ContainerKind::kInit || c.resource != resource ||
          !Holds(p->allocated, c)) {
        continue;
      }
      for (const api::AssignedDevice& d : c.devices) {
        if (std::find(ids.begin(), ids.end(), d.slot) != ids.end()) {
          return p;
        }
      }
    }
  }
  return nullptr;
}

}  // namespace

std::optional<AssignmentStore::Pods> AssignmentStore::WithPresumedAllocated(const Pods& pods) {
  if (std::none_of(pods.begin(), pods.end(),
                   [](const auto& kv) { return !kv.second.presumed.empty(); })) {
    return std::nullopt;
  }
  Pods merged = pods;
  for (auto& [uid, p] : merged) {
    p.allocated.insert(p.presumed.begin(), p.presumed.end());
    p.presumed.clear();
  }
  return merged;
}

// Whether kubelet may pick the container's own slots: each is available (or
// must be included) and every must-include id is one of them.
bool FitsPreferred(const api::AssignedContainer& c, const std::set<std::string>& available,
                   const std::vector<std::string>& must_include) {
  std::vector<std::string> slots = SortedSlots(c);
  return std::all_of(slots.begin(), slots.end(),
                     [&](const std::string& s) {
                       return available.count(s) > 0 ||
                              std::find(must_include.begin(), must_include.end(), s) !=
                                  must_include.end();
                     }) &&
         std::all_of(must_include.begin(), must_include.end(), [&](const std::string& m) {
           return std::binary_search(slots.begin(), slots.end(), m);
         });
}

std::vector<std::string> SlotsOf(const api::AssignedContainer& c) {
  std::vector<std::string> out;
  for (const api::AssignedDevice& d : c.devices) {
    out.push_back(d.slot);
  }
  return out;
}

// A pod's container of `resource` x `n` allocated before (or presumed) whose
// slots kubelet reports free: the pod may be one kubelet admits again. One per
// pod (its first, in kubelet's order), in the order of `pods`.
using Candidates = std::vector<std::pair<const PodAssignment*, const api::AssignedContainer*>>;
Candidates ReadmissionCandidates(const std::vector<const PodAssignment*>& pods,
                                 const std::string& resource,
                                 const std::set<std::string>& available,
                                 const std::vector<std::string>& must_include, size_t n) {
  Candidates again;
  for (const PodAssignment* p : pods) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (c.resource == resource && c.devices.size() == n && n > 0 &&
          (Holds(p->allocated, c) || Holds(p->presumed, c)) &&
          FitsPreferred(c, available, must_include)) {
        again.emplace_back(p, &c);
        break;
      }
    }
  }
  return again;
}

// The one candidate kubelet's view lists as being admitted (its container
// without devices), or null when none or several are.
const api::AssignedContainer* OneListed(const Candidates& again, const std::string& resource,
                                        const KubeletView& kubelet) {
  const api::AssignedContainer* listed = nullptr;
  for (const auto& [p, c] : again) {
    if (!Admitting(*p, *c, resource, kubelet)) continue;
    if (listed != nullptr) return nullptr;
    listed = c;
  }
  return listed;
}

bool AssignmentStore::PresumedAsks(const std::string& resource, size_t n) const {
  for (const auto& [uid, p] : pods_) {
    if (p.terminating) continue;
    for (const api::AssignedContainer& c : p.assignment.containers) {
      if (Holds(p.presumed, c) && c.resource == resource && c.devices.size() == n) {
        return true;
      }
    }
  }
  return false;
}

void AssignmentStore::ListedWithoutAssignment(const std::string& resource, size_t n,
                                              const KubeletView& kubelet,
                                              std::vector<PodRef>* known,
                                              std::vector<PodRef>* unknown) const {
  std::set<std::string> seen;
  for (const auto& [uid, key] : known_) seen.insert(key);
  for (const auto& [key, when] : gone_) seen.insert(key);
  for (const auto& [uid, u] : unassigned_) {
    if (!kubelet.count(u.pod.Key())) continue;
    if (std::any_of(u.requests.begin(), u.requests.end(), [&](const UnassignedRequest& r) {
          return r.resource == resource && (r.count < 0 || r.count == static_cast<int64_t>(n));
        })) {
      known->push_back(u.pod);
    }
  }
  // Until the node's pods are listed, every pod is unknown: none is a stranger.
  if (pods_listed_ && !pods_listed_()) return;
  for (const auto& [key, containers] : kubelet) {
    if (seen.count(key)) continue;
    const bool holds_all = !containers.empty() &&
                           std::all_of(containers.begin(), containers.end(),
                                       [&](const auto& c) { return c.second.count(resource) > 0; });
    if (holds_all) continue;
    const size_t slash = key.find('/');
    PodRef pod;
    pod.ns = key.substr(0, slash);
    pod.name = slash == std::string::npos ? std::string() : key.substr(slash + 1);
    unknown->push_back(std::move(pod));
  }
}

StatusOr<ContainerMatch> AssignmentStore::Match(const std::string& resource,
                                                const std::vector<std::string>& slot_ids,
                                                std::optional<PodRef>* caller,
                                                const KubeletView* kubelet,
                                                const AnsweredContainers* answered) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The containers answered earlier in this call are left out altogether:
  // counted as allocated they would still match as repeats.
  std::optional<Pods> rest;
  if (answered != nullptr && !answered->empty()) {
    rest = pods_;
    for (const auto& done : *answered) {  // not a structured binding: the lambda captures it
      auto it = rest->find(done.first);
      if (it == rest->end()) continue;
      std::erase_if(it->second.assignment.containers,
                    [&](const api::AssignedContainer& c) { return c.name == done.second; });
    }
  }
  const Pods& pods = rest.has_value() ? *rest : pods_;
  const std::optional<Pods> merged = WithPresumedAllocated(pods);
  if (!merged.has_value()) {
    return MatchIn(pods, resource, slot_ids, caller, kubelet);
  }
  StatusOr<ContainerMatch> m = MatchIn(*merged, resource, slot_ids, caller, kubelet);
  if ((m.ok() && !m->repeat) || !PresumedAsks(resource, slot_ids.size())) {
    return m;
  }
  // Nobody pending is the caller, or only a repeat of an earlier call names
  // these ids (a container reusing its init container's devices sends the
  // init container's ids): an admitted pod's presumed container may be.
  std::optional<PodRef> first_caller = caller != nullptr ? *caller : std::nullopt;
  if (caller != nullptr) caller->reset();
  StatusOr<ContainerMatch> again = MatchIn(pods, resource, slot_ids, caller, kubelet);
  if (again.ok()) {
    const auto p = pods.find(again->pod.uid);
    again->presumed = p != pods.end() && Holds(p->second.presumed, again->container);
  }
  if (again.ok() || !m.ok()) {
    return again;
  }
  if (caller != nullptr) *caller = first_caller;
  return m;  // the repeat
}

StatusOr<ContainerMatch> AssignmentStore::MatchIn(const Pods& pods, const std::string& resource,
                                                  const std::vector<std::string>& slot_ids,
                                                  std::optional<PodRef>* caller,
                                                  const KubeletView* kubelet) const {
  std::vector<std::string> want = slot_ids;
  std::sort(want.begin(), want.end());
  const size_t n = slot_ids.size();
  const std::vector<const PodAssignment*> oldest = Oldest(pods);

  // The container whose slots are exactly the ids (a pending one wins).
  const PodAssignment* exact_pod = nullptr;
  const api::AssignedContainer* exact = nullptr;
  for (const PodAssignment* p : oldest) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (c.resource != resource || SortedSlots(c) != want) {
        continue;
      }
      const bool pending = !Holds(p->allocated, c);
      if (exact == nullptr || (pending && Holds(exact_pod->allocated, *exact))) {
        exact_pod = p;
        exact = &c;
      }
    }
  }
  const bool exact_pending = exact != nullptr && !Holds(exact_pod->allocated, *exact);

  // Everyone who could be asking for n devices of `resource`.
  std::vector<const PodAssignment*> shape;
  for (const PodAssignment* p : oldest) {
    if (PendingOf(*p, resource, n) != nullptr) {
      shape.push_back(p);
    }
  }
  std::vector<std::string> unassigned;            // "<ns>/<name>/<container>"
  std::map<std::string, PodRef> unassigned_pods;  // by uid
  for (const auto& [uid, u] : unassigned_) {
    for (const UnassignedRequest& r : u.requests) {
      if (r.resource == resource && (r.count < 0 || r.count == static_cast<int64_t>(n))) {
        unassigned.push_back(u.pod.Key() + "/" + r.container);
        unassigned_pods[uid] = u.pod;
      }
    }
  }
  const std::string asks = std::to_string(n) + " of " + resource;
  const std::string schedule =
      "pods that ask for " + resource +
      " must be scheduled through the accelpool extender (spec.schedulerName of the accelpool "
      "scheduler profile, accelpool-scheduler by default, which the accelpool webhook sets); "
      "delete the pod and create it again";
  const auto no_assignment = [&](const PodRef& pod) {
    if (caller != nullptr) {
      *caller = pod;
    }
    return NotFoundError("pod " + pod.Key() + " asks for " + asks +
                         " but has no accelpool assignment for it (" + api::kAssignmentAnnotation +
                         " is missing or was refused); " + schedule);
  };

  // The ids are exactly the slots of an allocated container while others
  // wait with the shape: a pod kubelet admits again after losing its
  // checkpoint ("Admitted again"), or a finished pod the watch has not
  // reported yet whose ids kubelet hands to a waiting one. Kubelet's view
  // tells them apart: it lists the pod it admits (its container without
  // devices), not a pod it has not reached.
  const bool readmission = exact != nullptr && !exact_pending && !shape.empty() &&
                           std::find(shape.begin(), shape.end(), exact_pod) == shape.end();
  if (readmission && kubelet != nullptr && Admitting(*exact_pod, *exact, resource, *kubelet) &&
      std::none_of(shape.begin(), shape.end(), [&](const PodAssignment* p) {
        return Admitting(*p, *PendingOf(*p, resource, n), resource, *kubelet);
      })) {
    ContainerMatch m{exact_pod->pod, *exact, false, true};
    m.how = ContainerMatch::How::kKubelet;
    return m;
  }

  // Who is calling, most certain first.
  const PodAssignment* who = nullptr;
  ContainerMatch::How how = ContainerMatch::How::kSlots;
  // Once kubelet's view is read, only a pod it lists may be answered (it
  // adds a pod to its pod manager before admitting it). Null: no view, or one
  // that lists no pod that may be waiting (a kubelet that lists pods only
  // once they run), which tells nothing; the slot ids and the only candidate
  // decide as without it.
  std::optional<std::vector<const PodAssignment*>> listed;
  bool listed_several = false;  // the view lists several pods of the shape
  std::vector<std::string> listed_keys;
  if (const PodAssignment* reuse = ReusedBy(oldest, resource, slot_ids);
      reuse != nullptr && PendingOf(*reuse, resource, n) != nullptr) {
    who = reuse;
    how = ContainerMatch::How::kInitReuse;
  } else if (kubelet != nullptr) {
    std::vector<const PodAssignment*> admitting;
    for (const PodAssignment* p : shape) {
      if (Admitting(*p, *PendingOf(*p, resource, n), resource, *kubelet)) {
        admitting.push_back(p);
      }
    }
    std::vector<PodRef> admitting_unassigned;
    std::vector<PodRef> admitting_unknown;
    ListedWithoutAssignment(resource, n, *kubelet, &admitting_unassigned, &admitting_unknown);
    if (admitting.size() == 1 && admitting_unassigned.empty()) {
      who = admitting.front();
      how = ContainerMatch::How::kKubelet;
    } else if (admitting.size() > 1) {
      // Kubelet admits one pod at a time, oldest first, adding each to its
      // pod manager just before; the older ones it lists were turned away
      // (a kubelet before 1.34 lists them until they are deleted). `shape`
      // is oldest first.
      who = admitting.back();
      how = ContainerMatch::How::kKubelet;
      listed_several = true;
      for (const PodAssignment* p : admitting) listed_keys.push_back(p->pod.Key());
      for (const PodRef& p : admitting_unassigned) listed_keys.push_back(p.Key());
      for (const PodRef& p : admitting_unknown) listed_keys.push_back(p.Key());
    } else if (admitting.empty()) {
      // None of the pods waiting with the shape is listed: the caller is a
      // listed pod without an assignment. A pod the plugin does not know
      // counts only here: while a pod of the shape is listed, it is the one
      // kubelet admits, and an unknown pod listed beside it is a running one
      // (a static pod whose mirror pod is missing).
      admitting_unassigned.insert(admitting_unassigned.end(), admitting_unknown.begin(),
                                  admitting_unknown.end());
      if (admitting_unassigned.size() == 1) {
        return no_assignment(admitting_unassigned.front());
      }
      if (admitting_unassigned.size() > 1) {
        std::vector<std::string> keys;
        for (const PodRef& p : admitting_unassigned) keys.push_back(p.Key());
        return AbortedError("kubelet's pod-resources API lists " + std::to_string(keys.size()) +
                            " pods that could be asking for " + asks +
                            " without an accelpool assignment ([" + List(keys) +
                            "]) and none of the pods assigned that shape here; " + schedule);
      }
    }
    if (!admitting.empty() || !admitting_unassigned.empty()) {
      listed = std::move(admitting);
    }
  }
  const auto is_listed = [&](const PodAssignment* p) {
    return !listed.has_value() || std::find(listed->begin(), listed->end(), p) != listed->end();
  };
  if (who == nullptr && exact_pending && is_listed(exact_pod)) {
    who = exact_pod;
    how = ContainerMatch::How::kSlots;
  }
  if (who == nullptr && shape.size() == 1 && unassigned.empty() && is_listed(shape.front())) {
    who = shape.front();
    how = ContainerMatch::How::kOnlyCandidate;
  }
  if (who == nullptr && exact != nullptr && is_listed(exact_pod)) {
    // Those ids were allocated before: kubelet repeats a call whose answer it
    // lost. While pods wait with the shape, one of them may be the caller,
    // handed the ids of a pod that finished before the watch said so: the
    // match is ambiguous, and kubelet's view decides (it lists the pod it
    // admits). A view that lists others as being admitted, and not this
    // pod, names no repeat.
    ContainerMatch m{exact_pod->pod, *exact, false, true};
    m.ambiguous = readmission;
    return m;
  }
  if (who == nullptr) {
    if (shape.empty() && unassigned_pods.size() == 1) {
      return no_assignment(unassigned_pods.begin()->second);
    }
    if (shape.empty() && unassigned.empty()) {
      return NotFoundError("no pending assignment on this node names slots [" + List(want) +
                           "] or asks for " + asks +
                           "; was the pod scheduled by the accelpool scheduler profile?");
    }
    std::vector<std::string> pending;
    for (const PodAssignment* p : shape) {
      pending.push_back(p->pod.Key() + "/" + PendingOf(*p, resource, n)->name);
    }
    return AbortedError(
        "slots [" + List(want) + "] name no assignment, and " +
        std::to_string(pending.size() + unassigned.size()) +
        " containers on this node could be asking for " + asks + " (pending with an assignment: [" +
        List(pending) + "]; without one: [" + List(unassigned) + "]); " +
        (kubelet == nullptr ? "kubelet's pod-resources API was not asked"
                            : "kubelet's pod-resources API does not tell them apart either") +
        ", so the plugin refuses rather than give one pod another pod's devices. If this pod has "
        "no " +
        api::kAssignmentAnnotation + ": " + schedule +
        ". If it has one: delete it and create it again once the other pods have started");
  }
  const api::AssignedContainer* c = PendingOf(*who, resource, n);
  if (how == ContainerMatch::How::kSlots) {
    c = exact;  // exactly the ids; PendingOf could name an earlier container of the same shape
  }
  ContainerMatch m{who->pod, *c, how == ContainerMatch::How::kOnlyCandidate, false};
  m.how = how;
  // Chosen by the ids alone while other pods could be asking too: right when
  // GetPreferredAllocation steered kubelet to this pod's slots for this pod.
  m.ambiguous =
      how == ContainerMatch::How::kSlots &&
      (std::any_of(shape.begin(), shape.end(), [&](const PodAssignment* p) { return p != who; }) ||
       !unassigned_pods.empty());
  // The only candidate, but the ids name an allocated container exactly: ask
  // kubelet whether that pod is being admitted again.
  if (how == ContainerMatch::How::kOnlyCandidate && readmission && kubelet == nullptr) {
    m.ambiguous = true;
  }
  m.listed_several = listed_several;
  m.listed = std::move(listed_keys);
  m.ambiguous = m.ambiguous || listed_several;
  return m;
}

PreferredAnswer AssignmentStore::Preferred(const std::string& resource,
                                           const std::set<std::string>& available,
                                           const std::vector<std::string>& must_include,
                                           int32_t size, const KubeletView* kubelet) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<Pods> merged = WithPresumedAllocated(pods_);
  if (!merged.has_value()) {
    PreferredAnswer a = PreferredIn(pods_, resource, available, must_include, size, kubelet);
    return a.slots.has_value() ? a : Readmitted(resource, available, must_include, size, kubelet);
  }
  PreferredAnswer a = PreferredIn(*merged, resource, available, must_include, size, kubelet);
  if (a.slots.has_value() || !PresumedAsks(resource, static_cast<size_t>(std::max(size, 0)))) {
    return a.slots.has_value() ? a : Readmitted(resource, available, must_include, size, kubelet);
  }
  a = PreferredIn(pods_, resource, available, must_include, size, kubelet);
  return a.slots.has_value() ? a : Readmitted(resource, available, must_include, size, kubelet);
}

PreferredAnswer AssignmentStore::Readmitted(const std::string& resource,
                                            const std::set<std::string>& available,
                                            const std::vector<std::string>& must_include,
                                            int32_t size, const KubeletView* kubelet) const {
  const size_t n = static_cast<size_t>(std::max(size, 0));
  const Candidates again =
      ReadmissionCandidates(Oldest(pods_), resource, available, must_include, n);
  PreferredAnswer answer;
  if (again.empty()) return answer;
  answer.readmitted = true;
  if (again.size() > 1 && kubelet != nullptr) {
    if (const api::AssignedContainer* c = OneListed(again, resource, *kubelet); c != nullptr) {
      answer.slots = SlotsOf(*c);
      return answer;
    }
  }
  answer.ambiguous = again.size() > 1;
  answer.slots = SlotsOf(*again.front().second);
  return answer;
}

PreferredAnswer AssignmentStore::PreferredIn(const Pods& pods, const std::string& resource,
                                             const std::set<std::string>& available,
                                             const std::vector<std::string>& must_include,
                                             int32_t size, const KubeletView* kubelet) const {
  const size_t n = static_cast<size_t>(std::max(size, 0));
  const std::vector<const PodAssignment*> oldest = Oldest(pods);
  std::vector<const PodAssignment*> shape;
  for (const PodAssignment* p : oldest) {
    if (PendingOf(*p, resource, n) != nullptr) {
      shape.push_back(p);
    }
  }
  // Pods waiting with the shape, and an allocated container of the shape
  // whose slots kubelet reports free (a pod it admits again after losing its
  // checkpoint, or a finished pod the watch has not reported yet): kubelet's
  // view tells them apart; without it, the waiting pods are preferred as
  // before, and the answer is marked ambiguous so that the view is asked.
  bool readmission = false;
  if (!shape.empty()) {
    // A pod waiting itself is being admitted now: its allocated containers are
    // the earlier ones of that admission (an init container whose devices a
    // later one reuses), not a pod admitted again.
    Candidates again = ReadmissionCandidates(oldest, resource, available, must_include, n);
    std::erase_if(again, [&](const auto& pc) {
      return std::find(shape.begin(), shape.end(), pc.first) != shape.end();
    });
    readmission = !again.empty();
    if (readmission && kubelet != nullptr) {
      const api::AssignedContainer* listed = OneListed(again, resource, *kubelet);
      const bool pending_listed =
          std::any_of(shape.begin(), shape.end(), [&](const PodAssignment* p) {
            return Admitting(*p, *PendingOf(*p, resource, n), resource, *kubelet);
          });
      if (listed != nullptr && !pending_listed) {
        PreferredAnswer a;
        a.slots = SlotsOf(*listed);
        a.readmitted = true;
        return a;
      }
    }
  }
  PreferredAnswer answer =
      PreferredForPending(oldest, shape, resource, available, must_include, n, kubelet);
  if (readmission && kubelet == nullptr && answer.slots.has_value()) answer.ambiguous = true;
  return answer;
}

PreferredAnswer AssignmentStore::PreferredForPending(
    const std::vector<const PodAssignment*>& oldest, const std::vector<const PodAssignment*>& shape,
    const std::string& resource, const std::set<std::string>& available,
    const std::vector<std::string>& must_include, size_t n, const KubeletView* kubelet) const {
  const auto fits = [&](const api::AssignedContainer& c) {
    return FitsPreferred(c, available, must_include);
  };
  const PodAssignment* who = nullptr;
  PreferredAnswer answer;
  if (const PodAssignment* reuse = ReusedBy(oldest, resource, must_include);
      reuse != nullptr && PendingOf(*reuse, resource, n) != nullptr) {
    who = reuse;  // kubelet must include devices an init container of this pod held
  } else if (!shape.empty()) {
    if (kubelet != nullptr) {
      // As in MatchIn: once the view is read, a pod it does not list is not
      // the caller, unless it lists no pod that may be waiting at all.
      std::vector<const PodAssignment*> admitting;
      for (const PodAssignment* p : shape) {
        if (Admitting(*p, *PendingOf(*p, resource, n), resource, *kubelet)) {
          admitting.push_back(p);
        }
      }
      std::vector<PodRef> known;
      std::vector<PodRef> unknown;
      ListedWithoutAssignment(resource, n, *kubelet, &known, &unknown);
      if (admitting.size() == 1) {
        who = admitting.front();
      } else if (admitting.size() > 1) {
        // Several listed: all but one were turned away, and Allocate settles
        // which one calls by re-reading the node's pods. Slots nobody is
        // promised, so that kubelet takes no turned-away pod's.
        answer.foreign = true;
        answer.listed_several = true;
      } else if (admitting.empty() && (!known.empty() || !unknown.empty())) {
        answer.foreign = true;  // a pod without an assignment: nobody's slots
      }
    } else if (shape.size() == 1) {
      who = shape.front();
      answer.unchecked = true;
    }
    if (who == nullptr && shape.size() == 1 && !answer.foreign) {
      who = shape.front();
    }
    if (who == nullptr && !answer.foreign) {
      // Several pods wait with this shape and nothing here says which one
      // kubelet is admitting: the oldest whose slots are free, as kubelet
      // orders the pods it receives together. The caller may ask kubelet and
      // call again.
      answer.ambiguous = true;
      for (const PodAssignment* p : shape) {
        const api::AssignedContainer* c = PendingOf(*p, resource, n);
        if (fits(*c)) {
          answer.slots = SlotsOf(*c);
          return answer;
        }
      }
      return answer;
    }
  }
  if (who == nullptr && !answer.foreign) {
    return answer;
  }
  const api::AssignedContainer* c = who != nullptr ? PendingOf(*who, resource, n) : nullptr;
  if (c != nullptr && fits(*c)) {
    answer.slots = SlotsOf(*c);
    return answer;
  }
  // Its own slots are not free (kubelet keeps a sidecar's devices, or gave
  // them to a container whose ids named nobody), or the caller has no
  // assignment here (`foreign`): offer slots no pending container is
  // assigned, so that kubelet takes nobody else's; Allocate answers with the
  // caller's own assignment whatever the ids.
  std::set<std::string> promised;
  for (const PodAssignment* p : oldest) {
    for (const api::AssignedContainer& other : p->assignment.containers) {
      if (!Holds(p->allocated, other)) {
        for (const api::AssignedDevice& d : other.devices) {
          promised.insert(d.slot);
        }
      }
    }
  }
  // Kubelet records the ids it picks (pod-resources, the device health in the
  // pod's allocatedResourcesStatus), so a slot of each of the caller's own
  // devices comes first: the record then names the devices the container gets.
  std::vector<std::string> spare = must_include;
  std::set<std::string> on_device;  // devices `spare` has a slot of
  const auto device_of = [](const std::string& slot) {
    StatusOr<std::pair<std::string, int32_t>> parsed = api::ParseSlotId(slot);
    return parsed.ok() ? parsed->first : std::string();
  };
  const auto usable = [&](const std::string& id) {
    return !promised.count(id) && std::find(spare.begin(), spare.end(), id) == spare.end();
  };
  for (const std::string& id : spare) {
    on_device.insert(device_of(id));
  }
  for (const api::AssignedDevice& d :
       c != nullptr ? c->devices : std::vector<api::AssignedDevice>{}) {
    if (spare.size() >= n || on_device.count(d.id)) {
      continue;
    }
    for (auto it = available.lower_bound(d.id + "::");
         it != available.end() && it->compare(0, d.id.size() + 2, d.id + "::") == 0; ++it) {
      if (device_of(*it) == d.id && usable(*it)) {
        spare.push_back(*it);
        on_device.insert(d.id);
        break;
      }
    }
  }
  for (const std::string& id : available) {
    if (spare.size() >= n) {
      break;
    }
    if (usable(id)) {
      spare.push_back(id);
    }
  }
  if (spare.size() == n) {
    answer.slots = std::move(spare);
  }
  return answer;
}

std::vector<api::AllocatedResource> AssignmentStore::MarkAllocated(
    const std::string& uid, const std::string& resource,
    const std::vector<std::string>& containers) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) {
    std::vector<api::AllocatedResource> out;
    for (const std::string& c : containers) out.push_back({c, resource});
    return out;
  }
  for (const std::string& c : containers) {
    it->second.allocated.insert({c, resource});
    it->second.presumed.erase({c, resource});
  }
  return InAssignmentOrder(it->second);
}

std::vector<api::AllocatedResource> AssignmentStore::AllocatedContainers(
    const std::string& uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(uid);
  return it == pods_.end() ? std::vector<api::AllocatedResource>() : InAssignmentOrder(it->second);
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
      n += Holds(p.allocated, c) || Holds(p.presumed, c) ? 0 : 1;
    }
  }
  return n;
}

}  // namespace accelpool::plugin
