#include "plugin/allocator.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "api/assignment_codec.h"
#include "api/resources.h"
#include "plugin/container_usage.h"
#include "plugin/priority_file.h"

namespace accelpool::plugin {
namespace {

// Between re-reads of the node's pods while kubelet lists several pods of a
// shape as being admitted (kubelet's Failed status of the ones it turned
// away is on its way).
constexpr std::chrono::milliseconds kSeveralListedPause{100};

// The metric label for a failed Allocate.
std::string Reason(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return "bad_request";
    case StatusCode::kNotFound:
      return "no_assignment";
    case StatusCode::kFailedPrecondition:
      return "assignment_mismatch";
    case StatusCode::kAborted:
      return "ambiguous";
    case StatusCode::kDeadlineExceeded:
      return "pods_unread";
    default:
      return "driver";
  }
}

}  // namespace

Allocator::Allocator(std::string node, DeviceState* state, AssignmentStore* store,
                     PluginMetrics* metrics, PodReporter* reporter, EnforcementOptions options,
                     Logger log, std::function<Status()> refresh)
    : node_(std::move(node)),
      state_(state),
      store_(store),
      metrics_(metrics),
      reporter_(reporter),
      options_(std::move(options)),
      log_(std::move(log)),
      refresh_(std::move(refresh)),
      dirs_(options_.state_root,
            StateDirOptions{.create = options_.create_state_dirs,
                            .size_mib = options_.state_dir_size_mib,
                            .inodes = options_.state_dir_inodes,
                            .calls = options_.mount_calls,
                            .on_uncapped = [log = log_, metrics = metrics_](const Status& why) {
                              log.Warn(
                                  "container state dirs are not size-capped: a container can "
                                  "fill the node's disk through its state dir; run the plugin "
                                  "privileged with mountPropagation Bidirectional on the state "
                                  "root, or pass --state-dir-size-mib=0 to silence this",
                                  {{"error", why.ToString()}});
                              if (metrics != nullptr) metrics->SetStateDirsUncapped(true);
                            }}) {
  narrow_.fn = refresh_;
  narrow_.scope = "pending";
  wide_.scope = "not_ended";
}

Allocator::~Allocator() {
  for (ReRead* r : {&narrow_, &wide_}) {
    std::shared_future<Status> inflight;
    {
      std::lock_guard<std::mutex> lock(r->mu);
      inflight = r->inflight;
    }
    if (inflight.valid()) {
      inflight.wait();  // it uses the store and the callback's captures
    }
  }
}

Status Allocator::Refresh(ReRead& which, std::chrono::steady_clock::time_point deadline) {
  const auto entered = std::chrono::steady_clock::now();
  std::shared_future<Status> f;
  for (;;) {
    bool read_after_entry = true;
    {
      std::lock_guard<std::mutex> lock(which.mu);
      if (!which.inflight.valid() ||
          which.inflight.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        which.started = std::chrono::steady_clock::now();
        which.inflight = std::async(std::launch::async, which.fn).share();
      } else {
        read_after_entry = which.started >= entered;
      }
      f = which.inflight;
    }
    if (read_after_entry || f.wait_until(deadline) != std::future_status::ready) break;
    // It began before this call: wait for it to end (above), then read again.
  }
  if (f.wait_until(deadline) != std::future_status::ready) {
    // Kubelet waits on this call with no deadline while it admits the node's
    // pods one at a time; the re-read goes on and serves the next call.
    if (metrics_ != nullptr) metrics_->PodReread(which.scope, "timeout");
    return DeadlineExceededError(
        "re-reading the node's pods took longer than " + std::to_string(refresh_budget_.count()) +
        " ms (is the apiserver slow or unreachable from this node?); kubelet fails the pod's "
        "admission (UnexpectedAdmissionError) and does not call again for it: its controller "
        "creates it again, or delete the pod and create it again");
  }
  Status st = f.get();
  if (metrics_ != nullptr) metrics_->PodReread(which.scope, st.ok() ? "ok" : "failed");
  return st;
}

StatusOr<ContainerAnswer> Allocator::One(const std::string& resource, const Snapshot& snap,
                                         const std::vector<std::string>& ids,
                                         const AnsweredContainers& answered,
                                         std::optional<PodRef>* pod, MadeDirs* made, bool* sure,
                                         bool* again) {
  *again = false;
  *sure = false;
  if (ids.empty()) {
    return InvalidArgumentError("Allocate named no device ids for a container of " + resource);
  }
  auto devices = snap.resources.find(resource);
  for (const std::string& id : ids) {
    StatusOr<std::pair<std::string, int32_t>> slot = api::ParseSlotId(id);
    if (!slot.ok()) {
      return InvalidArgumentError("device id \"" + id + "\" is not a slot id of this plugin (" +
                                  slot.status().message() + ")");
    }
    const core::Device* d = snap.Find(slot->first);
    if (d == nullptr || slot->second < 0 || slot->second >= d->max_shares) {
      return InvalidArgumentError("unknown slot id \"" + id +
                                  "\": this plugin never advertised it; kubelet's checkpoint may "
                                  "be stale, restart the pod");
    }
    if (devices == snap.resources.end() || ResourceFor(*d) != resource) {
      return InvalidArgumentError("slot \"" + id + "\" belongs to " + ResourceFor(*d) + ", not " +
                                  resource);
    }
  }
  std::optional<PodRef> caller;
  bool asked_kubelet = false;  // whether kubelet's view was read for this lookup
  std::optional<KubeletView> last_view;  // the view last read for this lookup
  StatusOr<ContainerMatch> match = store_->Match(resource, ids, &caller, nullptr, &answered);
  // A miss may be the informer lagging the binding. A fallback, and a repeat
  // of an earlier call, are judged on who else could be calling, so they must
  // see the node's pods as they are now (a pod bound a moment ago may be the
  // caller, and the pod an earlier call was for may have finished): all
  // re-read the pods once, and a fallback that cannot be confirmed is refused.
  if ((!match.ok() || match->by_fallback || match->repeat) && refresh_) {
    const auto deadline = std::chrono::steady_clock::now() + refresh_budget_;
    Status fresh = Refresh(narrow_, deadline);
    caller.reset();
    match = store_->Match(resource, ids, &caller, nullptr, &answered);
    if (!match.ok() && fresh.ok() && wide_.fn) {
      // Not among the Pending pods: it may be a running one (wide_).
      fresh = Refresh(wide_, deadline);
      caller.reset();
      match = store_->Match(resource, ids, &caller, nullptr, &answered);
    }
    if (match.ok() && match->by_fallback && !fresh.ok()) {
      return AbortedError("slot ids [" +
                          [&] {
                            std::string s;
                            for (const std::string& id : ids) {
                              s += (s.empty() ? "" : ",") + id;
                            }
                            return s;
                          }() +
                          "] name no assignment and the node's pods could not be re-read (" +
                          fresh.message() + ") to confirm that pod " + match->pod.Key() +
                          " container " + match->container.name + " is the only one asking for " +
                          resource +
                          "; kubelet fails the pod's admission and does not call again for it "
                          "(a pod created again is looked up afresh)");
    }
    if (!match.ok() && fresh.code() == StatusCode::kDeadlineExceeded) {
      return fresh;  // the store may just be behind: say so, not "no assignment"
    }
    // A repeat, or a container presumed allocated, answers with a grant
    // handed out before. Unconfirmed it may be a finished pod's the watch has
    // not reported, handed to a pod bound a moment ago: its devices, limits
    // and state dir would go to the new pod. Kubelet's own view confirms it
    // when it lists that pod as being admitted (a kubelet that lost its
    // checkpoint while the apiserver is unreachable).
    if (match.ok() && (match->repeat || match->presumed) && !fresh.ok()) {
      std::string why = "kubelet's pod-resources API is not configured";
      if (kubelet_view_) {
        StatusOr<KubeletView> view = kubelet_view_();
        why = !view.ok() ? "kubelet's pod-resources API could not be read (" +
                               view.status().message() + ")"
              : KubeletAdmitting(*view, match->pod, match->container, resource)
                  ? std::string()
                  : "kubelet's pod-resources API does not list the pod as being admitted";
      }
      if (!why.empty()) {
        // Not reported on that pod: the caller may well be another one.
        return AbortedError(
            "slot ids name container " + match->container.name + " of pod " + match->pod.Key() +
            ", allocated before, and the node's pods could not be re-read (" + fresh.message() +
            ") to confirm that it is being admitted again; " + why +
            ". Kubelet fails the pod's admission and does not call again for it "
            "(its controller creates it again, or delete it and create it again)");
      }
      log_.Info(
          "the node's pods could not be re-read; kubelet's pod-resources API confirms the "
          "pod is being admitted again",
          {{"pod", match->pod.Key()}, {"container", match->container.name}});
    }
  }
  // Several pods could be asking: kubelet's own view settles it.
  if (kubelet_view_ && ((match.ok() && match->ambiguous) ||
                        (!match.ok() && match.status().code() == StatusCode::kAborted))) {
    StatusOr<KubeletView> view = kubelet_view_();
    if (view.ok()) {
      asked_kubelet = true;
      caller.reset();
      match = store_->Match(resource, ids, &caller, &*view, &answered);
      last_view = *view;
    } else {
      log_.Warn(
          "kubelet's pod-resources API could not be read; who is calling goes by the slot "
          "ids",
          {{"resource", resource}, {"error", view.status().ToString()}});
    }
  } else if (kubelet_view_ && match.ok() &&
             (match->how == ContainerMatch::How::kSlots ||
              match->how == ContainerMatch::How::kOnlyCandidate) &&
             !match->repeat && !match->presumed) {
    // The slot ids, or being the only one, name the one pod waiting with that
    // shape that the store knows. The store may lag kubelet: a pod bound a
    // moment before it, not on this plugin's watch yet, is admitted first and
    // GetPreferredAllocation steered it to the other pod's slots; and a
    // static pod has no mirror pod, so no record here, until kubelet has
    // admitted it. Kubelet's view must list the named pod as being admitted;
    // when it does not, the node's pods are read again and the view decides
    // among them (the store answers for no pod the view does not list).
    StatusOr<KubeletView> view = kubelet_view_();
    if (!view.ok()) {
      // The pod the ids name may be one the store knows while the caller was
      // bound a moment ago: the node's pods are read again before the ids
      // are trusted.
      log_.Warn(
          "kubelet's pod-resources API could not be read to confirm the pod the slot ids "
          "name; re-reading the node's pods",
          {{"pod", match->pod.Key()},
           {"container", match->container.name},
           {"resource", resource},
           {"error", view.status().ToString()}});
      if (refresh_ && !match->by_fallback) {  // a fallback has just re-read them
        if (Status fresh = Refresh(); !fresh.ok()) {
          log_.Warn("the node's pods could not be re-read either; the slot ids decide",
                    {{"resource", resource}, {"error", fresh.ToString()}});
        }
        caller.reset();
        match = store_->Match(resource, ids, &caller, nullptr, &answered);
      }
    } else if (!KubeletAdmitting(*view, match->pod, match->container, resource)) {
      asked_kubelet = true;
      last_view = *view;
      log_.Warn(
          "kubelet is not admitting the pod the slot ids name; re-reading the node's pods to "
          "find the caller",
          {{"pod", match->pod.Key()},
           {"container", match->container.name},
           {"resource", resource}});
      if (refresh_ && !match->by_fallback) {  // a fallback has just re-read them
        static_cast<void>(Refresh());
      }
      caller.reset();
      match = store_->Match(resource, ids, &caller, &*view, &answered);
    }
  }
  if (match.ok() && match->listed_several) {
    // Kubelet lists several pods of the shape as being admitted. It admits
    // one at a time, so all but one were turned away (a kubelet before
    // 1.34 lists them until they are deleted): re-read the node's pods
    // until their Failed status has arrived. No order names the caller
    // for sure (creation times tie within a second, and an older pod may
    // reach kubelet after a newer one), so the call is refused when the
    // re-reads do not settle it.
    const auto deadline = std::chrono::steady_clock::now() + refresh_budget_;
    Status fresh = FailedPreconditionError("no way to re-read the node's pods is configured");
    for (bool first = true; refresh_ && match.ok() && match->listed_several; first = false) {
      if (!first) {
        // No re-read is started that could not end before the deadline.
        if (std::chrono::steady_clock::now() + kSeveralListedPause >= deadline) {
          break;
        }
        std::this_thread::sleep_for(kSeveralListedPause);
      }
      fresh = Refresh(narrow_, deadline);
      caller.reset();
      match = store_->Match(resource, ids, &caller, &*last_view, &answered);
      if (!fresh.ok()) {
        break;
      }
    }
    if (match.ok() && match->listed_several) {
      std::string keys;
      for (const std::string& k : match->listed) {
        keys += (keys.empty() ? "" : ", ") + k;
      }
      return AbortedError(
          "kubelet's pod-resources API lists " + std::to_string(match->listed.size()) +
          " pods that could be asking for " + std::to_string(ids.size()) + " of " + resource +
          " as being admitted ([" + keys +
          "]); kubelet admits one at a time and lists the pods it turned away until they are "
          "deleted, and the node's pods, re-read" +
          (fresh.ok() ? std::string() : " (" + fresh.message() + ")") +
          ", do not say which one it turned away, so the plugin refuses rather than give one "
          "pod another pod's devices. Kubelet fails the pod's admission (its controller "
          "creates it again; or delete it and create it again)");
    }
  }
  if (!match.ok()) {
    *pod = caller;
    return match.status();
  }
  *pod = match->pod;
  *sure = !match->ambiguous && !match->by_fallback;
  *again = match->repeat || match->presumed;
  const api::AssignedContainer& c = match->container;
  if (match->by_fallback) {
    log_.Warn("slot ids identify no container; the only pending container that asks for them",
              {{"pod", match->pod.Key()}, {"container", c.name}, {"resource", resource}});
  } else if (match->how == ContainerMatch::How::kKubelet ||
             match->how == ContainerMatch::How::kInitReuse) {
    log_.Info("caller found by " + std::string(match->how == ContainerMatch::How::kKubelet
                                                   ? "kubelet's pod-resources API"
                                                   : "the init container's devices it reuses"),
              {{"pod", match->pod.Key()}, {"container", c.name}, {"resource", resource}});
  } else if (match->ambiguous) {
    log_.Warn(asked_kubelet
                  ? "other pods wait with the same shape and kubelet's pod-resources API does not "
                    "tell them apart; the slot ids decide"
                  : "other pods wait with the same shape and kubelet was not asked; the slot ids "
                    "decide",
              {{"pod", match->pod.Key()}, {"container", c.name}, {"resource", resource}});
  }
  if (c.devices.size() != ids.size()) {
    return FailedPreconditionError("pod " + match->pod.Key() + " container " + c.name +
                                   " is assigned " + std::to_string(c.devices.size()) +
                                   " devices but kubelet allocated " + std::to_string(ids.size()));
  }
  std::vector<vendors::GrantedDevice> grants;
  std::optional<size_t> inventory;
  for (const api::AssignedDevice& a : c.devices) {
    auto where = snap.by_id.find(a.id);
    if (where == snap.by_id.end()) {
      return FailedPreconditionError("the assignment of pod " + match->pod.Key() +
                                     " names device " + a.id + ", which is not on node " + node_ +
                                     "; the assignment is foreign or stale, delete the pod");
    }
    if (inventory.has_value() && *inventory != where->second.inventory) {
      return FailedPreconditionError("container " + c.name + " of pod " + match->pod.Key() +
                                     " is assigned devices of two vendors in one resource");
    }
    inventory = where->second.inventory;
    const core::Device& device = *snap.Find(a.id);
    if (!device.healthy) {
      // Kubelet left its slots out and picked others; the container would
      // still run on the broken device, so it does not start at all.
      return FailedPreconditionError("the assignment of pod " + match->pod.Key() + " container " +
                                     c.name + " names device " + a.id +
                                     ", which is unhealthy now; delete the pod (its controller "
                                     "creates it again and the scheduler places it elsewhere)");
    }
    if (ResourceFor(device) != resource) {
      // Kubelet accounts the container's devices under `resource` only.
      return FailedPreconditionError("the assignment of pod " + match->pod.Key() + " container " +
                                     c.name + " names device " + a.id + " of " +
                                     ResourceFor(device) + " for " + resource +
                                     "; the assignment is malformed, delete the pod");
    }
    vendors::GrantedDevice g;
    g.device = device;
    g.memory_mib = a.memory_mib;
    g.compute = a.compute;
    g.exclusive = GrantsWholeDevice(a);
    grants.push_back(std::move(g));
  }
  vendors::VendorDriver* driver = snap.drivers[*inventory];
  if (driver == nullptr) {
    return InternalError("no driver serves inventory " + std::to_string(*inventory));
  }
  StatusOr<vendors::ContainerSpec> spec = driver->BuildContainerSpec(grants);
  if (!spec.ok()) {
    return spec.status().WithPrefix("pod " + match->pod.Key() + " container " + c.name);
  }
  if (!options_.cdi) {
    spec->cdi_devices.clear();
  }
  ACCELPOOL_RETURN_IF_ERROR(Enforce(match->pod, c.name, grants, &*spec, made));
  return ContainerAnswer{match->pod, c.name, std::move(spec).value(), match->repeat};
}

Status Allocator::Enforce(const PodRef& pod, const std::string& container,
                          const std::vector<vendors::GrantedDevice>& grants,
                          vendors::ContainerSpec* spec, MadeDirs* made) const {
  if (!options_.enabled || grants.empty() ||
      !vendors::TraitsFor(grants.front().device.vendor).soft_enforcement) {
    return Status::Ok();
  }
  bool fractional = std::any_of(grants.begin(), grants.end(),
                                [](const vendors::GrantedDevice& g) { return !g.exclusive; });
  if (!fractional) {
    return Status::Ok();
  }
  const bool mps = options_.sharing == NvidiaSharing::kMps;
  int32_t compute = 0;
  std::string pinned;  // MPS: "<ordinal>=<MiB>M,..."
  // MPS reads its limits by the client's CUDA ordinal, not by the grant's
  // order the shim's contract names by UUID. CUDA numbers identical GPUs in
  // PCI bus order (NVML's index order is the same): the ordinal of each grant
  // is its rank among the grant's devices. Different models go fastest
  // first, an order the plugin cannot know, so each ordinal then gets the
  // smallest of the limits (CUDA_DEVICE_ORDER would fix the order, but a
  // pod's own value of it would win).
  int64_t smallest = -1;
  bool mixed = false;
  for (const vendors::GrantedDevice& g : grants) {
    const int64_t mib = g.memory_mib > 0 ? g.memory_mib : g.device.memory_mib;
    smallest = smallest < 0 ? mib : std::min(smallest, mib);
    mixed = mixed || g.device.model != grants.front().device.model;
  }
  std::vector<size_t> by_bus(grants.size());
  for (size_t i = 0; i < by_bus.size(); ++i) by_bus[i] = i;
  std::sort(by_bus.begin(), by_bus.end(), [&](size_t a, size_t b) {
    const core::Device& da = grants[a].device;
    const core::Device& db = grants[b].device;
    return std::tie(da.pci_bus, da.index) < std::tie(db.pci_bus, db.index);
  });
  for (size_t i = 0; i < grants.size(); ++i) {
    const vendors::GrantedDevice& g = grants[i];
    int64_t mib = g.memory_mib > 0 ? g.memory_mib : g.device.memory_mib;
    if (mps) {
      const vendors::GrantedDevice& o = grants[by_bus[i]];
      const int64_t omib = mixed ? smallest : o.memory_mib > 0 ? o.memory_mib : o.device.memory_mib;
      pinned += (i == 0 ? "" : ",") + std::to_string(i) + "=" + std::to_string(omib) + "M";
    } else {
      spec->env["ACCELPOOL_CUDA_MEMORY_LIMIT_" + std::to_string(i)] = std::to_string(mib);
      if (options_.hami_compat) {
        spec->env["CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i)] = std::to_string(mib) + "m";
      }
    }
    int32_t c = g.compute > 0 ? g.compute : core::kComputeWhole;
    compute = i == 0 ? c : std::min(compute, c);
  }
  const std::string percent = std::to_string(std::max(1, compute / 10));
  if (mps) {
    // The vendor mechanism instead of the shim: the MPS server partitions the
    // SMs and pins the memory. Device indices are the container's visible
    // order, as CUDA numbers them. ACCELPOOL_CUDA_DISABLE keeps a shim that
    // the image preloads on its own from limiting twice.
    spec->env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = percent;
    spec->env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = pinned;
    spec->env["CUDA_MPS_PIPE_DIRECTORY"] = options_.mps_pipe_dir;
    spec->env["ACCELPOOL_CUDA_DISABLE"] = "1";
    spec->mounts.push_back({options_.mps_pipe_dir, options_.mps_pipe_dir, false});
    if (!options_.mps_shm_dir.empty()) {
      spec->mounts.push_back({options_.mps_shm_dir, "/dev/shm", false});
    }
    return Status::Ok();
  }
  spec->env["ACCELPOOL_CUDA_COMPUTE_LIMIT"] = percent;
  // The caps, the compute bucket and the region's figures are numbered by
  // the grant's order (NVIDIA_VISIBLE_DEVICES), but each process numbers its
  // devices after its own CUDA_VISIBLE_DEVICES (a launcher giving each
  // worker one GPU makes every GPU its device 0): the shim maps them back by
  // UUID (docs/enforcement.md).
  std::string uuids;
  for (size_t i = 0; i < grants.size(); ++i) {
    uuids += (i == 0 ? "" : ",") + grants[i].device.id;
  }
  spec->env["ACCELPOOL_CUDA_DEVICE_UUIDS"] = uuids;
  if (options_.hami_compat) {
    spec->env["CUDA_DEVICE_SM_LIMIT"] = percent;
  }
  // The dir is mounted read-write into the container, and its name comes from
  // the pod: StateDirs refuses anything that is not a plain child of the root.
  bool created = false;
  StatusOr<std::string> host_dir = dirs_.Create(pod.uid, container, &created);
  if (!host_dir.ok()) {
    return host_dir.status().WithPrefix("pod " + pod.Key() + " container " + container);
  }
  if (created) {
    made->emplace_back(pod.uid, container);
  }
  spec->env["ACCELPOOL_CUDA_STATE_DIR"] = options_.state_mount;
  if (options_.create_state_dirs && options_.priority) {
    // Task priority (PriorityWatch): the file through which a low-priority
    // container's launches are held while a high-priority one on its GPU
    // is busy, and which a high-priority one counts its launches in.
    ACCELPOOL_RETURN_IF_ERROR(EnsurePriorityFile(StateDirs::StateSubdir(*host_dir))
                                  .WithPrefix("pod " + pod.Key() + " container " + container));
    spec->env["ACCELPOOL_CUDA_PRIORITY"] = pod.high_priority.contains(container) ? "high" : "low";
  }
  if (options_.create_state_dirs) {
    // The contract again, read-only beside the library, where the shim takes
    // it from: the pod's own env comes after this one and would win, and
    // admission cannot see what envFrom brings (docs/enforcement.md).
    std::string limits;
    for (const auto& [name, value] : spec->env) {
      if (api::DeviceControlledEnv(name) == std::optional<std::string_view>("enforcement")) {
        limits += name + "=" + value + "\n";
      }
    }
    ACCELPOOL_RETURN_IF_ERROR(dirs_.WriteLimits(*host_dir, limits)
                                  .WithPrefix("pod " + pod.Key() + " container " + container));
    spec->mounts.push_back({StateDirs::StateSubdir(*host_dir), options_.state_mount, false});
    spec->mounts.push_back(
        {StateDirs::LimitsFile(*host_dir), options_.library_container + ".limits", true});
  } else {
    spec->mounts.push_back({*host_dir, options_.state_mount, false});
  }
  spec->mounts.push_back({options_.library_host, options_.library_container, true});
  if (options_.preload) {
    spec->mounts.push_back({options_.preload_host, "/etc/ld.so.preload", true});
  }
  return Status::Ok();
}

StatusOr<std::vector<ContainerAnswer>> Allocator::Allocate(
    const std::string& resource, const std::vector<std::vector<std::string>>& requests) {
  const auto start = std::chrono::steady_clock::now();
  SnapshotPtr snap = state_->Get();
  std::vector<ContainerAnswer> answers;
  std::optional<PodRef> pod;
  bool caller_sure = false;
  bool caller_again = false;  // a container allocated before: the pod was admitted
  MadeDirs made;
  AnsweredContainers answered;  // the store is marked only after the whole call
  Status failure;
  if (requests.empty()) {
    failure = InvalidArgumentError("Allocate carried no container requests");
  }
  for (const std::vector<std::string>& ids : requests) {
    if (!failure.ok()) {
      break;
    }
    StatusOr<ContainerAnswer> a =
        One(resource, *snap, ids, answered, &pod, &made, &caller_sure, &caller_again);
    if (!a.ok()) {
      failure = a.status();
    } else {
      answered.emplace(a->pod.uid, a->container);
      answers.push_back(std::move(a).value());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!failure.ok()) {
    if (metrics_ != nullptr) {
      metrics_->AllocateDone(resource, false, Reason(failure.code()), seconds);
    }
    log_.Error("allocate failed", {{"resource", resource},
                                   {"pod", pod.has_value() ? pod->Key() : std::string("unknown")},
                                   {"error", failure.ToString()}});
    // Nothing is booked, so nothing may stay behind: only the dirs this call
    // made (one that existed belongs to an earlier, successful call).
    for (const auto& [uid, container] : made) {
      if (Status st = dirs_.Remove(uid, container); !st.ok()) {
        log_.Warn("removing a state dir failed; the sweep tries again", {{"error", st.ToString()}});
      }
    }
    const std::vector<api::AllocatedResource> allocated =
        pod.has_value() ? store_->AllocatedContainers(pod->uid)
                        : std::vector<api::AllocatedResource>();
    // kubelet turns the pod away: it is no caller of a later Allocate (when
    // the call was surely its; a guess among pods of one shape may have
    // named another pod, which still waits).
    // Not after a repeat: kubelet also calls again for a running pod whose
    // devices it lost (a node restart), and a failure there only makes it
    // retry the container's start.
    if (pod.has_value() && caller_sure && !caller_again && store_->RejectAdmission(pod->uid)) {
      log_.Info("forgot a pod kubelet turns away at admission", {{"pod", pod->Key()}});
    }
    if (reporter_ != nullptr) {
      // The pod's allocation state says Failed only when the call was surely
      // its, or it is the one pod asking without an assignment (kNotFound):
      // a Failed state makes the plugin stop waiting for the pod (kubelet
      // does not admit a pod it turned away), and a guess among pods of one
      // shape may have named another pod, which still waits. A guess gets
      // the Event alone, saying it is one.
      if (caller_sure || failure.code() == StatusCode::kNotFound) {
        reporter_->Failed(pod, resource, failure.message(), allocated);
      } else {
        reporter_->Failed(pod, "",
                          "kubelet's Allocate call did not name its pod for sure, and this pod is "
                          "the likeliest of those waiting with the same devices: " +
                              failure.message(),
                          allocated);
      }
    }
    return failure;
  }
  std::map<std::string, std::pair<PodRef, std::vector<std::string>>> by_pod;
  for (const ContainerAnswer& a : answers) {
    auto& entry = by_pod[a.pod.uid];
    entry.first = a.pod;
    entry.second.push_back(a.container);
  }
  for (auto& [uid, entry] : by_pod) {
    std::vector<api::AllocatedResource> all = store_->MarkAllocated(uid, resource, entry.second);
    if (reporter_ != nullptr) {
      reporter_->Allocated(entry.first, all);
    }
    log_.Info("allocated", {{"pod", entry.first.Key()},
                            {"resource", resource},
                            {"containers", static_cast<int64_t>(entry.second.size())}});
  }
  int64_t repeats = 0;
  for (const ContainerAnswer& a : answers) {
    if (!a.repeat) continue;
    ++repeats;
    log_.Info(
        "answered a container allocated before again (kubelet repeated the call, or lost "
        "its checkpoint and admits the pod again)",
        {{"pod", a.pod.Key()}, {"container", a.container}, {"resource", resource}});
  }
  if (metrics_ != nullptr) {
    if (repeats > 0) metrics_->AllocateRepeated(resource, repeats);
    metrics_->AllocateDone(resource, true, "", seconds);
    metrics_->SetPending(static_cast<double>(store_->PendingContainers()));
  }
  return answers;
}

std::vector<std::vector<std::string>> Allocator::Preferred(
    const std::string& resource, const std::vector<PreferredRequest>& requests) {
  std::vector<std::vector<std::string>> out;
  for (const PreferredRequest& r : requests) {
    if (r.size <= 0 || static_cast<int64_t>(r.must_include.size()) > r.size) {
      // Kubelet never sends this; no answer can hold the must-include ids
      // within the size. An empty preference leaves the choice to kubelet.
      log_.Warn(
          "GetPreferredAllocation asked for fewer devices than it must include; no preference",
          {{"resource", resource},
           {"size", r.size},
           {"must_include", static_cast<int64_t>(r.must_include.size())}});
      out.emplace_back();
      continue;
    }
    std::set<std::string> available(r.available.begin(), r.available.end());
    PreferredAnswer answer = store_->Preferred(resource, available, r.must_include, r.size);
    bool refreshed = false;
    if (((!answer.slots.has_value() && !answer.ambiguous) || answer.readmitted) && refresh_) {
      // No caller, or a pod admitted again (the pod may have finished, and a
      // pod bound a moment ago may be the caller): re-read the node's pods.
      // A failed re-read leaves the store as it was; it is logged there.
      const auto deadline = std::chrono::steady_clock::now() + refresh_budget_;
      const bool read = Refresh(narrow_, deadline).ok();
      refreshed = true;
      answer = store_->Preferred(resource, available, r.must_include, r.size);
      if (read && !answer.slots.has_value() && !answer.ambiguous && wide_.fn) {
        static_cast<void>(Refresh(wide_, deadline));  // a running pod (SetWideRefresh)
        answer = store_->Preferred(resource, available, r.must_include, r.size);
      }
    }
    // Several pods wait with the shape, or one does and the caller may be a
    // pod this plugin does not know (a static pod has no mirror pod before
    // kubelet admits it): kubelet's view says whom it admits. Unread, the one
    // pod's slots are offered as before, without a warning: Allocate checks
    // the view again.
    if ((answer.ambiguous || answer.unchecked) && kubelet_view_) {
      StatusOr<KubeletView> view = kubelet_view_();
      if (view.ok()) {
        answer = store_->Preferred(resource, available, r.must_include, r.size, &*view);
        if (answer.foreign && refresh_ && !refreshed) {
          // The pod kubelet lists may be one bound a moment ago; of several
          // it lists, those whose Failed status has arrived go.
          static_cast<void>(Refresh());
          answer = store_->Preferred(resource, available, r.must_include, r.size, &*view);
        }
      } else if (answer.ambiguous) {
        log_.Warn(
            "kubelet's pod-resources API could not be read; preferring the oldest pod's "
            "slots",
            {{"resource", resource}, {"error", view.status().ToString()}});
      }
    }
    std::optional<std::vector<std::string>>& slots = answer.slots;
    if (slots.has_value()) {
      out.push_back(std::move(*slots));
      continue;
    }
    std::vector<std::string> fill = r.must_include;
    for (const std::string& id : r.available) {
      if (static_cast<int32_t>(fill.size()) >= r.size) {
        break;
      }
      if (std::find(fill.begin(), fill.end(), id) == fill.end()) {
        fill.push_back(id);
      }
    }
    log_.Warn("no pending assignment fits GetPreferredAllocation; kubelet chooses",
              {{"resource", resource}, {"size", r.size}});
    out.push_back(std::move(fill));
  }
  return out;
}

void Allocator::RefreshUsageMetrics() {
  if (metrics_ == nullptr) {
    return;
  }
  SnapshotPtr snap = state_->Get();
  std::map<std::string, std::pair<int64_t, int64_t>> usage;
  for (const PodAssignment& p : store_->All()) {
    for (const api::AssignedContainer& c : p.assignment.containers) {
      if (c.kind == core::ContainerKind::kInit) {
        continue;  // init containers reuse the regular containers' shares
      }
      for (const api::AssignedDevice& d : c.devices) {
        const core::Device* dev = snap->Find(d.id);
        const bool whole = GrantsWholeDevice(d);
        auto& u = usage[d.id];
        u.first += whole && dev != nullptr ? dev->memory_mib : d.memory_mib;
        u.second += whole ? core::kComputeWhole : d.compute;
      }
    }
  }
  std::set<std::string> live;
  for (const core::NodeInventory& inv : snap->inventories) {
    for (const core::Device& d : inv.devices) {
      live.insert(d.id);
      auto u = usage[d.id];
      metrics_->SetUsage(std::string(core::VendorName(d.vendor)), d.id,
                         static_cast<double>(u.first), static_cast<double>(u.second));
      metrics_->SetHealth(std::string(core::VendorName(d.vendor)), d.id, d.healthy);
      metrics_->SetCapacity(node_, std::string(core::VendorName(d.vendor)), d.model, d.id,
                            static_cast<double>(d.memory_mib));
    }
  }
  metrics_->RetainDevices(live);  // a device that left the node leaves the exposition
  metrics_->SetPending(static_cast<double>(store_->PendingContainers()));
  RefreshContainerUsage(*snap);
}

bool HasShimState(const PodAssignment& p, const api::AssignedContainer& c) {
  // As Enforce decides: only a fractional grant gets a state dir.
  const bool fractional =
      std::any_of(c.devices.begin(), c.devices.end(),
                  [](const api::AssignedDevice& d) { return !GrantsWholeDevice(d); });
  return Holds(p.allocated, c) && fractional && vendors::TraitsFor(c.vendor).soft_enforcement;
}

void Allocator::RefreshContainerUsage(const Snapshot& snap) {
  std::lock_guard<std::mutex> lock(usage_mu_);
  std::set<std::vector<std::string>> live;
  std::set<std::string> shimmed;  // keys of the containers with state now
  const bool shim = options_.enabled && options_.sharing != NvidiaSharing::kMps;
  for (const PodAssignment& p : shim ? store_->All() : std::vector<PodAssignment>{}) {
    for (const api::AssignedContainer& c : p.assignment.containers) {
      if (!HasShimState(p, c)) {
        continue;  // no enforcement state: kubelet has not started it, or it is not shimmed
      }
      StatusOr<std::string> dir = dirs_.PathFor(p.pod.uid, c.name);
      if (!dir.ok()) {
        continue;
      }
      const std::string key = p.pod.Key() + "/" + c.name;
      shimmed.insert(key);
      const std::vector<std::string> who = {p.pod.ns, p.pod.name, c.name};
      RegionReadFailure why = RegionReadFailure::kNone;
      StatusOr<cuda::RegionUsage> usage =
          ReadRegionFile(options_.create_state_dirs ? StateDirs::StateSubdir(*dir) : *dir, &why);
      if (!usage.ok() && why != RegionReadFailure::kMissing) {
        metrics_->ContainerUsageReadFailed(why == RegionReadFailure::kLayout       ? "layout"
                                           : why == RegionReadFailure::kNotRegular ? "not_regular"
                                                                                   : "io");
        if (usage_unread_.insert(key).second) {
          log_.Warn(
              "a container's enforcement accounting cannot be read; its usage is not "
              "reported (it runs another libaccelpool-cuda version, or its state dir was "
              "overwritten: restart the pod)",
              {{"pod", p.pod.Key()}, {"container", c.name}, {"error", usage.status().message()}});
        }
        continue;
      }
      usage_unread_.erase(key);
      // kNotFound: no process has used CUDA yet, so it holds nothing.
      const cuda::RegionUsage u = usage.ok() ? *usage : cuda::RegionUsage();
      live.insert(who);
      metrics_->SetContainerProcesses(who, u.processes);
      // Index i is the container's i-th granted device, as its caps
      // (ACCELPOOL_CUDA_MEMORY_LIMIT_<i>) are numbered: the shim maps each
      // process's CUDA ordinals to it (ACCELPOOL_CUDA_DEVICE_UUIDS).
      for (size_t i = 0; i < c.devices.size() && i < static_cast<size_t>(cuda::kMaxDevices); ++i) {
        const api::AssignedDevice& d = c.devices[i];
        const core::Device* dev = snap.Find(d.id);
        const int64_t limit = d.memory_mib > 0 ? d.memory_mib : (dev ? dev->memory_mib : 0);
        metrics_->SetContainerMemory(who, d.id, static_cast<double>(u.used_bytes[i] >> 20),
                                     static_cast<double>(limit));
      }
    }
  }
  metrics_->RetainContainers(live);
  // A container that went is forgotten with its warning: pods come and go,
  // and this must not grow with them.
  std::erase_if(usage_unread_, [&](const std::string& key) { return !shimmed.contains(key); });
}

size_t Allocator::UnreadUsageContainers() {
  std::lock_guard<std::mutex> lock(usage_mu_);
  return usage_unread_.size();
}

}  // namespace accelpool::plugin
