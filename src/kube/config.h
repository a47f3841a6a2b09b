// Where the Kubernetes API is and how to authenticate to it.
//
// LoadInCluster reads the pod's service account (KUBERNETES_SERVICE_HOST /
// KUBERNETES_SERVICE_PORT and /var/run/secrets/kubernetes.io/serviceaccount/
// {token,ca.crt}, and namespace when present); LoadKubeconfig reads a
// kubeconfig file (JSON, or YAML in block or flow style as kubectl, kind and
// other tools write it, see yaml_subset.h) and takes its current-context:
// the context's namespace, the cluster's
// server, certificate-authority(-data), insecure-skip-tls-verify, and the
// user's token / tokenFile, client-certificate(-data) and client-key(-data),
// or, for a user with none of these, its exec credential plugin (run at load,
// and again by the client when the token it gave expires; see
// exec_credential.h). Relative file paths in a kubeconfig (and an exec
// command with a '/') are relative to the file's folder.
//
// Thread-safety: plain functions and values.
#ifndef ACCELPOOL_KUBE_CONFIG_H_
#define ACCELPOOL_KUBE_CONFIG_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kube/exec_credential.h"

namespace accelpool {
class MetricsRegistry;  // common/metrics.h
}  // namespace accelpool

namespace accelpool::kube {

struct KubeConfig {
  std::string server;      // "https://10.96.0.1:443"
  std::string token;       // bearer token, "" when none
  // When set, read again (rotated service-account tokens: the kubelet rewrites
  // a projected token well before it expires) at most every token_reread, as
  // client-go does, and at once after a 401. An unreadable or empty file
  // keeps the last token.
  std::string token_file;
  std::chrono::milliseconds token_reread{60000};
  std::string ca_file;     // PEM CA bundle
  std::string ca_pem;      // inline PEM CA bundle (certificate-authority-data, decoded)
  std::string client_cert_file, client_key_file;
  std::string client_cert_pem, client_key_pem;
  bool insecure_skip_verify = false;
  // The cluster's tls-server-name: the name the apiserver's certificate is
  // checked against (and sent as SNI) instead of the server URL's host.
  std::string tls_server_name;
  // The namespace a command works in when it is given none, as kubectl
  // takes it: the kubeconfig context's `namespace`, or in a pod its service
  // account's namespace file; "" when there is neither.
  std::string ns;
  // The user's exec credential plugin, when the credentials came from one:
  // the client runs it again 10 s before token_expiry (the credentials'
  // expirationTimestamp) and after a 401, and takes its new token or client
  // certificate.
  std::optional<ExecPlugin> exec;
  std::optional<std::chrono::system_clock::time_point> token_expiry;

  // Client-side rate limit (token bucket) and per-request timeout.
  double qps = 50;
  int burst = 100;
  std::chrono::milliseconds timeout{30000};
  // Requests in flight at once (each on its own HTTP/1.1 connection); more
  // wait for a free connection. Watches have connections of their own.
  size_t max_connections = 64;
  // "sockets" (kept-alive connections used on the calling thread) or
  // "cpprestsdk" (cpprestsdk's asynchronous client); see http::ClientOptions.
  std::string transport = "sockets";
  // Where the client counts its requests (accelpool_kube_requests_total,
  // accelpool_kube_request_seconds), labelled client=<metrics_client>; the
  // registry is not owned and outlives the client. Null: nothing counted.
  MetricsRegistry* metrics = nullptr;
  std::string metrics_client = "api";
};

// Reads an environment variable; injectable for tests. nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnv();

// kFailedPrecondition when not running in a pod (variables unset, with a hint
// to pass --kubeconfig), kInvalidArgument when the token file is unreadable.
// `sa_dir` defaults to the standard service-account folder.
StatusOr<KubeConfig> LoadInCluster(
    const EnvLookup& env,
    std::string_view sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// kInvalidArgument naming the file and the field when the file cannot be read
// or parsed, has no current-context, or the context names a missing cluster
// or user. `context` overrides current-context when not empty.
StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, std::string_view context = "");

// Several kubeconfig files merged as kubectl merges a KUBECONFIG list: files
// that do not exist are skipped; the first file to set current-context, or
// to define a cluster, user or context of a name, wins; each relative path
// is relative to the file that holds it. kInvalidArgument when none exists,
// or as LoadKubeconfig.
StatusOr<KubeConfig> LoadKubeconfigs(const std::vector<std::string>& paths,
                                     std::string_view context = "");
// "a:b::c" -> {a, b, c}.
std::vector<std::string> SplitKubeconfigList(const std::string& list);

// `kubeconfig` if not empty, else the $KUBECONFIG list, else in-cluster.
StatusOr<KubeConfig> LoadDefault(const std::string& kubeconfig, const EnvLookup& env);

// Base64 decoding for *-data fields (and Secret data); kInvalidArgument on bad input.
StatusOr<std::string> Base64Decode(std::string_view in);
// Standard base64 with padding (Secret data, admission patches).
std::string Base64Encode(std::string_view in);

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_CONFIG_H_
