// An in-process apiserver stand-in (kube::FakeApiServer) as its own process,
// so the device plugin binary can be measured with its Kubernetes side on
// (pod informer, allocation reporting, node inventory publishing) on a
// machine without a cluster. Used by bench/plugin/rss_kube.sh.
//
//   plugin_fake_apiserver --node=NAME --pods=N --kubeconfig=FILE
//
// Seeds the Node and N pending pods bound to it, each with an accelpool
// assignment for one share of one of the node's 16 fake NVIDIA GPUs, writes
// a kubeconfig pointing at itself, prints "ready <url>", and serves until
// SIGTERM or SIGINT. Then prints what the plugin published on the Node.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "api/assignment_codec.h"
#include "bench_pods.h"
#include "kube/fake_apiserver.h"

namespace {

using nlohmann::json;

std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(prefix, 0) == 0) {
      return a.substr(prefix.size());
    }
  }
  return def;
}

json Pod(const std::string& node, int i) {
  const std::string device = "NVIDIA-" + node + "-" + std::to_string(i % 16);
  return accelpool::bench::SharePod("pod-" + std::to_string(i), node, device, i % 16,
                                    accelpool::api::SlotId(device, (i / 16) % 10),
                                    "2026-11-30T02:00:00Z");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string node = Flag(argc, argv, "node", "n");
  const int pods = std::stoi(Flag(argc, argv, "pods", "160"));
  const std::string kubeconfig = Flag(argc, argv, "kubeconfig", "");
  if (kubeconfig.empty() || pods < 0) {
    std::cerr << "usage: plugin_fake_apiserver --node=NAME --pods=N --kubeconfig=FILE\n";
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before the server's threads start

  accelpool::kube::FakeApiServer api;
  if (auto st = api.Start(); !st.ok()) {
    std::cerr << "cannot start the fake apiserver: " << st.ToString() << "\n";
    return 1;
  }
  api.Put("/api/v1/nodes", {{"apiVersion", "v1"},
                            {"kind", "Node"},
                            {"metadata", {{"name", node}, {"uid", "uid-node"}}}});
  for (int i = 0; i < pods; ++i) {
    api.Put("/api/v1/namespaces/default/pods", Pod(node, i));
  }
  std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n"
                            << "  cluster:\n    server: " << api.url() << "\n"
                            << "users:\n- name: fake\n  user:\n    token: bench\n"
                            << "contexts:\n- name: fake\n  context:\n    cluster: fake\n"
                            << "    user: fake\ncurrent-context: fake\n";
  std::cout << "ready " << api.url() << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  auto n = api.Object("/api/v1/nodes", node);
  size_t inventory = 0;
  if (n && (*n)["metadata"].contains("annotations") &&
      (*n)["metadata"]["annotations"].contains("accelpool.io/inventory")) {
    inventory = (*n)["metadata"]["annotations"]["accelpool.io/inventory"].get<std::string>().size();
  }
  size_t watches = 0;
  size_t patches = 0;
  for (const std::string& r : api.Requests()) {
    watches += r.find("watch=") != std::string::npos ? 1 : 0;
    patches += r.rfind("PATCH", 0) == 0 ? 1 : 0;
  }
  std::cout << "node " << node << ": inventory annotation " << inventory << " bytes; requests "
            << api.Requests().size() << " (" << watches << " watches, " << patches << " patches)"
            << std::endl;
  api.Stop();
  return 0;
}
