// accelpool-extender: kube-scheduler extender and pod admission webhook.
//
// Flags, wiring and lifecycle only; see docs/extender.md. SIGTERM or SIGINT
// stops serving gracefully (in-flight requests finish, watches close).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "api/task_priority.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "core/policy.h"
#include "extender/ca_injector.h"
#include "extender/cache.h"
#include "extender/extender.h"
#include "extender/handlers.h"
#include "extender/kube_adapters.h"
#include "extender/leader.h"
#include "extender/pod_load.h"
#include "extender/server.h"
#include "extender/webhook.h"
#include "http/http.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/informer.h"

namespace accelpool::extender {
namespace {

constexpr const char* kUsage = R"(usage: accelpool-extender [flags]
  --listen=HOST:PORT        address to serve on (default 0.0.0.0:8888; ":PORT" is every address,
                            IPv6 and IPv4, or IPv4 alone where the node has no IPv6)
  --shutdown-delay=DUR      on SIGTERM, answer /readyz not ready and go on serving this long before
                            stopping, so that the apiserver and kube-scheduler stop calling a
                            replica that is going away (default 0s; the chart sets 10s)
  --managed-resources=LIST  comma-separated resource names kube-scheduler sends to the extender
                            (its extender config's managedResources); the webhook refuses a pod
                            that asks for another accelpool resource, which kube-scheduler would
                            bind without an assignment (default empty: not checked)
  --high-priority-namespaces=LIST
                            comma-separated namespaces whose pods may ask for high task priority
                            (nvidia.com/priority: 0), which holds the kernel launches of the other
                            containers on their GPU; the webhook refuses a pod of another namespace
                            that asks. "*" is every namespace (HAMi's behaviour, for a cluster of
                            one tenant); give the device plugin the same list (default empty: none)
  --tls-cert=FILE           PEM certificate; with --tls-key serves HTTPS (reloaded on change)
  --tls-key=FILE            PEM private key
  --client-ca=FILE          require client certificates signed by this CA
  --client-cert-optional    with --client-ca: also serve clients without a certificate (the
                            apiserver calling the webhook, Prometheus); one they present must
                            still be signed by --client-ca, and the scheduler verbs still need
                            loopback or a verified certificate (default off)
  --kubeconfig=FILE         kubeconfig; default: $KUBECONFIG (a list is merged), then in-cluster
  --policy=NAME             binpack|spread|topology|fragmentation|accelpool (default accelpool)
  --node-policy=NAME        the policy that scores nodes for pods naming none of their own,
                            while --policy picks their devices (default: --policy does both)
  --scheduler-name=NAME     scheduler pods are routed to (default accelpool-scheduler)
  --host-pods-scheduler-name=NAME
                            scheduler profile /mutate-host-pods routes pods that ask for no
                            device to (default accelpool-scheduler-hosts; the chart's
                            webhook.hostPods profile, with kube-scheduler's scores on)
  --leader-elect            elect among replicas with Lease accelpool-extender; only the
                            leader binds, followers report not ready (a standalone extender
                            behind a Service) (default off)
  --scheduler-lease=[NS/]NAME
                            lead while the kube-scheduler in this pod holds its Lease NAME
                            (its leaderElection.resourceName; NS defaults to --lease-namespace);
                            only then bind; followers stay ready. The active replica also
                            writes Lease accelpool-extender (the key it signs with) (default off)
  --lease-namespace=NS      namespace of the Lease (default kube-system)
  --log-level=LEVEL         trace|debug|info|warn|error (default info)
  --filter-threads=N        threads per filter call of 512+ nodes, at most 64 (default: 1 on
                            up to two cores, else one per core, at most 4)
  --max-body-bytes=N        largest request body (default 67108864)
  --max-connections=N       open client connections per listener; at the cap the one idle
                            longest is closed for a new one, and with none idle the new one
                            gets 503 (default 1024: kube-scheduler holds one per bind in flight)
  --tie-break-salt=N        salt of the stable order among equal scores; choose once per
                            deployment and keep it (default 0)
  --kube-api-qps=N          apiserver requests per second for watches and bindings (default 100)
  --kube-api-burst=N        requests allowed above the rate in a burst (default 200)
  --event-qps=N             pod Events per second, on their own budget so they never delay a
                            binding (default 20; burst twice that)
  --kube-api-connections=N  apiserver requests in flight at once, one kept-alive connection
                            each (default 64; watches have their own)
  --kube-api-transport=T    sockets (requests on the calling thread over kept-alive
                            connections) or cpprestsdk (its asynchronous client) (default sockets)
  --scheduler-listen=HOST:PORT
                            also serve filter/prioritize/bind/preempt (and /healthz, /readyz,
                            /metrics) over plain HTTP on this loopback address, for a
                            kube-scheduler in the same pod (default off)
  --scheduler-verbs-from-any
                            serve filter/prioritize/bind/preempt on --listen to any peer; by
                            default only to loopback peers and clients with a certificate
                            signed by --client-ca (bind writes Bindings with the extender's
                            own credentials) (default off)
  --webhook-allow-device-env
                            admit pods that set, in their own env, the variables the device
                            plugin applies a grant through (ACCELPOOL_CUDA_*, HAMi's and MPS's
                            limits, NVIDIA_VISIBLE_DEVICES, ...); they win over the plugin's, so
                            such a pod can lift its cap or pick other devices (default off:
                            refused with the name)
  --webhook-refuse-oversized
                            refuse a pod that asks for more devices than the largest node of its
                            vendor has, or more memory than its largest device (default off: it is
                            admitted with a warning and waits, pending, for such a node, which a
                            cluster autoscaler adds only for pending pods)
  --assignment-key-dir=DIR  sign every assignment it binds with the key set in DIR (the chart's
                            key Secret: "signing" names the key id, one file per key); device
                            plugins given the same keys refuse assignments that do not verify
                            (default off: unsigned)
  --webhook-ca-bundle=NAME  keep the caBundle of MutatingWebhookConfiguration NAME equal to
                            --webhook-ca-file (checked every minute; with a leader election
                            only the active replica writes) (default off)
  --webhook-ca-file=FILE    PEM CA of the serving certificate (the TLS Secret's ca.crt)
  --host-aware=BOOL         score each node's free host CPU and memory (its allocatable less the
                            requests of every pod bound there), so devices are not stranded on
                            nodes whose CPU or memory is gone; watches every pod, each kept as
                            a summary of about 1.5 KiB (default true)
  --learn-workload=BOOL     score fragmentation against the mix of pods the cluster runs, learned
                            from every pod that arrives (DaemonSet and static pods excepted),
                            instead of a built-in mix (default true)
  --workload-window=N       arrivals the learned mix is drawn from, newest first (default 2048)
  --workload-refresh=DUR    how often the policies take up the learned mix (default 30s)
  --workload-configmap=[NS/]NAME
                            keep the learned mix in this ConfigMap (NS defaults to
                            --lease-namespace): read back at start, so a restarted or new
                            replica scores with it at once and counts no running pod twice;
                            written by the active replica after each refresh in which pods
                            arrived (needs get and patch on it, create if it does not exist)
                            (default off; the chart sets <release>-workload)
  --pick-in-filter          filter answers only the node prioritize would rank first, so
                            kube-scheduler skips scoring and the prioritize call; use it with a
                            profile whose score plugins are off (the chart's) (default off)
)";

// The most threads one filter call may start (--filter-threads).
constexpr long long kMaxFilterThreads = 64;

struct Flags {
  std::string listen = "0.0.0.0:8888";
  std::string scheduler_listen;  // "" = off
  std::string tls_cert, tls_key, client_ca, kubeconfig;
  std::string policy = "accelpool";
  std::string node_policy;
  std::string scheduler_name = "accelpool-scheduler";
  std::string host_pods_scheduler_name = "accelpool-scheduler-hosts";
  bool leader_elect = false;
  std::string scheduler_lease;  // "[NS/]NAME" of kube-scheduler's Lease; "" = off
  bool pick_in_filter = false;
  bool scheduler_verbs_from_any = false;
  bool client_cert_optional = false;
  bool webhook_allow_device_env = false;
  bool webhook_refuse_oversized = false;
  bool host_aware = true;
  bool learn_workload = true;
  size_t workload_window = 2048;
  std::chrono::seconds workload_refresh{30};
  std::chrono::seconds shutdown_delay{0};
  std::vector<std::string> managed_resources;  // "" = not checked
  api::HighPriorityNamespaces high_priority_namespaces;  // default: none
  std::string workload_configmap;  // "[NS/]NAME"; "" = the learned mix is not kept
  std::string lease_namespace = "kube-system";
  std::string log_level = "info";
  int filter_threads = 0;
  size_t max_body_bytes = 64 << 20;
  int max_connections = 1024;
  uint64_t tie_salt = 0;
  int kube_api_qps = 100;
  int kube_api_burst = 200;
  int event_qps = 20;
  int kube_api_connections = 64;
  std::string kube_api_transport = "sockets";
  std::string assignment_key_dir;  // "" = assignments are not signed
  std::string webhook_ca_bundle;   // MutatingWebhookConfiguration whose caBundle we keep; "" = off
  std::string webhook_ca_file;
};

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::map<std::string, std::string*> strings = {
      {"listen", &f.listen},
      {"scheduler-listen", &f.scheduler_listen},
      {"tls-cert", &f.tls_cert},
      {"tls-key", &f.tls_key},
      {"client-ca", &f.client_ca},
      {"kubeconfig", &f.kubeconfig},
      {"policy", &f.policy},
      {"node-policy", &f.node_policy},
      {"scheduler-name", &f.scheduler_name},
      {"host-pods-scheduler-name", &f.host_pods_scheduler_name},
      {"lease-namespace", &f.lease_namespace},
      {"scheduler-lease", &f.scheduler_lease},
      {"log-level", &f.log_level},
      {"kube-api-transport", &f.kube_api_transport},
      {"assignment-key-dir", &f.assignment_key_dir},
      {"webhook-ca-bundle", &f.webhook_ca_bundle},
      {"webhook-ca-file", &f.webhook_ca_file},
      {"workload-configmap", &f.workload_configmap}};
  std::string filter_threads, max_body_bytes, tie_salt, api_qps, api_burst, event_qps,
      api_connections, max_connections, workload_window, workload_refresh, shutdown_delay,
      managed_resources, high_priority_namespaces;
  strings["high-priority-namespaces"] = &high_priority_namespaces;
  strings["workload-window"] = &workload_window;
  strings["workload-refresh"] = &workload_refresh;
  strings["shutdown-delay"] = &shutdown_delay;
  strings["managed-resources"] = &managed_resources;
  strings["filter-threads"] = &filter_threads;
  strings["kube-api-qps"] = &api_qps;
  strings["kube-api-burst"] = &api_burst;
  strings["event-qps"] = &event_qps;
  strings["kube-api-connections"] = &api_connections;
  strings["max-connections"] = &max_connections;
  strings["max-body-bytes"] = &max_body_bytes;
  strings["tie-break-salt"] = &tie_salt;
  ACCELPOOL_RETURN_IF_ERROR(
      ParseFlagTable(argc, argv, strings,
                     {{"leader-elect", &f.leader_elect},
                      {"pick-in-filter", &f.pick_in_filter},
                      {"scheduler-verbs-from-any", &f.scheduler_verbs_from_any},
                      {"client-cert-optional", &f.client_cert_optional},
                      {"host-aware", &f.host_aware},
                      {"learn-workload", &f.learn_workload},
                      {"webhook-allow-device-env", &f.webhook_allow_device_env},
                      {"webhook-refuse-oversized", &f.webhook_refuse_oversized}}));
  auto positive = [](const std::string& name, const std::string& value) -> StatusOr<long long> {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(value.c_str(), &end, 10);
    // ERANGE: past long long, which strtoll would clamp to its largest.
    if (end == value.c_str() || *end != '\0' || n <= 0 || errno == ERANGE) {
      return InvalidArgumentError("--" + name + " must be a positive integer, got " + value);
    }
    return n;
  };
  if (!workload_window.empty()) {
    StatusOr<long long> n = positive("workload-window", workload_window);
    ACCELPOOL_RETURN_IF_ERROR(n.status());
    if (*n > 1000000) {
      return InvalidArgumentError("--workload-window must be at most 1000000, got " +
                                  workload_window);
    }
    f.workload_window = static_cast<size_t>(*n);
  }
  if (!workload_refresh.empty()) {
    StatusOr<std::chrono::seconds> d = ParseDurationFlag("workload-refresh", workload_refresh);
    ACCELPOOL_RETURN_IF_ERROR(d.status());
    if (d->count() <= 0) {
      return InvalidArgumentError("--workload-refresh must be at least 1s, got " +
                                  workload_refresh);
    }
    f.workload_refresh = *d;
  }
  if (!shutdown_delay.empty()) {
    StatusOr<std::chrono::seconds> d = ParseDurationFlag("shutdown-delay", shutdown_delay);
    ACCELPOOL_RETURN_IF_ERROR(d.status());
    if (d->count() < 0 || d->count() > 600) {
      return InvalidArgumentError("--shutdown-delay must be 0s..10m, got " + shutdown_delay);
    }
    f.shutdown_delay = *d;
  }
  StatusOr<api::HighPriorityNamespaces> high =
      api::HighPriorityNamespaces::Parse(high_priority_namespaces);
  ACCELPOOL_RETURN_IF_ERROR(high.status());
  f.high_priority_namespaces = *high;
  for (size_t start = 0; start < managed_resources.size();) {
    size_t comma = managed_resources.find(',', start);
    if (comma == std::string::npos) comma = managed_resources.size();
    const std::string name = managed_resources.substr(start, comma - start);
    if (name.empty()) {
      return InvalidArgumentError("--managed-resources has an empty name: " + managed_resources);
    }
    f.managed_resources.push_back(name);
    start = comma + 1;
  }
  if (!filter_threads.empty()) {
    StatusOr<long long> n = positive("filter-threads", filter_threads);
    ACCELPOOL_RETURN_IF_ERROR(n.status());
    // Every filter call of 512+ nodes starts this many threads.
    if (*n > kMaxFilterThreads) {
      return InvalidArgumentError("--filter-threads must be at most " +
                                  std::to_string(kMaxFilterThreads) + ", got " + filter_threads);
    }
    f.filter_threads = static_cast<int>(*n);
  }
  for (auto [name, text, out] : {std::tuple{"kube-api-qps", &api_qps, &f.kube_api_qps},
                                 std::tuple{"kube-api-burst", &api_burst, &f.kube_api_burst},
                                 std::tuple{"event-qps", &event_qps, &f.event_qps},
                                 std::tuple{"kube-api-connections", &api_connections,
                                            &f.kube_api_connections},
                                 std::tuple{"max-connections", &max_connections,
                                            &f.max_connections}}) {
    if (text->empty()) continue;
    StatusOr<long long> n = positive(name, *text);
    ACCELPOOL_RETURN_IF_ERROR(n.status());
    if (*n > 100000) {
      return InvalidArgumentError(std::string("--") + name + " must be at most 100000, got " + *text);
    }
    *out = static_cast<int>(*n);
  }
  if (StatusOr<http::ClientOptions::Transport> t = http::ParseTransport(f.kube_api_transport);
      !t.ok()) {
    return InvalidArgumentError("--kube-api-transport: " + t.status().message());
  }
  if (!max_body_bytes.empty()) {
    StatusOr<long long> n = positive("max-body-bytes", max_body_bytes);
    ACCELPOOL_RETURN_IF_ERROR(n.status());
    f.max_body_bytes = static_cast<size_t>(*n);
  }
  if (!tie_salt.empty()) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(tie_salt.c_str(), &end, 10);
    // Digits only: strtoull would take " -1" as its largest value, and clamp
    // one past it to the same.
    if (tie_salt.find_first_not_of("0123456789") != std::string::npos || end == tie_salt.c_str() ||
        *end != '\0' || errno == ERANGE) {
      return InvalidArgumentError("--tie-break-salt must be a non-negative integer, got " + tie_salt);
    }
    f.tie_salt = n;
  }
  // "--scheduler-name=" would select no pod (every pod has a scheduler name)
  // and the webhook would route pods to none.
  for (auto [name, value] : {std::pair{"scheduler-name", &f.scheduler_name},
                             std::pair{"host-pods-scheduler-name", &f.host_pods_scheduler_name},
                             std::pair{"lease-namespace", &f.lease_namespace}}) {
    if (value->empty()) {
      return InvalidArgumentError(std::string("--") + name + " must not be empty; leave it out " +
                                  "for its default");
    }
  }
  // A policy name is checked before anything starts (the extender checks
  // them again when it builds them).
  for (auto [name, value] :
       {std::pair{"policy", &f.policy}, std::pair{"node-policy", &f.node_policy}}) {
    const std::vector<std::string>& known = core::PolicyNames();
    if ((name == std::string("policy") || !value->empty()) &&
        std::find(known.begin(), known.end(), *value) == known.end()) {
      std::string valid;
      for (const std::string& k : known) valid += (valid.empty() ? "" : ", ") + k;
      return InvalidArgumentError(std::string("--") + name + "=" + *value +
                                  " names no policy; use one of " + valid);
    }
  }
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return InvalidArgumentError("--tls-cert and --tls-key go together; give both or neither");
  }
  if (!f.client_ca.empty() && f.tls_cert.empty()) {
    return InvalidArgumentError("--client-ca needs --tls-cert and --tls-key");
  }
  if (f.client_cert_optional && f.client_ca.empty()) {
    return InvalidArgumentError(
        "--client-cert-optional needs --client-ca (the CA a certificate, when given, is checked "
        "against)");
  }
  if (f.webhook_ca_bundle.empty() != f.webhook_ca_file.empty()) {
    return InvalidArgumentError(
        "--webhook-ca-bundle and --webhook-ca-file go together; give both or neither");
  }
  if (f.leader_elect && !f.scheduler_lease.empty()) {
    return InvalidArgumentError(
        "--leader-elect and --scheduler-lease choose the active replica in two different ways; "
        "give --scheduler-lease for an extender beside kube-scheduler in one pod, --leader-elect "
        "for a standalone one");
  }
  for (auto [name, value] : {std::pair{"scheduler-lease", &f.scheduler_lease},
                             std::pair{"workload-configmap", &f.workload_configmap}}) {
    if (value->empty()) continue;
    const size_t slash = value->find('/');
    const bool ok = slash == std::string::npos
                        ? true
                        : slash > 0 && slash + 1 < value->size() &&
                              value->find('/', slash + 1) == std::string::npos;
    if (!ok) {
      return InvalidArgumentError(std::string("--") + name +
                                  " must be NAME or NAMESPACE/NAME, got " + *value);
    }
  }
  return f;
}

// "[NS/]NAME" as (namespace, name), NS defaulting to `ns`.
std::pair<std::string, std::string> SplitNamespaced(const std::string& ref, const std::string& ns) {
  const size_t slash = ref.find('/');
  if (slash == std::string::npos) return {ns, ref};
  return {ref.substr(0, slash), ref.substr(slash + 1)};
}

StatusOr<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("--listen must be HOST:PORT, got " + listen);
  }
  const std::string port = listen.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
    return InvalidArgumentError("--listen port must be 0..65535, got " + port);
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:8889: the resolver takes the bare address
  }
  // ":PORT" is every address, IPv6 and IPv4 (http::ServerOptions::host).
  return std::make_pair(host, static_cast<uint16_t>(p));
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

int Run(const Flags& flags) {
  LogOptions lo;
  lo.level = flags.log_level;
  StatusOr<Logger> root = NewLogger("accelpool-extender", lo);
  if (!root.ok()) {
    std::fprintf(stderr, "accelpool-extender: %s\n", root.status().ToString().c_str());
    return 2;
  }
  Logger log = *root;
  auto fatal = [&](std::string_view what, const Status& st) {
    log.Error(what, {{"error", st.ToString()}});
    // Said on stderr too: with --log-level=off the exit would be silent.
    std::fprintf(stderr, "accelpool-extender: %.*s: %s\n", static_cast<int>(what.size()),
                 what.data(), st.ToString().c_str());
    return 1;
  };
  StatusOr<std::pair<std::string, uint16_t>> addr = SplitHostPort(flags.listen);
  if (!addr.ok()) return fatal("bad --listen", addr.status());
  std::optional<std::pair<std::string, uint16_t>> sched_addr;
  if (!flags.scheduler_listen.empty()) {
    StatusOr<std::pair<std::string, uint16_t>> a = SplitHostPort(flags.scheduler_listen);
    if (!a.ok()) {
      return fatal("bad --scheduler-listen",
                   InvalidArgumentError("--scheduler-listen must be HOST:PORT, got " +
                                        flags.scheduler_listen));
    }
    if (!IsLoopback(a->first)) {
      return fatal("bad --scheduler-listen",
                   InvalidArgumentError("--scheduler-listen serves without TLS, so it only binds a "
                                        "loopback address (127.0.0.1 or ::1), got " + a->first +
                                        "; use --listen with --tls-cert for other addresses"));
    }
    sched_addr = *a;
  }
  StatusOr<kube::KubeConfig> kc = kube::LoadDefault(flags.kubeconfig, kube::ProcessEnv());
  if (!kc.ok()) return fatal("no Kubernetes configuration", kc.status());
  kc->qps = flags.kube_api_qps;
  kc->burst = flags.kube_api_burst;
  kc->max_connections = static_cast<size_t>(flags.kube_api_connections);
  kc->transport = flags.kube_api_transport;
  // Declared before the clients that count into it, so it outlives them.
  MetricsRegistry registry;
  kc->metrics = &registry;
  StatusOr<std::unique_ptr<kube::KubeClient>> client = kube::NewKubeClient(*kc);
  if (!client.ok()) return fatal("Kubernetes client", client.status());
  // Events get their own client and token bucket: a burst of failures must
  // not queue the bindings behind its Events.
  kube::KubeConfig event_kc = *kc;
  event_kc.qps = flags.event_qps;
  event_kc.burst = 2 * flags.event_qps;
  event_kc.metrics_client = "events";
  StatusOr<std::unique_ptr<kube::KubeClient>> event_client = kube::NewKubeClient(event_kc);
  if (!event_client.ok()) return fatal("Kubernetes client for events", event_client.status());
  // A filter's reads (a node with cordoned devices, the pods of a busy node)
  // get their own client too, with a short timeout: a filter must answer
  // within kube-scheduler's extender timeout even when the apiserver is slow.
  kube::KubeConfig read_kc = *kc;
  read_kc.qps = 10;
  read_kc.burst = 10;
  read_kc.timeout = ExtenderOptions{}.read_budget;
  read_kc.max_connections = 4;
  read_kc.metrics_client = "reads";
  StatusOr<std::unique_ptr<kube::KubeClient>> read_client = kube::NewKubeClient(read_kc);
  if (!read_client.ok()) return fatal("Kubernetes client for filter reads", read_client.status());

  Cache cache;
  StatusOr<ExtenderMetrics> metrics = ExtenderMetrics::Register(registry);
  if (!metrics.ok()) return fatal("metrics", metrics.status());
  std::unique_ptr<api::AssignmentKeyRing> keys;
  if (!flags.assignment_key_dir.empty()) {
    StatusOr<std::unique_ptr<api::AssignmentKeyRing>> ring =
        api::AssignmentKeyRing::Open(flags.assignment_key_dir);
    if (!ring.ok()) return fatal("--assignment-key-dir", ring.status());
    keys = std::move(ring).value();
    keys->OnReloadError([log, errors = metrics->key_reload_errors](const Status& st) {
      log.Warn("re-reading the assignment keys failed; keeping the keys read before",
               {{"error", st.ToString()}});
      errors->Get().Inc();
    });
    log.Info("signing assignments",
             {{"key_dir", flags.assignment_key_dir}, {"signing_key", keys->SigningKeyId()}});
  } else {
    log.Warn(
        "assignments are not signed (no --assignment-key-dir): device plugins cannot tell "
        "an assignment edited by hand from the extender's",
        {});
  }
  KubePodWriter writer(**client, cache, keys.get());
  AsyncEvents events(**event_client, log.Child("events"));
  ExtenderOptions eo;
  eo.rank.tie_salt = flags.tie_salt;
  eo.policy = flags.policy;
  eo.node_policy = flags.node_policy;
  eo.filter_threads = flags.filter_threads;
  eo.pick_in_filter = flags.pick_in_filter;
  // Nodes first, so pods find their node's inventory when they arrive.
  CacheFeeder feeder(cache, log.Child("cache"), &*metrics);
  // A pod that finds no node re-reads the nodes that turned it away for
  // cordoned or unhealthy devices, and nodes not cached yet (each at most
  // every 2 s, 5 reads a second in all): kube-scheduler retries it on the
  // Node update a moment before the node informer below delivers it.
  NodeRefresher refresher(**read_client, feeder, std::chrono::seconds(2), log.Child("cache"));
  eo.refresh_node = [&refresher](const std::string& node) { return refresher.Refresh(node); };
  // A pod that finds no node re-reads the pods of a few nodes that turned it
  // away only for devices held (at most every 2 s per node, 5 reads a second
  // in all): kube-scheduler retries it on another pod's deletion a moment
  // before the pod informer below delivers that deletion.
  PodRechecker rechecker(**read_client, cache, flags.scheduler_name, std::chrono::seconds(2), 5.0,
                         log.Child("cache"));
  eo.recheck_pods = [&rechecker](const std::string& node) { return rechecker.Recheck(node); };
  StatusOr<std::unique_ptr<Extender>> ext =
      Extender::Create(cache, eo, &writer, &events, &*metrics, log.Child("extender"));
  if (!ext.ok()) return fatal("bad --policy or --node-policy", ext.status());

  kube::InformerOptions node_options;
  node_options.resource = kube::Nodes();
  kube::Informer nodes(**client, node_options, feeder.NodeHandlers(), log.Child("nodes"));
  kube::InformerOptions pod_options;
  pod_options.resource = kube::Pods();
  pod_options.field_selector = "spec.schedulerName=" + flags.scheduler_name;
  kube::Informer pods(**client, pod_options, feeder.PodHandlers(), log.Child("pods"));
  // Every pod, as a summary: host requests per node and the workload's mix.
  PodLoadOptions plo;
  plo.host = flags.host_aware;
  plo.learn = flags.learn_workload;
  plo.learner.window = flags.workload_window;
  plo.refresh = flags.workload_refresh;
  PodLoad pod_load(cache, plo, &*metrics, log.Child("workload"));
  std::unique_ptr<kube::Informer> all_pods;
  if (flags.host_aware || flags.learn_workload) {
    kube::InformerOptions all_options;
    all_options.resource = kube::Pods();
    all_options.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
    all_options.transform = &PodLoad::Trim;
    all_pods = std::make_unique<kube::Informer>(**client, all_options, pod_load.Handlers(),
                                                log.Child("all-pods"));
  }
  cache.TrackHost(flags.host_aware);
  // The learned mix a predecessor kept, read before the pods are listed so
  // that those it counted are not counted again.
  std::unique_ptr<WorkloadStore> workload_store;
  if (flags.learn_workload && !flags.workload_configmap.empty()) {
    auto [ns, name] = SplitNamespaced(flags.workload_configmap, flags.lease_namespace);
    workload_store = std::make_unique<WorkloadStore>(**client, ns, name);
    pod_load.SetStore(workload_store.get(), nullptr);
    (void)pod_load.Restore();  // logged; the learner then starts empty
  }
  nodes.Start();
  pods.Start();
  if (all_pods) all_pods->Start();

  std::unique_ptr<LeaderElector> leader;
  if (flags.leader_elect || !flags.scheduler_lease.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    LeaderOptions lopt;
    lopt.ns = flags.lease_namespace;
    lopt.identity = std::string(host) + "-" + std::to_string(getpid());
    if (!flags.scheduler_lease.empty()) {
      std::tie(lopt.scheduler_lease_ns, lopt.scheduler_lease_name) =
          SplitNamespaced(flags.scheduler_lease, flags.lease_namespace);
      lopt.host = host;
    }
    if (keys != nullptr) {
      // The key the leader signs with, on its Lease: a key rotation drops the
      // old key only once the leader has switched (docs/operations.md).
      lopt.signing_key = [ring = keys.get()] { return ring->CurrentSigningKeyId(); };
    }
    leader = std::make_unique<LeaderElector>(**client, lopt, log.Child("leader"));
    leader->Start();
  }
  if (workload_store && leader) {
    // Only the active replica writes the learned mix.
    pod_load.SetStore(workload_store.get(), [&leader] { return leader->IsLeader(); });
  }
  pod_load.Start(**ext);
  GaugeFamily* const leading = *registry.AddGauge(
      "accelpool_extender_leader",
      "1 while this replica may bind (it leads, or no leader election is configured), else 0", {});
  std::unique_ptr<CaInjector> ca_injector;
  GaugeFamily* ca_current = nullptr;
  if (!flags.webhook_ca_bundle.empty()) {
    CaInjectorOptions co;
    co.webhook = flags.webhook_ca_bundle;
    co.ca_file = flags.webhook_ca_file;
    if (leader) co.may_write = [&leader] { return leader->IsLeader(); };
    CounterFamily* const writes = *registry.AddCounter(
        "accelpool_extender_webhook_ca_writes_total",
        "Writes of the webhook's caBundle from --webhook-ca-file, by result (written|failed).",
        {"result"});
    ca_current = *registry.AddGauge(
        "accelpool_extender_webhook_ca_current",
        "1 when the last check found the webhook's caBundle equal to --webhook-ca-file.", {});
    ca_injector = std::make_unique<CaInjector>(**client, co, log.Child("webhook-ca"), writes);
    ca_injector->Start();
  }
  // The background work stops in its order on every way out, a server that
  // cannot start included: pod_load's last save asks the leader, which must
  // still exist, and the objects above are destroyed in the reverse order of
  // their declaration, pod_load last.
  struct StopAll {
    std::function<void()> run;
    ~StopAll() { run(); }
  } stop_all{[&] {
    if (ca_injector) ca_injector->Stop();
    pod_load.Stop();  // its last save, while this replica still leads
    if (leader) leader->Stop();
    if (all_pods) all_pods->Stop();
    pods.Stop();
    nodes.Stop();
  }};
  auto update_gauges = [&] {
    (*ext)->UpdateGauges();
    leading->Get().Set(leader == nullptr || leader->IsLeader() ? 1 : 0);
    if (ca_current != nullptr) ca_current->Get().Set(ca_injector->Current() ? 1 : 0);
  };

  // The reservations of Bindings with an unknown outcome whose pods did not
  // come back to bind are settled every 10 s (Extender::ReleaseUnknownBindings).
  // Declared after stop_all: it stops before the informers and the leader.
  std::jthread unknown_bindings([&ext](std::stop_token stop) {
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, stop, std::chrono::seconds(10), [] { return false; }) &&
           !stop.stop_requested()) {
      (*ext)->ReleaseUnknownBindings(stop);
    }
  });

  KubePodSource pod_source(**client, &pods);
  Handlers handlers(**ext, &pod_source, &*metrics, log.Child("http"),
                    HandlerOptions{flags.max_body_bytes, flags.scheduler_name});
  // kube-scheduler calls the extender whether it is ready or not: nothing is
  // decided before both caches have listed everything once (double booking).
  handlers.SetSyncGate([&nodes, &pods, &all_pods] {
    return nodes.Synced() && pods.Synced() && (all_pods == nullptr || all_pods->Synced());
  });
  if (leader) {
    auto gate = [&leader] {
      return leader->IsLeaderNow() ? std::string() : leader->NotLeaderReason();
    };
    handlers.SetBindGate(gate);
    writer.SetWriteGate(gate);
    writer.SetWriteTimeLeft([&leader] { return leader->LeadLeft(); });
  }
  Webhook webhook(WebhookOptions{flags.scheduler_name, flags.webhook_allow_device_env,
                                 flags.host_pods_scheduler_name, flags.webhook_refuse_oversized,
                                 flags.managed_resources, flags.high_priority_namespaces},
                  &cache, log.Child("webhook"), &*metrics);

  http::ServerOptions so;
  so.host = addr->first;
  so.port = addr->second;
  so.max_body_bytes = flags.max_body_bytes;
  so.max_connections = flags.max_connections;
  so.metrics = &registry;  // accelpool_extender_http_*: requests, latency, connections
  so.metrics_prefix = "accelpool_extender_http";
  so.log = log.Child("http");  // descriptors or threads running out, said once
  if (!flags.tls_cert.empty()) {
    http::TlsOptions tls;
    tls.cert_file = flags.tls_cert;
    tls.key_file = flags.tls_key;
    tls.client_ca_file = flags.client_ca;
    tls.client_cert_optional = flags.client_cert_optional;
    so.tls = tls;
  }
  std::atomic<bool> draining{false};  // SIGTERM came: --shutdown-delay runs
  auto not_ready = [&]() -> std::string {
    if (draining.load()) return "shutting down";
    if (!nodes.Synced() || !pods.Synced() || (all_pods != nullptr && !all_pods->Synced())) {
      return "caches not synced yet";
    }
    // A follower of kube-scheduler's Lease stays ready: kube-scheduler calls
    // only the extender in its own pod, and the webhook and metrics are served
    // by every replica. An elected standalone follower is not ready, so the
    // Service in front of it routes to the leader.
    if (leader && !leader->Follows() && !leader->IsLeader()) return "not the leader";
    return "";
  };
  std::unique_ptr<http::HttpServer> server = http::NewHttpServer(so);
  RegisterRoutes(*server, Routes{&handlers, &webhook, &registry, update_gauges, not_ready,
                                 SchedulerVerbGate(flags.scheduler_verbs_from_any)});
  if (flags.scheduler_verbs_from_any && flags.client_ca.empty()) {
    log.Warn(
        "filter/prioritize/bind/preempt are served on --listen to any peer, without client "
        "certificates: whoever reaches the port can bind pods with this extender's "
        "credentials; keep others out with a network policy, or drop "
        "--scheduler-verbs-from-any",
        {{"listen", flags.listen}});
  }
  if (Status st = server->Start(); !st.ok()) return fatal("cannot serve", st);
  // kube-scheduler's calls over loopback HTTP: the same handlers, no webhook.
  // Inside one pod the hop never leaves the network namespace, and it saves
  // kube-scheduler a TLS handshake on every connection its pool opens.
  std::unique_ptr<http::HttpServer> sched_server;
  if (sched_addr) {
    http::ServerOptions loopback = so;
    loopback.host = sched_addr->first;
    loopback.port = sched_addr->second;
    loopback.tls.reset();
    sched_server = http::NewHttpServer(loopback);
    RegisterRoutes(*sched_server,
                   Routes{&handlers, nullptr, &registry, update_gauges, not_ready, {}});
    if (Status st = sched_server->Start(); !st.ok()) {
      return fatal("cannot serve --scheduler-listen", st);
    }
  }
  log.Info("serving",
           {{"listen", flags.listen},
            {"port", static_cast<int64_t>(server->port())},
            {"tls", !flags.tls_cert.empty()},
            {"policy", flags.policy},
            {"node_policy", flags.node_policy.empty() ? flags.policy : flags.node_policy},
            {"scheduler_name", flags.scheduler_name},
            {"leader_elect", flags.leader_elect},
            {"scheduler_lease", flags.scheduler_lease},
            {"webhook_ca_bundle", flags.webhook_ca_bundle},
            {"pick_in_filter", flags.pick_in_filter},
            {"host_aware", flags.host_aware},
            {"learn_workload", flags.learn_workload},
            {"workload_configmap", flags.workload_configmap},
            {"scheduler_listen", flags.scheduler_listen},
            {"scheduler_port", static_cast<int64_t>(sched_server ? sched_server->port() : 0)}});

  const sigset_t set = SignalSet({SIGTERM, SIGINT, SIGHUP});
  int sig = 0;
  // SIGHUP (which the device plugin takes as "check the devices") changes
  // nothing here: the TLS files and the key Secret are re-read as they
  // change. It is said and ignored, never the end of the process.
  while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
    log.Info("SIGHUP ignored: the extender re-reads its files as they change; SIGTERM stops it");
  }
  if (sig == SIGTERM && flags.shutdown_delay.count() > 0) {
    // Not ready, still serving: the endpoints drop this replica, and
    // kube-scheduler and the apiserver (which does not retry a webhook call)
    // stop calling it before the listener closes. A second SIGTERM or a
    // SIGINT ends the wait.
    draining = true;
    log.Info("draining: not ready, still serving",
             {{"signal", sig}, {"seconds", static_cast<int64_t>(flags.shutdown_delay.count())}});
    const auto until = std::chrono::steady_clock::now() + flags.shutdown_delay;
    for (;;) {
      const auto left = until - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) break;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      const timespec ts{static_cast<time_t>(ns / 1'000'000'000),
                        static_cast<long>(ns % 1'000'000'000)};
      const int got = sigtimedwait(&set, nullptr, &ts);
      if (got == SIGTERM || got == SIGINT) {
        sig = got;
        break;
      }
    }
  }
  log.Info("shutting down", {{"signal", sig}});
  if (sched_server) sched_server->Stop();
  server->Stop();
  return 0;  // stop_all stops the rest
}

}  // namespace
}  // namespace accelpool::extender

int main(int argc, char** argv) {
  // Block the stop signals before any thread starts so only sigwait sees them;
  // a peer that closed its connection (kube-scheduler after its timeout, a
  // scraper) must cost one failed write, never the process.
  accelpool::BlockDaemonSignals();
  // Before any thread: new apiserver connections stop re-reading the system
  // CA bundle (the clients share one trust store, see http.h).
  accelpool::http::DisableDefaultCaPaths();
  accelpool::StatusOr<accelpool::extender::Flags> flags =
      accelpool::extender::ParseFlags(argc, argv);
  if (!flags.ok()) {
    return accelpool::FlagsExit(flags.status(), "accelpool-extender", accelpool::extender::kUsage);
  }
  return accelpool::extender::Run(*flags);
}
