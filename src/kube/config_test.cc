#include "kube/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "http/http.h"
#include "http/test_certs.h"
#include "kube/client.h"

namespace accelpool::kube {
namespace {

namespace ht = http::testing;

std::string B64(const std::string& in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ht::MakeTempDir("accelpool-kube"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ConfigTest, Base64) {
  for (const std::string s : {"", "a", "ab", "abc", "abcd", "hello, world\n"}) {
    auto d = Base64Decode(B64(s));
    ASSERT_TRUE(d.ok()) << s;
    EXPECT_EQ(*d, s);
  }
  EXPECT_FALSE(Base64Decode("ab$c").ok());
  EXPECT_FALSE(Base64Decode("ab=c").ok());
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(*Base64Decode(Base64Encode(s)), s);
  }
}

TEST_F(ConfigTest, InCluster) {
  ASSERT_TRUE(ht::WriteFile(dir_ + "/token", "tok-123\n"));
  ASSERT_TRUE(ht::WriteFile(dir_ + "/ca.crt", "pem"));
  auto c = LoadInCluster(
      Env({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}}), dir_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token, "tok-123");
  EXPECT_EQ(c->ca_file, dir_ + "/ca.crt");
  EXPECT_EQ(c->token_file, dir_ + "/token");

  auto v6 = LoadInCluster(
      Env({{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "6443"}}), dir_);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->server, "https://[fd00::1]:6443");

  auto outside = LoadInCluster(Env({}), dir_);
  EXPECT_EQ(outside.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(outside.status().message().find("--kubeconfig"), std::string::npos);
  auto no_token = LoadInCluster(
      Env({{"KUBERNETES_SERVICE_HOST", "h"}, {"KUBERNETES_SERVICE_PORT", "1"}}), dir_ + "/missing");
  EXPECT_EQ(no_token.status().code(), StatusCode::kInvalidArgument);
}

// The namespace a command works in when given none, as kubectl takes it:
// the context's, else (in a pod) the service account's.
TEST_F(ConfigTest, TheDefaultNamespaceIsTheContextsOrThePods) {
  const std::string yaml = R"(apiVersion: v1
kind: Config
current-context: team
clusters:
- name: one
  cluster: {server: "https://one:6443"}
contexts:
- name: team
  context:
    cluster: one
    user: u
    namespace: ml-team
- name: bare
  context: {cluster: one, user: u}
users:
- name: u
  user: {token: t}
)";
  const std::string path = dir_ + "/config";
  ASSERT_TRUE(ht::WriteFile(path, yaml));
  auto team = LoadKubeconfig(path);
  ASSERT_TRUE(team.ok()) << team.status().ToString();
  EXPECT_EQ(team->ns, "ml-team");
  auto bare = LoadKubeconfig(path, "bare");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->ns, "");
  auto merged = LoadKubeconfigs({dir_ + "/absent", path});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(merged->ns, "ml-team");

  ASSERT_TRUE(ht::WriteFile(dir_ + "/token", "tok"));
  ASSERT_TRUE(ht::WriteFile(dir_ + "/ca.crt", "pem"));
  const EnvLookup env =
      Env({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}});
  auto no_file = LoadInCluster(env, dir_);
  ASSERT_TRUE(no_file.ok()) << no_file.status().ToString();
  EXPECT_EQ(no_file->ns, "");
  ASSERT_TRUE(ht::WriteFile(dir_ + "/namespace", "accelpool-system\n"));
  auto in_pod = LoadInCluster(env, dir_);
  ASSERT_TRUE(in_pod.ok()) << in_pod.status().ToString();
  EXPECT_EQ(in_pod->ns, "accelpool-system");
}

TEST_F(ConfigTest, KubeconfigYamlWithDataAndFiles) {
  const std::string yaml = R"(apiVersion: v1
kind: Config
current-context: b
clusters:
- name: one
  cluster:
    server: https://one:6443
    certificate-authority-data: )" +
                           B64("CA-PEM") + R"(
- name: two
  cluster:
    server: https://two:6443
    certificate-authority: certs/ca.pem
    insecure-skip-tls-verify: true
    tls-server-name: apiserver.internal
contexts:
- name: a
  context: {cluster: one, user: u}
- name: b
  context:
    cluster: one
    user: cert-user
- name: c
  context:
    cluster: two
    user: file-user
users:
- name: cert-user
  user:
    client-certificate-data: )" +
                           B64("CERT") + R"(
    client-key-data: )" + B64("KEY") +
                           R"(
- name: file-user
  user:
    client-certificate: certs/client.crt
    client-key: /abs/client.key
    tokenFile: token
- name: exec-user
  user:
    exec:
      command: aws
)";
  const std::string path = dir_ + "/config";
  ASSERT_TRUE(ht::WriteFile(path, yaml));
  ASSERT_TRUE(ht::WriteFile(dir_ + "/token", "from-file\n"));
  // Context "a" is written as a flow mapping.
  auto b = LoadKubeconfig(path);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->server, "https://one:6443");
  EXPECT_EQ(b->ca_pem, "CA-PEM");
  EXPECT_EQ(b->client_cert_pem, "CERT");
  EXPECT_EQ(b->client_key_pem, "KEY");
  auto c = LoadKubeconfig(path, "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ca_file, dir_ + "/certs/ca.pem");
  EXPECT_TRUE(c->insecure_skip_verify);
  EXPECT_EQ(c->tls_server_name, "apiserver.internal");
  EXPECT_EQ(b->tls_server_name, "");
  EXPECT_EQ(c->client_cert_file, dir_ + "/certs/client.crt");
  EXPECT_EQ(c->client_key_file, "/abs/client.key");
  EXPECT_EQ(c->token, "from-file");
  auto a = LoadKubeconfig(path, "a");
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("user \"u\""), std::string::npos) << a.status().message();
}

TEST_F(ConfigTest, KubeconfigErrors) {
  struct Case {
    std::string name, text, want;
  };
  const std::vector<Case> cases = {
      {"no context", "apiVersion: v1\n", "has no current-context"},
      {"missing context", "current-context: x\ncontexts: []\n", "context \"x\" is not defined"},
      {"missing cluster",
       "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: nope\n",
       "cluster \"nope\""},
      {"exec only",
       "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: e\n"
       "clusters:\n- name: c\n  cluster:\n    server: https://h\nusers:\n- name: e\n  user:\n"
       "    exec:\n      command: x\n",
       "exec.apiVersion \"\" is not supported"},
      {"bad base64",
       "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\nclusters:\n- name: "
       "c\n"
       "  cluster:\n    server: https://h\n    certificate-authority-data: '@@@'\n",
       "certificate-authority-data"},
      {"json", R"({"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],
        "clusters": [{"name": "c", "cluster": {}}]})",
       "has no server"},
  };
  for (const Case& c : cases) {
    const std::string path = dir_ + "/cfg";
    ASSERT_TRUE(ht::WriteFile(path, c.text));
    auto r = LoadKubeconfig(path);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  EXPECT_NE(LoadKubeconfig(dir_ + "/absent").status().message().find("cannot read kubeconfig"),
            std::string::npos);
  auto from_env = LoadDefault("", Env({{"KUBECONFIG", dir_ + "/absent:" + dir_ + "/other"}}));
  EXPECT_NE(from_env.status().message().find(dir_ + "/absent"), std::string::npos);
}

// Named for the kube test filter ('Kube'); same fixture.
using KubeconfigShapesTest = ConfigTest;

// Kubeconfig shapes as tools write them: kubectl and kind (block style),
// PyYAML-style leaf flow mappings, one flow document, flow spread over lines.
TEST_F(KubeconfigShapesTest, WrittenByTools) {
  const std::string ca = B64("CA-PEM"), cert = B64("CERT-PEM"), key = B64("KEY-PEM");
  struct Case {
    std::string name, text;
    std::string server, token, ca_pem, cert_pem, key_pem;
    bool insecure;
  };
  const std::vector<Case> cases = {
      {"kubectl",
       R"(apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: )" +
           ca + R"(
    server: https://10.0.0.1:6443
  name: prod
contexts:
- context:
    cluster: prod
    namespace: kube-system
    user: admin
  name: admin@prod
current-context: admin@prod
kind: Config
preferences: {}
users:
- name: admin
  user:
    token: s3cr3t
)",
       "https://10.0.0.1:6443", "s3cr3t", "CA-PEM", "", "", false},
      {"kind",
       R"(apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: )" +
           ca + R"(
    server: https://127.0.0.1:40123
  name: kind-kind
contexts:
- context:
    cluster: kind-kind
    user: kind-kind
  name: kind-kind
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    client-certificate-data: )" +
           cert + R"(
    client-key-data: )" +
           key + R"(
)",
       "https://127.0.0.1:40123", "", "CA-PEM", "CERT-PEM", "KEY-PEM", false},
      {"leaf flow mappings",
       R"(apiVersion: v1
clusters:
- cluster: {certificate-authority-data: )" +
           ca + R"(, server: 'https://lb:6443'}
  name: lab
contexts:
- context: {cluster: lab, namespace: default, user: ci}
  name: lab
current-context: lab
kind: Config
preferences: {}
users:
- name: ci
  user: {token: "abc", client-certificate-data: )" +
           cert + ", client-key-data: " + key + R"(}
)",
       "https://lb:6443", "abc", "CA-PEM", "CERT-PEM", "KEY-PEM", false},
      {"flow document",
       "{apiVersion: v1, kind: Config, current-context: x, clusters: [{name: x, "
       "cluster: {server: https://x:6443, insecure-skip-tls-verify: true}}], "
       "contexts: [{name: x, context: {cluster: x, user: u}}], users: [{name: "
       "u, user: {token: abc}}]}\n",
       "https://x:6443", "abc", "", "", "", true},
      {"flow over lines",
       R"(current-context: x
clusters: [
  {name: x, cluster: {server: "https://x:6443",   # the load balancer
                      certificate-authority-data: )" +
           ca + R"(}},
]
contexts: [{name: x,
            context: {cluster: x, user: u}}]
users:
- {name: u, user: {token: 'it''s'}}
)",
       "https://x:6443", "it's", "CA-PEM", "", "", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir_ + "/kubeconfig";
    ASSERT_TRUE(ht::WriteFile(path, c.text));
    auto cfg = LoadKubeconfig(path);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    EXPECT_EQ(cfg->server, c.server);
    EXPECT_EQ(cfg->token, c.token);
    EXPECT_EQ(cfg->ca_pem, c.ca_pem);
    EXPECT_EQ(cfg->client_cert_pem, c.cert_pem);
    EXPECT_EQ(cfg->client_key_pem, c.key_pem);
    EXPECT_EQ(cfg->insecure_skip_verify, c.insecure);
  }
}

// An exec plugin that is not installed (EKS, GKE shapes) and an
// auth-provider user (OIDC) are clear errors with what to do; malformed flow
// style names the line and column. (Plugins that run: exec_credential_test.)
TEST_F(KubeconfigShapesTest, ExecPluginsAndMalformedFlowAreClearErrors) {
  const std::string head =
      "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
      "clusters: [{name: c, cluster: {server: https://h}}]\n";
  struct Case {
    std::string name, users;
    StatusCode code;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"eks exec",
       "users:\n- name: u\n  user:\n    exec:\n      apiVersion: "
       "client.authentication.k8s.io/v1beta1\n      command: accelpool-absent-aws\n      args: "
       "[eks, get-token, --cluster-name, prod]\n      env: null\n",
       StatusCode::kUnavailable,
       {"user u: exec plugin accelpool-absent-aws cannot be started", "install it"}},
      {"gke exec flow",
       "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
       "command: accelpool-absent-gke-plugin, installHint: \"Install it: gcloud components "
       "install\", provideClusterInfo: true}}}]\n",
       StatusCode::kUnavailable,
       {"cannot be started", "; Install it: gcloud components install"}},
      {"oidc auth-provider",
       "users:\n- name: u\n  user:\n    auth-provider:\n      name: oidc\n      config: "
       "{client-id: k, idp-issuer-url: 'https://idp'}\n",
       StatusCode::kUnimplemented,
       {"auth-provider plugin", "exec plugin", "kubectl create token"}},
      {"unclosed mapping",
       "users: [{name: u, user: {token: abc}]\n",
       StatusCode::kInvalidArgument,
       {"line 4, column 37", "want ',' or '}'", "found ']'"}},
      {"never closed",
       "users: [{name: u,\n  user: {token: abc}}\n",
       StatusCode::kInvalidArgument,
       {"line 5", "want ']' to close the '[' opened at line 4"}},
      {"missing comma",
       "users: [{name: u user: x}]\n",
       StatusCode::kInvalidArgument,
       {"line 4, column 22", "want ',' or '}'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir_ + "/kubeconfig";
    ASSERT_TRUE(ht::WriteFile(path, head + c.users));
    auto cfg = LoadKubeconfig(path);
    ASSERT_FALSE(cfg.ok());
    EXPECT_EQ(cfg.status().code(), c.code) << cfg.status().ToString();
    for (const std::string& w : c.want) {
      EXPECT_NE(cfg.status().message().find(w), std::string::npos)
          << "want \"" << w << "\" in: " << cfg.status().message();
    }
  }
}

// A KUBECONFIG list is merged as kubectl merges it: missing files skipped,
// the first file to set current-context or define a name wins, and each
// relative path is relative to its own file.
TEST_F(ConfigTest, AKubeconfigListIsMergedAsKubectlMergesIt) {
  std::filesystem::create_directories(dir_ + "/a");
  std::filesystem::create_directories(dir_ + "/b");
  ASSERT_TRUE(ht::WriteFile(dir_ + "/a/config",
                            "current-context: prod\n"
                            "contexts:\n- name: prod\n  context: {cluster: prod, user: sso}\n"));
  ASSERT_TRUE(ht::WriteFile(
      dir_ + "/b/config",
      "current-context: staging\n"
      "contexts:\n- name: prod\n  context: {cluster: other, user: nobody}\n"
      "- name: staging\n  context: {cluster: staging, user: sso}\n"
      "clusters:\n- name: prod\n  cluster: {server: 'https://prod:6443', certificate-authority: "
      "certs/ca.pem}\n- name: staging\n  cluster: {server: 'https://staging:6443'}\n"
      "users:\n- name: sso\n  user: {tokenFile: token}\n"));
  ASSERT_TRUE(ht::WriteFile(dir_ + "/b/token", "from-b\n"));
  const std::string list = dir_ + "/absent:" + dir_ + "/a/config::" + dir_ + "/b/config";
  auto c = LoadDefault("", Env({{"KUBECONFIG", list}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "https://prod:6443");  // a's current-context and a's context prod
  EXPECT_EQ(c->ca_file, dir_ + "/b/certs/ca.pem");
  EXPECT_EQ(c->token, "from-b");
  EXPECT_EQ(c->token_file, dir_ + "/b/token");
  auto staging = LoadKubeconfigs(SplitKubeconfigList(list), "staging");
  ASSERT_TRUE(staging.ok()) << staging.status().ToString();
  EXPECT_EQ(staging->server, "https://staging:6443");
  // Errors name the merged files.
  auto missing = LoadKubeconfigs(SplitKubeconfigList(list), "dev");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(dir_ + "/a/config:" + dir_ +
                                            "/b/config: context "
                                            "\"dev\" is not defined"),
            std::string::npos)
      << missing.status().message();
  EXPECT_EQ(SplitKubeconfigList("a::b:"), (std::vector<std::string>{"a", "b"}));
  auto none = LoadKubeconfigs({dir_ + "/x", dir_ + "/y"});
  EXPECT_NE(none.status().message().find("none of the kubeconfig files exists"), std::string::npos)
      << none.status().message();
}

TEST_F(ConfigTest, KubeconfigDrivesATlsClient) {
  ht::TestCa ca(dir_, "cluster");
  ASSERT_TRUE(ca.ok());
  auto server_cert = ca.Issue("apiserver", "apiserver", true);
  auto client_cert = ca.Issue("system:node:n1", "client", false);
  auto server = ca.MutualTlsServer(server_cert);
  server->Handle("GET", "/api/v1/nodes/n1", [](const http::Request& r) {
    return http::Response::Json(200,
                                R"({"kind":"Node","metadata":{"name":"n1","annotations":{"who":")" +
                                    r.client_cert_subject + R"("}}})");
  });
  ASSERT_TRUE(server->Start().ok());
  const std::string yaml =
      "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n"
      "    user: u\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:" +
      std::to_string(server->port()) + "\n    certificate-authority-data: " + B64(ca.ca_pem()) +
      "\nusers:\n- name: u\n  user:\n    client-certificate-data: " + B64(client_cert.cert_pem) +
      "\n    client-key-data: " + B64(client_cert.key_pem) + "\n";
  ASSERT_TRUE(ht::WriteFile(dir_ + "/kc", yaml));
  auto cfg = LoadKubeconfig(dir_ + "/kc");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto client = NewKubeClient(*cfg);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto node = (*client)->Get(Nodes(), "", "n1");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ((*node)["metadata"]["annotations"]["who"], "/CN=system:node:n1");
}

}  // namespace
}  // namespace accelpool::kube
