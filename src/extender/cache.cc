#include "extender/cache.h"

#include <functional>
#include <utility>

namespace accelpool::extender {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Cache::Cache() { Touch(); }

void Cache::Touch() { last_change_ns_.store(NowNs()); }

Cache::Shard& Cache::ShardOf(const std::string& node) const {
  return shards_[std::hash<std::string>{}(node) % kShards];
}

int Cache::UpsertNode(const std::string& name,
                      StatusOr<std::vector<core::NodeInventory>> inventories, int64_t generation,
                      const NodeDomains& domains) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  Shard& shard = ShardOf(name);
  std::lock_guard<std::mutex> lock(shard.mu);
  NodeSnapshotPtr old;
  if (auto it = shard.nodes.find(name); it != shard.nodes.end()) {
    old = it->second;
  }
  auto next = std::make_shared<NodeSnapshot>();
  next->name = name;
  next->version = next_version_.fetch_add(1);
  next->generation = generation;
  next->domains = domains;
  next->updated = std::chrono::steady_clock::now();
  if (inventories.ok()) {
    for (core::NodeInventory& inv : inventories.value()) {
      inv.node = name;
      next->devices += static_cast<int32_t>(inv.devices.size());
      next->inventories.push_back(
          InventoryState::Empty(std::make_shared<const core::NodeInventory>(std::move(inv))));
    }
  } else {
    next->inventory_status = inventories.status();
  }
  int dropped = 0;
  if (auto it = pods_by_node_.find(name); it != pods_by_node_.end()) {
    for (const std::string& uid : it->second) {
      PodRecord& rec = pods_[uid];
      rec.applied = false;
      std::vector<AssignmentPart> kept;
      for (AssignmentPart& part : rec.assignment.parts) {
        const InventoryState* was = old ? old->Find(part.vendor) : nullptr;
        const InventoryState* now = next->Find(part.vendor);
        if (now == nullptr) {
          for (const auto& c : part.placement.containers) {
            dropped += static_cast<int>(c.grants.size());
          }
          continue;
        }
        if (was != nullptr) {
          dropped += RemapPart(*was->inventory, *now->inventory, &part);
        }
        kept.push_back(std::move(part));
      }
      rec.assignment.parts = std::move(kept);
      rec.applied = ApplyAssignment(rec.assignment, next.get()).ok();
    }
  }
  shard.nodes[name] = std::move(next);
  Touch();
  return dropped;
}

void Cache::RemoveNode(const std::string& name) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (auto it = pods_by_node_.find(name); it != pods_by_node_.end()) {
    for (const std::string& uid : it->second) {
      pods_[uid].applied = false;
    }
  }
  Shard& shard = ShardOf(name);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.nodes.erase(name);
  Touch();
}

NodeSnapshotPtr Cache::Node(const std::string& name) const {
  Shard& shard = ShardOf(name);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.nodes.find(name);
  return it == shard.nodes.end() ? nullptr : it->second;
}

std::vector<std::string> Cache::NodeNames() const {
  std::vector<std::string> out;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [name, snap] : shard.nodes) {
      out.push_back(name);
    }
  }
  return out;
}

Status Cache::ApplyRecordLocked(PodRecord& rec) {
  Shard& shard = ShardOf(rec.assignment.node);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.nodes.find(rec.assignment.node);
  if (it == shard.nodes.end()) {
    return NotFoundError("node " + rec.assignment.node + " is not in the cache yet");
  }
  auto next = std::make_shared<NodeSnapshot>(*it->second);
  ACCELPOOL_RETURN_IF_ERROR(ApplyAssignment(rec.assignment, next.get()));
  next->version = next_version_.fetch_add(1);
  next->updated = std::chrono::steady_clock::now();
  it->second = std::move(next);
  rec.applied = true;
  Touch();
  return Status::Ok();
}

void Cache::ReleaseRecordLocked(PodRecord& rec) {
  if (!rec.applied) {
    return;
  }
  Shard& shard = ShardOf(rec.assignment.node);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.nodes.find(rec.assignment.node);
  rec.applied = false;
  if (it == shard.nodes.end()) {
    return;
  }
  auto next = std::make_shared<NodeSnapshot>(*it->second);
  ReleaseAssignment(rec.assignment, next.get());
  next->version = next_version_.fetch_add(1);
  next->updated = std::chrono::steady_clock::now();
  it->second = std::move(next);
  Touch();
}

void Cache::EraseRecordLocked(const std::string& uid) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) {
    return;
  }
  PodRecord& rec = it->second;
  const std::string node = rec.assignment.node;
  ReleaseRecordLocked(rec);
  if (!rec.ref.job.empty()) {
    auto job = jobs_.find(rec.ref.job);
    if (job != jobs_.end() && --job->second[node] <= 0) {
      job->second.erase(node);
      if (job->second.empty()) {
        jobs_.erase(job);
      }
    }
  }
  auto by_node = pods_by_node_.find(node);
  if (by_node != pods_by_node_.end()) {
    by_node->second.erase(uid);
    if (by_node->second.empty()) {
      pods_by_node_.erase(by_node);
    }
  }
  pods_.erase(it);
  // Devices came back: records that did not fit before may fit now.
  if (by_node = pods_by_node_.find(node); by_node != pods_by_node_.end()) {
    for (const std::string& other : by_node->second) {
      PodRecord& waiting = pods_[other];
      if (!waiting.applied) {
        (void)ApplyRecordLocked(waiting);
      }
    }
  }
}

Status Cache::Reserve(const PodRef& pod, const PodAssignment& a, uint64_t version) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (auto it = pods_.find(pod.uid); it != pods_.end()) {
    if (it->second.assignment == a) {
      return Status::Ok();
    }
    return AlreadyExistsError("pod " + pod.ns + "/" + pod.name + " already holds devices on node " +
                              it->second.assignment.node);
  }
  PodRecord rec{pod, a, false, false};
  Status applied = ApplyRecordLocked(rec);
  if (!applied.ok()) {
    if (applied.code() == StatusCode::kNotFound) {
      return applied;
    }
    return AbortedError("devices changed on node " + a.node + " since planning (" +
                        applied.message() + "); re-plan");
  }
  (void)version;  // the apply itself re-checks capacity and slots
  pods_by_node_[a.node].insert(pod.uid);
  if (!pod.job.empty()) {
    ++jobs_[pod.job][a.node];
  }
  pods_.emplace(pod.uid, std::move(rec));
  return Status::Ok();
}

void Cache::MarkBound(const std::string& uid) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (auto it = pods_.find(uid); it != pods_.end()) {
    it->second.bound = true;
  }
}

void Cache::Release(const std::string& uid) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  EraseRecordLocked(uid);
}

Status Cache::ObservePod(const PodRef& pod, const std::string& node_name,
                         const std::optional<PodAssignment>& a) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  auto it = pods_.find(pod.uid);
  if (node_name.empty()) {
    return Status::Ok();  // not bound yet: a reservation in flight stays
  }
  if (it != pods_.end() && it->second.bound &&
      (!a.has_value() || a->node != node_name || !(it->second.assignment == *a))) {
    assignment_changes_ignored_.fetch_add(1, std::memory_order_relaxed);
    return PermissionDeniedError(
        "pod " + pod.ns + "/" + pod.name + " on node " + node_name + " now shows " +
        (a.has_value() ? std::string("an assignment other than")
                       : std::string("no valid assignment instead of")) +
        " the one it was bound with; the cache keeps that one. The annotation comes with "
        "the pod's Binding and must not be edited: restore it, or delete the pod to free its "
        "devices (the chart's annotationGuard policy refuses such edits)");
  }
  if (!a.has_value() || a->node != node_name) {
    if (it != pods_.end() && it->second.bound) {
      EraseRecordLocked(pod.uid);
    }
    return Status::Ok();
  }
  if (it != pods_.end()) {
    if (it->second.assignment == *a) {
      it->second.bound = true;
      return Status::Ok();
    }
    EraseRecordLocked(pod.uid);
  }
  PodRecord rec{pod, *a, true, false};
  Status applied = ApplyRecordLocked(rec);
  pods_by_node_[a->node].insert(pod.uid);
  if (!pod.job.empty()) {
    ++jobs_[pod.job][a->node];
  }
  pods_.emplace(pod.uid, std::move(rec));
  if (!applied.ok() && applied.code() != StatusCode::kNotFound) {
    return FailedPreconditionError("assignment of pod " + pod.ns + "/" + pod.name +
                                   " does not fit node " + node_name + " as cached (" +
                                   applied.message() +
                                   "); it is applied when devices free up");
  }
  return applied;
}

std::optional<PodAssignment> Cache::Assignment(const std::string& uid) const {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) {
    return std::nullopt;
  }
  return it->second.assignment;
}

std::map<std::string, int> Cache::JobNodes(const std::string& job) const {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  auto it = jobs_.find(job);
  return it == jobs_.end() ? std::map<std::string, int>() : it->second;
}

CacheStats Cache::Stats() const {
  CacheStats s;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (const auto& [name, snap] : shard.nodes) {
      ++s.nodes;
      if (!snap->inventory_status.ok()) {
        ++s.nodes_unparsable;
      }
    }
  }
  {
    std::lock_guard<std::mutex> pods_lock(pods_mu_);
    for (const auto& [uid, rec] : pods_) {
      ++(rec.bound ? s.pods_bound : s.pods_reserved);
    }
  }
  s.assignment_changes_ignored = assignment_changes_ignored_.load(std::memory_order_relaxed);
  s.seconds_since_update = static_cast<double>(NowNs() - last_change_ns_.load()) / 1e9;
  return s;
}

}  // namespace accelpool::extender
