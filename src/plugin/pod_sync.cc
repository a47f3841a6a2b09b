#include "plugin/pod_sync.h"

#include <exception>
#include <filesystem>
#include <map>
#include <utility>

#include "api/pod_request.h"
#include "api/resources.h"
#include "api/task_priority.h"
#include "kube/objects.h"

namespace accelpool::plugin {
namespace {

using nlohmann::json;

// The pod's containers and init containers by name (sidecars are init
// containers); ephemeral containers get no devices.
std::map<std::string, const json*> ContainersByName(const json& pod) {
  std::map<std::string, const json*> out;
  for (const char* list : {"/spec/containers", "/spec/initContainers"}) {
    const json::json_pointer ptr(list);
    if (!pod.contains(ptr) || !pod.at(ptr).is_array()) {
      continue;
    }
    for (const json& c : pod.at(ptr)) {
      if (c.is_object() && c.contains("name") && c.at("name").is_string()) {
        out.emplace(c.at("name").get<std::string>(), &c);
      }
    }
  }
  return out;
}

PodRef RefOf(const json& pod) {
  PodRef r;
  r.ns = kube::StringAt(pod, json::json_pointer("/metadata/namespace"));
  r.name = kube::StringAt(pod, json::json_pointer("/metadata/name"));
  r.uid = kube::StringAt(pod, json::json_pointer("/metadata/uid"));
  r.created = kube::StringAt(pod, json::json_pointer("/metadata/creationTimestamp"));
  // As the pod asks; PodSync::Apply takes it away from a namespace not
  // granted it.
  r.high_priority = api::HighPriorityContainers(pod);
  return r;
}

// The pod as admission sees it: a pod deleted before kubelet admitted it
// (deletionTimestamp, no container status) without its deletionTimestamp, in
// `scratch`, since kubelet may still admit it; any other pod as it is.
const json& AdmissionView(const json& pod, json& scratch) {
  if (!pod.contains(json::json_pointer("/metadata/deletionTimestamp"))) {
    return pod;
  }
  scratch = pod;
  scratch["metadata"].erase("deletionTimestamp");
  return api::AwaitsAdmission(scratch) ? scratch : pod;
}

// Whether kubelet turned the pod away at admission: this plugin's Allocate
// for it failed (its accelpool.io/allocation says Failed) and kubelet never
// admitted it. kubelet does not admit a pod it rejected again, so the pod
// waits for nothing: it is no caller, and its grant is no one's.
bool RejectedAtAdmission(const json& pod, const json& view) {
  const std::string alloc = kube::StringAt(
      pod, json::json_pointer(std::string("/metadata/annotations/") + "accelpool.io~1allocation"));
  if (alloc.empty() || !api::AwaitsAdmission(view)) {
    return false;
  }
  StatusOr<api::Allocation> al = api::ParseAllocation(alloc);
  return al.ok() && al->phase == api::AllocationPhase::kFailed;
}

std::map<std::string, std::string> ExtendedResources(const json& container);

// Whether each entry of `a` is what kubelet will ask for: kubelet calls
// Allocate for a container with as many ids as the container asks for of the
// count resource, so the extender writes the resource the container asked
// through and one device per device asked for (a fraction is one device with
// its share; each die of a 910C module is a device of its own; init
// containers and sidecars have entries of their own). An entry without a
// resource, or with another count, is matched by no call of its container:
// the pod would be neither a pending caller nor a pod without an assignment,
// and its own Allocate could be steered to another pod's grant.
Status CheckRequests(const std::map<std::string, const json*>& containers, const PodRef& ref,
                     const api::Assignment& a) {
  for (const api::AssignedContainer& c : a.containers) {
    if (c.resource.empty()) {
      return InvalidArgumentError("pod " + ref.Key() + " has an " + api::kAssignmentAnnotation +
                                  " entry for container \"" + c.name +
                                  "\" that names no resource; delete the pod so the scheduler "
                                  "assigns it again");
    }
    // An entry under a memory or compute name (a container that asked for no
    // count, read as one device) is no count kubelet asks ids for: no check.
    if (std::optional<api::ResourceInfo> info = api::LookupResource(c.resource);
        info.has_value() && info->role != api::ResourceRole::kCount) {
      continue;
    }
    auto spec = containers.find(c.name);
    const std::map<std::string, std::string> asked = spec == containers.end()
                                                         ? std::map<std::string, std::string>()
                                                         : ExtendedResources(*spec->second);
    auto quantity = asked.find(c.resource);
    StatusOr<int64_t> n = quantity == asked.end()
                              ? StatusOr<int64_t>(int64_t{0})
                              : api::ParseWholeQuantity(quantity->second, false);
    if (!n.ok() || *n != static_cast<int64_t>(c.devices.size())) {
      return InvalidArgumentError(
          "pod " + ref.Key() + " has an " + api::kAssignmentAnnotation + " of " +
          std::to_string(c.devices.size()) + " devices of " + c.resource + " for container \"" +
          c.name + "\", which asks for " +
          (quantity == asked.end() ? std::string("none") : quantity->second) +
          "; delete the pod so the scheduler assigns it again");
    }
  }
  return Status::Ok();
}

StatusOr<std::optional<PodEntry>> EntryChecked(const json& pod, const std::string& node,
                                               api::AssignmentKeyRing* keys) {
  const std::string phase = kube::StringAt(pod, json::json_pointer("/status/phase"));
  if (phase == "Succeeded" || phase == "Failed") {
    return std::optional<PodEntry>();
  }
  // Being deleted: its containers run on through the grace period, holding
  // what they were granted, so the foreign memory check must still count it
  // (else its own use of its devices reads as ungranted). A pod deleted
  // before kubelet admitted it is still a waiting pod: kubelet admits a pod
  // it first sees already deleted (and calls Allocate for it) before its
  // worker stops it, and that Allocate must find the pod's own grant, not
  // another waiting pod's of the same shape. It holds nothing until then.
  json live;
  const json& view = AdmissionView(pod, live);
  const bool terminating =
      pod.contains(json::json_pointer("/metadata/deletionTimestamp")) && &view == &pod;
  if (RejectedAtAdmission(pod, view)) {
    return std::optional<PodEntry>();
  }
  const std::string text = kube::StringAt(
      pod, json::json_pointer(std::string("/metadata/annotations/") + "accelpool.io~1assignment"));
  if (text.empty()) {
    return std::optional<PodEntry>();
  }
  PodEntry e;
  e.pod = RefOf(pod);
  e.terminating = terminating;
  StatusOr<api::Assignment> a = api::ParseAssignment(text);
  if (!a.ok()) {
    return InvalidArgumentError("pod " + e.pod.Key() + " has an unreadable " +
                                api::kAssignmentAnnotation + " (" + a.status().message() +
                                "); delete the pod so the scheduler assigns it again");
  }
  if (a->node != node) {
    return FailedPreconditionError("pod " + e.pod.Key() + " runs on " + node +
                                   " but its assignment is for node \"" + a->node +
                                   "\"; delete the pod so the scheduler assigns it again");
  }
  // The uid and the container names end up in host paths (the enforcement
  // state dirs); the codec has checked the names' form, and here they must
  // also be containers of this very pod.
  if (Status st = api::CheckPodUid(e.pod.uid); !st.ok()) {
    return InvalidArgumentError("pod " + e.pod.Key() + ": " + st.message() + "; delete the pod");
  }
  const std::map<std::string, const json*> containers = ContainersByName(pod);
  for (const api::AssignedContainer& c : a->containers) {
    if (containers.count(c.name) == 0) {
      return InvalidArgumentError("pod " + e.pod.Key() + " has an " + api::kAssignmentAnnotation +
                                  " for container \"" + c.name +
                                  "\", which the pod does not have; delete the pod so the "
                                  "scheduler assigns it again");
    }
  }
  // What kubelet may still allocate from must match what the pod asks for.
  // An admitted pod's entries are not checked: its Allocate calls are done,
  // and its grants must go on counting (usage, foreign memory) whatever an
  // older extender wrote.
  if (api::AwaitsAdmission(view)) {
    ACCELPOOL_RETURN_IF_ERROR(CheckRequests(containers, e.pod, *a));
  }
  // Signed assignments: one that kubelet may still allocate from must be the
  // extender's own. An admitted pod's is no longer used for an Allocate (and
  // may predate signing), so it is not checked.
  if (keys != nullptr && api::AwaitsAdmission(view)) {
    const std::string sig =
        kube::StringAt(pod, json::json_pointer(std::string("/metadata/annotations/") +
                                               "accelpool.io~1assignment-signature"));
    if (Status st = keys->Verify(e.pod.uid, node, text, sig); !st.ok()) {
      if (st.code() == StatusCode::kNotFound) {
        // A key this node does not hold (yet): during a key rotation the
        // Secret reaches the nodes up to about a minute apart. Read again
        // at the next lookup (PodSync::Apply keeps no version for it).
        return NotFoundError("pod " + e.pod.Key() + ": its " + api::kAssignmentAnnotation +
                             " is refused for now: " + st.message() +
                             "; if an assignment key rotation is under way, the key reaches "
                             "this node with the Secret (accelpool-keys status shows which "
                             "nodes hold which keys); otherwise delete the pod so the "
                             "scheduler assigns it again");
      }
      return PermissionDeniedError("pod " + e.pod.Key() + ": its " + api::kAssignmentAnnotation +
                                   " is refused: " + st.message() +
                                   "; delete the pod so the scheduler assigns it again");
    }
  }
  e.assignment = std::move(a).value();
  const std::string alloc = kube::StringAt(
      pod, json::json_pointer(std::string("/metadata/annotations/") + "accelpool.io~1allocation"));
  if (!alloc.empty()) {
    StatusOr<api::Allocation> al = api::ParseAllocation(alloc);
    // Both phases list what is allocated so far: a failed Allocate of one
    // container leaves the others running with their devices. By container
    // and resource: another vendor's plugin allocating the container's
    // devices of its own resource leaves this plugin's entry pending (a name
    // an older plugin wrote stands for every resource, api::Allocation).
    if (al.ok()) {
      e.allocated.insert(al->allocated.begin(), al->allocated.end());
    }
  }
  // Kubelet makes every Allocate call of a pod while admitting it, before it
  // reports any container status: an admitted pod has nothing pending, even
  // when its allocation record was never written (the plugin stopped, or the
  // write failed past its retries). Its other containers are presumed
  // allocated, so it does not stay a possible caller for every later pod of
  // the same shape.
  if (!api::AwaitsAdmission(view)) {
    for (const api::AssignedContainer& c : e.assignment.containers) {
      if (!Holds(e.allocated, c)) e.presumed.insert({c.name, c.resource});
    }
  }
  return std::optional<PodEntry>(std::move(e));
}

// Resource name -> quantity text of one container (limits win over
// requests, as for the scheduler). Only extended resources ("x/y").
std::map<std::string, std::string> ExtendedResources(const json& container) {
  std::map<std::string, std::string> out;
  for (const char* kind : {"/resources/requests", "/resources/limits"}) {
    const json::json_pointer ptr(kind);
    if (!container.contains(ptr) || !container.at(ptr).is_object()) {
      continue;
    }
    for (const auto& [name, value] : container.at(ptr).items()) {
      if (name.find('/') == std::string::npos) {
        continue;
      }
      out[name] = value.is_string()           ? value.get<std::string>()
                  : value.is_number_integer() ? std::to_string(value.get<int64_t>())
                                              : std::string();
    }
  }
  return out;
}

std::vector<UnassignedRequest> UnassignedChecked(const json& pod,
                                                 const api::Assignment* assignment) {
  json live;
  const json& view = AdmissionView(pod, live);
  if (!api::AwaitsAdmission(view) || RejectedAtAdmission(pod, view)) {
    return {};
  }
  std::vector<UnassignedRequest> out;
  for (const char* list : {"/spec/initContainers", "/spec/containers"}) {
    const json::json_pointer ptr(list);
    if (!pod.contains(ptr) || !pod.at(ptr).is_array()) {
      continue;
    }
    for (const json& c : pod.at(ptr)) {
      if (!c.is_object() || !c.contains("name") || !c.at("name").is_string()) {
        continue;
      }
      const std::string name = c.at("name").get<std::string>();
      for (const auto& [resource, quantity] : ExtendedResources(c)) {
        bool covered = false;
        for (const api::AssignedContainer& a : assignment != nullptr
                                                   ? assignment->containers
                                                   : std::vector<api::AssignedContainer>{}) {
          covered = covered || (a.name == name && a.resource == resource);
        }
        if (covered) {
          continue;
        }
        StatusOr<int64_t> n = api::ParseWholeQuantity(quantity, false);
        if (n.ok() && *n == 0) {
          continue;
        }
        out.push_back({name, resource, n.ok() ? *n : -1});
      }
    }
  }
  return out;
}

}  // namespace

std::vector<UnassignedRequest> UnassignedRequestsOf(const nlohmann::json& pod,
                                                    const api::Assignment* assignment) {
  if (!pod.is_object()) {
    return {};
  }
  try {
    return UnassignedChecked(pod, assignment);
  } catch (const std::exception&) {
    return {};  // EntryFromPod reports the malformed pod
  }
}

StatusOr<std::optional<PodEntry>> EntryFromPod(const nlohmann::json& pod, const std::string& node,
                                               api::AssignmentKeyRing* keys) {
  if (!pod.is_object()) {
    return InvalidArgumentError("a pod object is not a JSON object");
  }
  try {
    return EntryChecked(pod, node, keys);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("a pod object could not be read: ") + e.what());
  }
}

PodSync::PodSync(kube::KubeClient* client, std::string node, AssignmentStore* store,
                 PodReporter* reporter, Logger log, const StateDirs* dirs)
    : client_(client),
      node_(std::move(node)),
      store_(store),
      reporter_(reporter),
      log_(std::move(log)),
      dirs_(dirs) {}

PodSync::~PodSync() { Stop(); }

void PodSync::Apply(const nlohmann::json& pod) {
  StatusOr<std::optional<PodEntry>> e = EntryFromPod(pod, node_, keys_);
  PodRef ref = RefOf(pod);
  // High task priority is the platform's grant (api/task_priority.h): a pod
  // of a namespace not granted it that asks (the webhook refuses such a pod;
  // this one got past it) runs as if it had not asked, never high.
  std::set<std::string> not_granted;
  if (!ref.high_priority.empty() && !high_priority_.Allows(ref.ns)) {
    not_granted = std::move(ref.high_priority);
    ref.high_priority.clear();
    if (e.ok() && e->has_value()) (**e).pod.high_priority.clear();
  }
  const PodEntry* entry = e.ok() && e->has_value() ? &**e : nullptr;
  std::vector<UnassignedRequest> unassigned =
      UnassignedRequestsOf(pod, entry != nullptr ? &entry->assignment : nullptr);
  const std::string version = kube::StringAt(pod, json::json_pointer("/metadata/resourceVersion"));
  const std::string phase = kube::StringAt(pod, json::json_pointer("/status/phase"));
  {
    // One store update: a concurrent Allocate must never see the pod without
    // its assignment and without its unassigned requests at the same time.
    // The version is recorded with it: when the watch and a refresh apply
    // two versions at once, applied_ names the one the store kept.
    std::lock_guard<std::mutex> lock(apply_mu_);
    if (forgotten_.count(ref.uid) != 0) {
      // Deleted or ended already: this object was read before the delete
      // event, or the version that ended it, came (a refresh racing the
      // watch). Checked under the lock Forget holds, so that the pod cannot
      // come back between the check and the store.
      log_.Debug("not applying a pod that was deleted or has ended", {{"pod", ref.Key()}});
      return;
    }
    NoteName(pod, ref);
    store_->Replace(entry != nullptr ? entry->pod : ref,
                    entry != nullptr ? &entry->assignment : nullptr,
                    entry != nullptr ? entry->allocated : AllocatedSet(), std::move(unassigned),
                    entry != nullptr ? entry->presumed : AllocatedSet(),
                    entry != nullptr && entry->terminating);
    // A pod refused for a key this node does not hold yet keeps no version,
    // so the next refresh reads it again (by then the key may be here).
    const bool retry = !e.ok() && e.status().code() == StatusCode::kNotFound;
    if (!ref.uid.empty() && !version.empty() && !retry) {
      applied_[ref.uid] = version;
    } else {
      applied_.erase(ref.uid);
    }
    if (!ref.uid.empty()) {
      applied_seq_[ref.uid] = ++apply_seq_;
    }
    if (phase == "Succeeded" || phase == "Failed") {
      // A pod's phase never leaves Succeeded or Failed: an older version a
      // refresh read before this one must not bring it back as pending.
      RememberGoneLocked(ref.uid);
    }
  }
  if (!not_granted.empty()) {
    NotePriorityNotGranted(ref, not_granted);
  }
  if (e.ok()) {
    return;
  }
  bool first = false;
  {
    const std::string why = e.status().ToString();
    std::lock_guard<std::mutex> lock(mu_);
    if (ref.uid.empty()) {
      first = true;
    } else if (auto [it, added] = reported_.try_emplace(ref.uid, why); added || it->second != why) {
      it->second = why;
      first = true;
    }
  }
  if (first) {
    log_.Error("ignoring the pod's assignment",
               {{"pod", ref.Key()}, {"error", e.status().ToString()}});
    if (on_refused_) {
      const StatusCode code = e.status().code();
      on_refused_(code == StatusCode::kPermissionDenied     ? "signature"
                  : code == StatusCode::kNotFound           ? "unknown_key"
                  : code == StatusCode::kFailedPrecondition ? "other_node"
                                                            : "malformed");
    }
    if (reporter_ != nullptr) {
      reporter_->Failed(ref, "", e.status().message(), {});
    }
  }
}

void PodSync::NotePriorityNotGranted(const PodRef& ref, const std::set<std::string>& containers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ref.uid.empty() && !priority_not_granted_.insert(ref.uid).second) return;
  }
  std::string names;
  for (const std::string& c : containers) names += (names.empty() ? "" : ",") + c;
  log_.Warn(
      "a pod asks for high task priority in a namespace not granted it; its containers run as "
      "low priority",
      {{"pod", ref.Key()},
       {"containers", names},
       {"reason",
        "namespace " + ref.ns +
            " is not in --high-priority-namespaces (chart: "
            "devicePlugin.priority.highPriorityNamespaces); the admission webhook refuses "
            "such pods, so this one got past it"}});
  if (on_priority_not_granted_) on_priority_not_granted_();
}

std::string PodSync::PodKeyOfUid(const std::string& uid) const {
  const std::optional<PodRef> ref = PodOfUid(uid);
  return ref.has_value() ? ref->Key() : std::string();
}

std::optional<PodRef> PodSync::PodOfUid(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = names_.find(uid);
  return it == names_.end() ? std::nullopt : std::optional<PodRef>(it->second);
}

void PodSync::NoteName(const nlohmann::json& pod, const PodRef& ref, bool gone) {
  const std::string phase = kube::StringAt(pod, json::json_pointer("/status/phase"));
  const std::string mirror =
      kube::StringAt(pod, json::json_pointer("/metadata/annotations/kubernetes.io~1config.mirror"));
  const bool ended = gone || phase == "Succeeded" || phase == "Failed";
  if (ref.uid.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  // The static pod's uid as last recorded goes with its mirror pod (a delete
  // event may carry less of the object than the watch delivered before).
  if (const auto m = mirrors_.find(ref.uid); m != mirrors_.end()) {
    names_.erase(m->second);
    mirrors_.erase(m);
  }
  if (ended) {
    names_.erase(ref.uid);
    return;
  }
  names_[ref.uid] = ref;
  if (!mirror.empty() && mirror != ref.uid) {
    names_[mirror] = ref;
    mirrors_[ref.uid] = mirror;
  }
}

void PodSync::Update(const nlohmann::json& old, const nlohmann::json& now) {
  const std::string was = RefOf(old).uid;
  if (!was.empty() && was != RefOf(now).uid) {
    Forget(old);
  }
  Apply(now);
}

void PodSync::RememberGoneLocked(const std::string& uid) {
  if (uid.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(forgotten_, [&](const auto& kv) { return now - kv.second > kForgottenFor; });
  forgotten_[uid] = now;
}

void PodSync::Forget(const nlohmann::json& pod) {
  const PodRef ref = RefOf(pod);
  {
    std::lock_guard<std::mutex> lock(apply_mu_);
    NoteName(pod, ref, /*gone=*/true);
    store_->Remove(ref.uid);
    applied_.erase(ref.uid);
    applied_seq_.erase(ref.uid);
    {
      std::lock_guard<std::mutex> reported_lock(mu_);
      reported_.erase(ref.uid);
      priority_not_granted_.erase(ref.uid);
    }
    RememberGoneLocked(ref.uid);
  }
  if (dirs_ != nullptr && !ref.uid.empty()) {
    QueueRemoval(ref);
  }
}

void PodSync::QueueRemoval(const PodRef& ref) {
  std::unique_lock<std::mutex> lock(remove_mu_);
  if (remove_stop_) {
    return;  // stopped: the next run's sweep removes them
  }
  for (const PodRef& queued : removals_) {
    if (queued.uid == ref.uid) return;
  }
  if (removals_.size() >= kMaxQueuedRemovals) {
    lock.unlock();
    log_.Warn(
        "too many deleted pods wait for their state dirs to be removed; the sweep removes "
        "this one's",
        {{"pod", ref.Key()}, {"queued", static_cast<int64_t>(kMaxQueuedRemovals)}});
    return;
  }
  removals_.push_back(ref);
  if (!remover_.joinable()) {
    remover_ = std::thread([this] { RemoveLoop(); });
  }
  remove_cv_.notify_all();  // The remover, and WaitForRemovals (one cv for both).
}

void PodSync::RemoveLoop() {
  std::unique_lock<std::mutex> lock(remove_mu_);
  for (;;) {
    remove_cv_.wait(lock, [this] { return remove_stop_ || !removals_.empty(); });
    if (remove_stop_) {
      if (!removals_.empty()) {
        log_.Info(
            "stopping with deleted pods whose state dirs are not removed yet; the next "
            "sweep removes them",
            {{"pods", static_cast<int64_t>(removals_.size())}});
        removals_.clear();
      }
      return;
    }
    const PodRef ref = removals_.front();
    removals_.pop_front();
    removing_ = true;
    lock.unlock();
    size_t removed = 0;
    const Status st =
        remove_pod_ ? remove_pod_(ref.uid, &removed) : dirs_->RemovePod(ref.uid, &removed);
    if (!st.ok()) {
      log_.Warn("removing the pod's state dirs failed; the sweep tries again",
                {{"pod", ref.Key()}, {"error", st.ToString()}});
    } else if (removed > 0) {
      log_.Debug("removed the pod's state dirs",
                 {{"pod", ref.Key()}, {"dirs", static_cast<int64_t>(removed)}});
    }
    lock.lock();
    removing_ = false;
    remove_cv_.notify_all();  // WaitForRemovals
  }
}

bool PodSync::WaitForRemovals(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(remove_mu_);
  return remove_cv_.wait_for(lock, timeout, [this] { return removals_.empty() && !removing_; });
}

void PodSync::StopRemover() {
  std::thread remover;
  {
    std::lock_guard<std::mutex> lock(remove_mu_);
    remove_stop_ = true;
    remover = std::move(remover_);
  }
  remove_cv_.notify_all();
  if (remover.joinable()) {
    remover.join();
  }
}

void PodSync::Start() {
  kube::InformerOptions o;
  o.resource = kube::Pods();
  o.field_selector = "spec.nodeName=" + node_;
  // One node's pods: from the watch cache (the kubelet-path refreshes read
  // consistently where the newest pods matter).
  o.list_from_watch_cache = true;
  kube::InformerHandlers h;
  h.on_add = [this](const json& pod) { Apply(pod); };
  h.on_update = [this](const json& old, const json& pod) { Update(old, pod); };
  h.on_delete = [this](const json& pod) { Forget(pod); };
  informer_ = std::make_unique<kube::Informer>(*client_, o, h, log_.Child("informer"));
  store_->SetPodsListed(
      [inf = informer_.get()] { return inf->WaitForSync(std::chrono::milliseconds(0)); });
  informer_->Start();
}

void PodSync::Stop() {
  if (informer_ != nullptr) {
    store_->SetPodsListed(nullptr);
    informer_->Stop();
    informer_.reset();
  }
  // After the informer: no Forget queues more.
  StopRemover();
}

bool PodSync::WaitForSync(std::chrono::milliseconds timeout) const {
  return informer_ != nullptr && informer_->WaitForSync(timeout);
}

void PodSync::NoteListForm(bool metadata_only) {
  const int form = metadata_only ? 1 : 0;
  if (list_form_.exchange(form) == form) {
    return;
  }
  if (metadata_only) {
    log_.Info("the apiserver answers metadata-only pod lists (PartialObjectMetadataList)");
  } else {
    log_.Info(
        "the apiserver answers metadata-only pod lists with whole pods; refreshes apply those");
  }
}

void PodSync::RetainPending(std::set<std::string> pending, uint64_t since) {
  std::lock_guard<std::mutex> lock(apply_mu_);
  // Pods the watch applied after the list began (bound since): the list
  // could not show them, and dropping them would lose a pod kubelet may be
  // admitting now.
  for (const auto& [uid, seq] : applied_seq_) {
    if (seq > since) pending.insert(uid);
  }
  store_->RetainPending(pending);
  // The store may have dropped what it held for these pods (their
  // unassigned requests at least), so their versions no longer describe it.
  std::erase_if(applied_, [&](const auto& kv) { return pending.count(kv.first) == 0; });
  std::erase_if(applied_seq_, [&](const auto& kv) { return pending.count(kv.first) == 0; });
  // reported_ stays: a pod not in `pending` may well exist (a running pod,
  // after a re-read of the Pending ones), and its refusal was said. Forget
  // drops its entry when the pod is gone, and a re-read of every pod that
  // has not ended one it does not list (ReRead).
}

size_t PodSync::RefusalsRemembered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reported_.size();
}

uint64_t PodSync::ApplySeq() {
  std::lock_guard<std::mutex> lock(apply_mu_);
  return apply_seq_;
}

void PodSync::ApplyPending(const std::vector<nlohmann::json>& pods, uint64_t since) {
  std::set<std::string> pending;
  for (const json& pod : pods) {
    pending.insert(RefOf(pod).uid);
    Apply(pod);
  }
  RetainPending(std::move(pending), since);
}

Status PodSync::Refresh() {
  // Only a pod that kubelet is still admitting can be the caller of an
  // Allocate that the store missed, and kubelet marks a pod Running only
  // after it admitted it: the Pending pods are enough, and on a node in
  // steady state they are a handful rather than all of them, which keeps
  // this list (it runs on kubelet's path) short.
  return ReRead(",status.phase=Pending", /*every_live_pod=*/false);
}

Status PodSync::RefreshNotEnded() {
  // The caller may also be a running pod: kubelet admits one again when it
  // lost its device checkpoint, and a pod's phase is whatever its node agent
  // last wrote, which need not trail kubelet's admission (kwok, which keeps
  // simulated nodes, marks a pod Running as it is bound). While the watch is
  // down (an apiserver restart) such a pod reaches the store only this way.
  return ReRead(",status.phase!=Succeeded,status.phase!=Failed", /*every_live_pod=*/true);
}

Status PodSync::ReRead(const std::string& phases, bool every_live_pod) {
  // The list asks for metadata only: serialising and parsing whole pods was
  // most of a refresh's cost, and the store already holds nearly all of them
  // at their current version (the watch delivered them). Only the others
  // are read in full: the assignment is checked against the pod's
  // containers, and a pod without one may still block the fallback rule
  // with what its containers ask for, both of which need the spec.
  kube::ListOptions o;
  o.field_selector = "spec.nodeName=" + node_ + phases;
  auto list = [&](bool metadata_only) {
    o.metadata_only = metadata_only;
    StatusOr<kube::ListResult> r = client_->List(kube::Pods(), "", o);
    if (!r.ok()) {
      log_.Warn("re-reading the node's pods failed",
                {{"selector", o.field_selector}, {"error", r.status().ToString()}});
    }
    return r;
  };
  std::set<std::string> reported_before;  // refusals said before the list
  if (every_live_pod) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [uid, why] : reported_) reported_before.insert(uid);
    reported_before.insert(priority_not_granted_.begin(), priority_not_granted_.end());
  }
  const uint64_t since = ApplySeq();  // before the list: see RetainPending
  StatusOr<kube::ListResult> pods = list(true);
  if (!pods.ok()) {
    return pods.status();
  }
  NoteListForm(pods->metadata_only);
  if (every_live_pod) {
    // A refused pod that ended, or was deleted while the watch was down (the
    // informer's relist then never knew it, and Forget never comes), is not
    // listed: its record goes. One refused during the list keeps its record.
    std::set<std::string> listed;
    for (const json& item : pods->items) listed.insert(RefOf(item).uid);
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& uid : reported_before) {
      if (listed.count(uid) == 0) {
        reported_.erase(uid);
        priority_not_granted_.erase(uid);
      }
    }
  }
  if (!pods->metadata_only) {
    // A server that cannot transform lists (an aggregated apiserver or a
    // proxy in the way) answered whole pods: use them as they are.
    ApplyPending(pods->items, since);
    return Status::Ok();
  }
  // The listed pods, and those of them the store does not hold at the listed
  // version (new to this plugin, or changed since the watch last delivered).
  std::set<std::string> pending;
  std::vector<PodRef> stale;
  bool relist = false;
  {
    std::lock_guard<std::mutex> lock(apply_mu_);
    for (const json& item : pods->items) {
      PodRef ref = RefOf(item);
      pending.insert(ref.uid);
      const std::string version =
          kube::StringAt(item, json::json_pointer("/metadata/resourceVersion"));
      auto it = applied_.find(ref.uid);
      if (ref.uid.empty() || version.empty() || it == applied_.end() || it->second != version) {
        relist = relist || ref.name.empty();  // cannot be read by name
        stale.push_back(std::move(ref));
      }
    }
  }
  if (relist || stale.size() > kMaxFetches) {
    // Many pods changed at once (a burst of bindings the watch has not
    // delivered yet): one list of whole pods costs less than their reads.
    StatusOr<kube::ListResult> full = list(false);
    if (!full.ok()) {
      return full.status();
    }
    ApplyPending(full->items, since);
    return Status::Ok();
  }
  for (const PodRef& ref : stale) {
    StatusOr<json> pod = client_->Get(kube::Pods(), ref.ns, ref.name);
    // Gone since the list, or gone and created again under its name (the
    // new pod is another pod, not known to be this node's): not pending.
    if ((!pod.ok() && pod.status().code() == StatusCode::kNotFound) ||
        (pod.ok() && RefOf(*pod).uid != ref.uid)) {
      pending.erase(ref.uid);
      continue;
    }
    if (!pod.ok()) {
      log_.Warn("reading a pending pod failed",
                {{"pod", ref.Key()}, {"error", pod.status().ToString()}});
      return pod.status();
    }
    Apply(*pod);
  }
  log_.Debug("re-read the node's pods", {{"selector", o.field_selector},
                                         {"listed", static_cast<int64_t>(pods->items.size())},
                                         {"read", static_cast<int64_t>(stale.size())}});
  RetainPending(std::move(pending), since);
  return Status::Ok();
}

StatusOr<std::set<std::string>> PodSync::ListLiveUids(const std::string& not_older_than) {
  kube::ListOptions o;
  o.field_selector = "spec.nodeName=" + node_;
  o.metadata_only = true;  // uids only; a server may answer whole pods
  if (!not_older_than.empty()) {
    o.resource_version = not_older_than;
    o.resource_version_match = "NotOlderThan";
    o.limit = 0;  // with a limit, kube-apiserver before 1.31 reads etcd instead
  }
  StatusOr<kube::ListResult> pods = client_->List(kube::Pods(), "", o);
  if (!pods.ok()) {
    log_.Warn("listing the node's pods for the state-dir sweep failed",
              {{"error", pods.status().ToString()}});
    return pods.status();
  }
  NoteListForm(pods->metadata_only);
  std::set<std::string> live;
  for (const json& pod : pods->items) {
    const std::string uid = RefOf(pod).uid;
    if (uid.empty()) {
      // A pod whose uid cannot be read would look gone: sweep nothing.
      return InternalError("a listed pod has no metadata.uid; state dirs not swept");
    }
    live.insert(uid);
  }
  return live;
}

Status PodSync::SweepStateDirs() {
  if (dirs_ == nullptr) {
    return Status::Ok();
  }
  // Taken before the list: a dir made after it may belong to a pod the list
  // does not show yet. The margin covers coarse filesystem timestamps.
  constexpr auto kMargin = std::chrono::minutes(1);
  const auto before = std::filesystem::file_time_type::clock::now() - kMargin;
  // Every node sweeps: the first list is served from the apiserver's watch
  // cache (a consistent list is read from etcd, which has no index on
  // spec.nodeName, on apiservers without ConsistentListFromCache). It shows a
  // state at least as new as the informer's last version, but a lagging
  // cache may still omit a pod bound since (one Refresh found), so a dir it
  // would remove is removed only when a consistent list agrees. Most sweeps
  // find nothing to remove and never ask for one.
  std::string since = informer_ != nullptr ? informer_->last_resource_version() : "";
  StatusOr<std::set<std::string>> live = ListLiveUids(since);
  if (!live.ok() && !since.empty()) {
    // The apiserver this list reached may lag the one the watch reads (an
    // HA control plane answers "too large resource version" after a wait):
    // a consistent list decides instead.
    since.clear();
    live = ListLiveUids(since);
  }
  if (!live.ok()) {
    return live.status();
  }
  if (!since.empty()) {
    StatusOr<std::set<std::string>> unlisted = dirs_->Unlisted(*live, before);
    if (!unlisted.ok()) {
      log_.Warn("sweeping state dirs failed", {{"error", unlisted.status().ToString()}});
      return unlisted.status();
    }
    if (unlisted->empty()) {
      return Status::Ok();
    }
    live = ListLiveUids("");
    if (!live.ok()) {
      return live.status();
    }
  }
  size_t removed = 0;
  Status st = dirs_->Sweep(*live, before, &removed);
  if (!st.ok()) {
    log_.Warn("sweeping state dirs failed", {{"error", st.ToString()}});
  }
  if (removed > 0) {
    log_.Info("removed the state dirs of pods that are gone",
              {{"dirs", static_cast<int64_t>(removed)}});
  }
  return st;
}

}  // namespace accelpool::plugin
