#include "ctl/cluster_view.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "api/assignment_codec.h"
#include "common/log.h"
#include "common/strings.h"
#include "core/frag.h"
#include "core/reasons.h"
#include "core/usage.h"
#include "core/workload.h"
#include "ctl/node_filters.h"
#include "extender/convert.h"
#include "extender/extender.h"
#include "extender/kube_adapters.h"
#include "extender/pod_load.h"
#include "extender/workload_store.h"
#include "kube/objects.h"

namespace accelpool::ctl {
namespace {

using extender::NodeSnapshotPtr;
using nlohmann::json;

std::string Percent(int64_t thousandths) {
  return thousandths % 10 == 0 ? fmt::format("{}%", thousandths / 10)
                               : fmt::format("{:.1f}%", static_cast<double>(thousandths) / 10.0);
}

std::string Gib(int64_t mib) {
  return mib % 1024 == 0 ? fmt::format("{}", mib / 1024)
                         : fmt::format("{:.1f}", static_cast<double>(mib) / 1024.0);
}

// Left-aligned columns, two blanks apart.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string Models(const core::NodeInventory& inv) {
  std::set<std::string> models;
  for (const core::Device& d : inv.devices) {
    models.insert(d.partition.empty() ? d.model : d.model + " " + d.partition);
  }
  return models.empty() ? "-"
                        : StrJoin(std::vector<std::string>(models.begin(), models.end()), ",");
}

std::string PodName(const extender::PodRef& ref) { return ref.ns + "/" + ref.name; }

std::string DescribeAsk(const core::DeviceRequest& r) {
  std::string s = std::string(core::VendorName(r.vendor)) + " x" + std::to_string(r.count);
  if (!r.partition.empty()) return s + " (" + r.partition + " instance)";
  if (!r.Fractional()) return s + " (whole)";
  if (r.memory_mib > 0) s += ", " + std::to_string(r.memory_mib) + " MiB each";
  if (r.memory_percent > 0) s += ", " + std::to_string(r.memory_percent) + "% of memory each";
  if (r.compute > 0) s += ", " + Percent(r.compute) + " compute each";
  return s;
}

}  // namespace

void ClusterView::AddNode(const json& node) {
  feeder_.OnNode(node);
  const std::string name = kube::StringAt(node, json::json_pointer("/metadata/name"));
  facts_[name] = NodeFactsFromJson(node);
  if (NodeSnapshotPtr snap = cache_.Node(name); snap != nullptr && !snap->inventory_status.ok()) {
    bad_nodes_[name] = std::string(snap->inventory_status.message());
  }
}

void ClusterView::AddPod(const json& pod) {
  extender::ObservedPod o = extender::ObservePodJson(pod);
  if (o.ref.uid.empty() || o.finished) return;
  // As CacheFeeder::OnPod, without parsing the pod a second time; what does
  // not parse or fit is shown as such by the reports, not logged.
  (void)cache_.ObservePod(o.ref, o.node_name, o.assignment);
  pods_[o.ref.uid] =
      PodEntry{o.ref, o.node_name, kube::StringAt(pod, json::json_pointer("/status/phase"))};
}

void ClusterView::CountPod(const json& pod) {
  const std::string node = kube::StringAt(pod, json::json_pointer("/spec/nodeName"));
  const std::string phase = kube::StringAt(pod, json::json_pointer("/status/phase"));
  if (node.empty() || phase == "Succeeded" || phase == "Failed") return;
  // The pod's host request on its node, read as the extender's pod watch reads it.
  if (cache_.tracking_host()) {
    const extender::PodLoad::Summary s = extender::PodLoad::SummaryOf(pod);
    if (s.host_ok && !s.uid.empty()) cache_.ObserveHostPod(s.uid, node, s.host);
  }
  NodeUse& use = use_[node];
  ++use.pods;
  for (const auto& [name, milli] : PodRequests(pod)) {
    // Saturating: each pod's request may be as large as an int64 holds.
    int64_t& sum = use.requested[name];
    sum = milli > std::numeric_limits<int64_t>::max() - sum ? std::numeric_limits<int64_t>::max()
                                                            : sum + milli;
  }
  for (HostPort& h : PodHostPorts(pod)) use.host_ports.push_back(std::move(h));
  use.pod_labels.push_back(PodLabelsFromJson(pod));
  const std::string self = kube::StringAt(pod, json::json_pointer("/metadata/namespace")) + "/" +
                           kube::StringAt(pod, json::json_pointer("/metadata/name"));
  for (std::string& claim : PodClaimKeys(pod)) use.claims.emplace(std::move(claim), self);
  for (std::string& claim : PodVolumeClaimKeys(pod)) use.volume_claims.push_back(std::move(claim));
  for (InlineDisk& d : PodInlineDisks(pod)) use.disks.push_back(std::move(d));
}

std::unique_ptr<ClusterView> ClusterView::FromObjects(const std::vector<json>& nodes,
                                                      const std::vector<json>& pods,
                                                      const ViewOptions& options) {
  auto view = std::unique_ptr<ClusterView>(new ClusterView(options));
  for (const json& n : nodes) view->AddNode(n);
  for (const json& p : pods) {
    view->CountPod(p);
    view->AddPod(p);
  }
  return view;
}

StatusOr<std::unique_ptr<ClusterView>> ClusterView::Load(
    kube::KubeClient& client, const std::function<void(const std::string&)>& progress,
    const ViewOptions& options) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  say("listing nodes");
  kube::ListOptions no;
  StatusOr<kube::ListResult> nodes = client.List(kube::Nodes(), "", no);
  if (!nodes.ok()) {
    return nodes.status().WithPrefix(
        "listing nodes (needs list on nodes; check the kubeconfig's context)");
  }
  say("listed " + std::to_string(nodes->items.size()) + " nodes; listing pods");
  auto view = std::unique_ptr<ClusterView>(new ClusterView(options));
  for (const json& n : nodes->items) view->AddNode(n);
  nodes->items.clear();
  kube::ListOptions po;
  po.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  // Every bound pod's requests are summed on its node (kube-scheduler's
  // resource fit); only pods holding an assignment are kept, and what is kept
  // of them drops the status (container statuses can be most of a pod) but
  // its phase, so a cluster of many thousand pods is never held whole.
  int64_t listed = 0;
  ClusterView* v = view.get();
  po.keep = [&listed, &say, v](json& pod) {
    if (++listed % 10000 == 0) say("read " + std::to_string(listed) + " pods");
    v->CountPod(pod);
    const json* a = pod.contains("metadata") && pod["metadata"].is_object() &&
                            pod["metadata"].contains("annotations") &&
                            pod["metadata"]["annotations"].is_object()
                        ? &pod["metadata"]["annotations"]
                        : nullptr;
    if (a == nullptr || !a->contains(api::kAssignmentAnnotation)) return false;
    pod["status"] = {{"phase", kube::StringAt(pod, json::json_pointer("/status/phase"))}};
    if (pod["metadata"].is_object()) pod["metadata"].erase("managedFields");
    return true;
  };
  StatusOr<kube::ListResult> pods = client.List(kube::Pods(), "", po);
  if (!pods.ok()) {
    return pods.status().WithPrefix("listing pods (needs list on pods in every namespace)");
  }
  say("listed " + std::to_string(listed) + " pods, " + std::to_string(pods->items.size()) +
      " holding accelpool devices");
  for (const json& p : pods->items) view->AddPod(p);
  return view;
}

std::vector<std::string> ClusterView::Nodes() const {
  std::vector<std::string> names = cache_.NodeNames();
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// Devices with two decimals, trailing zeros dropped ("3.75", "0.5", "8").
std::string Devices(double thousandths) {
  std::string s = fmt::format("{:.2f}", thousandths / core::kComputeWhole);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string ReportJsonText(const Report& r) {
  return r.json.dump(2, ' ', false, json::error_handler_t::replace);
}

Report NodesReport(const ClusterView& view, const ReportWorkload& workload) {
  Report r;
  r.json = {{"nodes", json::array()}};
  std::vector<std::vector<std::string>> rows = {{"NODE", "VENDOR", "MODEL", "DEVICES", "UNHEALTHY",
                                                 "CORDONED", "FREE", "MEMORY GiB", "COMPUTE",
                                                 "FRAGMENTED/IDLE", "PODS"}};
  int64_t devices = 0, free_whole = 0, memory = 0, memory_used = 0, free_cordoned = 0;
  double idle_total = 0, fragmented_total = 0;
  // Per super node (an Ascend super pod, a multi-node NVLink domain): its
  // nodes, and those a multi-node job could take whole now.
  std::map<std::string, std::pair<int64_t, int64_t>> supers;
  for (const std::string& name : view.Nodes()) {
    NodeSnapshotPtr snap = view.cache().Node(name);
    if (snap == nullptr) continue;
    // A cordoned node (kubectl cordon) takes no new pod, whatever its devices.
    const NodeFacts* facts = view.Facts(name);
    const bool unschedulable = facts != nullptr && facts->unschedulable;
    const std::string shown = unschedulable ? name + " (cordoned)" : name;
    json node = {{"name", name},
                 {"unschedulable", unschedulable},
                 {"pods", snap->pods},
                 {"inventories", json::array()}};
    if (!snap->domains.super_node.empty()) node["super_node"] = snap->domains.super_node;
    bool whole_node_free = !unschedulable && snap->inventory_status.ok();
    if (!snap->inventory_status.ok()) {
      node["inventory_error"] = std::string(snap->inventory_status.message());
      rows.push_back(
          {shown, "-", "inventory does not parse", "-", "-", "-", "-", "-", "-", "-", "-"});
    }
    for (const extender::InventoryState& st : snap->inventories) {
      const core::NodeInventory& inv = *st.inventory;
      int64_t unhealthy = 0, cordoned = 0, free = 0, mem = 0, mem_used = 0, compute_used = 0;
      for (size_t i = 0; i < inv.devices.size(); ++i) {
        const core::Device& d = inv.devices[i];
        const core::DeviceUsage& u = st.usage.devices[i];
        unhealthy += d.healthy ? 0 : 1;
        cordoned += d.cordoned ? 1 : 0;
        const bool idle = u.shares == 0 && !u.exclusive && u.memory_mib == 0;
        // A device holding memory no grant accounts for takes no whole pod.
        free += idle && d.healthy && !d.cordoned && d.foreign_mib == 0 ? 1 : 0;
        mem += d.memory_mib;
        mem_used += u.exclusive ? d.memory_mib : u.memory_mib;
        compute_used += u.exclusive ? core::kComputeWhole : u.compute;
      }
      const core::FragmentationNow frag =
          core::MeasureFragmentation(inv, st.usage, workload.shapes);
      idle_total += static_cast<double>(frag.idle);
      fragmented_total += frag.fragment;
      const int64_t n = static_cast<int64_t>(inv.devices.size());
      whole_node_free = whole_node_free && free == n;
      devices += n;
      free_whole += free;
      free_cordoned += unschedulable ? free : 0;
      memory += mem;
      memory_used += mem_used;
      node["inventories"].push_back(
          {{"vendor", std::string(core::VendorName(inv.vendor))},
           {"models", Models(inv)},
           {"devices", n},
           {"unhealthy", unhealthy},
           {"cordoned", cordoned},
           {"free_whole", free},
           {"memory_mib", mem},
           {"memory_assigned_mib", mem_used},
           {"compute_assigned", compute_used},
           {"compute_total", n * core::kComputeWhole},
           {"idle_devices", static_cast<double>(frag.idle) / core::kComputeWhole},
           {"fragmented_devices", frag.fragment / core::kComputeWhole}});
      rows.push_back({shown, std::string(core::VendorName(inv.vendor)), Models(inv),
                      std::to_string(n), std::to_string(unhealthy), std::to_string(cordoned),
                      std::to_string(free), Gib(mem_used) + "/" + Gib(mem),
                      n > 0 ? Percent(compute_used / n) : "-",
                      Devices(frag.fragment) + "/" + Devices(static_cast<double>(frag.idle)),
                      std::to_string(snap->pods)});
    }
    if (!snap->domains.super_node.empty()) {
      auto& [nodes, idle] = supers[snap->domains.super_node];
      nodes += 1;
      idle += whole_node_free ? 1 : 0;
    }
    r.json["nodes"].push_back(std::move(node));
  }
  // Most idle nodes first: where the next multi-node job fits.
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> by_idle(supers.begin(),
                                                                           supers.end());
  std::stable_sort(by_idle.begin(), by_idle.end(),
                   [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  r.json["super_nodes"] = json::array();
  for (const auto& [sn, counts] : by_idle) {
    r.json["super_nodes"].push_back(
        {{"name", sn}, {"nodes", counts.first}, {"idle_nodes", counts.second}});
  }
  r.json["totals"] = {{"nodes", r.json["nodes"].size()},
                      {"devices", devices},
                      {"free_whole", free_whole},
                      {"free_whole_on_cordoned_nodes", free_cordoned},
                      {"memory_mib", memory},
                      {"memory_assigned_mib", memory_used},
                      {"idle_devices", idle_total / core::kComputeWhole},
                      {"fragmented_devices", fragmented_total / core::kComputeWhole}};
  const std::string source = !workload.source.empty() ? workload.source : "the built-in mix";
  r.json["workload"] = {{"source", source}, {"shapes", workload.shapes.size()}};
  r.text = Table(rows);
  r.text += fmt::format(
      "{} nodes, {} devices ({} free whole{}), {} of {} GiB assigned\n", r.json["nodes"].size(),
      devices, free_whole,
      free_cordoned > 0 ? fmt::format(", {} of them on cordoned nodes", free_cordoned) : "",
      Gib(memory_used), Gib(memory));
  r.text += fmt::format(
      "{} of {} idle devices fragmented{} for {}\n", Devices(fragmented_total), Devices(idle_total),
      idle_total > 0 ? fmt::format(" ({:.1f}%)", 100.0 * fragmented_total / idle_total) : "",
      source);
  if (!by_idle.empty()) {
    constexpr size_t kShown = 8;
    std::string line = "super nodes, idle nodes/nodes:";
    for (size_t i = 0; i < by_idle.size() && i < kShown; ++i) {
      line += fmt::format(" {} {}/{}", by_idle[i].first, by_idle[i].second.second,
                          by_idle[i].second.first);
    }
    if (by_idle.size() > kShown) line += fmt::format(" (and {} more)", by_idle.size() - kShown);
    r.text += line + "\n";
  }
  return r;
}

StatusOr<ReportWorkload> ReadWorkload(kube::KubeClient& client, const std::string& where) {
  const size_t slash = where.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == where.size() ||
      where.find('/', slash + 1) != std::string::npos) {
    return InvalidArgumentError(
        "--workload-configmap must be NAMESPACE/NAME (the chart's is "
        "<release>-workload in the extender's namespace), not \"" +
        where + "\"");
  }
  extender::WorkloadStore store(client, where.substr(0, slash), where.substr(slash + 1));
  StatusOr<std::optional<extender::WorkloadState>> state = store.Load();
  if (!state.ok()) {
    return state.status().WithPrefix("reading the learned workload (needs get on configmaps in " +
                                     where.substr(0, slash) + ")");
  }
  ReportWorkload out;
  if (!state->has_value()) {
    out.source = "the built-in mix (ConfigMap " + where + " holds no learned workload yet)";
    return out;
  }
  // The whole stored window, as the extender that wrote it restores it.
  core::WorkloadLearnerOptions opts;
  opts.window = std::max(opts.window, (*state)->arrivals.size());
  core::WorkloadLearner learner(opts);
  learner.Restore((*state)->arrivals, (*state)->observed);
  out.shapes = learner.Shapes();
  out.source = out.shapes.empty()
                   ? fmt::format("the built-in mix ({} arrivals in {}, fewer than the {} needed)",
                                 learner.arrivals(), where, opts.min_arrivals)
                   : fmt::format("the learned workload of {} ({} shapes from {} arrivals)", where,
                                 out.shapes.size(), learner.arrivals());
  return out;
}

Report PodsReport(const ClusterView& view, const std::string& ns) {
  Report r;
  r.json = {{"pods", json::array()}};
  std::vector<std::vector<std::string>> rows = {
      {"POD", "NODE", "PHASE", "VENDOR", "DEVICES", "WHOLE", "MEMORY MiB", "COMPUTE"}};
  std::vector<const PodEntry*> entries;
  for (const auto& [uid, entry] : view.pods()) {
    if (ns.empty() || entry.ref.ns == ns) entries.push_back(&entry);
  }
  std::sort(entries.begin(), entries.end(), [](const PodEntry* a, const PodEntry* b) {
    return std::tie(a->ref.ns, a->ref.name) < std::tie(b->ref.ns, b->ref.name);
  });
  for (const PodEntry* e : entries) {
    // What is counted on the node, in its current device indices; a pod
    // whose assignment is not counted there (its node or devices missing)
    // is listed from the assignment itself.
    std::optional<extender::PodAssignment> a = view.cache().AppliedAssignment(e->ref.uid);
    const bool counted = a.has_value();
    if (!counted) a = view.cache().Assignment(e->ref.uid);
    if (!a.has_value()) continue;
    NodeSnapshotPtr snap = view.cache().Node(e->node);
    json pj = {{"pod", PodName(e->ref)},
               {"node", e->node},
               {"phase", e->phase},
               {"counted", counted},
               {"vendors", json::array()}};
    for (const extender::AssignmentPart& part : a->parts) {
      const extender::InventoryState* inv =
          counted && snap != nullptr ? snap->Find(part.vendor) : nullptr;
      std::set<int32_t> devices, whole;
      int64_t memory = 0, compute = 0;
      const std::vector<core::Device>* devs = inv != nullptr ? &inv->inventory->devices : nullptr;
      auto device_memory = [&](int32_t d, int64_t fallback) {
        return devs != nullptr && d >= 0 && static_cast<size_t>(d) < devs->size()
                   ? (*devs)[static_cast<size_t>(d)].memory_mib
                   : fallback;
      };
      bool in_range = devs != nullptr;
      for (const core::ContainerPlacement& c : part.placement.containers) {
        for (const core::Grant& g : c.grants) {
          devices.insert(g.device);
          in_range = in_range && g.device >= 0 && static_cast<size_t>(g.device) < devs->size();
        }
      }
      if (in_range) {
        // What the node counts: on each device the most the pod holds at
        // any moment, its init containers' phases included (core::Footprint).
        const std::vector<core::DeviceUsage> fp = core::Footprint(part.placement, *inv->inventory);
        for (size_t d = 0; d < fp.size(); ++d) {
          if (fp[d].exclusive) {
            whole.insert(static_cast<int32_t>(d));
            memory += device_memory(static_cast<int32_t>(d), fp[d].memory_mib);
            compute += core::kComputeWhole;
          } else {
            memory += fp[d].memory_mib;
            compute += fp[d].compute;
          }
        }
      } else {
        // Listed from the assignment alone: per device, the larger of the
        // steady state and each init container's grant.
        struct Held {
          int64_t memory = 0;
          int64_t compute = 0;
          bool whole = false;
        };
        std::map<int32_t, Held> steady, init;
        for (const core::ContainerPlacement& c : part.placement.containers) {
          for (const core::Grant& g : c.grants) {
            const Held now{g.memory_mib, g.exclusive ? core::kComputeWhole : g.compute,
                           g.exclusive};
            if (c.kind == core::ContainerKind::kInit) {
              Held& h = init[g.device];
              h.memory = std::max(h.memory, now.memory);
              h.compute = std::max(h.compute, now.compute);
              h.whole = h.whole || now.whole;
            } else {
              Held& h = steady[g.device];
              h.memory += now.memory;
              h.compute += now.compute;
              h.whole = h.whole || now.whole;
            }
          }
        }
        for (int32_t d : devices) {
          const Held s = steady.count(d) ? steady[d] : Held{};
          const Held i = init.count(d) ? init[d] : Held{};
          if (s.whole || i.whole) {
            whole.insert(d);
            memory += std::max(s.memory, i.memory);
            compute += core::kComputeWhole;
          } else {
            memory += std::max(s.memory, i.memory);
            compute += std::max(s.compute, i.compute);
          }
        }
      }
      const std::string vendor(core::VendorName(part.vendor));
      pj["vendors"].push_back({{"vendor", vendor},
                               {"devices", devices.size()},
                               {"whole", whole.size()},
                               {"memory_mib", memory},
                               {"compute", compute}});
      rows.push_back({PodName(e->ref), e->node, e->phase, vendor, std::to_string(devices.size()),
                      std::to_string(whole.size()), std::to_string(memory), Percent(compute)});
    }
    r.json["pods"].push_back(std::move(pj));
  }
  r.text = Table(rows);
  r.text += fmt::format("{} pods holding devices{}\n", r.json["pods"].size(),
                        ns.empty() ? "" : " in namespace " + ns);
  return r;
}

StatusOr<Report> NodeReport(const ClusterView& view, const std::string& node) {
  NodeSnapshotPtr snap = view.cache().Node(node);
  if (snap == nullptr) {
    return NotFoundError("node " + node +
                         " has no accelpool inventory (no accelpool.io/inventory annotation: is "
                         "the device plugin running there? `kubectl accelpool nodes` lists the "
                         "nodes that have one)");
  }
  // Holders per (vendor, device index), from what the cache counts of each
  // pod bound here.
  struct Holder {
    std::string pod, container;
    core::Grant grant;
  };
  std::map<std::pair<core::Vendor, int32_t>, std::vector<Holder>> holders;
  for (const auto& [uid, entry] : view.pods()) {
    if (entry.node != node) continue;
    std::optional<extender::PodAssignment> a = view.cache().AppliedAssignment(uid);
    if (!a.has_value()) continue;
    for (const extender::AssignmentPart& part : a->parts) {
      for (const core::ContainerPlacement& c : part.placement.containers) {
        for (const core::Grant& g : c.grants) {
          holders[{part.vendor, g.device}].push_back(Holder{PodName(entry.ref), c.container, g});
        }
      }
    }
  }
  Report r;
  r.json = {{"name", node},
            {"generation", snap->generation},
            {"pods", snap->pods},
            {"devices", json::array()}};
  if (!snap->inventory_status.ok()) {
    r.json["inventory_error"] = std::string(snap->inventory_status.message());
  }
  std::vector<std::vector<std::string>> rows = {{"VENDOR", "IDX", "ID", "MODEL", "NUMA", "STATE",
                                                 "MEMORY MiB", "COMPUTE", "SHARES", "HELD BY"}};
  for (const extender::InventoryState& st : snap->inventories) {
    const core::NodeInventory& inv = *st.inventory;
    for (size_t i = 0; i < inv.devices.size(); ++i) {
      const core::Device& d = inv.devices[i];
      const core::DeviceUsage& u = st.usage.devices[i];
      const std::string state = !d.healthy   ? "unhealthy"
                                : d.cordoned ? "cordoned"
                                : d.foreign_mib
                                    ? "foreign " + std::to_string(d.foreign_mib) + " MiB"
                                    : "ok";
      json dj = {{"vendor", std::string(core::VendorName(inv.vendor))},
                 {"index", d.index},
                 {"id", d.id},
                 {"model", d.model},
                 {"partition", d.partition},
                 {"numa", d.numa},
                 {"state", state},
                 {"memory_mib", d.memory_mib},
                 {"foreign_mib", d.foreign_mib},
                 {"memory_assigned_mib", u.exclusive ? d.memory_mib : u.memory_mib},
                 {"compute_assigned", u.exclusive ? core::kComputeWhole : u.compute},
                 {"shares", u.shares},
                 {"max_shares", d.max_shares},
                 {"exclusive", u.exclusive},
                 {"holders", json::array()}};
      std::vector<std::string> held;
      for (const Holder& h : holders[{inv.vendor, static_cast<int32_t>(i)}]) {
        dj["holders"].push_back({{"pod", h.pod},
                                 {"container", h.container},
                                 {"memory_mib", h.grant.memory_mib},
                                 {"compute", h.grant.compute},
                                 {"exclusive", h.grant.exclusive}});
        held.push_back(h.pod + "[" + h.container + "]" +
                       (h.grant.exclusive ? " whole"
                                          : " " + std::to_string(h.grant.memory_mib) + " MiB " +
                                                Percent(h.grant.compute)));
      }
      rows.push_back({std::string(core::VendorName(inv.vendor)), std::to_string(d.index),
                      d.id.empty() ? "-" : d.id,
                      d.partition.empty() ? d.model : d.model + " " + d.partition,
                      d.numa < 0 ? "-" : std::to_string(d.numa), state,
                      std::to_string(dj["memory_assigned_mib"].get<int64_t>()) + "/" +
                          std::to_string(d.memory_mib),
                      Percent(dj["compute_assigned"].get<int64_t>()),
                      std::to_string(u.shares) + "/" + std::to_string(d.max_shares),
                      held.empty() ? "-" : StrJoin(held, ", ")});
      r.json["devices"].push_back(std::move(dj));
    }
  }
  r.text = "node " + node + " (inventory generation " + std::to_string(snap->generation) + ", " +
           std::to_string(snap->pods) + " pods holding devices)\n";
  if (!snap->inventory_status.ok()) {
    r.text += "inventory does not parse: " + std::string(snap->inventory_status.message()) + "\n";
  }
  r.text += Table(rows);
  return r;
}

StatusOr<NamespaceLabels> ListNamespaceLabels(kube::KubeClient& client) {
  NamespaceLabels out;
  kube::ListOptions o;
  o.metadata_only = true;
  o.keep = [&out](json& ns) {
    const std::string name = kube::StringAt(ns, json::json_pointer("/metadata/name"));
    std::map<std::string, std::string>& labels = out[name];
    const json* l =
        ns.contains("metadata") && ns["metadata"].is_object() && ns["metadata"].contains("labels")
            ? &ns["metadata"]["labels"]
            : nullptr;
    if (l != nullptr && l->is_object()) {
      for (const auto& [k, v] : l->items()) {
        if (v.is_string()) labels[k] = v.get<std::string>();
      }
    }
    return false;
  };
  StatusOr<kube::ListResult> listed = client.List(kube::Namespaces(), "", o);
  if (!listed.ok()) return listed.status().WithPrefix("listing namespaces");
  return out;
}

StatusOr<Report> ExplainReport(ClusterView& view, const json& pod, const std::string& policy,
                               const ExplainInputs& inputs) {
  const std::string ns = kube::StringAt(pod, json::json_pointer("/metadata/namespace"));
  const std::string name = kube::StringAt(pod, json::json_pointer("/metadata/name"));
  Report r;
  r.json = {{"pod", ns + "/" + name}};
  r.text = "pod " + ns + "/" + name + "\n";
  StatusOr<extender::PodInfo> info = extender::PodInfoFromJson(pod);
  if (!info.ok()) {
    r.json["request_error"] = std::string(info.status().message());
    r.text += "  its request does not parse: " + std::string(info.status().message()) +
              "\n  the webhook refuses such pods at creation; fix the resources and annotations "
              "named above and create it again\n";
    return r;
  }
  if (!info->Pooled()) {
    r.json["asks"] = json::array();
    r.text += "  asks for no accelerator accelpool manages: kube-scheduler places it alone\n";
    return r;
  }
  r.json["asks"] = json::array();
  r.text += "  asks:\n";
  for (const core::DeviceRequest& d : info->request.containers) {
    r.json["asks"].push_back({{"container", d.container}, {"ask", DescribeAsk(d)}});
    r.text += "    " + d.container + ": " + DescribeAsk(d) + "\n";
  }
  const std::string node = kube::StringAt(pod, json::json_pointer("/spec/nodeName"));
  if (!node.empty()) {
    r.json["node"] = node;
    std::optional<extender::PodAssignment> a = view.cache().Assignment(info->ref.uid);
    r.text += "  bound to " + node + "\n";
    const std::string phase = kube::StringAt(pod, json::json_pointer("/status/phase"));
    if (phase == "Succeeded" || phase == "Failed") {
      // Finished: its devices went back when it ended (the view counts only
      // pods that run).
      r.json["phase"] = phase;
      r.json["assignment"] = nullptr;
      r.text += "  finished (" + phase + "): its devices were released when it ended\n";
      return r;
    }
    if (!a.has_value()) {
      r.json["assignment"] = nullptr;
      r.text +=
          "  it holds no accelpool devices there: bound without the extender (spec.nodeName set "
          "by hand, or another scheduler), or its accelpool.io/assignment is missing or does not "
          "parse; the device plugin refuses its containers (see its Events)\n";
      return r;
    }
    json devices = json::array();
    for (const extender::AssignmentPart& part : a->parts) {
      for (const core::ContainerPlacement& c : part.placement.containers) {
        for (const core::Grant& g : c.grants) {
          auto id = part.device_ids.find(g.device);
          const std::string dev =
              id != part.device_ids.end() ? id->second : "#" + std::to_string(g.device);
          devices.push_back({{"container", c.container},
                             {"vendor", std::string(core::VendorName(part.vendor))},
                             {"device", dev},
                             {"memory_mib", g.memory_mib},
                             {"compute", g.compute},
                             {"exclusive", g.exclusive}});
          r.text += "    " + c.container + ": " + std::string(core::VendorName(part.vendor)) + " " +
                    dev +
                    (g.exclusive ? " (whole)"
                                 : " " + std::to_string(g.memory_mib) + " MiB, " +
                                       Percent(g.compute) + " compute") +
                    "\n";
        }
      }
    }
    r.json["assignment"] = devices;
    return r;
  }
  // A gated pod (spec.schedulingGates, as Kueue holds a workload it has not
  // admitted) is not tried by kube-scheduler at all: say so first; where it
  // would fit once the gates are gone follows.
  const json::json_pointer gates_at("/spec/schedulingGates");
  if (const json gates = pod.contains(gates_at) ? pod.at(gates_at) : json();
      gates.is_array() && !gates.empty()) {
    std::vector<std::string> names;
    for (const json& g : gates) {
      names.push_back(g.is_object() ? kube::StringAt(g, json::json_pointer("/name")) : "");
    }
    r.json["scheduling_gates"] = names;
    r.text +=
        "  gated: kube-scheduler does not try to place it until its scheduling gates are "
        "removed (" +
        StrJoin(names, ", ") +
        "; a kueue.x-k8s.io gate is Kueue's, lifted when it admits the workload). Once "
        "they are:\n";
  }
  extender::ExtenderOptions o;
  o.policy = policy;
  StatusOr<std::unique_ptr<extender::Extender>> ext =
      extender::Extender::Create(view.cache(), o, nullptr, nullptr, nullptr, Logger());
  if (!ext.ok()) return ext.status().WithPrefix("--policy");
  const std::vector<std::string> nodes = view.Nodes();
  // kube-scheduler's node filters run first; the extender sees what they pass.
  std::vector<std::string> passed;
  json rejected = json::object();
  std::map<std::string, std::vector<std::string>> why;
  const PodAsks asks = PodAsksFromJson(pod);
  const TopologySpread spread(pod, view.facts(), view.uses());
  const InterPodAffinity affinity(pod, view.facts(), view.uses(), inputs.ns_labels);
  // The claims the cluster's pods mount, noted once (a copy when the caller
  // has not).
  const PodVolumes* volumes = inputs.volumes;
  std::optional<PodVolumes> noted;
  if (volumes != nullptr && !volumes->claims_noted()) {
    noted = *volumes;
    noted->NoteClaimsInUse(view.uses());
    volumes = &*noted;
  }
  // A volume reason of kube-scheduler's PreFilter is every node's.
  const std::string every = volumes != nullptr ? volumes->every_node() : "";
  for (const std::string& n : nodes) {
    const NodeFacts* facts = view.Facts(n);
    std::string no = facts == nullptr ? ""
                     : !every.empty() ? every
                                      : SchedulerRejects(pod, asks, *facts, &view.Use(n));
    if (no.empty() && facts != nullptr && volumes != nullptr) {
      no = volumes->Rejects(*facts, view.Use(n));
    }
    if (no.empty() && facts != nullptr) no = spread.Rejects(*facts);
    if (no.empty() && facts != nullptr) no = affinity.Rejects(*facts);
    if (no.empty()) {
      passed.push_back(n);
      continue;
    }
    rejected[n] = {{"reason", no}, {"by", "kube-scheduler"}, {"could_fit_later", false}};
    why["kube-scheduler: " + no].push_back(n);
  }
  extender::FilterDecision d;
  if (!passed.empty()) d = (*ext)->Filter(*info, passed);
  std::vector<extender::HostPriority> ranked;
  if (!d.fits.empty()) ranked = (*ext)->Prioritize(*info, d.fits);
  r.json["policy"] = info->policy.empty() ? policy : info->policy;
  // The nodes are scored by the pod's node policy, by the cluster's when its
  // own policy is HAMi's gpu-scheduler-policy (devices only), else by its own.
  r.json["node_policy"] = !info->node_policy.empty()  ? info->node_policy
                          : info->policy_devices_only ? policy
                                                      : r.json["policy"].get<std::string>();
  r.json["fits"] = json::array();
  for (const extender::HostPriority& h : ranked) {
    r.json["fits"].push_back({{"node", h.host}, {"score", h.score}});
  }
  // Nodes that do not fit, grouped by the message.
  for (const auto* m : {&d.failed, &d.unresolvable}) {
    for (const auto& [n, msg] : *m) {
      why[msg].push_back(n);
      rejected[n] = {{"reason", msg}, {"by", "accelpool"}, {"could_fit_later", m == &d.failed}};
    }
  }
  r.json["rejected"] = rejected;
  r.text += "  pending; with policy " + r.json["policy"].get<std::string>();
  if (r.json["node_policy"] != r.json["policy"]) {
    r.text += " (nodes scored by " + r.json["node_policy"].get<std::string>() + ")";
  }
  r.text += " it ";
  if (ranked.empty()) {
    r.text += "fits on none of the " + std::to_string(nodes.size()) + " accelpool nodes\n";
  } else {
    std::vector<std::string> best;
    for (size_t i = 0; i < ranked.size() && i < 5; ++i) {
      best.push_back(ranked[i].host + " (score " + std::to_string(ranked[i].score) + ")");
    }
    r.text += "fits on " + std::to_string(ranked.size()) + " of " + std::to_string(nodes.size()) +
              " accelpool nodes, best first: " + StrJoin(best, ", ") +
              (ranked.size() > best.size() ? ", ..." : "") + "\n";
  }
  if (!why.empty()) {
    std::vector<std::pair<std::string, std::vector<std::string>>> groups(why.begin(), why.end());
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    r.text += "  does not fit:\n";
    for (const auto& [msg, ns_] : groups) {
      std::vector<std::string> some(ns_.begin(), ns_.begin() + std::min<size_t>(ns_.size(), 3));
      r.text += "    " + std::to_string(ns_.size()) + (ns_.size() == 1 ? " node" : " nodes") +
                " (" + StrJoin(some, ", ") + (ns_.size() > some.size() ? ", ..." : "") +
                "): " + msg + "\n";
    }
  }
  r.text +=
      "  (kube-scheduler's cordon, taint, node affinity, host port, resource, volume binding and "
      "zone, volume restriction, CSI volume limit, topology spread and pod affinity filters are "
      "applied here, bound pods' anti-affinity included: `kubectl describe pod` shows its last "
      "attempt)\n";
  if (inputs.volumes == nullptr) {
    r.json["volumes_not_judged"] = "not read";
  } else if (!inputs.volumes->unjudged_reason().empty()) {
    r.json["volumes_not_judged"] = inputs.volumes->unjudged_reason();
    r.text += "  (its volumes were not judged: " + inputs.volumes->unjudged_reason() + ")\n";
  } else if (!inputs.volumes->limits_unjudged_reason().empty()) {
    r.json["volume_limits_not_judged"] = inputs.volumes->limits_unjudged_reason();
    r.text +=
        "  (its volume attach limits were not judged: " + inputs.volumes->limits_unjudged_reason() +
        ")\n";
  }
  if (inputs.volumes != nullptr && inputs.volumes->waiting_claims() > 0) {
    r.json["claims_waiting_for_first_consumer"] = inputs.volumes->waiting_claims();
    if (!inputs.volumes->waiting_unjudged_reason().empty()) {
      r.json["waiting_claims_not_judged"] = inputs.volumes->waiting_unjudged_reason();
      r.text += "  (" + std::to_string(inputs.volumes->waiting_claims()) +
                " claim(s) wait for their first consumer and were not judged: " +
                inputs.volumes->waiting_unjudged_reason() + ")\n";
    }
  }
  // Dynamic resource allocation is kube-scheduler's DynamicResources
  // plugin's to judge: its claims are counted, not judged.
  if (const json* claims = pod.contains("spec") && pod["spec"].is_object() &&
                                   pod["spec"].contains("resourceClaims") &&
                                   pod["spec"]["resourceClaims"].is_array()
                               ? &pod["spec"]["resourceClaims"]
                               : nullptr;
      claims != nullptr && !claims->empty()) {
    r.json["resource_claims_not_judged"] = claims->size();
    r.text += "  (" + std::to_string(claims->size()) +
              " resource claim(s) (dynamic resource allocation) were not judged: kube-scheduler's "
              "DynamicResources filter decides where their devices are)\n";
  }
  if (affinity.skipped() > 0) {
    r.json["affinity_terms_not_judged"] = affinity.skipped();
    r.text += "  (" + std::to_string(affinity.skipped()) +
              " pod affinity term(s) select namespaces by label and were not judged: the "
              "namespaces could not be read; grant list on namespaces, as the chart's viewer "
              "role does)\n";
  }
  return r;
}

}  // namespace accelpool::ctl
