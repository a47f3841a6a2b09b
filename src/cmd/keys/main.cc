// accelpool-keys: shows and rotates the assignment signing key set (the
// Secret the extender signs with and the device plugins verify with).
//
// Flags and output only; the steps are keys/key_rotation.h, the procedure
// docs/operations.md, "Rotating the assignment key".
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/flags.h"
#include "common/log.h"
#include "common/strings.h"
#include "http/http.h"
#include "keys/key_rotation.h"
#include "kube/client.h"
#include "kube/config.h"

namespace accelpool::keys {
namespace {

constexpr const char* kUsage = R"(usage: accelpool-keys status|rotate [flags]

  status    prints the key Secret's state: the keys, which one signs, the step
            of a rotation under way, the nodes that lack the newest key and
            the pods still signed with an old one
  rotate    rotates the key: adds a new key, switches signing to it once every
            node's device plugin holds it, drops the old keys once the extender
            signs with the new one and no pod awaiting admission is signed with
            them. Resumes a rotation under way instead of starting another.
            Exit status 0 when done; 1 with the reason when a wait timed out
            (the Secret stays at the step reached; run it again to resume)

flags:
  --namespace=NS            the key Secret's namespace (default: $POD_NAMESPACE, else the
                            service account's namespace, else accelpool-system)
  --secret=NAME             the key Secret (default accelpool-assignment-key: the chart's
                            <release>-assignment-key for release "accelpool")
  --kubeconfig=FILE         kubeconfig (default: $KUBECONFIG, a list merged, else in-cluster)
  --node-timeout=DURATION   rotate: how long the new key may take to reach every node (15m)
  --skip-not-ready          rotate: do not wait for nodes that are not Ready (by default they
                            are waited for like the others: a pod placed on one in the first
                            minutes after it is back may be refused for a key it lacks)
  --settle=DURATION         rotate: the least time between the switch and dropping the old
                            keys, for the extender to re-read the Secret (5m)
  --drain-timeout=DURATION  rotate: how long pods signed with an old key may wait for
                            admission after the switch (60m)
  --poll=DURATION           rotate: how often to look again while waiting (10s)
  --extender-lease=[NS/]NAME  rotate: the extender's leader Lease; the old keys are dropped only
                            once its leader reports signing with the new key (default
                            accelpool-extender in the Secret's namespace; none: not checked)
  --output=text|json        status: text for a person, or one JSON object for scripts (text)
  --log-level=LEVEL         trace|debug|info|warn|error (default info)
Durations are written like 90s, 15m or 1h30m.
)";

struct Flags {
  std::string command;
  std::string ns;
  std::string secret = "accelpool-assignment-key";
  std::string kubeconfig;
  std::string log_level = "info";
  std::string output = "text";
  std::string extender_lease = "accelpool-extender";
  RotationOptions rotation;
};

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    return Status(StatusCode::kCancelled, "");
  }
  Flags f;
  f.command = argv[1];
  if (f.command != "status" && f.command != "rotate") {
    return InvalidArgumentError("unknown command \"" + f.command + "\"; use status or rotate");
  }
  std::string node_timeout = "15m", settle = "5m", drain_timeout = "60m", poll = "10s";
  std::map<std::string, std::string*> strings = {
      {"namespace", &f.ns},         {"secret", &f.secret},
      {"kubeconfig", &f.kubeconfig}, {"log-level", &f.log_level},
      {"node-timeout", &node_timeout}, {"settle", &settle},
      {"drain-timeout", &drain_timeout}, {"poll", &poll}, {"output", &f.output},
      {"extender-lease", &f.extender_lease}};
  // The command takes argv[0]'s place: ParseFlagTable starts after it.
  ACCELPOOL_RETURN_IF_ERROR(ParseFlagTable(argc - 1, argv + 1, strings,
                                           {{"skip-not-ready", &f.rotation.skip_not_ready}}));
  const std::pair<const char*, std::pair<std::string*, std::chrono::seconds*>> durations[] = {
      {"node-timeout", {&node_timeout, &f.rotation.node_timeout}},
      {"settle", {&settle, &f.rotation.settle}},
      {"drain-timeout", {&drain_timeout, &f.rotation.drain_timeout}},
      {"poll", {&poll, &f.rotation.poll}}};
  for (const auto& [name, where] : durations) {
    StatusOr<std::chrono::seconds> d = ParseDurationFlag(name, *where.first);
    if (!d.ok()) return d.status();
    *where.second = *d;
  }
  if (f.rotation.poll.count() < 1) {
    return InvalidArgumentError("--poll must be at least 1s");
  }
  // A wait shorter than what it waits for fails at its first look.
  if (f.rotation.node_timeout < f.rotation.poll) {
    return InvalidArgumentError("--node-timeout=" + node_timeout + " is shorter than --poll=" +
                                poll + "; give the nodes at least one look");
  }
  if (f.rotation.drain_timeout < f.rotation.settle) {
    return InvalidArgumentError("--drain-timeout=" + drain_timeout + " is shorter than --settle=" +
                                settle + ": step 3 could never drop the old key; make it longer");
  }
  if (f.output != "text" && f.output != "json") {
    return InvalidArgumentError("--output must be text or json, not \"" + f.output + "\"");
  }
  if (f.secret.empty()) {
    return InvalidArgumentError("--secret must name the key Secret");
  }
  if (f.ns.empty()) {
    if (const char* env = std::getenv("POD_NAMESPACE"); env != nullptr && *env != '\0') {
      f.ns = env;
    } else if (std::ifstream in("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
               in && std::getline(in, f.ns) && !f.ns.empty()) {
    } else {
      f.ns = "accelpool-system";
    }
  }
  f.rotation.ns = f.ns;
  f.rotation.secret = f.secret;
  if (f.extender_lease != "none") {
    const size_t slash = f.extender_lease.find('/');
    f.rotation.lease_ns = slash == std::string::npos ? f.ns : f.extender_lease.substr(0, slash);
    f.rotation.lease_name =
        slash == std::string::npos ? f.extender_lease : f.extender_lease.substr(slash + 1);
    if (f.rotation.lease_ns.empty() || f.rotation.lease_name.empty() ||
        f.rotation.lease_name.find('/') != std::string::npos) {
      return InvalidArgumentError("--extender-lease=" + f.extender_lease +
                                  " must be NAME or NAMESPACE/NAME (or none)");
    }
  }
  return f;
}

std::string Join(const std::vector<std::string>& v) {
  return v.empty() ? "none" : StrJoin(v, ", ");
}

// The state as text, for a person at a terminal.
void PrintStatus(const RotationState& s, const Flags& f) {
  std::printf("secret %s/%s\n", f.ns.c_str(), f.secret.c_str());
  std::vector<std::string> ids;
  for (const auto& [id, key] : s.keys.keys) ids.push_back(id);
  std::printf("  keys:     %s\n  signing:  %s\n", Join(ids).c_str(), s.keys.signing.c_str());
  switch (s.phase) {
    case RotationPhase::kSteady:
      std::printf("  rotation: none under way\n");
      break;
    case RotationPhase::kAdded:
      std::printf("  rotation: step 1 of 3 done (key %s added; %s still signs)\n", s.newest.c_str(),
                  s.keys.signing.c_str());
      break;
    case RotationPhase::kSwitched:
      std::printf("  rotation: step 2 of 3 done (%s signs since %s; older keys still accepted)\n",
                  s.keys.signing.c_str(),
                  s.switched_at.empty() ? "an unrecorded time" : s.switched_at.c_str());
      break;
  }
  std::printf("nodes whose device plugin reports its keys: %zu", s.node_keys.size());
  if (!s.not_ready.empty()) {
    std::printf(", not Ready without key %s: %s (%s)", s.newest.c_str(), Join(s.not_ready).c_str(),
                f.rotation.skip_not_ready ? "not waited for" : "waited for");
  }
  std::printf("\n");
  if (!s.no_plugin.empty()) {
    std::printf(
        "nodes that report keys but run no device-plugin pod (not waited for; clear with "
        "kubectl annotate node NAME accelpool.io/assignment-keys-): %s\n",
        Join(s.no_plugin).c_str());
  }
  if (s.plugins_unseen) {
    std::printf(
        "no device-plugin pod (%s) in namespace %s: every node that reports keys is "
        "waited for\n",
        kPluginPodSelector, f.ns.c_str());
  }
  const std::vector<std::string> missing = s.NodesWithout(s.newest);
  std::printf("  without key %s: %s\n", s.newest.c_str(), Join(missing).c_str());
  if (!s.unreported.empty()) {
    std::printf("nodes with an accelpool inventory that report no keys (signing off there, or "
                "an older plugin): %s\n",
                Join(s.unreported).c_str());
  }
  if (s.phase == RotationPhase::kSwitched) {
    std::printf("the extender's leader signs with: %s\n",
                s.leader_signs.empty() ? "(not reported)" : s.leader_signs.c_str());
    std::printf("pods awaiting admission signed with an old key: %s\n",
                Join(s.pods_with_old_keys).c_str());
  }
}

// The state as one JSON object (keys by id only, never their bytes).
void PrintStatusJson(const RotationState& s, const Flags& f) {
  nlohmann::json j;
  j["namespace"] = f.ns;
  j["secret"] = f.secret;
  j["signing"] = s.keys.signing;
  j["keys"] = nlohmann::json::array();
  for (const auto& [id, key] : s.keys.keys) j["keys"].push_back(id);
  j["phase"] = RotationPhaseName(s.phase);
  j["newest"] = s.newest;
  j["switched_at"] = s.switched_at;
  j["nodes_reporting"] = s.node_keys.size();
  j["nodes_without_newest"] = s.NodesWithout(s.newest);
  j["nodes_not_ready"] = s.not_ready;
  j["nodes_unreported"] = s.unreported;
  j["nodes_no_plugin"] = s.no_plugin;
  j["plugins_unseen"] = s.plugins_unseen;
  j["pods_with_old_keys"] = s.pods_with_old_keys;
  j["leader_signs"] = s.leader_signs;
  std::printf("%s\n", j.dump().c_str());
}

int Run(const Flags& f) {
  LogOptions lo;
  lo.level = f.log_level;
  StatusOr<Logger> root = NewLogger("accelpool-keys", lo);
  if (!root.ok()) {
    std::fprintf(stderr, "accelpool-keys: %s\n", root.status().ToString().c_str());
    return 2;
  }
  StatusOr<kube::KubeConfig> kc = kube::LoadDefault(f.kubeconfig, kube::ProcessEnv());
  if (!kc.ok()) {
    std::fprintf(stderr, "accelpool-keys: kubernetes config: %s\n", kc.status().ToString().c_str());
    return 1;
  }
  StatusOr<std::unique_ptr<kube::KubeClient>> client = kube::NewKubeClient(*kc);
  if (!client.ok()) {
    std::fprintf(stderr, "accelpool-keys: kubernetes client: %s\n",
                 client.status().ToString().c_str());
    return 1;
  }
  KeyRotation rotation(client->get(), f.rotation, root->Child("rotation"));
  if (f.command == "status") {
    StatusOr<RotationState> s = rotation.Read();
    if (!s.ok()) {
      std::fprintf(stderr, "accelpool-keys: %s\n", s.status().ToString().c_str());
      return 1;
    }
    if (f.output == "json") {
      PrintStatusJson(*s, f);
    } else {
      PrintStatus(*s, f);
    }
    return 0;
  }
  Status st = rotation.Rotate();
  if (!st.ok()) {
    root->Error("key rotation stopped", {{"error", st.ToString()}});
    std::fprintf(stderr, "accelpool-keys: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace accelpool::keys

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  accelpool::http::DisableDefaultCaPaths();
  auto flags = accelpool::keys::ParseFlags(argc, argv);
  if (!flags.ok()) {
    return accelpool::FlagsExit(flags.status(), "accelpool-keys", accelpool::keys::kUsage);
  }
  return accelpool::keys::Run(*flags);
}
