#include "extender/cache.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include "core/fit.h"
#include "core/usage.h"

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
                      const NodeDomains& domains, std::optional<core::HostResources> allocatable) {
  std::lock_guard<std::mutex> host_lock(host_mu_);
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  Shard& shard = ShardOf(name);
  std::lock_guard<std::mutex> lock(shard.mu);
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
  int newly_absent = 0;
  if (auto it = pods_by_node_.find(name); it != pods_by_node_.end()) {
    for (const std::string& uid : it->second) {
      PodRecord& rec = pods_[uid];
      const int32_t absent_before = rec.absent;
      (void)CountRecord(rec, next.get(), /*partial=*/true);
      newly_absent += std::max(0, rec.absent - absent_before);
    }
  }
  next->host_allocatable = allocatable;
  if (auto it = host_sums_.find(name); it != host_sums_.end()) {
    next->host_requested = it->second.Requested();
    next->host_pods = it->second.pods;
  }
  next->SetHostFree(track_host_.load());
  NodeSnapshotPtr& slot = shard.nodes[name];
  NoteSnapshot(slot.get(), next.get());
  slot = std::move(next);
  Touch();
  return newly_absent;
}

void Cache::TrackHost(bool on) {
  std::lock_guard<std::mutex> host_lock(host_mu_);
  if (track_host_.exchange(on) == on) return;
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mu);
    for (auto& [name, snap] : shard.nodes) {
      auto next = std::make_shared<NodeSnapshot>(*snap);
      next->version = next_version_.fetch_add(1);
      next->SetHostFree(on);
      snap = std::move(next);
    }
  }
  Touch();
}

void Cache::RefreshHostLocked(const std::string& node) {
  Shard& shard = ShardOf(node);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.nodes.find(node);
  if (it == shard.nodes.end()) return;  // applied when the node arrives (UpsertNode)
  auto next = std::make_shared<NodeSnapshot>(*it->second);
  next->version = next_version_.fetch_add(1);
  const auto sum = host_sums_.find(node);
  next->host_requested = sum == host_sums_.end() ? core::HostResources{} : sum->second.Requested();
  next->host_pods = sum == host_sums_.end() ? 0 : sum->second.pods;
  next->SetHostFree(track_host_.load());
  NoteSnapshot(it->second.get(), next.get());
  it->second = std::move(next);
}

core::HostResources Cache::HostSum::Requested() const {
  __extension__ typedef __int128 int128;
  constexpr int128 kMax = std::numeric_limits<int64_t>::max();
  return core::HostResources{static_cast<int64_t>(std::clamp<int128>(cpu_milli, 0, kMax)),
                             static_cast<int64_t>(std::clamp<int128>(memory_mib, 0, kMax))};
}

void Cache::ObserveHostPod(const std::string& uid, const std::string& node,
                           const core::HostResources& request) {
  std::lock_guard<std::mutex> host_lock(host_mu_);
  auto it = host_pods_.find(uid);
  if (it == host_pods_.end() ? node.empty()
                             : it->second.node == node && it->second.request == request) {
    return;  // nothing changes
  }
  auto add = [this](const std::string& n, const core::HostResources& r, int sign) {
    HostSum& sum = host_sums_[n];
    __extension__ typedef __int128 int128;
    sum.cpu_milli += sign * static_cast<int128>(r.cpu_milli);
    sum.memory_mib += sign * static_cast<int128>(r.memory_mib);
    sum.pods += sign;
    if (sum.pods <= 0) host_sums_.erase(n);
  };
  std::string old_node;
  if (it != host_pods_.end()) {
    old_node = it->second.node;
    if (!old_node.empty()) add(old_node, it->second.request, -1);
  }
  if (node.empty()) {
    host_pods_.erase(uid);
  } else {
    host_pods_[uid] = HostPod{node, request};
    add(node, request, +1);
  }
  if (!old_node.empty() && old_node != node) RefreshHostLocked(old_node);
  if (!node.empty()) RefreshHostLocked(node);
  Touch();
}

void Cache::ForgetHostPod(const std::string& uid) { ObserveHostPod(uid, "", {}); }

int64_t Cache::HostPods() const {
  std::lock_guard<std::mutex> host_lock(host_mu_);
  return static_cast<int64_t>(host_pods_.size());
}

void Cache::RemoveNode(const std::string& name) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (auto it = pods_by_node_.find(name); it != pods_by_node_.end()) {
    for (const std::string& uid : it->second) {
      pods_[uid].applied = false;
      pods_[uid].applied_as = PodAssignment{};
    }
  }
  Shard& shard = ShardOf(name);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (auto it = shard.nodes.find(name); it != shard.nodes.end()) {
    NoteSnapshot(it->second.get(), nullptr);
    shard.nodes.erase(it);
    Touch();
  }
}

void Cache::NoteSnapshot(const NodeSnapshot* before, const NodeSnapshot* after) {
  auto busy = [](const NodeSnapshot* s) {
    return s != nullptr && !s->domains.super_node.empty() && !s->Idle();
  };
  if (busy(before) == busy(after) &&
      (!busy(before) || before->domains.super_node == after->domains.super_node)) {
    return;
  }
  std::lock_guard<std::mutex> lock(super_mu_);
  if (busy(before)) {
    auto it = super_busy_.find(before->domains.super_node);
    if (it != super_busy_.end() && --it->second <= 0) super_busy_.erase(it);
  }
  if (busy(after)) ++super_busy_[after->domains.super_node];
}

int Cache::BusyInSuperNode(const std::string& super_node) const {
  std::lock_guard<std::mutex> lock(super_mu_);
  auto it = super_busy_.find(super_node);
  return it == super_busy_.end() ? 0 : it->second;
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

PodAssignment Cache::Resolve(PodRecord& rec, const NodeSnapshot& snap) {
  PodAssignment out;
  out.node = rec.assignment.node;
  out.policy = rec.assignment.policy;
  rec.absent = 0;
  rec.ids.resize(rec.assignment.parts.size());
  for (size_t p = 0; p < rec.assignment.parts.size(); ++p) {
    const AssignmentPart& part = rec.assignment.parts[p];
    const InventoryState* st = snap.Find(part.vendor);
    if (st == nullptr) {
      for (const core::ContainerPlacement& cp : part.placement.containers) {
        rec.absent += static_cast<int32_t>(cp.grants.size());
      }
      continue;
    }
    const core::NodeInventory& inv = *st->inventory;
    std::map<int32_t, std::string>& ids = rec.ids[p];
    std::map<std::string_view, int32_t> index_of;
    for (size_t i = 0; i < inv.devices.size(); ++i) {
      index_of.emplace(inv.devices[i].id, static_cast<int32_t>(i));
    }
    AssignmentPart now{part.vendor, {}, {}, {}};
    for (size_t c = 0; c < part.placement.containers.size(); ++c) {
      const core::ContainerPlacement& cp = part.placement.containers[c];
      core::ContainerPlacement kept{cp.container, cp.kind, {}};
      std::vector<int32_t> kept_slots;
      for (size_t g = 0; g < cp.grants.size(); ++g) {
        const int32_t dev = cp.grants[g].device;
        auto id = ids.find(dev);
        if (id == ids.end()) {
          // The id the part was planned or bound with; else the node's now.
          if (auto known = part.device_ids.find(dev); known != part.device_ids.end()) {
            id = ids.emplace(dev, known->second).first;
          } else if (dev >= 0 && static_cast<size_t>(dev) < inv.devices.size()) {
            id = ids.emplace(dev, inv.devices[static_cast<size_t>(dev)].id).first;
          }
        }
        auto index = id == ids.end() ? index_of.end() : index_of.find(id->second);
        if (index == index_of.end()) {
          ++rec.absent;
          continue;
        }
        core::Grant moved = cp.grants[g];
        moved.device = index->second;
        now.device_ids[index->second] = id->second;
        kept.grants.push_back(moved);
        kept_slots.push_back(c < part.slots.size() && g < part.slots[c].size() ? part.slots[c][g]
                                                                               : 0);
      }
      now.placement.containers.push_back(std::move(kept));
      now.slots.push_back(std::move(kept_slots));
    }
    out.parts.push_back(std::move(now));
  }
  return out;
}

PodAssignment Cache::ResolveUnreadable(const PodRecord& rec, const NodeSnapshot& snap) {
  PodAssignment out;
  out.node = rec.assignment.node;
  const std::set<std::string_view> ids(rec.unreadable_ids.begin(), rec.unreadable_ids.end());
  for (const InventoryState& st : snap.inventories) {
    AssignmentPart part{st.inventory->vendor, {}, {{}}, {}};
    core::ContainerPlacement cp{"unreadable", core::ContainerKind::kRegular, {}};
    for (size_t i = 0; i < st.inventory->devices.size(); ++i) {
      const core::Device& d = st.inventory->devices[i];
      if (!ids.contains(d.id)) continue;
      const auto index = static_cast<int32_t>(i);
      cp.grants.push_back(core::Grant{index, d.memory_mib, core::kComputeWhole, true});
      part.device_ids[index] = d.id;
    }
    if (cp.grants.empty()) continue;
    part.placement.containers.push_back(std::move(cp));
    out.parts.push_back(std::move(part));
  }
  return out;
}

namespace {

// Whether `a`, counted in `s`, leaves every device it uses within its memory
// beside the foreign memory there (core::CheckForeignRoom, CheckPlacement's
// rule).
Status ForeignRoom(const PodAssignment& a, const NodeSnapshot& s) {
  for (const AssignmentPart& part : a.parts) {
    const InventoryState* st = s.Find(part.vendor);
    if (st == nullptr) continue;
    ACCELPOOL_RETURN_IF_ERROR(core::CheckForeignRoom(part.placement, *st->inventory, st->usage));
  }
  return Status::Ok();
}

}  // namespace

Status Cache::CountRecord(PodRecord& rec, NodeSnapshot* s, bool partial) {
  rec.conflicting = 0;
  if (!partial && !s->unreadable_pods.empty()) {
    rec.applied = false;
    rec.applied_as = PodAssignment{};
    return FailedPreconditionError("node " + s->name + " runs pod " +
                                   s->unreadable_pods.begin()->second +
                                   ", whose assignment annotation does not parse");
  }
  PodAssignment now;
  if (rec.unreadable) {
    rec.absent = 0;
    now = ResolveUnreadable(rec, *s);
    if (now.empty()) {
      // Nothing of it can be placed on the node: all of the node is held.
      s->unreadable_pods[rec.ref.uid] = rec.ref.ns + "/" + rec.ref.name;
      ++s->pods;
      rec.applied = true;
      rec.applied_as = std::move(now);
      return Status::Ok();
    }
  } else {
    now = Resolve(rec, *s);
  }
  if (!partial && rec.absent > 0) {
    // A reservation needs every device it was planned on.
    rec.applied = false;
    rec.applied_as = PodAssignment{};
    return FailedPreconditionError(std::to_string(rec.absent) +
                                   " of its grants are on devices no longer in the inventory");
  }
  if (!partial) {
    // A reservation takes only devices that may take new grants now: one
    // that turned unhealthy or was cordoned since planning is refused (a
    // bound pod's record keeps counting there, see ObservePod).
    for (const AssignmentPart& part : now.parts) {
      const InventoryState* st = s->Find(part.vendor);
      if (st == nullptr) {
        continue;  // ApplyAssignment below refuses it
      }
      const std::vector<core::Device>& devices = st->inventory->devices;
      for (const core::ContainerPlacement& cp : part.placement.containers) {
        for (const core::Grant& g : cp.grants) {
          if (g.device < 0 || static_cast<size_t>(g.device) >= devices.size()) {
            continue;  // ApplyAssignment below refuses it
          }
          const core::Device& d = devices[static_cast<size_t>(g.device)];
          if (!d.Schedulable()) {
            rec.applied = false;
            rec.applied_as = PodAssignment{};
            return FailedPreconditionError("device " + d.id + " is " +
                                           (d.healthy ? "cordoned" : "unhealthy"));
          }
        }
      }
    }
  }
  Status all = ApplyAssignment(now, s);
  if (all.ok() && !partial) {
    // Memory no grant accounts for (Device::foreign_mib) is held to as Fit
    // holds it: two pods planned on one snapshot both passed Fit, and only
    // this count, under the lock, sees the first one's memory.
    all = ForeignRoom(now, *s);
    if (!all.ok()) ReleaseAssignment(now, s);
  }
  if (all.ok() || !partial) {
    rec.applied = all.ok();
    rec.applied_as = all.ok() ? std::move(now) : PodAssignment{};
    return all;
  }
  // Device by device: each device's grants (all containers) count as they
  // would for a new pod where they fit. Where they do not (the device is held
  // as cached: assignments overlap), they count all the same, past its
  // capacity (rec.conflicting): the pod runs there, and a device shown with
  // room it does not have would take yet another pod.
  PodAssignment kept{now.node, now.policy, {}};
  for (const AssignmentPart& part : now.parts) {
    InventoryState* st = s->Find(part.vendor);
    AssignmentPart empty{part.vendor, {}, {}, part.device_ids};
    std::set<int32_t> devices;
    for (const core::ContainerPlacement& cp : part.placement.containers) {
      empty.placement.containers.push_back(core::ContainerPlacement{cp.container, cp.kind, {}});
      empty.slots.emplace_back();
      for (const core::Grant& g : cp.grants) {
        devices.insert(g.device);
      }
    }
    AssignmentPart out = empty;
    for (int32_t dev : devices) {
      AssignmentPart one = empty;  // this device's grants only
      int32_t grants = 0;
      for (size_t c = 0; c < part.placement.containers.size(); ++c) {
        const core::ContainerPlacement& cp = part.placement.containers[c];
        for (size_t g = 0; g < cp.grants.size(); ++g) {
          if (cp.grants[g].device == dev) {
            one.placement.containers[c].grants.push_back(cp.grants[g]);
            one.slots[c].push_back(
                c < part.slots.size() && g < part.slots[c].size() ? part.slots[c][g] : 0);
            ++grants;
          }
        }
      }
      if (st == nullptr) {
        rec.conflicting += grants;
        continue;
      }
      if (!ApplyPart(one, st).ok()) {
        rec.conflicting += grants;
        StatusOr<AssignmentPart> forced = ForcePart(one, st);
        if (!forced.ok()) {
          continue;  // an index the inventory does not have: nothing added
        }
        one = std::move(forced).value();
      }
      for (size_t c = 0; c < one.placement.containers.size(); ++c) {
        auto& to = out.placement.containers[c].grants;
        const auto& from = one.placement.containers[c].grants;
        to.insert(to.end(), from.begin(), from.end());
        out.slots[c].insert(out.slots[c].end(), one.slots[c].begin(), one.slots[c].end());
      }
    }
    kept.parts.push_back(std::move(out));
  }
  ++s->pods;
  rec.applied = true;
  rec.applied_as = std::move(kept);
  return all;
}

Status Cache::ApplyRecordLocked(PodRecord& rec, bool partial) {
  Shard& shard = ShardOf(rec.assignment.node);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.nodes.find(rec.assignment.node);
  if (it == shard.nodes.end()) {
    return NotFoundError("node " + rec.assignment.node + " is not in the cache yet");
  }
  auto next = std::make_shared<NodeSnapshot>(*it->second);
  Status st = CountRecord(rec, next.get(), partial);
  if (!rec.applied) {
    return st;
  }
  next->version = next_version_.fetch_add(1);
  next->updated = std::chrono::steady_clock::now();
  NoteSnapshot(it->second.get(), next.get());
  it->second = std::move(next);
  Touch();
  return st;
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
  ReleaseAssignment(rec.applied_as, next.get());
  next->unreadable_pods.erase(rec.ref.uid);
  rec.applied_as = PodAssignment{};
  next->version = next_version_.fetch_add(1);
  next->updated = std::chrono::steady_clock::now();
  NoteSnapshot(it->second.get(), next.get());
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
  // Counted past a device's capacity: whatever it overlapped is counted
  // again below (releasing it may have cleared another holder's exclusive
  // mark).
  const bool overlapped = rec.conflicting > 0;
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
  // Devices came back: records not fully counted before may be now.
  if (by_node = pods_by_node_.find(node); by_node != pods_by_node_.end()) {
    for (const std::string& other : by_node->second) {
      PodRecord& waiting = pods_[other];
      if (overlapped || !waiting.applied || waiting.conflicting > 0) {
        ReleaseRecordLocked(waiting);
        (void)ApplyRecordLocked(waiting, /*partial=*/true);
      }
    }
  }
}

Status Cache::Reserve(const PodRef& pod, const PodAssignment& a, uint64_t version) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (released_.contains(pod.uid)) {
    return NotFoundError("pod " + pod.ns + "/" + pod.name +
                         " was deleted or has finished; there is nothing to bind");
  }
  if (auto it = pods_.find(pod.uid); it != pods_.end()) {
    if (SameAssignment(it->second.assignment, a)) {
      return Status::Ok();
    }
    return AlreadyExistsError("pod " + pod.ns + "/" + pod.name + " already holds devices on node " +
                              it->second.assignment.node);
  }
  PodRecord rec{pod, a, false, false, {}, {}, 0, 0};
  Status applied = ApplyRecordLocked(rec, /*partial=*/false);
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

void Cache::MarkBound(const std::string& uid, const PodAssignment& a) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (auto it = pods_.find(uid); it != pods_.end() && SameAssignment(it->second.assignment, a)) {
    it->second.bound = true;
  }
}

bool Cache::ReleaseReservation(const std::string& uid, const PodAssignment& a) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end() || it->second.bound || !SameAssignment(it->second.assignment, a)) {
    return false;
  }
  EraseRecordLocked(uid);
  return true;
}

std::optional<bool> Cache::Bound(const std::string& uid) const {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) {
    return std::nullopt;
  }
  return it->second.bound;
}

void Cache::Release(const std::string& uid) {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  EraseRecordLocked(uid);
  gone_.erase(uid);
  const auto now = std::chrono::steady_clock::now();
  while (!released_order_.empty() && now - released_order_.front().first > kReleasedMemory) {
    released_.erase(released_order_.front().second);
    released_order_.pop_front();
  }
  if (released_.insert(uid).second) {
    released_order_.emplace_back(now, uid);
  }
}

bool Cache::Released(const std::string& uid) const {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  return released_.contains(uid);
}

std::vector<std::string> Cache::BoundPods(const std::string& node) const {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  std::vector<std::string> uids;
  if (auto by_node = pods_by_node_.find(node); by_node != pods_by_node_.end()) {
    for (const std::string& uid : by_node->second) {
      if (auto it = pods_.find(uid); it != pods_.end() && it->second.bound) {
        uids.push_back(uid);
      }
    }
  }
  return uids;
}

void Cache::ReleaseGone(const std::string& uid) {
  constexpr auto kRemember = std::chrono::minutes(10);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  std::erase_if(gone_, [&](const auto& entry) { return now - entry.second > kRemember; });
  EraseRecordLocked(uid);
  gone_[uid] = now;
}

Status Cache::ObservePod(const PodRef& pod, const std::string& node_name,
                         const std::optional<PodAssignment>& observed,
                         const std::optional<std::vector<std::string>>& unreadable) {
  // An assignment without devices (a pod that asked for none, bound by an
  // older extender) holds nothing: no record, the node stays idle.
  const std::optional<PodAssignment> a =
      observed.has_value() && observed->empty() ? std::nullopt : observed;
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (gone_.contains(pod.uid)) {
    return Status::Ok();  // an older event of a pod known gone (ReleaseGone)
  }
  auto it = pods_.find(pod.uid);
  if (node_name.empty()) {
    return Status::Ok();  // not bound yet: a reservation in flight stays
  }
  // A record booked from an annotation that did not parse follows what the
  // pod shows now: the annotation mended (or removed) frees what it booked.
  const bool was_unreadable = it != pods_.end() && it->second.unreadable;
  if (it != pods_.end() && it->second.bound && !was_unreadable &&
      (!a.has_value() || a->node != node_name || !SameAssignment(it->second.assignment, *a))) {
    assignment_changes_ignored_.fetch_add(1, std::memory_order_relaxed);
    return PermissionDeniedError(
        "pod " + pod.ns + "/" + pod.name + " on node " + node_name + " now shows " +
        (a.has_value() ? std::string("an assignment other than")
                       : std::string("no valid assignment instead of")) +
        " the one it was bound with; the cache keeps that one. The annotation comes with "
        "the pod's Binding and must not be edited: restore it, or delete the pod to free its "
        "devices (the chart's annotationGuard policy refuses such edits)");
  }
  if (!a.has_value() && unreadable.has_value() && (it == pods_.end() || was_unreadable)) {
    // Fail closed: the pod runs on devices the cache cannot tell.
    std::vector<std::string> ids = *unreadable;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (was_unreadable) {
      if (it->second.assignment.node == node_name && it->second.unreadable_ids == ids) {
        return Status::Ok();
      }
      EraseRecordLocked(pod.uid);
    }
    PodRecord rec{pod, PodAssignment{node_name, "", {}}, true, false, {}, {}, 0, 0};
    rec.unreadable = true;
    rec.unreadable_ids = std::move(ids);
    Status applied = ApplyRecordLocked(rec, /*partial=*/true);
    pods_by_node_[node_name].insert(pod.uid);
    if (!pod.job.empty()) {
      ++jobs_[pod.job][node_name];
    }
    pods_.emplace(pod.uid, std::move(rec));
    return applied;
  }
  if (!a.has_value() || a->node != node_name) {
    if (it != pods_.end() && it->second.bound) {
      EraseRecordLocked(pod.uid);
    }
    return Status::Ok();
  }
  if (it != pods_.end()) {
    if (SameAssignment(it->second.assignment, *a)) {
      it->second.bound = true;
      return Status::Ok();
    }
    EraseRecordLocked(pod.uid);
  }
  PodRecord rec{pod, *a, true, false, {}, {}, 0, 0};
  Status applied = ApplyRecordLocked(rec, /*partial=*/true);
  pods_by_node_[a->node].insert(pod.uid);
  if (!pod.job.empty()) {
    ++jobs_[pod.job][a->node];
  }
  pods_.emplace(pod.uid, std::move(rec));
  if (!applied.ok() && applied.code() != StatusCode::kNotFound) {
    return FailedPreconditionError("assignment of pod " + pod.ns + "/" + pod.name +
                                   " does not fit node " + node_name + " as cached (" +
                                   applied.message() +
                                   "); it is counted in full, past the capacity of the devices "
                                   "it overlaps, which take no new pod until they free up");
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

std::optional<PodAssignment> Cache::AppliedAssignment(const std::string& uid) const {
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end() || !it->second.applied) {
    return std::nullopt;
  }
  return it->second.applied_as;
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
      s.pods_unreadable += rec.unreadable ? 1 : 0;
      s.grants_absent += rec.absent;
      s.grants_conflicting += rec.conflicting;
    }
  }
  s.assignment_changes_ignored = assignment_changes_ignored_.load(std::memory_order_relaxed);
  s.seconds_since_update = static_cast<double>(NowNs() - last_change_ns_.load()) / 1e9;
  return s;
}

}  // namespace accelpool::extender
