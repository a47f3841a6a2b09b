#include "extender/extender.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <thread>
#include <utility>

#include "core/reasons.h"

namespace accelpool::extender {
namespace {

std::string PodName(const PodRef& p) { return p.ns + "/" + p.name; }

std::string_view CodeName(core::FitCode c) {
  switch (c) {
    case core::FitCode::kFits:
      return "fits";
    case core::FitCode::kUnschedulable:
      return "unschedulable";
    case core::FitCode::kUnresolvable:
      return "unresolvable";
  }
  return "unknown";
}

// "nvidia:GPU-1/0[4096MiB,250]" per grant, for the audit trail.
std::string DescribeAssignment(const PodAssignment& a, const NodeSnapshot* snap) {
  std::string out;
  for (const AssignmentPart& part : a.parts) {
    const InventoryState* st = snap != nullptr ? snap->Find(part.vendor) : nullptr;
    for (size_t c = 0; c < part.placement.containers.size(); ++c) {
      const core::ContainerPlacement& cp = part.placement.containers[c];
      for (size_t g = 0; g < cp.grants.size(); ++g) {
        const core::Grant& gr = cp.grants[g];
        if (!out.empty()) {
          out += " ";
        }
        std::string id = std::to_string(gr.device);
        if (st != nullptr && static_cast<size_t>(gr.device) < st->inventory->devices.size()) {
          id = st->inventory->devices[static_cast<size_t>(gr.device)].id;
        }
        const int32_t slot = c < part.slots.size() && g < part.slots[c].size() ? part.slots[c][g] : -1;
        out += cp.container + "=" + id + "::" + std::to_string(slot) + "[" +
               (gr.exclusive ? std::string("whole")
                             : std::to_string(gr.memory_mib) + "MiB," + std::to_string(gr.compute) +
                                   "/1000") +
               "]";
      }
    }
  }
  return out;
}

// Checks `done` every `step` until it holds or `deadline` passes; whether it
// held. The filter's waits for the cache to catch up with the apiserver.
bool PollUntil(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds step,
               const std::function<bool()>& done) {
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(step);
    if (done()) return true;
  }
  return false;
}

}  // namespace

std::string CanonicalPolicy(std::string_view annotation) {
  std::string name;
  for (char c : annotation) {
    if (c != ' ' && c != '\t') name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return name;  // HAMi's values (binpack, spread) are names of ours already
}

StatusOr<std::shared_ptr<const Extender::PolicySet>> Extender::MakePolicySet(
    const std::string& main, const std::vector<core::TaskShape>& workload, uint64_t generation) {
  auto set = std::make_shared<PolicySet>();
  set->generation = generation;
  set->workload = workload;
  core::PolicyContext ctx;
  ctx.workload = workload;
  StatusOr<core::PolicyPtr> policy = core::MakePolicy(main, ctx);
  if (!policy.ok()) {
    return policy.status().WithPrefix("--policy");
  }
  set->main = std::move(policy).value();
  for (const std::string& name : core::PolicyNames()) {
    StatusOr<core::PolicyPtr> p = core::MakePolicy(name, ctx);
    if (!p.ok()) {
      return p.status().WithPrefix("policy " + name);
    }
    set->by_name[name] = std::move(p).value();
  }
  return std::shared_ptr<const PolicySet>(std::move(set));
}

StatusOr<std::unique_ptr<Extender>> Extender::Create(Cache& cache, ExtenderOptions options,
                                                     PodWriter* writer, EventSink* events,
                                                     const ExtenderMetrics* metrics, Logger log) {
  if (!options.node_policy.empty()) {
    // The policy itself is built in the policy set, with the workload.
    if (StatusOr<core::PolicyPtr> p = core::MakePolicy(options.node_policy); !p.ok()) {
      return p.status().WithPrefix("--node-policy");
    }
  }
  StatusOr<std::shared_ptr<const PolicySet>> set =
      MakePolicySet(options.policy, options.policy_context.workload, 0);
  if (!set.ok()) {
    return set.status();
  }
  return std::unique_ptr<Extender>(new Extender(cache, std::move(options), std::move(set).value(),
                                                writer, events, metrics, std::move(log)));
}

std::shared_ptr<const Extender::PolicySet> Extender::Policies() const {
  std::lock_guard<std::mutex> lock(policies_mu_);
  return policies_;
}

bool Extender::SetWorkload(std::vector<core::TaskShape> workload) {
  std::lock_guard<std::mutex> serial(set_workload_mu_);
  std::shared_ptr<const PolicySet> now = Policies();
  if (now->workload == workload) {
    return false;
  }
  StatusOr<std::shared_ptr<const PolicySet>> next =
      MakePolicySet(options_.policy, workload, now->generation + 1);
  if (!next.ok()) {  // the names were accepted by Create; a workload cannot make them fail
    log_.Error("rebuilding the policies failed; keeping the workload in use",
               {{"error", next.status().ToString()}});
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(policies_mu_);
    policies_ = std::move(next).value();
  }
  if (metrics_ != nullptr) {
    metrics_->workload_rebuilds->Get().Inc();
  }
  return true;
}

std::vector<core::TaskShape> Extender::Workload() const { return Policies()->workload; }

uint64_t Extender::workload_generation() const { return Policies()->generation; }

const std::pair<const std::string, core::PolicyPtr>* Extender::PodPolicy(
    const PodInfo& pod, const PolicySet& set) const {
  if (pod.policy.empty()) {
    return nullptr;
  }
  auto it = set.by_name.find(CanonicalPolicy(pod.policy));
  return it == set.by_name.end() ? nullptr : &*it;
}

std::string Extender::PolicyName(const PodInfo& pod) const {
  if (pod.policy.empty()) {
    return options_.policy;
  }
  const std::string name = CanonicalPolicy(pod.policy);
  const std::vector<std::string>& known = core::PolicyNames();
  return std::find(known.begin(), known.end(), name) != known.end() ? name : options_.policy;
}

const std::string& Extender::DefaultNodePolicy() const {
  return options_.node_policy.empty() ? options_.policy : options_.node_policy;
}

std::string Extender::NodePolicyName(const PodInfo& pod) const {
  if (!pod.node_policy.empty()) {
    const std::string name = CanonicalPolicy(pod.node_policy);
    const std::vector<std::string>& known = core::PolicyNames();
    return std::find(known.begin(), known.end(), name) != known.end() ? name : DefaultNodePolicy();
  }
  // accelpool.io/policy scores the nodes too; HAMi's gpu-scheduler-policy does not.
  return pod.policy.empty() || pod.policy_devices_only ? DefaultNodePolicy() : PolicyName(pod);
}

PlanPolicies Extender::PolicyFor(const PodInfo& pod, const PolicySet& set) const {
  const auto* own = PodPolicy(pod, set);
  const core::Policy& devices = own != nullptr ? *own->second : *set.main;
  const std::string nodes = NodePolicyName(pod);
  if (nodes == PolicyName(pod)) {
    return PlanPolicies{devices, devices};
  }
  if (nodes == options_.policy) {
    return PlanPolicies{devices, *set.main};
  }
  auto it = set.by_name.find(nodes);
  return PlanPolicies{devices, it != set.by_name.end() ? *it->second : *set.main};
}

std::string Extender::PlanKey(const PodInfo& pod, const PolicySet& set) const {
  std::string key = RequestShape(pod.request);
  key += "@" + std::to_string(set.generation);
  if (!pod.policy.empty()) {
    key += "#" + PolicyName(pod);
  }
  if (const std::string nodes = NodePolicyName(pod); nodes != PolicyName(pod)) {
    key += "/n:" + nodes;
  }
  return key;
}

Extender::Extender(Cache& cache, ExtenderOptions options, std::shared_ptr<const PolicySet> policies,
                   PodWriter* writer, EventSink* events, const ExtenderMetrics* metrics, Logger log)
    : cache_(cache),
      options_(std::move(options)),
      policies_(std::move(policies)),
      writer_(writer),
      events_(events),
      metrics_(metrics),
      log_(log),
      audit_(log.Child("audit")) {}

size_t FilterThreads(int configured) {
  if (configured > 0) {
    return static_cast<size_t>(configured);
  }
  // On two cores a second filter thread only competes with the HTTP threads
  // (measured: no gain at 5,000 nodes, more jitter); beyond that, up to 4.
  const size_t cores = std::thread::hardware_concurrency();
  return cores <= 2 ? 1 : std::min<size_t>(cores, 4);
}

std::shared_ptr<const NodePlan> Extender::CachedPlan(const PodInfo& pod, const std::string& shape,
                                                     const NodeSnapshot* snap,
                                                     const PlanPolicies& policy) {
  // A pod that asks for no device is planned afresh: its plan is a score, and
  // its many host shapes would push device pods' plans out of the memo.
  if (snap == nullptr || !pod.Pooled()) {
    return std::make_shared<const NodePlan>(PlanNode(pod, snap, policy));
  }
  if (std::shared_ptr<const NodePlan> hit = snap->memo.Find(shape)) {
    return hit;
  }
  auto plan = std::make_shared<const NodePlan>(PlanNode(pod, snap, policy));
  snap->memo.Put(shape, plan);
  return plan;
}

void Extender::ReadBack(const PodInfo& pod, const std::string& shape, const PlanPolicies& policy,
                        const std::vector<std::string>& nodes, std::vector<NodeSnapshotPtr>& snaps,
                        std::vector<std::shared_ptr<const NodePlan>>& plans) {
  ReadBudget budget{0, std::chrono::steady_clock::now() + options_.read_budget};
  auto plan_again = [&](size_t i) {
    snaps[i] = cache_.Node(nodes[i]);
    plans[i] = CachedPlan(pod, shape, snaps[i].get(), policy);
  };
  // Nodes the cache does not know yet, or that turned the pod away for
  // devices cordoned or unhealthy: the node itself may have changed.
  if (options_.refresh_node) {
    for (size_t i = 0; i < nodes.size() && budget.Left(); ++i) {
      const std::vector<core::FitReason>& why = plans[i]->reasons;
      const bool node_state = std::any_of(why.begin(), why.end(), [](const core::FitReason& r) {
        return r.reason == core::Reason::kCordoned || r.reason == core::Reason::kUnhealthy;
      });
      if (snaps[i] != nullptr && !node_state) {
        continue;
      }
      ++budget.reads;
      if (options_.refresh_node(nodes[i])) {
        plan_again(i);
      }
    }
  }
  // Nodes that could fit once their pods leave: some may have left.
  auto none_fit = [&] {
    return std::none_of(plans.begin(), plans.end(), [](const auto& p) { return p->fits(); });
  };
  std::vector<size_t> skipped;  // read too recently to read again
  if (options_.recheck_pods && none_fit()) {
    for (size_t i = 0; i < nodes.size() && budget.Left(); ++i) {
      if (snaps[i] == nullptr || plans[i]->code != core::FitCode::kUnschedulable) {
        continue;
      }
      ++budget.reads;
      const RecheckResult r = options_.recheck_pods(nodes[i]);
      if (metrics_ != nullptr) {
        static constexpr const char* kNames[] = {"skipped", "failed", "unchanged", "freed"};
        metrics_->pod_rechecks->WithLabels({kNames[static_cast<int>(r)]}).Inc();
      }
      if (r == RecheckResult::kFreed) {
        plan_again(i);
      } else if (r == RecheckResult::kSkipped) {
        skipped.push_back(i);
      }
    }
  }
  // Those read a moment ago: their deletions may be on the watch's way.
  if (skipped.empty() || options_.recheck_wait.count() <= 0 || !none_fit() || !AllowRecheckWait()) {
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options_.recheck_wait;
  const bool changed = PollUntil(deadline, std::chrono::milliseconds(5), [&] {
    bool any = false;
    for (size_t i : skipped) {
      const NodeSnapshotPtr now = cache_.Node(nodes[i]);
      if (now != nullptr && now->version != snaps[i]->version) {
        plan_again(i);
        any = true;
      }
    }
    return any;
  });
  if (metrics_ != nullptr && metrics_->recheck_waits != nullptr) {
    metrics_->recheck_waits->WithLabels({changed ? "changed" : "timeout"}).Inc();
  }
  audit_.Info(
      "filter waited for the nodes it had just read",
      {{"pod", PodName(pod.ref)},
       {"nodes", static_cast<int64_t>(skipped.size())},
       {"waited_ms", static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::steady_clock::now() - start)
                                              .count())},
       {"changed", changed}});
}

void Extender::PlanOwnReservation(const PodInfo& pod, const PlanPolicies& policy,
                                  const std::vector<std::string>& nodes,
                                  const std::vector<NodeSnapshotPtr>& snaps,
                                  std::vector<std::shared_ptr<const NodePlan>>& plans) {
  if (!pod.Pooled() || cache_.Bound(pod.ref.uid) != std::optional<bool>(false)) {
    return;
  }
  const std::optional<PodAssignment> held = cache_.AppliedAssignment(pod.ref.uid);
  if (!held.has_value()) {
    return;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] != held->node || snaps[i] == nullptr || plans[i]->fits()) {
      continue;
    }
    // Planned without the devices the pod itself holds: Bind on this node
    // takes the reservation as it is (PlanAndReserve), so the node fits
    // whenever the pod fits beside the other pods there.
    NodeSnapshot freed = *snaps[i];
    ReleaseAssignment(*held, &freed);
    auto plan = std::make_shared<const NodePlan>(PlanNode(pod, &freed, policy));
    if (plan->fits()) {
      audit_.Info("filter counts the pod's own reservation as free",
                  {{"pod", PodName(pod.ref)}, {"node", nodes[i]}});
      plans[i] = std::move(plan);
    }
  }
}

bool Extender::AllowRecheckWait() {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  while (!recheck_waits_.empty() && now - recheck_waits_.front() >= std::chrono::seconds(1)) {
    recheck_waits_.pop_front();
  }
  if (static_cast<int>(recheck_waits_.size()) >= options_.recheck_waits_per_second) {
    return false;
  }
  recheck_waits_.push_back(now);
  return true;
}

FilterDecision Extender::Filter(const PodInfo& pod, const std::vector<std::string>& nodes) {
  // Any preemption recorded: else no node is held, and the pod waits for no victim.
  const bool preempting = pod.Pooled() && TendPreemptions(pod);
  if (preempting) AwaitVictims(pod, nodes);
  std::vector<std::shared_ptr<const NodePlan>> plans(nodes.size());
  std::vector<NodeSnapshotPtr> snaps(nodes.size());
  const std::shared_ptr<const PolicySet> policies = Policies();
  const PlanPolicies policy = PolicyFor(pod, *policies);
  const std::string shape = PlanKey(pod, *policies);
  auto work = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      snaps[i] = cache_.Node(nodes[i]);
      plans[i] = CachedPlan(pod, shape, snaps[i].get(), policy);
    }
  };
  const size_t threads = nodes.size() >= 512 ? FilterThreads(options_.filter_threads) : 1;
  if (threads <= 1) {
    work(0, nodes.size());
  } else {
    std::vector<std::jthread> pool;
    const size_t chunk = (nodes.size() + threads - 1) / threads;
    for (size_t t = 1; t < threads; ++t) {
      const size_t b = std::min(nodes.size(), t * chunk);
      pool.emplace_back(work, b, std::min(nodes.size(), b + chunk));
    }
    work(0, std::min(nodes.size(), chunk));
  }
  PlanOwnReservation(pod, policy, nodes, snaps, plans);
  // Devices preemption freed for a preemptor: a node where the pod would take
  // them turns it away, or plans it beside them (never memoised: the plan
  // holds for this moment's preemptions only).
  auto hold = [&] {
    for (size_t i = 0; preempting && i < nodes.size(); ++i) {
      if (snaps[i] == nullptr || !plans[i]->fits()) {
        continue;
      }
      std::optional<NodePlan> beside;
      if (std::optional<std::string> why = HeldForPreemptors(pod, *snaps[i], policy, &beside)) {
        NodePlan held;
        held.code = core::FitCode::kUnschedulable;
        held.message_reason = "HeldForPreemptor";
        held.message = *why;
        plans[i] = std::make_shared<const NodePlan>(std::move(held));
      } else if (beside.has_value()) {
        plans[i] = std::make_shared<const NodePlan>(std::move(*beside));
      }
    }
  };
  hold();
  if (std::none_of(plans.begin(), plans.end(), [](const auto& p) { return p->fits(); })) {
    ReadBack(pod, shape, policy, nodes, snaps, plans);
    hold();  // nodes read back are held as well
  }

  FilterDecision d;
  core::ReasonAggregator agg;
  // Nodes turned away with a message and no core reason, by message_reason:
  // how many, and the first one's message.
  std::map<std::string_view, std::pair<size_t, std::string>> by_message;
  std::map<std::pair<std::string, std::string>, int> outcomes;
  FitList fitted;
  fitted.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodePlan& p = *plans[i];
    if (p.fits()) {
      d.fits.push_back(nodes[i]);
      if (snaps[i] != nullptr) {
        fitted.push_back(Fitted{std::move(snaps[i]), p.score});
      }
      ++outcomes[{"fits", ""}];
      continue;
    }
    (p.code == core::FitCode::kUnresolvable ? d.unresolvable : d.failed)[nodes[i]] = p.Describe();
    std::string_view reason;
    if (!p.reasons.empty()) {
      agg.Add(nodes[i], p.reasons);
      reason = core::ReasonName(p.reasons.front().reason);
    } else {
      reason = !p.message_reason.empty()
                   ? p.message_reason
                   : (snaps[i] == nullptr ? "NoInventory" : "InventoryInvalid");
      auto& [count, example] = by_message[reason];
      if (count++ == 0) example = p.Describe();
    }
    ++outcomes[{std::string(CodeName(p.code)), std::string(reason)}];
  }
  if (metrics_ != nullptr) {
    for (const auto& [key, n] : outcomes) {
      metrics_->filter_nodes->WithLabels({key.first, key.second}).Inc(n);
    }
  }
  // Pick in filter: keep only the node Prioritize would put first, unless
  // kube-scheduler's own scores could prefer another (the pod's soft
  // preferences, a PreferNoSchedule taint on a candidate, or a pod that asks
  // for no device: the host-pod profile keeps kube-scheduler's scores on to
  // spread such pods among the nodes the extender ranks alike).
  std::string picked;
  if (options_.pick_in_filter && pod.Pooled() && fitted.size() > 1 &&
      fitted.size() == d.fits.size() && !pod.soft_preferences) {
    std::vector<RankInput> inputs;
    inputs.reserve(fitted.size());
    bool soft_taint = false;
    for (const Fitted& f : fitted) {
      soft_taint = soft_taint || f.snap->domains.prefer_no_schedule;
      inputs.push_back(RankInput{f.snap->name, f.score, f.snap});
    }
    if (!soft_taint) {
      std::vector<HostPriority> ranked =
          RankNodes(pod, inputs, JobDomains(pod), options_.rank, SuperNodeBusy());
      picked = std::move(ranked.front().host);
      d.fits.assign(1, picked);
    }
  }
  const size_t rejected = d.failed.size() + d.unresolvable.size();
  // The core reasons summed over nodes, then the nodes turned away without
  // one, by kind, most first: the event must say why for every node.
  std::string summary = agg.Summarize();
  std::vector<std::pair<size_t, std::string>> kinds;
  for (const auto& [reason, counted] : by_message) {
    const auto& [n, example] = counted;
    // The messages of nodes without an inventory are all alike, and long.
    const std::string what = reason == "NoInventory"
                                 ? "no accelpool inventory published (no accelpool device plugin)"
                                 : example;
    kinds.emplace_back(n, std::to_string(n) + (n == 1 ? " node: " : " nodes: ") + what);
  }
  std::stable_sort(kinds.begin(), kinds.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [n, text] : kinds) {
    summary += (summary.empty() ? "" : "; ") + text;
  }
  audit_.Info("filter", {{"pod", PodName(pod.ref)},
                         {"uid", pod.ref.uid},
                         {"policy", PolicyName(pod)},
                         {"candidates", static_cast<int64_t>(nodes.size())},
                         {"feasible", static_cast<int64_t>(fitted.size())},
                         {"picked", picked},
                         {"rejected", static_cast<int64_t>(rejected)},
                         {"reasons", summary}});
  if (d.fits.empty() && events_ != nullptr && pod.Pooled()) {
    events_->PodEvent(pod.ref, true, "AccelpoolNoFit",
                      "no node has the devices this pod asks for: " + summary);
  }
  Remember(pod, std::move(fitted));
  return d;
}

void Extender::Remember(const PodInfo& pod, FitList fitted) {
  if (pod.ref.uid.empty()) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (remembered_.size() >= options_.max_remembered_pods) {
    for (auto it = remembered_.begin(); it != remembered_.end();) {
      it = now - it->second.at > options_.score_ttl ? remembered_.erase(it) : std::next(it);
    }
    // Still full: pods that ask for no device go first (their bind reads the
    // pod back at the cost of one GET; a device pod's needs its plans).
    while (remembered_.size() >= options_.max_remembered_pods) {
      auto victim = std::find_if(remembered_.begin(), remembered_.end(),
                                 [](const auto& e) { return !e.second.pod.Pooled(); });
      remembered_.erase(victim != remembered_.end() ? victim : remembered_.begin());
    }
  }
  remembered_[pod.ref.uid] = Remembered{
      pod,
      std::make_shared<const FitList>(std::move(fitted)),
      now};
  scored_.push_back(pod.ref.uid);
  while (scored_.size() > options_.max_remembered_scores) {
    const std::string oldest = std::move(scored_.front());
    scored_.pop_front();
    const bool again = std::find(scored_.begin(), scored_.end(), oldest) != scored_.end();
    if (auto it = remembered_.find(oldest); it != remembered_.end() && !again) {
      it->second.fitted.reset();
    }
  }
}

std::optional<PodInfo> Extender::RememberedPod(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = remembered_.find(uid);
  if (it == remembered_.end() ||
      std::chrono::steady_clock::now() - it->second.at > options_.score_ttl) {
    return std::nullopt;
  }
  return it->second.pod;
}

std::map<std::string, NodeDomains> Extender::JobDomains(const PodInfo& pod) const {
  std::map<std::string, NodeDomains> out;
  if (!pod.ref.job.empty()) {
    for (const auto& [node, count] : cache_.JobNodes(pod.ref.job)) {
      NodeSnapshotPtr s = cache_.Node(node);
      out[node] = s ? s->domains : NodeDomains{};
    }
  }
  return out;
}

std::vector<HostPriority> Extender::Prioritize(const PodInfo& pod,
                                               const std::vector<std::string>& nodes) {
  std::shared_ptr<const FitList> known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = remembered_.find(pod.ref.uid);
    if (it != remembered_.end() &&
        std::chrono::steady_clock::now() - it->second.at <= options_.score_ttl) {
      known = it->second.fitted;
    }
  }
  // Filter's entry for `n`: the next one in filter's order, else (orders
  // differ: another extender or plugin reordered or dropped nodes) by name.
  size_t cursor = 0;
  std::unordered_map<std::string_view, size_t> by_name;
  auto remembered = [&](const std::string& n) -> const Fitted* {
    if (known == nullptr) {
      return nullptr;
    }
    const FitList& list = *known;
    if (cursor < list.size() && list[cursor].snap->name == n) {
      return &list[cursor++];
    }
    if (by_name.empty()) {
      by_name.reserve(list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        by_name.emplace(list[i].snap->name, i);
      }
    }
    auto it = by_name.find(n);
    if (it == by_name.end()) {
      return nullptr;
    }
    cursor = it->second + 1;
    return &list[it->second];
  };
  const std::shared_ptr<const PolicySet> policies = Policies();
  const PlanPolicies policy = PolicyFor(pod, *policies);
  const std::string shape = PlanKey(pod, *policies);
  std::vector<RankInput> inputs;
  inputs.reserve(nodes.size());
  for (const std::string& n : nodes) {
    if (const Fitted* f = remembered(n)) {
      inputs.push_back(RankInput{n, f->score, f->snap});
      continue;
    }
    RankInput in{n, 0, cache_.Node(n)};
    std::shared_ptr<const NodePlan> p = CachedPlan(pod, shape, in.snap.get(), policy);
    in.policy_score = p->fits() ? p->score : 0;
    inputs.push_back(std::move(in));
  }
  std::vector<HostPriority> out =
      RankNodes(pod, inputs, JobDomains(pod), options_.rank, SuperNodeBusy());
  audit_.Debug("prioritize", {{"pod", PodName(pod.ref)},
                              {"policy", PolicyName(pod)},
                              {"nodes", static_cast<int64_t>(nodes.size())},
                              {"best", out.empty() ? std::string() : out.front().host}});
  return out;
}

StatusOr<PodAssignment> Extender::PlanAndReserve(const PodInfo& pod, const std::string& node,
                                                 int32_t* score, bool* reused) {
  *reused = false;
  Status last;
  const std::shared_ptr<const PolicySet> policies = Policies();
  for (int attempt = 0; attempt < kMaxPlanAttempts; ++attempt) {
    // A retried bind (kube-scheduler timed out waiting for an earlier one):
    // the devices it reserved, or was bound with, on this node, without
    // planning again on a node that already counts them.
    if (std::optional<PodAssignment> held = cache_.Assignment(pod.ref.uid);
        held.has_value() && held->node == node) {
      *score = 0;
      *reused = true;
      return *held;
    }
    NodeSnapshotPtr snap = cache_.Node(node);
    if (snap == nullptr) {
      return NotFoundError("node " + node +
                           " is not in the extender's cache (no accelpool inventory); the pod "
                           "is retried on another node");
    }
    NodePlan plan = PlanNode(pod, snap.get(), PolicyFor(pod, *policies));
    if (plan.fits()) {
      std::optional<NodePlan> beside;
      if (std::optional<std::string> why =
              HeldForPreemptors(pod, *snap, PolicyFor(pod, *policies), &beside)) {
        return FailedPreconditionError("pod no longer fits node " + node + ": " + *why +
                                       "; the pod is retried");
      }
      if (beside.has_value()) plan = std::move(*beside);  // clear of the devices held
    }
    if (!plan.fits()) {
      return FailedPreconditionError("pod no longer fits node " + node + ": " + plan.Describe() +
                                     "; the pod is retried");
    }
    PodAssignment a;
    a.node = node;
    a.policy = PolicyName(pod);
    a.parts = std::move(plan.parts);
    bool slots_ok = true;
    for (AssignmentPart& part : a.parts) {
      StatusOr<std::vector<std::vector<int32_t>>> slots =
          AssignSlots(*snap->Find(part.vendor), part.placement);
      if (!slots.ok()) {
        last = slots.status();
        slots_ok = false;
        break;
      }
      part.slots = std::move(slots).value();
      // The cards planned on, so the grants follow them if the node's
      // indices move before the bind (filter's plans do without).
      RecordDeviceIds(part, *snap->Find(part.vendor)->inventory);
    }
    if (!slots_ok) {
      return FailedPreconditionError(last.message() + "; the pod is retried");
    }
    Status st = cache_.Reserve(pod.ref, a, snap->version);
    if (st.ok()) {
      *score = plan.score;
      return a;
    }
    if (st.code() == StatusCode::kAlreadyExists) {
      std::optional<PodAssignment> existing = cache_.Assignment(pod.ref.uid);
      if (existing.has_value() && existing->node == node) {
        *score = plan.score;
        *reused = true;
        return *existing;  // a retried bind: finish the earlier one
      }
      // Reserved elsewhere by an earlier bind whose Binding's outcome was not
      // known (no bind of the pod runs now): a fresh read that shows the pod
      // unbound gives that reservation back, and this bind plans again.
      if (existing.has_value() && writer_ != nullptr && cache_.Bound(pod.ref.uid) == false) {
        StatusOr<std::string> on = writer_->BoundNode(pod);
        std::chrono::milliseconds left{0};
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (auto it = unknown_bindings_.find(pod.ref.uid); it != unknown_bindings_.end()) {
            left = std::chrono::duration_cast<std::chrono::milliseconds>(
                it->second.sent + options_.unknown_binding_hold - std::chrono::steady_clock::now());
          }
        }
        if (on.ok() && on->empty() && left.count() > 0) {
          return UnavailableError("an earlier Binding of this pod to " + existing->node +
                                  " has an unknown outcome and may still be written for up to " +
                                  std::to_string((left.count() + 999) / 1000) +
                                  " s: its devices there stay reserved, and the pod is retried");
        }
        if (on.ok() && on->empty() && cache_.ReleaseReservation(pod.ref.uid, *existing)) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            unknown_bindings_.erase(pod.ref.uid);
          }
          log_.Info("gave back the reservation of an earlier bind whose Binding did not land",
                    {{"pod", PodName(pod.ref)}, {"node", existing->node}, {"now", node}});
          continue;
        }
      }
      return st;
    }
    if (st.code() != StatusCode::kAborted) {
      return st;
    }
    last = st;
    if (metrics_ != nullptr) {
      metrics_->bind_conflicts->WithLabels({"reserve"}).Inc();
    }
    log_.Info("bind re-plans after a concurrent change",
              {{"pod", PodName(pod.ref)}, {"node", node}, {"attempt", attempt + 1},
               {"why", st.message()}});
  }
  return AbortedError("devices on node " + node + " kept changing during bind (" +
                      last.message() + "); the pod is retried");
}

void Extender::BindRefused(const PodRef& pod, const std::string& node, std::string_view stage,
                           const Status& why) {
  if (metrics_ != nullptr) {
    metrics_->bind_failures->WithLabels({std::string(stage)}).Inc();
  }
  audit_.Warn("bind failed", {{"pod", PodName(pod)},
                              {"uid", pod.uid},
                              {"node", node},
                              {"stage", stage},
                              {"error", why.ToString()}});
}

StatusOr<PodAssignment> Extender::Bind(const PodInfo& pod, const std::string& node) {
  auto fail = [&](std::string_view stage, const Status& st) -> Status {
    BindRefused(pod.ref, node, stage, st);
    if (events_ != nullptr) {
      events_->PodEvent(pod.ref, true, "AccelpoolBindFailed",
                        "binding to " + node + " failed at " + std::string(stage) + ": " +
                            st.message());
    }
    return st;
  };
  if (!pod.Pooled()) {
    // No device asked for (e.g. an explicit nvidia.com/gpu: 0): a plain
    // Binding, no record (the node stays Idle) and no assignment annotation
    // (kubelet does not call Allocate for a zero request).
    PodAssignment none;
    none.node = node;
    if (writer_ != nullptr) {
      if (Status st = writer_->Bind(pod, none); !st.ok()) {
        return fail("binding", st);
      }
    }
    audit_.Info("bind", {{"pod", PodName(pod.ref)},
                         {"uid", pod.ref.uid},
                         {"node", node},
                         {"devices", std::string("none asked")}});
    return none;
  }
  // One bind of a pod at a time: a reservation is given back only by the
  // bind that knows its Binding was not written.
  const PodClaim claim(*this, pod.ref.uid);
  if (!claim.held()) {
    return fail("plan", AbortedError("an earlier bind of this pod is still running; the pod "
                                     "is retried"));
  }
  int32_t score = 0;
  bool reused = false;
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<PodAssignment> a = PlanAndReserve(pod, node, &score, &reused);
  if (!a.ok()) {
    return fail("plan", a.status());
  }
  const auto t1 = std::chrono::steady_clock::now();
  // A retry that reuses the reservation of an earlier bind whose Binding's
  // outcome is unknown: that Binding may still land (within
  // unknown_binding_hold), so this bind failing does not give the devices
  // back; only the hold's end, a read showing the pod unbound, or the pod's
  // deletion does.
  bool earlier_may_land = false;
  if (reused) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = unknown_bindings_.find(pod.ref.uid);
    earlier_may_land =
        it != unknown_bindings_.end() &&
        it->second.sent + options_.unknown_binding_hold > std::chrono::steady_clock::now();
  }
  if (writer_ != nullptr) {
    // Whatever leaves this block other than a written Binding or an unknown
    // outcome (an error, an exception) gives the reservation back, unless an
    // earlier Binding with it may still land.
    struct Unwritten {
      Cache& cache;
      const std::string& uid;
      const PodAssignment& a;
      bool armed = true;
      ~Unwritten() {
        if (armed) (void)cache.ReleaseReservation(uid, a);
      }
    } unwritten{cache_, pod.ref.uid, *a, !earlier_may_land};
    Status st = writer_->Bind(pod, *a);
    if (!st.ok() && earlier_may_land && st.code() != StatusCode::kUnknown) {
      return fail("binding",
                  Status(st.code(), st.message() + "; an earlier Binding of this pod to " + node +
                                        " has an unknown outcome and may still land: its devices "
                                        "there stay reserved for the pod's retry"));
    }
    if (!st.ok()) {
      if (st.code() == StatusCode::kUnknown) {
        // The Binding may have landed, or may land yet: giving the devices
        // away now could book them twice. The watch confirms the pod, or a
        // retry past unknown_binding_hold finds it unbound (PlanAndReserve),
        // or its deletion frees them.
        unwritten.armed = false;
        // ReleaseUnknownBindings settles it once the hold has passed.
        std::lock_guard<std::mutex> lock(mu_);
        unknown_bindings_[pod.ref.uid] = {std::chrono::steady_clock::now(), pod.ref};
      }
      return fail("binding", st);
    }
    unwritten.armed = false;
  }
  const auto t2 = std::chrono::steady_clock::now();
  cache_.MarkBound(pod.ref.uid, *a);
  {
    std::lock_guard<std::mutex> lock(mu_);
    preemptions_.erase(pod.ref.uid);
    unknown_bindings_.erase(pod.ref.uid);
  }
  NodeSnapshotPtr snap = cache_.Node(node);
  const std::string devices = DescribeAssignment(*a, snap.get());
  auto us = [](auto d) {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  };
  audit_.Info("bind", {{"pod", PodName(pod.ref)},
                       {"uid", pod.ref.uid},
                       {"node", node},
                       {"policy", PolicyName(pod)},
                       {"score", static_cast<int64_t>(score)},
                       {"devices", devices},
                       {"plan_us", us(t1 - t0)},
                       {"apiserver_us", us(t2 - t1)}});
  if (events_ != nullptr && pod.Pooled()) {
    events_->PodEvent(pod.ref, false, "AccelpoolAssigned", "devices on " + node + ": " + devices);
  }
  return a;
}

Extender::PodClaim::PodClaim(Extender& e, const std::string& uid) : e_(e), uid_(uid) {
  std::lock_guard<std::mutex> lock(e_.mu_);
  held_ = e_.binding_.insert(uid_).second;
}

Extender::PodClaim::~PodClaim() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(e_.mu_);
  e_.binding_.erase(uid_);
}

size_t Extender::ReleaseUnknownBindings(std::stop_token stop) {
  if (writer_ == nullptr) return 0;
  std::vector<PodRef> due;
  {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [uid, u] : unknown_bindings_) {
      if (u.sent + options_.unknown_binding_hold <= now) due.push_back(u.pod);
    }
  }
  size_t released = 0;
  size_t reads = 0;
  for (const PodRef& ref : due) {
    if (stop.stop_requested() || reads >= kMaxUnknownBindingReads) break;  // the next sweep
    // Held as a bind of the pod, so that none runs meanwhile: a reservation
    // is given back only by whoever knows its Binding was not written.
    const PodClaim claim(*this, ref.uid);
    if (!claim.held()) continue;  // its bind settles it
    {
      // A bind that ran after the list above may have sent another Binding
      // with an unknown outcome (or settled it): only a hold past is due.
      std::lock_guard<std::mutex> lock(mu_);
      auto it = unknown_bindings_.find(ref.uid);
      if (it == unknown_bindings_.end() ||
          it->second.sent + options_.unknown_binding_hold > std::chrono::steady_clock::now()) {
        continue;
      }
    }
    auto settled = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      unknown_bindings_.erase(ref.uid);
    };
    const std::optional<PodAssignment> a = cache_.Assignment(ref.uid);
    if (!a.has_value() || cache_.Bound(ref.uid) != false) {
      settled();  // gone (deleted, released), or the watch showed it bound
      continue;
    }
    PodInfo info;
    info.ref = ref;
    ++reads;
    StatusOr<std::string> on = writer_->BoundNode(info);
    if (!on.ok()) {
      log_.Debug(
          "could not read whether a pod whose Binding had an unknown outcome is bound; "
          "tried again later",
          {{"pod", PodName(ref)}, {"error", on.status().ToString()}});
      continue;
    }
    if (!on->empty()) {
      continue;  // bound: the watch marks the reservation bound, then it is settled
    }
    if (cache_.ReleaseReservation(ref.uid, *a)) {
      ++released;
      log_.Info("gave back the reservation of a bind whose Binding did not land",
                {{"pod", PodName(ref)}, {"node", a->node}});
    }
    settled();
  }
  return released;
}

std::map<std::string, MetaVictims> Extender::Preempt(
    const PodInfo& pod, const std::map<std::string, MetaVictims>& victims) {
  std::map<std::string, MetaVictims> out;
  const std::shared_ptr<const PolicySet> policies = Policies();
  for (const auto& [node, mv] : victims) {
    if (mv.pod_uids.empty()) {
      continue;  // kube-scheduler refuses a node answered with no victims
    }
    NodeSnapshotPtr snap = cache_.Node(node);
    if (!pod.Pooled()) {
      out[node] = mv;
      continue;
    }
    if (snap == nullptr || !snap->inventory_status.ok()) {
      continue;  // no victim can make devices appear here
    }
    // kube-scheduler's SelectVictimsOnNode already reprieved every victim
    // its own filters can do without, so each one it sends is needed there
    // (CPU, memory, ports ...): all of them are kept, with its count of PDB
    // violations. The node is dropped when even removing all of them leaves
    // too few devices for the pod.
    NodeSnapshot freed = *snap;
    // Each victim frees its devices once, however often the request names it.
    std::set<std::string> uids(mv.pod_uids.begin(), mv.pod_uids.end());
    // The pod's own reservation here (a bind whose outcome is unknown) is
    // planned again, as filter plans it (PlanOwnReservation): its retry
    // takes it as it is.
    if (cache_.Bound(pod.ref.uid) == std::optional<bool>(false)) {
      uids.insert(pod.ref.uid);
    }
    for (const std::string& uid : uids) {
      std::optional<PodAssignment> a = cache_.AppliedAssignment(uid);
      if (a.has_value() && a->node == node) {
        ReleaseAssignment(*a, &freed);
      }
      freed.unreadable_pods.erase(uid);  // one holding the whole node
    }
    const PlanPolicies policy = PolicyFor(pod, *policies);
    if (!PlanNode(pod, &freed, policy).fits()) {
      continue;
    }
    // Devices an earlier preemption freed here for a preemptor of at least
    // this pod's priority are held for it (as filter and bind hold them):
    // evicting these victims would not make room for this pod, only evict
    // them for nothing.
    if (std::optional<std::string> why = HeldForPreemptors(pod, freed, policy, nullptr, &uids)) {
      audit_.Info("preempt dropped a node held for another preemptor",
                  {{"pod", PodName(pod.ref)}, {"node", node}, {"why", *why}});
      continue;
    }
    out[node] = mv;
  }
  // The victims kept, per node ("node-a=[uid1,uid2] node-b=[uid3]"): which
  // pods this answer let kube-scheduler evict, for whoever asks later why.
  std::string kept;
  for (const auto& [node, mv] : out) {
    kept += (kept.empty() ? "" : " ") + node + "=[";
    for (size_t i = 0; i < mv.pod_uids.size(); ++i) {
      kept += (i == 0 ? "" : ",") + mv.pod_uids[i];
    }
    kept += "]";
  }
  audit_.Info("preempt", {{"pod", PodName(pod.ref)},
                          {"uid", pod.ref.uid},
                          {"nodes_proposed", static_cast<int64_t>(victims.size())},
                          {"nodes_kept", static_cast<int64_t>(out.size())},
                          {"victims", kept}});
  RecordPreemption(pod, out);
  return out;
}

namespace {
constexpr auto kPreemptionMemory = std::chrono::seconds(60);
constexpr auto kPreemptionCap = std::chrono::minutes(10);
constexpr size_t kMaxPreemptions = 1024;
}  // namespace

bool Extender::Expired(const Preemption& p, std::chrono::steady_clock::time_point now) {
  return now - p.at > kPreemptionMemory || now - p.first > kPreemptionCap;
}

void Extender::RecordPreemption(const PodInfo& pod,
                                const std::map<std::string, MetaVictims>& kept) {
  if (pod.ref.uid.empty() || kept.empty() || !pod.Pooled()) {
    return;
  }
  // Only victims that hold devices there: one kube-scheduler evicts for CPU,
  // memory or ports frees nothing of ours, and its going must not read as
  // "the preemption took effect here" on every node proposed.
  std::map<std::string, std::vector<std::string>> victims;
  for (const auto& [node, mv] : kept) {
    for (const std::string& uid : mv.pod_uids) {
      if (std::optional<PodAssignment> a = cache_.AppliedAssignment(uid);
          a.has_value() && a->node == node) {
        victims[node].push_back(uid);
      }
    }
  }
  if (victims.empty()) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(preemptions_, [&](const auto& kv) { return Expired(kv.second, now); });
  if (preemptions_.size() >= kMaxPreemptions) {
    return;  // a flood of preemptions: the wait is an optimisation, not needed for correctness
  }
  Preemption& p = preemptions_[pod.ref.uid];
  p.at = now;
  p.first = now;
  p.preemptor = pod;
  p.recorded = victims;
  p.victims = std::move(victims);
  // kube-scheduler evicts on one of the nodes answered: with one, it is that.
  p.settled = kept.size() == 1;
  p.earlier_nomination = pod.nominated_node;
}

bool Extender::Holds(const std::string& uid, const std::string& node) const {
  std::optional<PodAssignment> a = cache_.AppliedAssignment(uid);
  return a.has_value() && a->node == node;
}

bool Extender::Narrow(Preemption& p, const std::string& nominated) const {
  if (!nominated.empty() && nominated != p.earlier_nomination) {
    auto it = p.recorded.find(nominated);
    if (it == p.recorded.end()) {
      // Evicted where no victim held devices (for CPU, memory, ports):
      // nothing freed of ours to hold, and no victim of ours to wait for.
      p.victims.clear();
      return false;
    }
    if (p.victims.size() != 1 || p.victims.begin()->first != nominated) {
      p.victims = {*it};
    }
    p.settled = true;
    return true;
  }
  if (p.settled) {
    return true;
  }
  // A victim gone from a node: kube-scheduler evicted there. (One that ended
  // on its own first would mislead this; the nominated node, when the
  // preemptor carries it, does not.)
  std::map<std::string, std::vector<std::string>> took_effect;
  for (const auto& [node, uids] : p.victims) {
    const std::string& on = node;  // a structured binding: clang before 16 cannot capture it
    if (std::any_of(uids.begin(), uids.end(),
                    [&](const std::string& uid) { return !Holds(uid, on); })) {
      took_effect.emplace(node, uids);
    }
  }
  if (!took_effect.empty()) {
    p.victims = std::move(took_effect);
    p.settled = true;
  }
  return true;
}

bool Extender::TendPreemptions(const PodInfo& pod) {
  // Copied out and worked on without mu_ (each check is a cache lookup), then
  // written back to the records that were not replaced meanwhile.
  struct Work {
    std::string uid;
    std::string name;
    Preemption p;           // without the preemptor's request
    std::string_view drop;  // why the record goes; empty: it stays
  };
  std::vector<Work> work;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(preemptions_, [&](const auto& kv) { return Expired(kv.second, now); });
    work.reserve(preemptions_.size());
    for (const auto& [uid, p] : preemptions_) {
      Work w{uid, PodName(p.preemptor.ref), {}, {}};
      w.p.settled = p.settled;
      w.p.earlier_nomination = p.earlier_nomination;
      w.p.first = p.first;
      if (!p.settled || uid == pod.ref.uid) w.p.victims = p.victims;
      if (uid == pod.ref.uid) w.p.recorded = p.recorded;
      work.push_back(std::move(w));
    }
  }
  for (Work& w : work) {
    // Bound (here or by another replica) or deleted: the hold has no one to
    // serve. Erased now rather than left to Cache::Released, which forgets a
    // deleted pod after kReleasedMemory while a record may live longer.
    if (cache_.Bound(w.uid) == std::optional<bool>(true)) {
      w.drop = "the preemptor is bound";
    } else if (cache_.Released(w.uid)) {
      w.drop = "the preemptor was deleted or finished";
    } else if (!w.p.victims.empty() &&
               !Narrow(w.p, w.uid == pod.ref.uid ? pod.nominated_node : std::string())) {
      w.drop = "kube-scheduler nominated a node where no victim held devices";
    }
  }
  bool left = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Work& w : work) {
      auto it = preemptions_.find(w.uid);
      if (it == preemptions_.end() || it->second.first != w.p.first) {
        w.drop = {};  // replaced by a later preempt of the pod, or already gone
        continue;
      }
      if (!w.drop.empty()) {
        preemptions_.erase(it);
      } else if (w.p.settled && (!it->second.settled || w.uid == pod.ref.uid)) {
        // Narrowed now, or (its own record) by the node it was nominated.
        it->second.victims = std::move(w.p.victims);
        it->second.settled = true;
      }
    }
    left = !preemptions_.empty();
  }
  for (const Work& w : work) {
    if (!w.drop.empty()) {
      log_.Info("preemption record dropped",
                {{"preemptor", w.name}, {"uid", w.uid}, {"why", w.drop}});
    }
  }
  return left;
}

std::optional<std::string> Extender::HeldForPreemptors(const PodInfo& pod, const NodeSnapshot& snap,
                                                       const PlanPolicies& policy,
                                                       std::optional<NodePlan>* replan,
                                                       const std::set<std::string>* freed) {
  if (!pod.Pooled()) {
    return std::nullopt;
  }
  struct Candidate {
    std::string uid;
    PodInfo preemptor;
    std::vector<std::string> victims;  // here
    bool settled = false;              // Preemption::settled
  };
  std::vector<Candidate> candidates;
  std::vector<std::string> own;  // the victims `pod` itself evicted here
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [uid, p] : preemptions_) {
      if (Expired(p, now)) continue;
      const auto v = p.victims.find(snap.name);
      if (v == p.victims.end() || v->second.empty()) continue;
      if (uid == pod.ref.uid) {
        own = v->second;
      } else if (p.preemptor.priority >= pod.priority) {
        candidates.push_back({uid, p.preemptor, v->second, p.settled});
      }
    }
  }
  if (candidates.empty()) {
    return std::nullopt;
  }
  auto holding = [&](const std::string& uid) {
    std::optional<PodAssignment> a = cache_.AppliedAssignment(uid);
    return a.has_value() && a->node == snap.name ? a : std::nullopt;
  };
  // Devices `snap` counts as free already are not released from it again.
  auto free_in_snap = [&](const std::string& uid) {
    return freed != nullptr && freed->contains(uid);
  };
  // The pod's own devices here (a reservation whose bind outcome is unknown)
  // are planned again, as PlanOwnReservation does: they are not counted
  // against it.
  const std::optional<PodAssignment> own_reservation =
      free_in_snap(pod.ref.uid) ? std::nullopt : holding(pod.ref.uid);
  // A pod whose own eviction took effect here (two preemptors of one
  // priority, one job's pods say) is not held back by its peers.
  const bool evicted_here_itself =
      std::any_of(own.begin(), own.end(), [&](const std::string& uid) { return !holding(uid); });
  const std::shared_ptr<const PolicySet> policies = Policies();
  std::optional<NodeSnapshot> held;
  std::string names;
  std::vector<std::string> still_evicting;  // records to keep alive
  for (const Candidate& c : candidates) {
    if (evicted_here_itself && c.preemptor.priority <= pod.priority) continue;
    // Held only where the preemption took effect (kube-scheduler picked this
    // node: a victim here is gone, or the record was narrowed to it) and the
    // preemptor is not bound yet.
    std::vector<PodAssignment> remaining;
    size_t remaining_freed = 0;  // of them, those `snap` counts as free already
    for (const std::string& uid : c.victims) {
      if (std::optional<PodAssignment> a = holding(uid)) {
        if (free_in_snap(uid)) {
          ++remaining_freed;
        } else {
          remaining.push_back(std::move(*a));
        }
      }
    }
    const size_t still_holding = remaining.size() + remaining_freed;
    const bool took_effect = c.settled || still_holding < c.victims.size();
    if (!took_effect) continue;  // kube-scheduler evicted nothing here (yet)
    // Nothing is held for a preemptor that is bound, or deleted, nor is its
    // record kept alive (TendPreemptions drops it).
    if (cache_.Bound(c.uid) == std::optional<bool>(true) || cache_.Released(c.uid)) {
      continue;
    }
    // Victims still leaving where the preemption took effect: a long grace
    // period keeps the record (and the hold) alive.
    if (still_holding > 0) still_evicting.push_back(c.uid);
    // Nothing freed yet to hold; or the preemptor holds devices of its own
    // already (its bind is running).
    if (still_holding == c.victims.size() || cache_.Assignment(c.uid).has_value()) {
      continue;
    }
    if (!held.has_value()) {
      held = snap;
      if (own_reservation.has_value()) ReleaseAssignment(*own_reservation, &*held);
    }
    // The preemptor as it will be planned once all its victims here are
    // gone: the devices of those still leaving count as free for it.
    for (const PodAssignment& a : remaining) ReleaseAssignment(a, &*held);
    const NodePlan plan = PlanNode(c.preemptor, &*held, PolicyFor(c.preemptor, *policies));
    if (!plan.fits()) {
      continue;  // what is freed does not make room for it here: nothing to hold
    }
    bool placed = true;
    for (const AssignmentPart& part : plan.parts) {
      InventoryState* st = held->Find(part.vendor);
      placed = placed && st != nullptr && ApplyPart(part, st).ok();
    }
    if (placed) {
      names += (names.empty() ? "" : ", ") + PodName(c.preemptor.ref) + " (priority " +
               std::to_string(c.preemptor.priority) + ")";
    }
  }
  if (!still_evicting.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& uid : still_evicting) {
      if (auto it = preemptions_.find(uid); it != preemptions_.end()) it->second.at = now;
    }
  }
  if (names.empty()) {
    return std::nullopt;
  }
  NodePlan beside = PlanNode(pod, &*held, policy);
  const std::string why = "the devices preemption freed here are held for " + names +
                          ", which evicted pods for them and binds first";
  if (!beside.fits()) {
    return why + " (" + beside.Describe() + " beside it)";
  }
  // The plan beside the held devices must fit the node as it is, too: it may
  // not take devices victims still hold.
  NodeSnapshot now_copy = snap;
  if (own_reservation.has_value()) ReleaseAssignment(*own_reservation, &now_copy);
  for (const AssignmentPart& part : beside.parts) {
    InventoryState* st = now_copy.Find(part.vendor);
    if (st == nullptr || !ApplyPart(part, st).ok()) {
      return why + " (beside it, only devices evicted pods still hold would do)";
    }
  }
  if (replan != nullptr) *replan = std::move(beside);
  return std::nullopt;
}

void Extender::AwaitVictims(const PodInfo& pod, const std::vector<std::string>& nodes) {
  Preemption p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = preemptions_.find(pod.ref.uid);
    if (it == preemptions_.end()) {
      return;
    }
    p.victims = it->second.victims;
    p.recorded = it->second.recorded;
    p.settled = it->second.settled;
    p.earlier_nomination = it->second.earlier_nomination;
  }
  const std::set<std::string> asked(nodes.begin(), nodes.end());
  // Victims still holding devices on the asked nodes where the preemption
  // took effect. Until it is known where (no victim has left yet), every one
  // on an asked node counts: the first to leave tells, and those elsewhere,
  // which kube-scheduler never evicts, are not waited for.
  auto holding = [&] {
    if (!Narrow(p, pod.nominated_node)) return size_t{0};
    size_t n = 0;
    for (const auto& [node, uids] : p.victims) {
      if (!asked.contains(node)) continue;
      const std::string& on = node;  // a structured binding: clang before 16 cannot capture it
      n += static_cast<size_t>(std::count_if(
          uids.begin(), uids.end(), [&](const std::string& uid) { return Holds(uid, on); }));
    }
    return n;
  };
  const size_t victims = holding();
  if (victims == 0) {
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options_.preemption_wait;
  const bool still =
      !PollUntil(deadline, std::chrono::milliseconds(10), [&] { return holding() == 0; });
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  if (metrics_ != nullptr) {
    metrics_->preemption_waits->WithLabels({still ? "timeout" : "released"}).Inc();
  }
  audit_.Info("filter waited for preemption victims", {{"pod", PodName(pod.ref)},
                                                       {"victims", static_cast<int64_t>(victims)},
                                                       {"waited_ms", static_cast<int64_t>(waited)},
                                                       {"released", !still}});
}

}  // namespace accelpool::extender
