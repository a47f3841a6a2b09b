// kubectl-accelpool: the accelerator pool as the apiserver holds it, for the
// people who run it. Installed on the PATH as kubectl-accelpool, it is the
// kubectl plugin `kubectl accelpool`.
//
// Flags and output only; the view and the reports are ctl/cluster_view.h.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/status.h"
#include "ctl/cluster_view.h"
#include "http/http.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/objects.h"

namespace accelpool::ctl {
namespace {

constexpr const char* kUsage = R"(usage: kubectl accelpool COMMAND [flags]

  nodes                 every node with an accelpool inventory: vendor and model, devices
                        (unhealthy, cordoned, free whole), memory and compute assigned, idle
                        device capacity and the part of it fragmented for the workload, pods
  node NAME             one node's devices, and which pod and container holds what on each
  pods                  every pod holding devices (in -n NS only, when given): node, phase,
                        devices, whole cards, memory and compute
  explain [NS/]POD      one pod: what it asks for, where it is bound and on which devices,
                        or, pending, the nodes it fits (best first) and why the others refuse it:
                        kube-scheduler's cordon, taint, node affinity, host port, resource,
                        volume, topology spread and pod (anti-)affinity filters first, then
                        the extender's

Usage and reasons are computed from the nodes' accelpool.io/inventory and the pods'
accelpool.io/assignment annotations by the extender's own code: what the extender
rebuilds after a restart. A difference from the running extender's metrics means
its cache has drifted.

flags:
  -n, --namespace=NS    explain: the pod's namespace (default: the kubeconfig context's
                        namespace, in a pod its own, else default); pods: only this one;
                        nodes and node refuse it (nodes have no namespace)
  -o, --output=FORMAT   text (default) or json
                        (-n and -o as kubectl takes them: -n NS, -nNS, -n=NS)
  --policy=NAME         explain: the extender's --policy (default accelpool); a pod's
                        accelpool.io/policy annotation wins, as in the extender
  --workload-configmap=NS/NAME
                        nodes: measure fragmentation against the extender's learned workload
                        in this ConfigMap (the chart's <release>-workload in the extender's
                        namespace) instead of the built-in mix
  --host-aware=BOOL     as the extender's --host-aware (default true): score and measure
                        each node's host CPU and memory left by its pods
  --kubeconfig=FILE     kubeconfig (default: the $KUBECONFIG list, merged as kubectl merges it,
                        else ~/.kube/config, else in-cluster);
                        users with a token, a client certificate or an exec credential plugin
  --context=NAME        the kubeconfig context (default: its current-context)
  -q, --quiet           no progress lines on stderr
)";

struct Flags {
  std::string command;
  std::string target;
  std::string ns;  // "" = not given
  std::string output = "text";
  std::string policy = "accelpool";
  std::string workload_configmap;  // "" = the built-in mix
  std::string kubeconfig;
  std::string context;
  bool quiet = false;
  bool host_aware = true;
};

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  // kubectl's short forms, then the long ones through the shared parser.
  std::vector<std::string> rest = {argv[0]};
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return Status(StatusCode::kCancelled, "");
    // A boolean flag takes its value after '=' only: "--host-aware false"
    // would read "false" as the command's argument.
    if ((a == "-q" || a == "--quiet" || a == "--host-aware") && i + 1 < argc &&
        (std::string(argv[i + 1]) == "true" || std::string(argv[i + 1]) == "false")) {
      const std::string name = a == "-q" ? "--quiet" : a;
      return InvalidArgumentError(a + " " + argv[i + 1] + ": a true/false flag takes its value " +
                                  "after '=': write " + name + "=" + argv[i + 1]);
    }
    if (a.size() >= 2 && a[0] == '-' && (a[1] == 'n' || a[1] == 'o')) {
      // kubectl's forms: -n NS, -nNS, -n=NS (and -o the same).
      const std::string flag = a.substr(0, 2);
      std::string value = a.substr(2);
      if (value.empty()) {
        if (i + 1 >= argc) return InvalidArgumentError(flag + " needs a value");
        value = argv[++i];
      } else if (value[0] == '=') {
        value = value.substr(1);
      }
      if (value.empty()) return InvalidArgumentError(flag + " needs a value");
      (flag == "-n" ? f.ns : f.output) = value;
    } else if (a == "-q") {
      f.quiet = true;
    } else if (a.rfind("-", 0) == 0) {
      rest.push_back(a);
      // "--name value": keep the value with its flag.
      if (a.find('=') == std::string::npos && a != "--quiet" && a != "--host-aware" &&
          i + 1 < argc && argv[i + 1][0] != '-') {
        rest.push_back(argv[++i]);
      }
    } else {
      positional.push_back(a);
    }
  }
  std::vector<const char*> cargv;
  for (const std::string& s : rest) cargv.push_back(s.c_str());
  ACCELPOOL_RETURN_IF_ERROR(ParseFlagTable(static_cast<int>(cargv.size()), cargv.data(),
                                           {{"namespace", &f.ns},
                                            {"output", &f.output},
                                            {"policy", &f.policy},
                                            {"workload-configmap", &f.workload_configmap},
                                            {"kubeconfig", &f.kubeconfig},
                                            {"context", &f.context}},
                                           {{"quiet", &f.quiet}, {"host-aware", &f.host_aware}}));
  if (positional.empty()) {
    return InvalidArgumentError("no command; use nodes, node, pods or explain");
  }
  f.command = positional[0];
  const bool bare = f.command == "nodes" || f.command == "pods";
  const size_t want = bare ? 1 : 2;
  if (!bare && f.command != "node" && f.command != "explain") {
    return InvalidArgumentError("unknown command \"" + f.command +
                                "\"; use nodes, node, pods or explain");
  }
  if (positional.size() != want) {
    return InvalidArgumentError(bare ? f.command + " takes no argument"
                                     : f.command + " takes one argument: " +
                                           (f.command == "node" ? "the node's name" : "[NS/]POD"));
  }
  if (want == 2) f.target = positional[1];
  if (f.command == "explain") {
    // An empty name would read the namespace's pod list as if it were a pod.
    const size_t slash = f.target.find('/');
    const bool ok = slash == std::string::npos
                        ? !f.target.empty()
                        : slash > 0 && slash + 1 < f.target.size() &&
                              f.target.find('/', slash + 1) == std::string::npos;
    if (!ok) {
      return InvalidArgumentError(
          "explain takes one argument: [NS/]POD, a pod's name with its "
          "namespace before a slash or in -n; not \"" +
          f.target + "\"");
    }
  }
  if (!f.workload_configmap.empty() && f.command != "nodes") {
    return InvalidArgumentError("--workload-configmap is for nodes only");
  }
  if (!f.ns.empty() && (f.command == "nodes" || f.command == "node")) {
    return InvalidArgumentError(
        "-n/--namespace is for pods and explain only; nodes have no "
        "namespace: leave it out");
  }
  if (f.output != "text" && f.output != "json") {
    return InvalidArgumentError("--output must be text or json, not \"" + f.output + "\"");
  }
  return f;
}

StatusOr<kube::KubeConfig> Config(const Flags& f) {
  if (!f.kubeconfig.empty()) return kube::LoadKubeconfig(f.kubeconfig, f.context);
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') {
    // A list is merged as kubectl merges it.
    return kube::LoadKubeconfigs(kube::SplitKubeconfigList(env), f.context);
  }
  const char* home = std::getenv("HOME");
  if (home != nullptr && std::filesystem::exists(std::string(home) + "/.kube/config")) {
    return kube::LoadKubeconfig(std::string(home) + "/.kube/config", f.context);
  }
  return kube::LoadDefault("", kube::ProcessEnv());
}

int Fail(const Status& s) {
  std::fprintf(stderr, "kubectl-accelpool: %s\n", s.ToString().c_str());
  return 1;
}

int Run(const Flags& f) {
  StatusOr<kube::KubeConfig> kc = Config(f);
  if (!kc.ok()) return Fail(kc.status().WithPrefix("kubernetes config"));
  StatusOr<std::unique_ptr<kube::KubeClient>> client = kube::NewKubeClient(*kc);
  if (!client.ok()) return Fail(client.status().WithPrefix("kubernetes client"));
  auto progress = [&f](const std::string& line) {
    if (!f.quiet) std::fprintf(stderr, "kubectl-accelpool: %s\n", line.c_str());
  };
  // explain: the pod first, so a mistyped name fails before the whole
  // cluster is read. Its namespace: NS/ in the argument, else -n, else the
  // kubeconfig context's (in a pod, its own), else default, as kubectl.
  nlohmann::json pod;
  if (f.command == "explain") {
    std::string ns = !f.ns.empty() ? f.ns : !kc->ns.empty() ? kc->ns : "default";
    std::string name = f.target;
    if (const size_t slash = name.find('/'); slash != std::string::npos) {
      ns = name.substr(0, slash);
      name = name.substr(slash + 1);
    }
    StatusOr<nlohmann::json> got = (*client)->Get(kube::Pods(), ns, name);
    if (!got.ok()) return Fail(got.status().WithPrefix("reading pod " + ns + "/" + name));
    pod = std::move(*got);
  }
  StatusOr<std::unique_ptr<ClusterView>> view =
      ClusterView::Load(**client, progress, ViewOptions{.host_aware = f.host_aware});
  if (!view.ok()) return Fail(view.status());
  auto make = [&]() -> StatusOr<Report> {
    if (f.command == "nodes") {
      ReportWorkload workload;
      if (!f.workload_configmap.empty()) {
        StatusOr<ReportWorkload> read = ReadWorkload(**client, f.workload_configmap);
        if (!read.ok()) return read.status();
        workload = std::move(*read);
      }
      return NodesReport(**view, workload);
    }
    if (f.command == "node") return NodeReport(**view, f.target);
    if (f.command == "pods") return PodsReport(**view, f.ns);
    // A bound pod is shown with its devices; nothing more to read.
    if (!kube::StringAt(pod, nlohmann::json::json_pointer("/spec/nodeName")).empty()) {
      return ExplainReport(**view, pod, f.policy);
    }
    // Pod affinity terms may select namespaces by label. Without the right
    // to list namespaces those terms are skipped, and the report says so.
    StatusOr<NamespaceLabels> namespaces = ListNamespaceLabels(**client);
    if (!namespaces.ok() && namespaces.status().code() != StatusCode::kPermissionDenied) {
      return namespaces.status();
    }
    // The pod's claims, their volumes and storage classes, and for claims
    // waiting for their first consumer what could serve them (a refusal
    // leaves them unjudged, said in the report).
    kube::KubeClient& api = **client;
    auto get = [&api](const std::string& kind, const std::string& in,
                      const std::string& obj) -> StatusOr<nlohmann::json> {
      if (kind == "persistentvolumeclaims") return api.Get(kube::PersistentVolumeClaims(), in, obj);
      if (kind == "persistentvolumes") return api.Get(kube::PersistentVolumes(), "", obj);
      if (kind == "csidrivers") return api.Get(kube::CsiDrivers(), "", obj);
      return api.Get(kube::StorageClasses(), "", obj);
    };
    // Each kind is listed once per run (the volumes serve both the waiting
    // claims and the attach limits); a failed list is not kept.
    std::map<std::string, std::vector<nlohmann::json>> listed;
    auto list = [&api, &progress,
                 &listed](const std::string& kind) -> StatusOr<std::vector<nlohmann::json>> {
      if (auto it = listed.find(kind); it != listed.end()) return it->second;
      const kube::Resource& r = kind == "persistentvolumes"        ? kube::PersistentVolumes()
                                : kind == "persistentvolumeclaims" ? kube::PersistentVolumeClaims()
                                : kind == "csinodes"               ? kube::CsiNodes()
                                : kind == "volumeattachments"      ? kube::VolumeAttachments()
                                                                   : kube::CsiStorageCapacities();
      progress("listing " + kind);
      kube::ListOptions o;
      if (kind == "persistentvolumeclaims") {
        // Every claim in the cluster: keep only what names its volume and class.
        o.keep = [](nlohmann::json& c) {
          nlohmann::json kept = {{"metadata", nlohmann::json::object()},
                                 {"spec", nlohmann::json::object()}};
          for (const char* field : {"name", "namespace", "annotations"}) {
            const nlohmann::json::json_pointer at(std::string("/metadata/") + field);
            if (c.contains(at)) kept["metadata"][field] = c[at];
          }
          for (const char* field : {"volumeName", "storageClassName"}) {
            const nlohmann::json::json_pointer at(std::string("/spec/") + field);
            if (c.contains(at)) kept["spec"][field] = c[at];
          }
          c = std::move(kept);
          return true;
        };
      }
      StatusOr<kube::ListResult> got = api.List(r, "", o);
      if (!got.ok()) return got.status();
      return listed[kind] = std::move(got->items);
    };
    PodVolumes volumes = PodVolumes::Read(pod, get, list);
    volumes.ReadVolumeLimits((*view)->uses(), get, list);
    volumes.NoteClaimsInUse((*view)->uses());
    ExplainInputs inputs;
    inputs.ns_labels = namespaces.ok() ? &*namespaces : nullptr;
    inputs.volumes = &volumes;
    return ExplainReport(**view, pod, f.policy, inputs);
  };
  StatusOr<Report> report = make();
  if (!report.ok()) return Fail(report.status());
  if (f.output == "json") {
    std::printf("%s\n", ReportJsonText(*report).c_str());
  } else {
    std::fputs(report->text.c_str(), stdout);
  }
  return 0;
}

}  // namespace
}  // namespace accelpool::ctl

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  accelpool::http::DisableDefaultCaPaths();
  auto flags = accelpool::ctl::ParseFlags(argc, argv);
  if (!flags.ok()) {
    return accelpool::FlagsExit(flags.status(), "kubectl-accelpool", accelpool::ctl::kUsage);
  }
  return accelpool::ctl::Run(*flags);
}
