#include "kube/exec_credential.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "kube/config.h"
#include "kube/objects.h"

extern char** environ;

namespace accelpool::kube {

using nlohmann::json;

namespace {

constexpr std::string_view kV1 = "client.authentication.k8s.io/v1";
constexpr std::string_view kV1beta1 = "client.authentication.k8s.io/v1beta1";
constexpr size_t kMaxOutput = 4u << 20;  // an answer holds a token or a certificate chain

std::string Who(const ExecPlugin& p) {
  return "kubeconfig user " + p.user + ": exec plugin " + p.command;
}

std::string EffectiveMode(const ExecPlugin& p) {
  return p.interactive_mode.empty() ? "IfAvailable" : p.interactive_mode;
}

// The request the plugin reads from KUBERNETES_EXEC_INFO.
std::string ExecInfo(const ExecPlugin& p, bool interactive) {
  json spec = {{"interactive", interactive}};
  if (p.provide_cluster_info) {
    json cluster = {{"server", p.server}};
    if (!p.tls_server_name.empty()) cluster["tls-server-name"] = p.tls_server_name;
    if (p.insecure_skip_verify) cluster["insecure-skip-tls-verify"] = true;
    if (!p.ca_pem.empty()) cluster["certificate-authority-data"] = Base64Encode(p.ca_pem);
    if (!p.config_json.empty()) {
      json cfg = json::parse(p.config_json, nullptr, false);
      if (!cfg.is_discarded()) cluster["config"] = std::move(cfg);
    }
    spec["cluster"] = std::move(cluster);
  }
  return json{{"apiVersion", p.api_version}, {"kind", "ExecCredential"}, {"spec", spec}}.dump();
}

// This process's environment, less the names the plugin's env sets, plus them
// and KUBERNETES_EXEC_INFO.
std::vector<std::string> ChildEnv(const ExecPlugin& p, bool interactive) {
  std::vector<std::pair<std::string, std::string>> add = p.env;
  add.emplace_back("KUBERNETES_EXEC_INFO", ExecInfo(p, interactive));
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const std::string_view name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [n, v] : add) replaced = replaced || n == name;
    if (!replaced) out.emplace_back(kv);
  }
  for (const auto& [n, v] : add) out.push_back(n + "=" + v);
  return out;
}

void Close(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Status ValidateExecPlugin(const ExecPlugin& p) {
  const std::string where = "kubeconfig user " + p.user + ": exec";
  if (p.api_version != kV1 && p.api_version != kV1beta1) {
    return InvalidArgumentError(where + ".apiVersion \"" + p.api_version + "\" is not supported; " +
                                "use " + std::string(kV1) + " (or v1beta1)");
  }
  if (p.command.empty()) return InvalidArgumentError(where + ".command is missing");
  if (p.interactive_mode.empty() && p.api_version == kV1) {
    return InvalidArgumentError(where + ".interactiveMode must be set for " + p.api_version +
                                " (Never, IfAvailable or Always)");
  }
  const std::string mode = EffectiveMode(p);
  if (mode != "Never" && mode != "IfAvailable" && mode != "Always") {
    return InvalidArgumentError(where + ".interactiveMode \"" + mode +
                                "\" is not one of Never, IfAvailable, Always");
  }
  for (const auto& [name, value] : p.env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return InvalidArgumentError(where + ".env: \"" + name + "\" is not a variable name");
    }
  }
  return Status::Ok();
}

StatusOr<std::chrono::system_clock::time_point> ParseRfc3339(const std::string& text) {
  if (!text.empty() && (text.back() == 'Z' || text.back() == 'z')) {
    return ParseMicroTime(text.substr(0, text.size() - 1) + "Z");
  }
  // "...+HH:MM" or "...-HH:MM"
  if (text.size() > 6 && (text[text.size() - 6] == '+' || text[text.size() - 6] == '-') &&
      text[text.size() - 3] == ':') {
    const std::string off = text.substr(text.size() - 5);
    int hh = 0;
    int mm = 0;
    int used = 0;
    if (std::sscanf(off.c_str(), "%2d:%2d%n", &hh, &mm, &used) == 2 && used == 5 && hh < 24 &&
        mm < 60) {
      auto t = ParseMicroTime(text.substr(0, text.size() - 6) + "Z");
      if (!t.ok()) return t.status();
      const auto offset = std::chrono::minutes(hh * 60 + mm);
      return text[text.size() - 6] == '+' ? *t - offset : *t + offset;
    }
  }
  return InvalidArgumentError("time \"" + text + "\" is not RFC 3339 (2026-12-02T10:00:00Z)");
}

StatusOr<ExecCredential> ParseExecCredential(const std::string& text,
                                             const std::string& api_version) {
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgumentError("its output is not a JSON object (want an ExecCredential)");
  }
  const json api = doc.value("apiVersion", json());
  if (!api.is_string() || api.get<std::string>() != api_version) {
    return InvalidArgumentError("its output has apiVersion " + api.dump() + ", want \"" +
                                api_version + "\" as the kubeconfig says");
  }
  if (doc.value("kind", json()) != "ExecCredential") {
    return InvalidArgumentError("its output has kind " + doc.value("kind", json()).dump() +
                                ", want \"ExecCredential\"");
  }
  const json status = doc.value("status", json());
  if (!status.is_object()) return InvalidArgumentError("its output has no status object");
  ExecCredential c;
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"token", &c.token},
                                 {"clientCertificateData", &c.client_cert_pem},
                                 {"clientKeyData", &c.client_key_pem}}) {
    const json v = status.value(key, json());
    if (v.is_null()) continue;
    if (!v.is_string())
      return InvalidArgumentError(std::string("status.") + key + " is not a string");
    *out = v.get<std::string>();
  }
  if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
    return InvalidArgumentError(
        "its status has only one of clientCertificateData and clientKeyData; both are needed");
  }
  if (c.token.empty() && c.client_cert_pem.empty()) {
    return InvalidArgumentError(
        "its status has neither a token nor clientCertificateData and clientKeyData");
  }
  const json exp = status.value("expirationTimestamp", json());
  if (!exp.is_null()) {
    if (!exp.is_string()) return InvalidArgumentError("status.expirationTimestamp is not a string");
    auto t = ParseRfc3339(exp.get<std::string>());
    if (!t.ok()) return t.status().WithPrefix("status.expirationTimestamp");
    c.expiry = *t;
  }
  return c;
}

StatusOr<ExecCredential> RunExecPlugin(const ExecPlugin& p) {
  ACCELPOOL_RETURN_IF_ERROR(ValidateExecPlugin(p));
  const std::string mode = EffectiveMode(p);
  const bool tty = ::isatty(STDIN_FILENO) == 1;
  if (mode == "Always" && !tty) {
    return FailedPreconditionError(Who(p) +
                                   " needs a terminal (interactiveMode: Always) and standard "
                                   "input is not one; run it from a terminal, or log in first");
  }
  const bool interactive = mode != "Never" && tty;

  std::vector<std::string> env = ChildEnv(p, interactive);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = {p.command};
  args.insert(args.end(), p.args.begin(), p.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return UnavailableError(Who(p) + ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (!interactive) {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  // A plugin that may not prompt runs in a process group of its own, so a
  // timeout stops what it started too (a shell script's children would
  // otherwise keep running, and keep our standard error open). One that may
  // prompt stays in the terminal's foreground group, where it can read.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (!interactive) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid = -1;
  // PATH lookup for a bare name (this process's PATH), as kubectl does.
  const int rc =
      p.command.find('/') == std::string::npos
          ? posix_spawnp(&pid, p.command.c_str(), &actions, &attr, argv.data(), envp.data())
          : posix_spawn(&pid, p.command.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  Close(out[1]);
  if (rc != 0) {
    Close(out[0]);
    std::string msg = Who(p) + " cannot be started: " + std::strerror(rc);
    msg += p.install_hint.empty() ? "; install it or fix the command in the kubeconfig"
                                  : "; " + p.install_hint;
    return UnavailableError(msg);
  }

  const auto limit = interactive ? p.interactive_timeout : p.timeout;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string text;
  bool too_long = false;
  bool timed_out = false;
  char buf[8192];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{out[0], POLLIN, 0};
    const int n = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    const ssize_t got = ::read(out[0], buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF (or an error, which ends the answer the same way)
    if (text.size() + static_cast<size_t>(got) > kMaxOutput) {
      too_long = true;
      break;
    }
    text.append(buf, static_cast<size_t>(got));
  }
  Close(out[0]);
  // The answer is complete (or refused); the plugin has until the deadline to
  // exit, then it is killed.
  int wstatus = 0;
  while (true) {
    const pid_t w = timed_out || too_long ? 0 : ::waitpid(pid, &wstatus, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      wstatus = 0;
      break;
    }
    if (timed_out || too_long || std::chrono::steady_clock::now() >= deadline) {
      timed_out = timed_out || !too_long;
      ::kill(interactive ? pid : -pid, SIGKILL);
      while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (timed_out) {
    return UnavailableError(Who(p) + " did not answer within " +
                            std::to_string(limit.count() / 1000) +
                            " s and was stopped; run it by hand to see where it waits");
  }
  if (too_long) {
    return InvalidArgumentError(Who(p) + " wrote more than 4 MiB; that is not an ExecCredential");
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    const std::string how = WIFEXITED(wstatus)
                                ? "exited with status " + std::to_string(WEXITSTATUS(wstatus))
                                : "was killed by signal " + std::to_string(WTERMSIG(wstatus));
    return UnavailableError(Who(p) + " " + how +
                            " (its messages are above); run it by hand, or log in again");
  }
  StatusOr<ExecCredential> c = ParseExecCredential(text, p.api_version);
  if (!c.ok()) return c.status().WithPrefix(Who(p));
  return c;
}

}  // namespace accelpool::kube
