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

}  // namespace

void AssignmentStore::Upsert(const PodRef& pod, const api::Assignment& assignment,
                             const std::set<std::string>& allocated) {
  std::lock_guard<std::mutex> lock(mu_);
  PodAssignment& p = pods_[pod.uid];
  p.pod = pod;
  p.assignment = assignment;
  p.allocated.insert(allocated.begin(), allocated.end());
}

void AssignmentStore::Remove(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_.erase(uid);
}

void AssignmentStore::RetainOnly(const std::set<std::string>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pods_.begin(); it != pods_.end();) {
    it = live.count(it->first) ? std::next(it) : pods_.erase(it);
  }
}

StatusOr<ContainerMatch> AssignmentStore::Match(const std::string& resource,
                                                const std::vector<std::string>& slot_ids) const {
  std::vector<std::string> want = slot_ids;
  std::sort(want.begin(), want.end());
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<ContainerMatch> repeat;
  for (const PodAssignment* p : Oldest(pods_)) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (SortedSlots(c) != want) {
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
  for (const PodAssignment* p : Oldest(pods_)) {
    for (const api::AssignedContainer& c : p->assignment.containers) {
      if (c.resource == resource && c.devices.size() == slot_ids.size() &&
          p->allocated.count(c.name) == 0) {
        return ContainerMatch{p->pod, c, true, false};
      }
    }
  }
  return NotFoundError("no pending assignment on this node names slots [" +
                       [&] {
                         std::string s;
                         for (const std::string& id : want) {
                           s += (s.empty() ? "" : ",") + id;
                         }
                         return s;
                       }() +
                       "] or asks for " + std::to_string(slot_ids.size()) + " of " + resource +
                       "; was the pod scheduled by the accelpool scheduler profile?");
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
  std::vector<std::string> out;
  for (const api::AssignedContainer& c : it->second.assignment.containers) {
    if (it->second.allocated.count(c.name) &&
        std::find(out.begin(), out.end(), c.name) == out.end()) {
      out.push_back(c.name);
    }
  }
  return out;
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
