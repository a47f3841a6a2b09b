// ctl_bench: what `kubectl accelpool` costs on a large cluster, against the
// cost of only parsing the same list answers (the baseline every client pays).
// Builds N nodes of 8 H200 (the inventory annotation the plugin publishes) and
// P bound pods (one in four whole-card, the rest 8 GiB shares, each with the
// assignment the extender writes), serialises both as the apiserver's list
// answers, then times, in one process:
//   parse_ms      json::parse of the two answers (baseline)
//   load_ms       parse + ClusterView::FromObjects (the view `kubectl accelpool` builds)
//   nodes_ms      NodesReport over every node
//   node_ms       NodeReport of one node
//   explain_ms    ExplainReport of a pending 8-card pod over every node
// and for the same pod with two claims, as `explain` judges them: one
// waiting for its first consumer (class local-nvme, 8 local volumes on every
// node, 6 taken, one of the 2 free big enough), one bound to a CSI volume (every node's
// CSINode limits the driver to 25 volumes; each bound pod mounts one):
//   storage_lists_ms    copying the volume, claim and CSINode lists once
//                       (baseline: what handing the list answers over costs)
//   volumes_read_ms     PodVolumes::Read (lists the volumes)
//   volume_limits_ms    ReadVolumeLimits (lists volumes, claims, CSINodes)
//   explain_volumes_ms  ExplainReport with those volumes
// and prints one JSON object with load_vs_parse (load_ms / parse_ms),
// volumes_vs_explain (explain_volumes_ms / explain_ms),
// volumes_total_vs_lists (the three volume steps / storage_lists_ms) and the
// process's peak resident memory.
//
// usage: ctl_bench [--nodes=1250] [--pods=10000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/assignment_codec.h"
#include "api/inventory_codec.h"
#include "core/profiles.h"
#include "ctl/cluster_view.h"
#include "ctl/volume_filters.h"
#include "extender/convert.h"
#include "extender/extender.h"

namespace accelpool::ctl {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double PeakRssMib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return -1;
}

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

json Pod(int i, bool whole) {
  json limits = whole ? json{{"nvidia.com/gpu", "1"}}
                      : json{{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "8192"}};
  const std::string name = "p" + std::to_string(i);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ml"},
            {"uid", "uid-" + name},
            {"labels", {{"app", "inference"}}}}},
          {"spec",
           {{"schedulerName", "accelpool-scheduler"},
            {"containers",
             {{{"name", "main"},
               {"image", "registry.example/serving:1.0"},
               {"resources", {{"limits", limits}}}}}}}},
          {"status", {{"phase", "Pending"}}}};
}

int Run(int nodes, int pods) {
  // The cluster, and pods bound on it as the extender binds them.
  extender::Cache scratch;
  json node_list = {{"kind", "NodeList"}, {"items", json::array()}};
  for (int n = 0; n < nodes; ++n) {
    const std::string name = "gpu-" + std::to_string(n);
    StatusOr<core::NodeInventory> inv = core::MakeProfileNode("nvidia-hgx-8", name);
    if (!inv.ok()) return 1;
    for (core::Device& d : inv->devices) d.max_shares = 8;
    scratch.UpsertNode(name, std::vector<core::NodeInventory>{*inv}, 1, {});
    api::InventoryDocument doc;
    doc.generation = 1;
    doc.inventories.push_back(*inv);
    node_list["items"].push_back(
        {{"kind", "Node"},
         {"metadata",
          {{"name", name},
           {"labels", {{"kubernetes.io/hostname", name}}},
           {"annotations", {{"accelpool.io/inventory", api::SerializeInventory(doc)}}}}},
         {"status", {{"allocatable", {{"cpu", "192"}, {"memory", "2Ti"}}}}}});
  }
  auto ext = extender::Extender::Create(scratch, extender::ExtenderOptions{}, nullptr, nullptr,
                                        nullptr, Logger());
  if (!ext.ok()) return 1;
  json pod_list = {{"kind", "PodList"}, {"items", json::array()}};
  int bound = 0;
  for (int i = 0; i < pods; ++i) {
    json pod = Pod(i, i % 4 == 0);
    const std::string node = "gpu-" + std::to_string(i % nodes);
    StatusOr<extender::PodInfo> info = extender::PodInfoFromJson(pod);
    StatusOr<extender::PodAssignment> a = (*ext)->Bind(*info, node);
    if (!info.ok() || !a.ok()) continue;
    StatusOr<api::Assignment> doc = extender::ToApiAssignment(*a, *scratch.Node(node), *info);
    pod["metadata"]["annotations"] = {{"accelpool.io/assignment", api::SerializeAssignment(*doc)}};
    pod["spec"]["nodeName"] = node;
    pod["spec"]["volumes"] = {
        {{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "c" + std::to_string(i)}}}}};
    pod["status"] = {{"phase", "Running"},
                     {"containerStatuses",
                      {{{"name", "main"},
                        {"ready", true},
                        {"restartCount", 0},
                        {"image", "registry.example/serving:1.0"},
                        {"state", {{"running", {{"startedAt", "2026-12-01T00:00:00Z"}}}}}}}}};
    pod_list["items"].push_back(std::move(pod));
    ++bound;
  }
  const std::string node_text = node_list.dump();
  const std::string pod_text = pod_list.dump();
  node_list = json();
  pod_list = json();

  const auto t0 = Clock::now();
  json parsed_nodes = json::parse(node_text);
  json parsed_pods = json::parse(pod_text);
  const auto t1 = Clock::now();
  parsed_nodes = json();
  parsed_pods = json();
  const auto t2 = Clock::now();
  json items_n = json::parse(node_text);
  json items_p = json::parse(pod_text);
  std::unique_ptr<ClusterView> view =
      ClusterView::FromObjects(std::move(items_n["items"].get_ref<json::array_t&>()),
                               std::move(items_p["items"].get_ref<json::array_t&>()));
  const auto t3 = Clock::now();
  items_n = json();
  items_p = json();
  Report nodes_report = NodesReport(*view);
  const auto t4 = Clock::now();
  StatusOr<Report> node_report = NodeReport(*view, "gpu-0");
  const auto t5 = Clock::now();
  json pending = Pod(-1, true);
  pending["spec"]["containers"][0]["resources"]["limits"] = {{"nvidia.com/gpu", "8"}};
  const auto t6 = Clock::now();
  StatusOr<Report> explain8 = ExplainReport(*view, pending, "accelpool");
  const auto t8 = Clock::now();
  if (!node_report.ok() || !explain8.ok()) return 1;

  // The storage side: local volumes, CSI volumes and their claims, CSINodes.
  std::map<std::string, std::vector<json>> lists;
  std::map<std::string, json> objects;  // "kind/name"
  auto hostname_affinity = [](const std::string& node) {
    json a;
    const json requirement = {
        {"key", "kubernetes.io/hostname"}, {"operator", "In"}, {"values", json::array({node})}};
    a["required"]["nodeSelectorTerms"] =
        json::array({json{{"matchExpressions", json::array({requirement})}}});
    return a;
  };
  for (int n = 0; n < nodes; ++n) {
    const std::string node = "gpu-" + std::to_string(n);
    for (int k = 0; k < 8; ++k) {
      json pv = {{"metadata", {{"name", "lpv-" + std::to_string(n) + "-" + std::to_string(k)}}},
                 {"spec",
                  {{"storageClassName", "local-nvme"},
                   {"capacity", {{"storage", k < 4 ? "1Ti" : "3Ti"}}},
                   {"accessModes", {"ReadWriteOnce"}},
                   {"local", {{"path", "/mnt/nvme" + std::to_string(k)}}},
                   {"nodeAffinity", hostname_affinity(node)}}},
                 {"status", {{"phase", k % 4 < 3 ? "Bound" : "Available"}}}};
      if (k % 4 < 3) pv["spec"]["claimRef"] = {{"namespace", "ml"}, {"name", "taken"}};
      lists["persistentvolumes"].push_back(std::move(pv));
    }
    lists["csinodes"].push_back(
        {{"metadata", {{"name", node}}},
         {"spec", {{"drivers", {{{"name", "ebs.csi"}, {"allocatable", {{"count", 25}}}}}}}}});
  }
  for (int i = 0; i < pods; ++i) {
    const std::string c = "c" + std::to_string(i);
    lists["persistentvolumeclaims"].push_back(
        {{"metadata",
          {{"name", c},
           {"namespace", "ml"},
           {"annotations", {{"pv.kubernetes.io/bind-completed", "yes"}}}}},
         {"spec", {{"volumeName", "cpv" + std::to_string(i)}, {"storageClassName", "gp3"}}}});
    lists["persistentvolumes"].push_back(
        {{"metadata", {{"name", "cpv" + std::to_string(i)}}},
         {"spec",
          {{"storageClassName", "gp3"},
           {"csi", {{"driver", "ebs.csi"}, {"volumeHandle", "vol-" + std::to_string(i)}}}}}});
  }
  objects["persistentvolumeclaims/scratch"] = {
      {"metadata", {{"name", "scratch"}, {"namespace", "ml"}, {"uid", "scratch-uid"}}},
      {"spec",
       {{"storageClassName", "local-nvme"},
        {"accessModes", {"ReadWriteOnce"}},
        {"resources", {{"requests", {{"storage", "1536Gi"}}}}}}}};
  objects["persistentvolumeclaims/ckpt"] = {
      {"metadata",
       {{"name", "ckpt"},
        {"namespace", "ml"},
        {"annotations", {{"pv.kubernetes.io/bind-completed", "yes"}}}}},
      {"spec", {{"volumeName", "cpv-ckpt"}, {"storageClassName", "gp3"}}}};
  objects["persistentvolumes/cpv-ckpt"] = {
      {"metadata", {{"name", "cpv-ckpt"}}},
      {"spec", {{"csi", {{"driver", "ebs.csi"}, {"volumeHandle", "vol-ckpt"}}}}}};
  objects["storageclasses/local-nvme"] = {{"metadata", {{"name", "local-nvme"}}},
                                          {"provisioner", "kubernetes.io/no-provisioner"},
                                          {"volumeBindingMode", "WaitForFirstConsumer"}};
  objects["storageclasses/gp3"] = {{"metadata", {{"name", "gp3"}}}, {"provisioner", "ebs.csi"}};
  ObjectGetter get = [&](const std::string& kind, const std::string&,
                         const std::string& name) -> StatusOr<json> {
    auto it = objects.find(kind + "/" + name);
    if (it == objects.end()) return Status(StatusCode::kNotFound, kind + " " + name);
    return it->second;
  };
  ObjectLister list = [&](const std::string& kind) -> StatusOr<std::vector<json>> {
    return lists[kind];
  };
  json with_volumes = pending;
  with_volumes["spec"]["volumes"] = {
      {{"name", "scratch"}, {"persistentVolumeClaim", {{"claimName", "scratch"}}}},
      {{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "ckpt"}}}}};
  // Baseline: the lists handed over once (each reader gets its own copy,
  // as each gets its own answer from the apiserver), and dropped.
  const auto c0 = Clock::now();
  for (const char* kind : {"persistentvolumes", "persistentvolumeclaims", "csinodes"}) {
    StatusOr<std::vector<json>> copy = list(kind);
    if (!copy.ok()) return 1;
  }
  const auto c1 = Clock::now();
  const auto t9 = Clock::now();
  PodVolumes volumes = PodVolumes::Read(with_volumes, get, list);
  const auto t9a = Clock::now();
  volumes.ReadVolumeLimits(view->uses(), get, list);
  volumes.NoteClaimsInUse(view->uses());
  const auto t9b = Clock::now();
  StatusOr<Report> explain_volumes =
      ExplainReport(*view, with_volumes, "accelpool", ExplainInputs{nullptr, &volumes});
  const auto t10 = Clock::now();

  if (!explain_volumes.ok()) return 1;
  const double parse_ms = Ms(t0, t1);
  const double load_ms = Ms(t2, t3);
  json out = {{"nodes", nodes},
              {"pods", bound},
              {"list_mib", static_cast<double>(node_text.size() + pod_text.size()) / 1048576.0},
              {"parse_ms", parse_ms},
              {"load_ms", load_ms},
              {"load_vs_parse", load_ms / parse_ms},
              {"nodes_ms", Ms(t3, t4)},
              {"node_ms", Ms(t4, t5)},
              {"explain_ms", Ms(t6, t8)},
              {"explain_fits", explain8->json["fits"].size()},
              {"storage_lists_ms", Ms(c0, c1)},
              {"volumes_read_ms", Ms(t9, t9a)},
              {"volume_limits_ms", Ms(t9a, t9b)},
              {"explain_volumes_ms", Ms(t9b, t10)},
              {"volumes_vs_explain", Ms(t9b, t10) / Ms(t6, t8)},
              {"volumes_total_vs_lists", Ms(t9, t10) / Ms(c0, c1)},
              {"explain_volumes_fits", explain_volumes->json["fits"].size()},
              {"peak_rss_mib", PeakRssMib()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace accelpool::ctl

int main(int argc, char** argv) {
  int nodes = 1250, pods = 10000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--nodes=", 0) == 0) {
      nodes = std::atoi(a.c_str() + 8);
    } else if (a.rfind("--pods=", 0) == 0) {
      pods = std::atoi(a.c_str() + 7);
    } else {
      std::fprintf(stderr, "usage: ctl_bench [--nodes=1250] [--pods=10000]\n");
      return 2;
    }
  }
  if (nodes < 1 || pods < 0) {
    std::fprintf(stderr, "ctl_bench: --nodes must be at least 1 and --pods not negative\n");
    return 2;
  }
  return accelpool::ctl::Run(nodes, pods);
}
