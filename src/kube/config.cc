#include "kube/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/strings.h"
#include "kube/yaml_subset.h"

namespace accelpool::kube {

using nlohmann::json;

namespace {

StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError("cannot read " + what + " " + path +
                                "; check that the file exists and is readable");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TrimSpace(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && s[b] == ' ') ++b;
  return s.substr(b);
}

// The entry of `list` (an array of {name, <field>: {...}}) called `name`.
const json* Named(const json& root, const char* list, const std::string& name, const char* field) {
  if (!root.contains(list) || !root.at(list).is_array()) return nullptr;
  for (const json& e : root.at(list)) {
    if (e.is_object() && e.value("name", json()).is_string() && e.at("name") == name &&
        e.contains(field) && e.at(field).is_object()) {
      return &e.at(field);
    }
  }
  return nullptr;
}

Status Str(const json& obj, const char* key, std::string& out, const std::string& where) {
  if (!obj.contains(key) || obj.at(key).is_null()) return Status::Ok();
  if (!obj.at(key).is_string()) {
    return InvalidArgumentError(where + "." + key + ": want a string");
  }
  out = obj.at(key).get<std::string>();
  return Status::Ok();
}

std::string Resolve(const std::filesystem::path& dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute()) return p;
  return (dir / p).string();
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string Base64Encode(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) |
                       (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : in) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const int v = val(c);
    if (v < 0 || padding) {
      return InvalidArgumentError("invalid base64 data; re-encode the value with base64 -w0");
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

StatusOr<KubeConfig> LoadInCluster(const EnvLookup& env, std::string_view sa_dir) {
  const auto host = env("KUBERNETES_SERVICE_HOST");
  const auto port = env("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return FailedPreconditionError(
        "not running inside a Kubernetes pod (KUBERNETES_SERVICE_HOST/PORT unset); pass "
        "--kubeconfig or set KUBECONFIG");
  }
  KubeConfig c;
  const bool v6 = host->find(':') != std::string::npos;
  c.server = "https://" + (v6 ? "[" + *host + "]" : *host) + ":" + *port;
  const std::string dir(sa_dir);
  c.token_file = dir + "/token";
  auto token = ReadWholeFile(c.token_file, "service account token");
  if (!token.ok()) return token.status();
  c.token = TrimSpace(*token);
  // The pod's namespace, as kubectl takes it in a pod; optional.
  if (std::ifstream ns(dir + "/namespace"); ns) {
    std::string text((std::istreambuf_iterator<char>(ns)), std::istreambuf_iterator<char>());
    c.ns = TrimSpace(text);
  }
  c.ca_file = dir + "/ca.crt";
  if (!std::filesystem::exists(c.ca_file)) {
    return InvalidArgumentError("service account CA " + c.ca_file +
                                " is missing; check automountServiceAccountToken");
  }
  return c;
}

namespace {

// The user's `exec` entry (client-go's ExecConfig) and, for
// provideClusterInfo, what the cluster entry says of the server.
StatusOr<ExecPlugin> ReadExec(const json& user, const json& cluster,
                              const std::filesystem::path& dir, const std::string& user_name,
                              const KubeConfig& c, const std::string& uw) {
  const json& e = user.at("exec");
  const std::string ew = uw + ".exec";
  if (!e.is_object()) return InvalidArgumentError(ew + ": want a mapping");
  ExecPlugin p;
  p.user = user_name;
  ACCELPOOL_RETURN_IF_ERROR(Str(e, "apiVersion", p.api_version, ew));
  ACCELPOOL_RETURN_IF_ERROR(Str(e, "command", p.command, ew));
  ACCELPOOL_RETURN_IF_ERROR(Str(e, "installHint", p.install_hint, ew));
  ACCELPOOL_RETURN_IF_ERROR(Str(e, "interactiveMode", p.interactive_mode, ew));
  // A relative command with a '/' is relative to the kubeconfig's folder; a
  // bare name is looked up in PATH.
  if (p.command.find('/') != std::string::npos) p.command = Resolve(dir, p.command);
  if (e.contains("args") && !e.at("args").is_null()) {
    if (!e.at("args").is_array()) return InvalidArgumentError(ew + ".args: want a list");
    for (const json& a : e.at("args")) {
      if (!a.is_string()) return InvalidArgumentError(ew + ".args: want strings");
      p.args.push_back(a.get<std::string>());
    }
  }
  if (e.contains("env") && !e.at("env").is_null()) {
    if (!e.at("env").is_array()) return InvalidArgumentError(ew + ".env: want a list");
    for (const json& v : e.at("env")) {
      std::string name, value;
      if (!v.is_object()) return InvalidArgumentError(ew + ".env: want {name, value} entries");
      ACCELPOOL_RETURN_IF_ERROR(Str(v, "name", name, ew + ".env"));
      ACCELPOOL_RETURN_IF_ERROR(Str(v, "value", value, ew + ".env"));
      p.env.emplace_back(std::move(name), std::move(value));
    }
  }
  if (e.contains("provideClusterInfo")) {
    const json& v = e.at("provideClusterInfo");
    if (!v.is_boolean() && !v.is_null()) {
      return InvalidArgumentError(ew + ".provideClusterInfo: want true or false");
    }
    p.provide_cluster_info = v.is_boolean() && v.get<bool>();
  }
  ACCELPOOL_RETURN_IF_ERROR(ValidateExecPlugin(p));
  if (p.provide_cluster_info) {
    p.server = c.server;
    p.insecure_skip_verify = c.insecure_skip_verify;
    ACCELPOOL_RETURN_IF_ERROR(Str(cluster, "tls-server-name", p.tls_server_name, ew));
    p.ca_pem = c.ca_pem;
    if (p.ca_pem.empty() && !c.ca_file.empty()) {
      auto ca = ReadWholeFile(c.ca_file, "certificate-authority");
      if (!ca.ok()) return ca.status();
      p.ca_pem = *ca;
    }
    const json* ext =
        Named(cluster, "extensions", "client.authentication.k8s.io/exec", "extension");
    if (ext != nullptr) p.config_json = ext->dump();
  }
  return p;
}

// One kubeconfig file's document.
StatusOr<json> ReadKubeconfigRoot(const std::string& path) {
  auto text = ReadWholeFile(path, "kubeconfig");
  if (!text.ok()) return text.status();
  // JSON first when the file looks like it; a "{...}" that is not JSON is
  // read as a YAML flow mapping, whose errors carry line and column.
  json root = json::value_t::discarded;
  const size_t first = text->find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (*text)[first] == '{') {
    root = json::parse(*text, nullptr, false);
  }
  if (root.is_discarded()) {
    auto y = ParseYamlSubset(*text);
    if (!y.ok()) return y.status().WithPrefix("kubeconfig " + path);
    root = std::move(*y);
  }
  if (!root.is_object()) return InvalidArgumentError("kubeconfig " + path + " is not a mapping");
  return root;
}

// Rewrites the relative paths of a file's entries against its folder, before
// the file is merged with others (each path is relative to its own file).
void AbsolutePaths(json& root, const std::filesystem::path& dir) {
  auto fix = [&](json& obj, const char* key, bool only_with_slash) {
    if (!obj.is_object() || !obj.contains(key) || !obj.at(key).is_string()) return;
    const std::string v = obj.at(key).get<std::string>();
    if (only_with_slash && v.find('/') == std::string::npos) return;  // looked up in PATH
    obj[key] = Resolve(dir, v);
  };
  for (const char* list : {"clusters", "users"}) {
    if (!root.contains(list) || !root.at(list).is_array()) continue;
    for (json& e : root.at(list)) {
      if (!e.is_object()) continue;
      if (e.contains("cluster")) fix(e["cluster"], "certificate-authority", false);
      if (e.contains("user")) {
        json& u = e["user"];
        for (const char* key : {"client-certificate", "client-key", "tokenFile"}) {
          fix(u, key, false);
        }
        if (u.is_object() && u.contains("exec")) fix(u["exec"], "command", true);
      }
    }
  }
}

StatusOr<KubeConfig> FromRoot(const json& root, const std::string& path,
                              const std::filesystem::path& dir, std::string_view context) {
  std::string ctx_name(context);
  if (ctx_name.empty()) {
    ACCELPOOL_RETURN_IF_ERROR(Str(root, "current-context", ctx_name, "kubeconfig " + path));
  }
  if (ctx_name.empty()) {
    return InvalidArgumentError("kubeconfig " + path +
                                " has no current-context; run kubectl config use-context");
  }
  const json* ctx = Named(root, "contexts", ctx_name, "context");
  if (ctx == nullptr) {
    return InvalidArgumentError("kubeconfig " + path + ": context \"" + ctx_name +
                                "\" is not defined under contexts");
  }
  std::string cluster_name, user_name;
  ACCELPOOL_RETURN_IF_ERROR(Str(*ctx, "cluster", cluster_name, "context " + ctx_name));
  ACCELPOOL_RETURN_IF_ERROR(Str(*ctx, "user", user_name, "context " + ctx_name));
  const json* cluster = Named(root, "clusters", cluster_name, "cluster");
  if (cluster == nullptr) {
    return InvalidArgumentError("kubeconfig " + path + ": cluster \"" + cluster_name +
                                "\" of context \"" + ctx_name + "\" is not defined");
  }
  KubeConfig c;
  ACCELPOOL_RETURN_IF_ERROR(Str(*ctx, "namespace", c.ns, "context " + ctx_name));
  const std::string cw = "kubeconfig " + path + ": cluster " + cluster_name;
  ACCELPOOL_RETURN_IF_ERROR(Str(*cluster, "server", c.server, cw));
  if (c.server.empty()) return InvalidArgumentError(cw + " has no server");
  std::string ca_file, ca_data;
  ACCELPOOL_RETURN_IF_ERROR(Str(*cluster, "certificate-authority", ca_file, cw));
  ACCELPOOL_RETURN_IF_ERROR(Str(*cluster, "certificate-authority-data", ca_data, cw));
  c.ca_file = Resolve(dir, ca_file);
  if (!ca_data.empty()) {
    auto pem = Base64Decode(ca_data);
    if (!pem.ok()) return pem.status().WithPrefix(cw + ": certificate-authority-data");
    c.ca_pem = *pem;
  }
  if (cluster->contains("insecure-skip-tls-verify")) {
    const json& v = cluster->at("insecure-skip-tls-verify");
    c.insecure_skip_verify = v.is_boolean() ? v.get<bool>() : (v.is_string() && v == "true");
  }
  ACCELPOOL_RETURN_IF_ERROR(Str(*cluster, "tls-server-name", c.tls_server_name, cw));
  if (!user_name.empty()) {
    const json* user = Named(root, "users", user_name, "user");
    if (user == nullptr) {
      return InvalidArgumentError("kubeconfig " + path + ": user \"" + user_name +
                                  "\" of context \"" + ctx_name + "\" is not defined");
    }
    const std::string uw = "kubeconfig " + path + ": user " + user_name;
    std::string cert_data, key_data, token_file;
    ACCELPOOL_RETURN_IF_ERROR(Str(*user, "token", c.token, uw));
    ACCELPOOL_RETURN_IF_ERROR(Str(*user, "tokenFile", token_file, uw));
    ACCELPOOL_RETURN_IF_ERROR(Str(*user, "client-certificate", c.client_cert_file, uw));
    ACCELPOOL_RETURN_IF_ERROR(Str(*user, "client-key", c.client_key_file, uw));
    ACCELPOOL_RETURN_IF_ERROR(Str(*user, "client-certificate-data", cert_data, uw));
    ACCELPOOL_RETURN_IF_ERROR(Str(*user, "client-key-data", key_data, uw));
    c.client_cert_file = Resolve(dir, c.client_cert_file);
    c.client_key_file = Resolve(dir, c.client_key_file);
    if (!token_file.empty()) {
      c.token_file = Resolve(dir, token_file);
      if (c.token.empty()) {
        auto t = ReadWholeFile(c.token_file, "token file");
        if (!t.ok()) return t.status();
        c.token = TrimSpace(*t);
      }
    }
    if (!cert_data.empty()) {
      auto pem = Base64Decode(cert_data);
      if (!pem.ok()) return pem.status().WithPrefix(uw + ": client-certificate-data");
      c.client_cert_pem = *pem;
    }
    if (!key_data.empty()) {
      auto pem = Base64Decode(key_data);
      if (!pem.ok()) return pem.status().WithPrefix(uw + ": client-key-data");
      c.client_key_pem = *pem;
    }
    const bool has_creds =
        !c.token.empty() || !c.client_cert_file.empty() || !c.client_cert_pem.empty();
    if (!has_creds && user->contains("exec") && !user->at("exec").is_null()) {
      StatusOr<ExecPlugin> plugin = ReadExec(*user, *cluster, dir, user_name, c, uw);
      if (!plugin.ok()) return plugin.status();
      StatusOr<ExecCredential> cred = RunExecPlugin(*plugin);
      if (!cred.ok()) return cred.status();
      c.token = cred->token;
      c.client_cert_pem = cred->client_cert_pem;
      c.client_key_pem = cred->client_key_pem;
      c.exec = std::move(*plugin);
      c.token_expiry = cred->expiry;
    } else if (!has_creds && user->contains("auth-provider")) {
      return UnimplementedError(uw +
                                " uses an auth-provider plugin (removed from kubectl in 1.26), "
                                "which accelpool does not run; switch the user to an exec "
                                "plugin, a token (token or tokenFile, e.g. from kubectl create "
                                "token) or a client certificate, or run in-cluster");
    }
  }
  return c;
}

}  // namespace

StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, std::string_view context) {
  StatusOr<json> root = ReadKubeconfigRoot(path);
  if (!root.ok()) return root.status();
  return FromRoot(*root, path, std::filesystem::path(path).parent_path(), context);
}

StatusOr<KubeConfig> LoadKubeconfigs(const std::vector<std::string>& paths,
                                     std::string_view context) {
  std::vector<std::string> present;
  std::vector<std::string> missing;
  for (const std::string& p : paths) {
    if (p.empty()) continue;
    (std::filesystem::exists(p) ? present : missing).push_back(p);
  }
  if (present.size() == 1) return LoadKubeconfig(present[0], context);
  if (present.empty()) {
    return InvalidArgumentError(
        "none of the kubeconfig files exists (" +
        (missing.empty() ? std::string("none given") : StrJoin(missing, ", ")) +
        "); check KUBECONFIG or pass --kubeconfig");
  }
  // As kubectl merges them: the first file to set current-context, or to
  // define a cluster, user or context of a given name, wins.
  json merged = {
      {"clusters", json::array()}, {"users", json::array()}, {"contexts", json::array()}};
  std::string current;
  for (const std::string& p : present) {
    StatusOr<json> root = ReadKubeconfigRoot(p);
    if (!root.ok()) return root.status();
    AbsolutePaths(*root, std::filesystem::path(p).parent_path());
    std::string cc;
    ACCELPOOL_RETURN_IF_ERROR(Str(*root, "current-context", cc, "kubeconfig " + p));
    if (current.empty()) current = cc;
    for (const char* list : {"clusters", "users", "contexts"}) {
      if (!root->contains(list) || !root->at(list).is_array()) continue;
      for (const json& e : root->at(list)) {
        if (!e.is_object() || !e.value("name", json()).is_string()) continue;
        const std::string name = e.at("name").get<std::string>();
        bool known = false;
        for (const json& m : merged[list]) known = known || m.at("name") == name;
        if (!known) merged[list].push_back(e);
      }
    }
  }
  merged["current-context"] = current;
  return FromRoot(merged, StrJoin(present, ":"), std::filesystem::path(), context);
}

std::vector<std::string> SplitKubeconfigList(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t colon = list.find(':', start);
    const size_t end = colon == std::string::npos ? list.size() : colon;
    if (end > start) out.push_back(list.substr(start, end - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

StatusOr<KubeConfig> LoadDefault(const std::string& kubeconfig, const EnvLookup& env) {
  if (!kubeconfig.empty()) return LoadKubeconfig(kubeconfig);
  if (auto k = env("KUBECONFIG"); k && !k->empty()) {
    return LoadKubeconfigs(SplitKubeconfigList(*k));
  }
  return LoadInCluster(env);
}

}  // namespace accelpool::kube
