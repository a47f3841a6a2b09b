#include "extender/planner.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/node_order.h"
#include "core/rank.h"

namespace accelpool::extender {

PodInfo MakePodInfo(PodRef ref, core::PodRequest request) {
  PodInfo info;
  info.ref = std::move(ref);
  info.request = std::move(request);
  std::map<core::Vendor, std::pair<int32_t, int32_t>> per_vendor;  // (long-running, max init)
  for (const core::DeviceRequest& r : info.request.containers) {
    if (std::find(info.vendors.begin(), info.vendors.end(), r.vendor) == info.vendors.end()) {
      info.vendors.push_back(r.vendor);
    }
    auto& [running, init] = per_vendor[r.vendor];
    if (r.kind == core::ContainerKind::kInit) {
      init = std::max(init, r.count);
    } else {
      running += r.count;
    }
  }
  for (const auto& [vendor, counts] : per_vendor) {
    info.devices += std::max(counts.first, counts.second);
  }
  return info;
}

std::string RequestShape(const core::PodRequest& request) {
  std::string out;
  auto list = [&out](const std::vector<std::string>& v) {
    for (const std::string& s : v) {
      out += s;
      out += ',';
    }
    out += ';';
  };
  for (const core::DeviceRequest& r : request.containers) {
    out += r.container;
    out += '|';
    out += std::to_string(static_cast<int>(r.kind)) + '|' +
           std::to_string(static_cast<int>(r.vendor)) + '|' + std::to_string(r.count) + '|' +
           std::to_string(r.memory_mib) + '|' + std::to_string(r.memory_percent) + '|' +
           std::to_string(r.compute) + '|' + (r.exclusive ? "x" : "-") +
           (r.numa_bind ? "n" : "-") + '|';
    list(r.model_include);
    list(r.model_exclude);
    list(r.id_include);
    list(r.id_exclude);
    // A MIG profile picks other devices than a whole-card request of the
    // same count ("" for whole devices).
    out += "p:" + r.partition;
    out += '\n';
  }
  // The host request moves the fragmentation policies' scores.
  out += "host|" + std::to_string(request.host.cpu_milli) + '|' +
         std::to_string(request.host.memory_mib);
  return out;
}

std::string NodePlan::Describe() const {
  if (!message.empty()) {
    return message;
  }
  std::string out;
  for (const core::FitReason& r : reasons) {
    if (!out.empty()) {
      out += "; ";
    }
    out += core::DescribeReason(r);
  }
  return out.empty() ? "does not fit" : out;
}

NodePlan PlanNode(const PodInfo& pod, const NodeSnapshot* snap, const PlanPolicies& policies) {
  NodePlan plan;
  if (!pod.Pooled()) {
    // Asks for no pooled device (a pod routed by the host-pod webhook, or an
    // explicit nvidia.com/gpu: 0): any node fits, with or without an
    // inventory (kube-scheduler's own filters check CPU and memory). Its
    // score is the node policy's HostScore of the host it takes there: with
    // the fragmentation policies, the idle device compute its CPU and memory
    // would strand; the others give every node the same score. A node
    // without a usable inventory has no devices to strand; it is scored as
    // an empty inventory is.
    // On a node with devices of several vendors the pod takes the host from
    // all of them: the vendor whose devices it strands most sets the score.
    // A node whose inventory does not parse may well have devices: one step
    // below a node known to have none.
    plan.code = core::FitCode::kFits;
    std::optional<int32_t> worst;
    if (snap != nullptr && snap->inventory_status.ok()) {
      for (const InventoryState& st : snap->inventories) {
        if (st.inventory == nullptr) continue;
        const int32_t s = policies.nodes.HostScore(*st.inventory, st.usage, pod.request.host);
        worst = std::min(worst.value_or(s), s);
      }
    }
    if (!worst.has_value()) {
      const core::NodeInventory none;
      worst = policies.nodes.HostScore(none, core::NodeUsage::Empty(none), pod.request.host);
      if (snap != nullptr && !snap->inventory_status.ok()) *worst -= 1;
    }
    plan.score = std::clamp(*worst, 0, 100);
    return plan;
  }
  if (snap == nullptr) {
    plan.code = core::FitCode::kUnresolvable;
    plan.message_reason = "NoInventory";
    plan.message =
        "node has no accelpool inventory; run the accelpool device plugin there or keep pods "
        "asking for pooled devices off it";
    return plan;
  }
  if (!snap->inventory_status.ok()) {
    plan.code = core::FitCode::kUnschedulable;
    plan.message_reason = "InventoryInvalid";
    plan.message = "node inventory does not parse (" + snap->inventory_status.message() +
                   "); check the accelpool device plugin on this node";
    return plan;
  }
  if (!snap->unreadable_pods.empty()) {
    const size_t more = snap->unreadable_pods.size() - 1;
    plan.code = core::FitCode::kUnschedulable;
    plan.message_reason = "UnreadableAssignment";
    plan.message = "pod " + snap->unreadable_pods.begin()->second +
                   (more > 0 ? " (and " + std::to_string(more) + " more)" : std::string()) +
                   " runs here with an accelpool.io/assignment annotation that does not parse, "
                   "so the devices it uses are unknown and the node takes no new pooled pod; "
                   "mend or remove the annotation, or delete the pod";
    return plan;
  }
  plan.code = core::FitCode::kFits;
  int64_t score_sum = 0;
  for (core::Vendor v : pod.vendors) {
    const InventoryState* st = snap->Find(v);
    if (st == nullptr) {
      plan.code = core::FitCode::kUnresolvable;
      plan.reasons.push_back(core::FitReason{core::Reason::kNoDevices, 1, 0});
      continue;
    }
    core::FitResult r = core::Fit(pod.request, *st->inventory, st->usage, &policies.devices);
    if (!r.fits()) {
      if (r.code == core::FitCode::kUnresolvable || plan.code == core::FitCode::kFits) {
        plan.code = r.code;
      }
      plan.reasons.insert(plan.reasons.end(), r.reasons.begin(), r.reasons.end());
      continue;
    }
    if (plan.fits()) {
      score_sum += policies.nodes.NodeScore(*st->inventory, st->usage, r.placement);
      // The host request was for the score; an assignment names devices only
      // (the annotation carries none, and a bound pod's must match it).
      r.placement.host = {};
      plan.parts.push_back(AssignmentPart{v, std::move(r.placement), {}, {}});
    }
  }
  if (!plan.fits()) {
    plan.parts.clear();
    return plan;
  }
  plan.score = pod.vendors.empty()
                   ? 0
                   : static_cast<int32_t>(score_sum / static_cast<int64_t>(pod.vendors.size()));
  plan.score = std::clamp(plan.score, 0, 100);
  return plan;
}

namespace {

int Locality(const NodeSnapshot* snap, std::string_view node,
             const std::map<std::string, NodeDomains>& job_domains, const RankOptions& o) {
  if (job_domains.empty()) {
    return 0;
  }
  if (job_domains.count(std::string(node))) {
    return o.locality_node;
  }
  if (snap == nullptr) {
    return 0;
  }
  int best = 0;
  const NodeDomains& d = snap->domains;
  for (const auto& [other, od] : job_domains) {
    if (!d.super_node.empty() && d.super_node == od.super_node) {
      best = std::max(best, o.locality_super_node);
    } else if (!d.rack.empty() && d.rack == od.rack) {
      best = std::max(best, o.locality_rack);
    } else if (!d.block.empty() && d.block == od.block) {
      best = std::max(best, o.locality_block);
    }
  }
  return best;
}

}  // namespace

std::vector<HostPriority> RankNodes(
    const PodInfo& pod, const std::vector<RankInput>& nodes,
    const std::map<std::string, NodeDomains>& job_domains, const RankOptions& options,
    const std::function<int(const std::string& super_node)>& busy_in_super_node) {
  // The keep-whole term needs a node's devices and idleness only when a
  // penalty can apply to it, and its super-node's idleness only when the node
  // itself is idle: skip the lookups otherwise.
  const bool node_penalty = options.idle_node_penalty != 0;
  const bool super_node_penalty = options.idle_super_node_penalty != 0;
  // Busy nodes per super-node: the cluster's when given, else among the
  // candidates. Asked once per super-node.
  std::unordered_map<std::string_view, int> busy_in;
  if (super_node_penalty) {
    for (const RankInput& n : nodes) {
      if (n.snap == nullptr || n.snap->domains.super_node.empty()) continue;
      const std::string& sn = n.snap->domains.super_node;
      if (busy_in_super_node) {
        if (busy_in.find(sn) == busy_in.end()) busy_in[sn] = busy_in_super_node(sn);
      } else {
        busy_in[sn] += n.snap->Idle() ? 0 : 1;
      }
    }
  }
  // The rule itself is core::Rank, shared with the simulator's kube mode.
  std::vector<core::RankCandidate> candidates;
  candidates.reserve(nodes.size());
  for (const RankInput& n : nodes) {
    core::RankCandidate c;
    c.node = n.node;
    c.policy_score = n.policy_score;
    c.locality = Locality(n.snap.get(), n.node, job_domains, options);
    c.pod_devices = pod.devices;
    c.order = core::StableNodeOrder(options.tie_salt, n.node);
    if (n.snap != nullptr &&
        (node_penalty || (super_node_penalty && !n.snap->domains.super_node.empty()))) {
      c.node_idle = n.snap->Idle();
      if (c.node_idle) {
        c.node_devices = n.snap->devices;
        const std::string& sn = n.snap->domains.super_node;
        c.super_node_idle = !sn.empty() && busy_in[sn] == 0;
      }
    }
    candidates.push_back(c);
  }
  const core::RankPenalties penalties{options.idle_node_penalty, options.idle_super_node_penalty};
  std::vector<HostPriority> out;
  out.reserve(nodes.size());
  // A pod that asks for no device: every node with the best score gets 10,
  // and the host-pod profile's own scores choose among them (core::RankRule).
  for (const core::RankedNode& r :
       core::Rank(candidates, core::RankRule{penalties, /*tied_best=*/!pod.Pooled()})) {
    out.push_back(HostPriority{std::string(nodes[r.index].node), r.score});
  }
  return out;
}

}  // namespace accelpool::extender
