// Kubeconfig exec credential plugins (client.authentication.k8s.io v1 and
// v1beta1): the user's `exec` entry names a program (aws eks get-token,
// kubelogin, gke-gcloud-auth-plugin, ...) that prints an ExecCredential
// with a bearer token or a client certificate on its standard output.
//
// RunExecPlugin starts the program with the kubeconfig's args and env plus
// KUBERNETES_EXEC_INFO (the request: apiVersion, kind, spec.interactive and,
// with provideClusterInfo, spec.cluster), passes its standard error through,
// gives it the terminal's standard input only when it may prompt, and checks
// the answer: same apiVersion, kind ExecCredential, a token or both
// certificate and key, an RFC 3339 expirationTimestamp when present.
//
// The client runs the plugin again when the token it gave expires (10 s
// early) and after a 401, as client-go does.
//
// Thread-safety: RunExecPlugin may be called from any thread; it forks.
#ifndef ACCELPOOL_KUBE_EXEC_CREDENTIAL_H_
#define ACCELPOOL_KUBE_EXEC_CREDENTIAL_H_

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace accelpool::kube {

// A kubeconfig user's `exec` entry, and what the plugin may be told of the
// cluster.
struct ExecPlugin {
  std::string user;         // the kubeconfig user, for messages
  std::string api_version;  // "client.authentication.k8s.io/v1" or ".../v1beta1"
  std::string command;      // a name looked up in PATH, or a path
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string install_hint;  // printed when the command cannot be started
  // Never, IfAvailable or Always; "" (v1beta1 only) means IfAvailable.
  std::string interactive_mode;
  bool provide_cluster_info = false;
  // spec.cluster when provide_cluster_info: server, CA, TLS name, and the
  // cluster's extension "client.authentication.k8s.io/exec" as JSON text.
  std::string server;
  std::string tls_server_name;
  std::string ca_pem;
  bool insecure_skip_verify = false;
  std::string config_json;
  // The longest the plugin may run before it is killed; an interactive one
  // (a login prompt) gets interactive_timeout.
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds interactive_timeout{600000};
};

struct ExecCredential {
  std::string token;
  std::string client_cert_pem, client_key_pem;
  std::optional<std::chrono::system_clock::time_point> expiry;
};

// Checks an `exec` entry as the kubeconfig gives it; kInvalidArgument naming
// the field (an unknown apiVersion, no command, a bad interactiveMode, an env
// entry without a name).
Status ValidateExecPlugin(const ExecPlugin& plugin);

// Runs the plugin. kUnavailable when it cannot be started (with the install
// hint), exits with an error or runs past its timeout; kInvalidArgument when
// its answer is not a valid ExecCredential; kFailedPrecondition when it needs
// a terminal (interactiveMode Always) and standard input is not one.
StatusOr<ExecCredential> RunExecPlugin(const ExecPlugin& plugin);

// Reads an ExecCredential answer (exposed for tests and the fuzzer).
StatusOr<ExecCredential> ParseExecCredential(const std::string& text,
                                             const std::string& api_version);

// RFC 3339 ("2026-12-02T10:00:00Z", fractions, "+01:00" offsets).
StatusOr<std::chrono::system_clock::time_point> ParseRfc3339(const std::string& text);

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_EXEC_CREDENTIAL_H_
