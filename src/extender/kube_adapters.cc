#include "extender/kube_adapters.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "api/assignment_codec.h"
#include "common/strings.h"
#include "extender/convert.h"
#include "kube/objects.h"

namespace accelpool::extender {
namespace {

// The pod as the apiserver has it now: uid, nodeName and assignment annotation.
struct PodNow {
  std::string uid;
  std::string node;
  std::string assignment;  // "" when none
};

StatusOr<PodNow> ReadPodNow(kube::KubeClient& client, const PodRef& pod) {
  StatusOr<nlohmann::json> obj = client.Get(kube::Pods(), pod.ns, pod.name);
  if (!obj.ok()) return obj.status();
  // Fields of another type read as absent (never an exception).
  nlohmann::json::json_pointer annotation("/metadata/annotations");
  annotation.push_back(api::kAssignmentAnnotation);
  return PodNow{kube::StringAt(*obj, nlohmann::json::json_pointer("/metadata/uid")),
                kube::StringAt(*obj, nlohmann::json::json_pointer("/spec/nodeName")),
                kube::StringAt(*obj, annotation)};
}

// Whether the annotation `text` a bound pod carries is assignment `a` (the
// same grants on the same devices, as Cache::ObservePod judges it).
bool CarriesAssignment(const std::string& text, const PodAssignment& a) {
  StatusOr<api::Assignment> doc = api::ParseAssignment(text);
  if (!doc.ok()) return false;
  StatusOr<PodAssignment> bound = FromApiAssignment(*doc);
  return bound.ok() && SameAssignment(*bound, a);
}

}  // namespace

Status KubePodWriter::Bind(const PodInfo& pod, const PodAssignment& a) {
  if (a.empty()) {
    // A pod that asks for no pooled device: a plain Binding (no assignment,
    // so the node needs no inventory). With a key ring every Binding is
    // guarded by the uid, as the signed ones are.
    if (keys_ != nullptr && pod.ref.uid.empty()) {
      return InvalidArgumentError("pod " + pod.ref.ns + "/" + pod.ref.name +
                                  " has no uid; kube-scheduler always sends it, not binding");
    }
    return BindPod(pod, a, {});
  }
  NodeSnapshotPtr snap = cache_.Node(a.node);
  if (snap == nullptr) {
    return NotFoundError("node " + a.node + " left the cache during bind");
  }
  StatusOr<api::Assignment> doc = ToApiAssignment(a, *snap, pod);
  if (!doc.ok()) {
    return doc.status();
  }
  // The apiserver copies a Binding's annotations onto the pod in the same
  // write that sets spec.nodeName.
  std::map<std::string, std::string> annotations = {
      {api::kAssignmentAnnotation, api::SerializeAssignment(*doc)}};
  if (keys_ != nullptr) {
    StatusOr<std::string> sig =
        keys_->Sign(pod.ref.uid, a.node, annotations[api::kAssignmentAnnotation]);
    if (!sig.ok())
      return sig.status().WithPrefix("signing the assignment of " + pod.ref.ns + "/" +
                                     pod.ref.name);
    annotations[api::kAssignmentSignatureAnnotation] = std::move(sig).value();
  }
  return BindPod(pod, a, annotations);
}

Status KubePodWriter::BindPod(const PodInfo& pod, const PodAssignment& a,
                              const std::map<std::string, std::string>& annotations) {
  const std::string& node = a.node;
  if (write_gate_) {
    if (std::string why = write_gate_(); !why.empty()) {
      return UnavailableError("this replica stopped leading before the Binding was written (" +
                              why + "); kube-scheduler retries the pod");
    }
  }
  std::optional<std::chrono::milliseconds> within;
  if (write_left_) {
    within = write_left_();
    if (*within < kMinWriteTime) {
      return UnavailableError("this replica's leadership ends in " +
                              std::to_string(std::max<int64_t>(0, within->count())) +
                              " ms, too soon to write a Binding; kube-scheduler retries the pod");
    }
  }
  Status st = kube::CreatePodBinding(client_, pod.ref.ns, pod.ref.name, node, pod.ref.uid,
                                     annotations, within);
  if (st.ok()) return st;
  // A conflict after a retried bind: kube-scheduler timed out waiting for an
  // earlier attempt whose Binding did land (with this assignment: a retry
  // reuses the reservation). Bound to this node by that attempt is success;
  // bound elsewhere (or another pod of that name) is not, nor bound here with
  // other devices (an earlier bind by another replica, whose Binding this
  // replica's watch had not shown yet): taking that as success would mark
  // this reservation bound and keep it counted instead of the devices the
  // pod holds.
  const bool conflict =
      st.code() == StatusCode::kAborted || st.code() == StatusCode::kAlreadyExists;
  // An answer that does not say whether the Binding was written: a 5xx (a
  // 504 may still commit), a timeout, a connection lost after the request
  // went out. Whether the pod is bound decides whether its devices may go.
  const bool unsure = st.code() == StatusCode::kUnavailable ||
                      st.code() == StatusCode::kDeadlineExceeded ||
                      st.code() == StatusCode::kInternal || st.code() == StatusCode::kUnknown;
  if (!conflict && !unsure) return st;
  StatusOr<PodNow> now = ReadPodNow(client_, pod.ref);
  if (now.ok() && now->uid == pod.ref.uid && now->node == node) {
    if (a.empty() || CarriesAssignment(now->assignment, a)) {
      return Status::Ok();
    }
    return AlreadyExistsError("pod " + pod.ref.ns + "/" + pod.ref.name + " is already bound to " +
                              node +
                              " with other devices than this bind planned (an earlier bind "
                              "wrote it); its devices are counted as the pod shows them");
  }
  // Gone (404): a pod that does not exist holds nothing, and had the Binding
  // landed, its deletion on the watch would free what it held anyway.
  if (unsure && !now.ok() && now.status().code() != StatusCode::kNotFound) {
    return Status(StatusCode::kUnknown,
                  st.message() + "; reading the pod back to see whether the Binding landed " +
                      "failed too (" + now.status().message() +
                      "): its devices stay reserved until the watch shows the pod, or a retry "
                      "reads it unbound");
  }
  // Shown unbound after an answer that does not say the Binding was refused
  // (a timeout, the apiserver's 504, a 500 such as "etcdserver: request
  // timed out", a connection lost after the request went out): the write may
  // still be on its way to the store and commit after this read. Keeping the
  // devices costs the pod little (its retry reuses them on this node,
  // Extender::Filter plans it there without them; another node waits for
  // unknown_binding_hold); giving them away could book them twice. Only a
  // 429 (API priority and fairness turns the request away before any
  // handler) is known unwritten.
  const bool throttled =
      st.code() == StatusCode::kUnavailable && st.message().find(": HTTP 429") != std::string::npos;
  if (unsure && !throttled && now.ok() && now->uid == pod.ref.uid && now->node.empty()) {
    return Status(StatusCode::kUnknown,
                  st.message() +
                      "; the pod read back unbound, but a Binding without a clear answer may "
                      "still land: its devices stay reserved for the pod's retry");
  }
  return st;
}

StatusOr<std::string> KubePodWriter::BoundNode(const PodInfo& pod) {
  StatusOr<PodNow> now = ReadPodNow(client_, pod.ref);
  if (!now.ok()) return now.status();
  if (!pod.ref.uid.empty() && now->uid != pod.ref.uid) {
    return NotFoundError("pod " + pod.ref.ns + "/" + pod.ref.name + " was replaced (uid " +
                         now->uid + ")");
  }
  return now->node;
}

StatusOr<nlohmann::json> KubePodSource::GetPod(const std::string& ns, const std::string& name,
                                               const std::string& uid) {
  if (informer_ != nullptr) {
    if (std::optional<nlohmann::json> obj = informer_->Get(ns + "/" + name); obj.has_value()) {
      // Another uid: the store may still hold the deleted pod while the watch
      // has not delivered its successor; only the apiserver can tell.
      if (uid.empty() ||
          kube::StringAt(*obj, nlohmann::json::json_pointer("/metadata/uid")) == uid) {
        return *obj;
      }
    }
  }
  return client_.Get(kube::Pods(), ns, name);
}

AsyncEvents::AsyncEvents(kube::KubeClient& client, Logger log, size_t max_queue,
                         std::chrono::seconds min_interval)
    : client_(client), log_(std::move(log)), max_queue_(max_queue), min_interval_(min_interval) {
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

AsyncEvents::~AsyncEvents() {
  thread_.request_stop();
  cv_.notify_all();
}

void AsyncEvents::PodEvent(const PodRef& pod, bool warning, const std::string& reason,
                           const std::string& message) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = pod.uid + "/" + reason;
  auto it = last_sent_.find(key);
  if (it != last_sent_.end() && now - it->second < min_interval_) {
    return;
  }
  if (queue_.size() >= max_queue_) {
    ++dropped_;
    return;
  }
  if (last_sent_.size() > 10 * max_queue_) {
    last_sent_.clear();
  }
  last_sent_[key] = now;
  queue_.push_back(Item{pod, warning, reason, message});
  cv_.notify_one();
}

void AsyncEvents::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait(lock, stop, [this] { return !queue_.empty(); })) {
        return;
      }
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    kube::ObjectRef ref{"v1", "Pod", item.pod.ns, item.pod.name, item.pod.uid};
    Status st = kube::CreateEvent(client_, ref,
                                  item.warning ? kube::EventKind::kWarning : kube::EventKind::kNormal,
                                  item.reason, item.message, "accelpool-extender", "Scheduling");
    if (!st.ok()) {
      log_.Warn("event not recorded", {{"pod", item.pod.ns + "/" + item.pod.name},
                                       {"reason", item.reason},
                                       {"error", st.ToString()}});
    }
  }
}

kube::InformerHandlers CacheFeeder::NodeHandlers() {
  return kube::InformerHandlers{
      [this](const nlohmann::json& n) { OnNode(n); },
      [this](const nlohmann::json&, const nlohmann::json& n) { OnNode(n); },
      [this](const nlohmann::json& n) { OnNodeDeleted(n); }};
}

kube::InformerHandlers CacheFeeder::PodHandlers() {
  return kube::InformerHandlers{
      [this](const nlohmann::json& p) { OnPod(p); },
      [this](const nlohmann::json& old, const nlohmann::json& p) { OnPodUpdated(old, p); },
      [this](const nlohmann::json& p) { OnPodDeleted(p); }};
}

namespace {
std::string NodeName(const nlohmann::json& node) {
  return kube::StringAt(node, nlohmann::json::json_pointer("/metadata/name"));
}
}  // namespace

void CacheFeeder::OnNode(const nlohmann::json& node) {
  std::lock_guard<std::mutex> lock(node_mu_);
  NoteNodeEvent(NodeName(node), /*deleted=*/false);
  ApplyNode(node);
}

void CacheFeeder::OnNodeDeleted(const nlohmann::json& node) {
  std::lock_guard<std::mutex> lock(node_mu_);
  NoteNodeEvent(NodeName(node), /*deleted=*/true);
  ApplyNodeDeleted(node);
}

void CacheFeeder::NoteNodeEvent(const std::string& name, bool deleted) {
  const uint64_t seq = ++node_seq_;
  last_event_[name] = seq;
  const auto now = std::chrono::steady_clock::now();
  if (deleted) deleted_.push_back(Deleted{now, name, seq});
  while (!deleted_.empty() && now - deleted_.front().when >= deleted_memory_) {
    const Deleted& d = deleted_.front();
    // A node created again under the name keeps its newer record.
    if (auto it = last_event_.find(d.node); it != last_event_.end() && it->second == d.seq) {
      last_event_.erase(it);
    }
    forgotten_seq_ = std::max(forgotten_seq_, d.seq);
    deleted_.pop_front();
  }
}

uint64_t CacheFeeder::NodeEvents() const {
  std::lock_guard<std::mutex> lock(node_mu_);
  return node_seq_;
}

bool CacheFeeder::OnNodeRead(const nlohmann::json& node, uint64_t events_before) {
  std::lock_guard<std::mutex> lock(node_mu_);
  // Begun before a deletion no longer remembered: it may read that node.
  if (events_before < forgotten_seq_) return false;
  auto it = last_event_.find(NodeName(node));
  if (it != last_event_.end() && it->second > events_before) return false;
  ApplyNode(node);
  return true;
}

void CacheFeeder::SetDeletedNodeMemory(std::chrono::steady_clock::duration d) {
  std::lock_guard<std::mutex> lock(node_mu_);
  deleted_memory_ = d;
}

size_t CacheFeeder::NodesRemembered() const {
  std::lock_guard<std::mutex> lock(node_mu_);
  return last_event_.size();
}

uint64_t CacheFeeder::NodeUpdatesApplied() const {
  std::lock_guard<std::mutex> lock(node_mu_);
  return updates_applied_;
}

uint64_t CacheFeeder::NodeUpdatesUnchanged() const {
  std::lock_guard<std::mutex> lock(node_mu_);
  return updates_unchanged_;
}

CacheFeeder::InputsDigest CacheFeeder::Digest(std::string_view inputs) {
  // Two unrelated 64-bit hashes and the length: equal digests of unequal
  // texts are not a practical concern.
  InputsDigest d{inputs.size(), std::hash<std::string_view>{}(inputs), 1469598103934665603ull};
  for (const char c : inputs) {
    d.fnv = (d.fnv ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return d;
}

void CacheFeeder::ApplyNode(const nlohmann::json& node) {
  const std::string name = NodeName(node);
  const InputsDigest inputs = Digest(NodeInputs(node));
  if (auto it = applied_inputs_.find(name);
      it != applied_inputs_.end() && it->second == inputs && cache_.Node(name) != nullptr) {
    // A heartbeat: rebuilding would change nothing but the entry's version,
    // which would void every plan made on the node.
    ++updates_unchanged_;
    if (metrics_ != nullptr && metrics_->node_updates != nullptr) {
      metrics_->node_updates->WithLabels({"unchanged"}).Inc();
    }
    return;
  }
  applied_inputs_.erase(name);
  StatusOr<NodeEntry> e = NodeEntryFromJson(node);
  if (!e.ok()) {
    log_.Warn("node skipped", {{"error", e.status().message()}});
    return;
  }
  ++updates_applied_;
  if (metrics_ != nullptr && metrics_->node_updates != nullptr) {
    metrics_->node_updates->WithLabels({"applied"}).Inc();
  }
  if (!e->has_inventory) {
    cache_.RemoveNode(e->name);  // no accelpool devices (or the plugin is gone)
    ForgetCordon(e->name);
    return;
  }
  applied_inputs_[e->name] = inputs;
  ReportCordon(*e);
  if (!e->inventories.ok()) {
    log_.Warn("node inventory does not parse; node kept without devices",
              {{"node", e->name}, {"error", e->inventories.status().message()}});
  }
  if (!e->allocatable.has_value() && cache_.tracking_host()) {
    log_.Debug("node's host CPU and memory are not scored",
               {{"node", e->name}, {"error", e->allocatable_error}});
  }
  const int absent = cache_.UpsertNode(e->name, std::move(e->inventories), e->generation,
                                       e->domains, e->allocatable);
  if (absent > 0) {
    log_.Warn(
        "assigned devices are missing from the node's inventory; the pods keep them and "
        "they are counted again when they return",
        {{"node", e->name}, {"grants_absent", absent}});
  }
}

void CacheFeeder::ApplyNodeDeleted(const nlohmann::json& node) {
  applied_inputs_.erase(NodeName(node));
  StatusOr<NodeEntry> e = NodeEntryFromJson(node);
  if (e.ok()) {
    cache_.RemoveNode(e->name);
    ForgetCordon(e->name);
  }
}

void CacheFeeder::ReportCordon(const NodeEntry& e) {
  auto join = [](const std::vector<std::string>& ids) { return StrJoin(ids, ","); };
  const std::string cordoned = join(e.cordoned);
  const std::string unknown = join(e.cordon_unknown);
  const std::string now = cordoned + "|" + unknown;
  {
    std::lock_guard<std::mutex> lock(cordon_mu_);
    auto it = cordon_logged_.find(e.name);
    const std::string before = it == cordon_logged_.end() ? "|" : it->second;
    if (before == now) {
      return;
    }
    if (now == "|") {
      cordon_logged_.erase(e.name);
    } else {
      cordon_logged_[e.name] = now;
    }
  }
  log_.Info("cordoned devices changed; no new grant lands on a cordoned device",
            {{"node", e.name},
             {"cordoned", cordoned},
             {"count", static_cast<int64_t>(e.cordoned.size())}});
  if (!e.cordon_unknown.empty()) {
    log_.Warn(std::string("entries of ") + kCordonedDevicesAnnotation +
                  " name no device of the node and are ignored; use the ids of the node's "
                  "accelpool.io/inventory annotation",
              {{"node", e.name}, {"unknown", unknown}});
  }
}

void CacheFeeder::ForgetCordon(const std::string& node) {
  std::lock_guard<std::mutex> lock(cordon_mu_);
  cordon_logged_.erase(node);
}

void CacheFeeder::OnPod(const nlohmann::json& pod) {
  ObservedPod o = ObservePodJson(pod);
  if (o.ref.uid.empty()) {
    return;
  }
  if (o.finished) {
    cache_.Release(o.ref.uid);
    return;
  }
  if (!o.problem.empty() && o.node_name.empty()) {
    log_.Warn("pod assignment does not parse; ignored until the pod is bound",
              {{"pod", o.ref.ns + "/" + o.ref.name}, {"error", o.problem}});
  } else if (!o.problem.empty()) {
    // Fail closed: the pod runs on devices the cache cannot tell.
    const std::vector<std::string> none;
    const std::vector<std::string>& ids = o.unreadable_ids.has_value() ? *o.unreadable_ids : none;
    log_.Warn(
        std::string("the ") + api::kAssignmentAnnotation +
            " annotation of a bound pod does not parse; the devices it names stay booked "
            "(all of the node when none can be read) until the annotation is mended or "
            "removed, or the pod is deleted",
        {{"pod", o.ref.ns + "/" + o.ref.name},
         {"node", o.node_name},
         {"devices", ids.empty() ? std::string("none read: the whole node") : StrJoin(ids, ",")},
         {"error", o.problem}});
  }
  Status st = cache_.ObservePod(o.ref, o.node_name, o.assignment, o.unreadable_ids);
  if (st.code() == StatusCode::kPermissionDenied) {
    log_.Warn("assignment of a bound pod was edited; keeping the one it was bound with",
              {{"pod", o.ref.ns + "/" + o.ref.name}, {"error", st.message()}});
  } else if (!st.ok() && st.code() != StatusCode::kNotFound) {
    log_.Warn("pod assignment conflicts with the cache",
              {{"pod", o.ref.ns + "/" + o.ref.name}, {"error", st.message()}});
  }
}

void CacheFeeder::OnPodUpdated(const nlohmann::json& old, const nlohmann::json& pod) {
  // A relist compares by namespace/name: a pod deleted and re-created under
  // the same name while the watch was down arrives as an update.
  const std::string old_uid = kube::StringAt(old, nlohmann::json::json_pointer("/metadata/uid"));
  if (!old_uid.empty() &&
      old_uid != kube::StringAt(pod, nlohmann::json::json_pointer("/metadata/uid"))) {
    OnPodDeleted(old);
  }
  OnPod(pod);
}

void CacheFeeder::OnPodDeleted(const nlohmann::json& pod) {
  ObservedPod o = ObservePodJson(pod);
  if (!o.ref.uid.empty()) {
    cache_.Release(o.ref.uid);
  }
}

bool ReadLimiter::Allow(const std::string& node) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_.find(node);
  if (it != last_.end() && now - it->second < per_node_) {
    return false;
  }
  if (!bucket_.TryAcquire()) {
    return false;
  }
  last_[node] = now;
  if (last_.size() > 4096) {  // forget nodes read long ago
    std::erase_if(last_, [&](const auto& e) { return now - e.second >= per_node_; });
  }
  return true;
}

bool NodeRefresher::Refresh(const std::string& node) {
  if (!limit_.Allow(node)) {
    return false;
  }
  const uint64_t events_before = feeder_.NodeEvents();
  StatusOr<nlohmann::json> got = client_.Get(kube::Nodes(), "", node);
  if (!got.ok()) {
    log_.Warn(
        "re-reading a node for a pod that found no node failed; its watch brings the next "
        "change",
        {{"node", node}, {"error", got.status().ToString()}});
    return false;
  }
  if (!feeder_.OnNodeRead(*got, events_before)) {
    // The watch delivered the node (or its deletion) during the read: that
    // is as fresh, and the cache changed, so the pod is planned again anyway.
    log_.Debug("node re-read overtaken by its watch", {{"node", node}});
    return true;
  }
  log_.Debug("node re-read for a pod that found no node", {{"node", node}});
  return true;
}

PodRechecker::PodRechecker(kube::KubeClient& client, Cache& cache, std::string scheduler_name,
                           std::chrono::milliseconds per_node, double qps, Logger log)
    : client_(client),
      cache_(cache),
      scheduler_name_(std::move(scheduler_name)),
      limit_(per_node, qps),
      log_(std::move(log)) {}

RecheckResult PodRechecker::Recheck(const std::string& node) {
  if (!limit_.Allow(node)) {
    return RecheckResult::kSkipped;
  }
  // Taken before the read: a pod bound after this is not judged by it.
  const std::vector<std::string> held = cache_.BoundPods(node);
  if (held.empty()) {
    return RecheckResult::kUnchanged;
  }
  kube::ListOptions o;
  o.field_selector = "spec.nodeName=" + node;
  if (!scheduler_name_.empty()) {
    o.field_selector += ",spec.schedulerName=" + scheduler_name_;
  }
  StatusOr<kube::ListResult> listed = client_.List(kube::Pods(), "", o);
  if (!listed.ok()) {
    log_.Warn(
        "reading a node's pods for a pod that found no node failed; their watch brings "
        "the next change",
        {{"node", node}, {"error", listed.status().ToString()}});
    return RecheckResult::kFailed;
  }
  std::set<std::string> present;  // listed and not finished
  for (const nlohmann::json& item : listed->items) {
    ObservedPod seen = ObservePodJson(item);
    if (!seen.ref.uid.empty() && !seen.finished) {
      present.insert(seen.ref.uid);
    }
  }
  int freed = 0;
  for (const std::string& uid : held) {
    if (!present.contains(uid)) {
      cache_.ReleaseGone(uid);
      ++freed;
    }
  }
  if (freed == 0) {
    return RecheckResult::kUnchanged;
  }
  log_.Info("pods gone from a node before their watch events arrived; their devices are free",
            {{"node", node}, {"pods", static_cast<int64_t>(freed)}});
  return RecheckResult::kFreed;
}

}  // namespace accelpool::extender
