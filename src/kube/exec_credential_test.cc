#include "kube/exec_credential.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/corpus_replay.h"
#include "http/http.h"
#include "http/test_certs.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/fake_apiserver.h"
#include "kube/objects.h"

namespace accelpool::kube {
namespace {

namespace ht = http::testing;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr char kV1[] = "client.authentication.k8s.io/v1";

std::string Answer(const std::string& status, const std::string& api = kV1) {
  return R"({"apiVersion": ")" + api + R"(", "kind": "ExecCredential", "status": )" + status + "}";
}

TEST(ExecCredentialParseTest, AnswersAreCheckedFieldByField) {
  auto tok = ParseExecCredential(
      Answer(R"({"token": "abc", "expirationTimestamp": "2026-12-02T10:00:00Z"})"), kV1);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->token, "abc");
  ASSERT_TRUE(tok->expiry.has_value());
  EXPECT_EQ(FormatMicroTime(*tok->expiry), "2026-12-02T10:00:00.000000Z");
  auto cert = ParseExecCredential(
      Answer(R"({"clientCertificateData": "CERT", "clientKeyData": "KEY"})"), kV1);
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  EXPECT_EQ(cert->client_cert_pem, "CERT");
  EXPECT_EQ(cert->client_key_pem, "KEY");
  EXPECT_TRUE(cert->token.empty());
  EXPECT_FALSE(cert->expiry.has_value());

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "not a JSON object"},
      {"token: abc", "not a JSON object"},
      {"[1]", "not a JSON object"},
      {Answer(R"({"token": "a"})", "client.authentication.k8s.io/v1beta1"),
       "apiVersion \"client.authentication.k8s.io/v1beta1\", want"},
      {R"({"apiVersion": "client.authentication.k8s.io/v1", "kind": "Secret", "status": {}})",
       "kind \"Secret\""},
      {R"({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"})",
       "no status object"},
      {Answer("{}"), "neither a token"},
      {Answer(R"({"token": ""})"), "neither a token"},
      {Answer(R"({"token": 5})"), "status.token is not a string"},
      {Answer(R"({"clientCertificateData": "CERT"})"), "only one of clientCertificateData"},
      {Answer(R"({"token": "a", "expirationTimestamp": "soon"})"),
       "status.expirationTimestamp: time \"soon\" is not RFC 3339"},
      {Answer(R"({"token": "a", "expirationTimestamp": 17})"), "expirationTimestamp is not a"},
  };
  for (const auto& [text, want] : bad) {
    auto r = ParseExecCredential(text, kV1);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos)
        << text << " -> " << r.status().message();
  }
}

TEST(ExecCredentialParseTest, Rfc3339TimesWithOffsets) {
  const std::string utc = "2026-12-02T10:00:00.000000Z";
  for (const std::string t :
       {"2026-12-02T10:00:00Z", "2026-12-02T10:00:00z", "2026-12-02T11:00:00+01:00",
        "2026-12-02T04:30:00-05:30", "2026-12-02T10:00:00.000Z"}) {
    auto got = ParseRfc3339(t);
    ASSERT_TRUE(got.ok()) << t << ": " << got.status().ToString();
    EXPECT_EQ(FormatMicroTime(*got), utc) << t;
  }
  for (const std::string t : {"", "2026-12-02", "tomorrow", "2026-12-02T10:00:00+1:00",
                              "2026-12-02T10:00:00+01:60", "2026-12-02T10:00:00"}) {
    EXPECT_FALSE(ParseRfc3339(t).ok()) << t;
  }
}

// The exec_credential_fuzzer seeds, every truncation of them and random byte
// changes: each gives a credential or an InvalidArgument error.
TEST(ExecCredentialParseTest, FuzzSeedsAndTheirMutationsGiveCredentialsOrErrors) {
  std::mt19937 rng(20261202);
  int parsed = 0;
  int rejected = 0;
  for (const std::string& text : accelpool::testing::SeedsCutAndMutated(
           ACCELPOOL_KUBE_EXEC_SEEDS, rng, "{}[],:\"0Z+-.\\ ", 300)) {
    auto c = ParseExecCredential(text, kV1);
    if (c.ok()) {
      ++parsed;
      EXPECT_TRUE(!c->token.empty() || (!c->client_cert_pem.empty() && !c->client_key_pem.empty()))
          << text;
    } else {
      ++rejected;
      EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << text;
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

// A plugin written as a shell script in a folder of its own; it counts its
// runs, records what it was given, and answers with the token "tok-<run>"
// and the expiry in the file "expiry".
class ExecPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ht::MakeTempDir("accelpool-exec");
    std::filesystem::create_directories(dir_ + "/bin");
    SetExpiry(std::chrono::system_clock::now() + 1h);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Script(const std::string& body) {
    const std::string path = dir_ + "/bin/plugin.sh";
    ASSERT_TRUE(ht::WriteFile(path, "#!/bin/sh\n" + body));
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  }
  void TokenScript() {
    Script(R"sh(n=$(( $(cat "$DIR/count" 2>/dev/null || echo 0) + 1 ))
echo $n > "$DIR/count"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$DIR/info.json"
echo "$@" > "$DIR/args"
echo "$GREETING" > "$DIR/env"
echo "plugin: fetching a token" >&2
expiry=$(cat "$DIR/expiry")
printf '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
printf '"status": {"token": "tok-%s", "expirationTimestamp": "%s"}}\n' "$n" "$expiry"
)sh");
  }
  void SetExpiry(std::chrono::system_clock::time_point t) {
    ASSERT_TRUE(ht::WriteFile(dir_ + "/expiry", FormatMicroTime(t)));
  }
  int Runs() const {
    std::ifstream in(dir_ + "/count");
    int n = 0;
    in >> n;
    return n;
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // A kubeconfig whose user runs ./bin/plugin.sh (relative to the file).
  std::string Kubeconfig(const std::string& server, const std::string& exec_extra = "",
                         std::string env = "") {
    if (env.empty()) {
      env = "      env:\n      - {name: DIR, value: '" + dir_ +
            "'}\n      - {name: GREETING, value: hello}\n";
    }
    const std::string path = dir_ + "/kubeconfig";
    const std::string text =
        "apiVersion: v1\nkind: Config\ncurrent-context: prod\n"
        "contexts:\n- name: prod\n  context: {cluster: prod, user: sso}\n"
        "clusters:\n- name: prod\n  cluster:\n    server: " +
        server + "\n    certificate-authority-data: " + Base64Encode("CA-PEM") +
        "\n    extensions:\n    - name: client.authentication.k8s.io/exec\n"
        "      extension: {audience: prod-cluster}\n"
        "users:\n- name: sso\n  user:\n    exec:\n"
        "      apiVersion: client.authentication.k8s.io/v1\n"
        "      command: ./bin/plugin.sh\n"
        "      args: [get-token, --cluster, prod]\n" +
        env + exec_extra;
    EXPECT_TRUE(ht::WriteFile(path, text));
    return path;
  }

  std::string dir_;
};

TEST_F(ExecPluginTest, TheKubeconfigsPluginGivesTheToken) {
  TokenScript();
  const auto expiry = std::chrono::system_clock::now() + 1h;
  SetExpiry(expiry);
  const std::string path = Kubeconfig(
      "https://prod:6443", "      interactiveMode: Never\n      provideClusterInfo: true\n");
  StatusOr<KubeConfig> c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->token, "tok-1");
  ASSERT_TRUE(c->exec.has_value());
  EXPECT_EQ(c->exec->command, dir_ + "/./bin/plugin.sh");
  ASSERT_TRUE(c->token_expiry.has_value());
  EXPECT_EQ(FormatMicroTime(*c->token_expiry), FormatMicroTime(expiry));
  EXPECT_EQ(Read("args"), "get-token --cluster prod\n");
  EXPECT_EQ(Read("env"), "hello\n");
  const json info = json::parse(Read("info.json"), nullptr, false);
  ASSERT_TRUE(info.is_object()) << Read("info.json");
  EXPECT_EQ(info.value("apiVersion", ""), kV1);
  EXPECT_EQ(info.value("kind", ""), "ExecCredential");
  EXPECT_EQ(info["spec"]["interactive"], false);  // interactiveMode: Never
  EXPECT_EQ(info["spec"]["cluster"]["server"], "https://prod:6443");
  EXPECT_EQ(info["spec"]["cluster"]["certificate-authority-data"], Base64Encode("CA-PEM"));
  EXPECT_EQ(info["spec"]["cluster"]["config"]["audience"], "prod-cluster");

  // Without provideClusterInfo the plugin is told nothing of the cluster.
  StatusOr<KubeConfig> bare =
      LoadKubeconfig(Kubeconfig("https://prod:6443", "      interactiveMode: Never\n"));
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->token, "tok-2");
  EXPECT_FALSE(json::parse(Read("info.json"))["spec"].contains("cluster"));
}

TEST_F(ExecPluginTest, APluginMayGiveAClientCertificate) {
  Script(R"(printf '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", )"
         R"("status": {"clientCertificateData": "CERT", "clientKeyData": "KEY"}}')");
  StatusOr<KubeConfig> c =
      LoadKubeconfig(Kubeconfig("https://h", "      interactiveMode: Never\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->client_cert_pem, "CERT");
  EXPECT_EQ(c->client_key_pem, "KEY");
  EXPECT_TRUE(c->token.empty());
  EXPECT_TRUE(c->exec.has_value());  // the client asks again when it expires
}

// A plugin that hands out short-lived client certificates: the client runs it
// again before the first one expires and connects with the second.
TEST_F(ExecPluginTest, ARenewedClientCertificateIsUsedForTheNextConnections) {
  ht::TestCa ca(dir_, "cluster");
  ASSERT_TRUE(ca.ok());
  const auto server_cert = ca.Issue("apiserver", "apiserver", true);
  const auto now = std::chrono::system_clock::now();
  int n = 0;
  for (const auto& [cn, expiry] : {std::pair{"sso:alice-1", now + 5s},  // inside the 10 s margin
                                   std::pair{"sso:alice-2", now + 1h}}) {
    ++n;
    const auto cert = ca.Issue(cn, "client-" + std::to_string(n), false);
    const nlohmann::json answer = {{"apiVersion", "client.authentication.k8s.io/v1"},
                                   {"kind", "ExecCredential"},
                                   {"status",
                                    {{"clientCertificateData", cert.cert_pem},
                                     {"clientKeyData", cert.key_pem},
                                     {"expirationTimestamp", FormatMicroTime(expiry)}}}};
    ASSERT_TRUE(ht::WriteFile(dir_ + "/answer-" + std::to_string(n) + ".json", answer.dump()));
  }
  Script(R"sh(n=$(( $(cat "$DIR/count" 2>/dev/null || echo 0) + 1 ))
echo $n > "$DIR/count"
cat "$DIR/answer-$n.json"
)sh");
  auto server = ca.MutualTlsServer(server_cert);
  server->Handle("GET", "/api/v1/nodes/n1", [](const http::Request& r) {
    return http::Response::Json(
        200, nlohmann::json{{"metadata",
                             {{"name", "n1"}, {"annotations", {{"who", r.client_cert_subject}}}}}}
                 .dump());
  });
  ASSERT_TRUE(server->Start().ok());
  const std::string path = dir_ + "/kubeconfig";
  ASSERT_TRUE(ht::WriteFile(path,
                            "apiVersion: v1\nkind: Config\ncurrent-context: prod\n"
                            "contexts:\n- name: prod\n  context: {cluster: prod, user: sso}\n"
                            "clusters:\n- name: prod\n  cluster:\n    server: https://127.0.0.1:" +
                                std::to_string(server->port()) +
                                "\n    certificate-authority-data: " + Base64Encode(ca.ca_pem()) +
                                "\nusers:\n- name: sso\n  user:\n    exec:\n"
                                "      apiVersion: client.authentication.k8s.io/v1\n"
                                "      command: ./bin/plugin.sh\n      interactiveMode: Never\n"
                                "      env:\n      - {name: DIR, value: '" +
                                dir_ + "'}\n"));
  StatusOr<KubeConfig> cfg = LoadKubeconfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(Runs(), 1);
  cfg->qps = 0;
  auto client = NewKubeClient(*cfg);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto who = [&]() -> std::string {
    StatusOr<nlohmann::json> node = (*client)->Get(Nodes(), "", "n1");
    return node.ok() ? (*node)["metadata"]["annotations"]["who"].get<std::string>()
                     : node.status().ToString();
  };
  EXPECT_EQ(who(), "/CN=sso:alice-2") << "the first certificate was about to expire";
  EXPECT_EQ(Runs(), 2);
  EXPECT_EQ(who(), "/CN=sso:alice-2");
  EXPECT_EQ(Runs(), 2) << "valid for an hour: not fetched again";
}

TEST_F(ExecPluginTest, PluginFailuresAreClearErrors) {
  struct Case {
    std::string name, script, extra;
    StatusCode code;
    std::string want;
    std::string env = "";
  };
  const std::string never = "      interactiveMode: Never\n";
  const std::vector<Case> cases = {
      {"exit status", "echo 'token expired, run sso login' >&2\nexit 3\n", never,
       StatusCode::kUnavailable, "exec plugin " + dir_ + "/./bin/plugin.sh exited with status 3"},
      {"killed", "kill -9 $$\n", never, StatusCode::kUnavailable, "killed by signal 9"},
      {"not json", "echo 'Please log in'\n", never, StatusCode::kInvalidArgument,
       "its output is not a JSON object"},
      {"older api",
       "echo '" + Answer(R"({"token": "a"})", "client.authentication.k8s.io/v1beta1") + "'\n",
       never, StatusCode::kInvalidArgument, "want \"client.authentication.k8s.io/v1\""},
      {"no credential", "echo '" + Answer("{}") + "'\n", never, StatusCode::kInvalidArgument,
       "neither a token"},
      {"v1 without interactiveMode", "exit 0\n", "", StatusCode::kInvalidArgument,
       "exec.interactiveMode must be set"},
      {"bad interactiveMode", "exit 0\n", "      interactiveMode: Sometimes\n",
       StatusCode::kInvalidArgument, "\"Sometimes\" is not one of"},
      {"env without a name", "exit 0\n", never, StatusCode::kInvalidArgument,
       "is not a variable name", "      env: [{value: x}]\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Script(c.script);
    StatusOr<KubeConfig> cfg = LoadKubeconfig(Kubeconfig("https://h", c.extra, c.env));
    ASSERT_FALSE(cfg.ok());
    EXPECT_EQ(cfg.status().code(), c.code) << cfg.status().ToString();
    EXPECT_NE(cfg.status().message().find(c.want), std::string::npos)
        << "want \"" << c.want << "\" in: " << cfg.status().message();
    EXPECT_NE(cfg.status().message().find("user sso"), std::string::npos) << cfg.status().message();
  }
}

TEST(ExecPluginRunTest, APluginThatHangsIsStopped) {
  ExecPlugin p;
  p.user = "u";
  p.api_version = kV1;
  p.interactive_mode = "Never";
  p.command = "/bin/sh";
  // A child of the plugin holds standard error open: it is stopped too.
  p.args = {"-c", "sleep 30 & sleep 30; wait"};
  p.timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<ExecCredential> r = RunExecPlugin(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("did not answer within"), std::string::npos)
      << r.status().message();
  // Killed, not waited for: far less than its 30 s sleep.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

TEST(ExecPluginRunTest, AlwaysInteractiveNeedsATerminal) {
  if (::isatty(STDIN_FILENO) == 1) GTEST_SKIP() << "standard input is a terminal here";
  ExecPlugin p;
  p.user = "u";
  p.api_version = kV1;
  p.interactive_mode = "Always";
  p.command = "/bin/true";
  StatusOr<ExecCredential> r = RunExecPlugin(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("needs a terminal"), std::string::npos)
      << r.status().message();
}

// The client fetches the token again when it is about to expire (before the
// request, without a 401) and after a 401; concurrent requests share one run.
class ExecPluginClientTest : public ExecPluginTest {
 protected:
  void SetUp() override {
    ExecPluginTest::SetUp();
    ASSERT_TRUE(api_.Start().ok());
    TokenScript();
  }
  std::unique_ptr<KubeClient> Client() {
    StatusOr<KubeConfig> cfg =
        LoadKubeconfig(Kubeconfig(api_.url(), "      interactiveMode: Never\n"));
    EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
    if (!cfg.ok()) return nullptr;
    cfg->qps = 0;
    cfg->timeout = 5000ms;
    auto c = NewKubeClient(*cfg);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  FakeApiServer api_;
};

TEST_F(ExecPluginClientTest, ATokenAboutToExpireIsFetchedBeforeTheRequest) {
  SetExpiry(std::chrono::system_clock::now() + 5s);  // inside the 10 s margin
  std::unique_ptr<KubeClient> client = Client();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(Runs(), 1);
  api_.RequireToken("tok-2");
  ASSERT_TRUE(client->List(Pods(), "ml", ListOptions()).ok());
  EXPECT_EQ(Runs(), 2);
  EXPECT_EQ(api_.Unauthorized(), 0);
  // tok-2 also expires within the margin: it is not fetched again at every
  // request, only after kExecRetry.
  ASSERT_TRUE(client->List(Pods(), "ml", ListOptions()).ok());
  EXPECT_EQ(Runs(), 2);
}

TEST_F(ExecPluginClientTest, ARefusedTokenIsFetchedAgainOnce) {
  std::unique_ptr<KubeClient> client = Client();  // tok-1, valid for an hour
  ASSERT_NE(client, nullptr);
  api_.RequireToken("tok-2");  // revoked on the server
  ASSERT_TRUE(client->List(Pods(), "ml", ListOptions()).ok());
  EXPECT_EQ(api_.Unauthorized(), 1);
  EXPECT_EQ(Runs(), 2);
  // A watch refused before its stream starts goes the same way.
  api_.RequireToken("tok-3");
  WatchOptions wo;
  wo.server_timeout = 1s;
  const Status st = client->Watch(Pods(), "ml", wo, [](const WatchEvent&) {}, {});
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(api_.Unauthorized(), 2);
  EXPECT_EQ(Runs(), 3);
  // A plugin that now fails leaves the request refused, with the server's
  // answer, and the client working.
  Script("exit 1\n");
  api_.RequireToken("tok-9");
  const auto refused = client->List(Pods(), "ml", ListOptions());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
}

TEST_F(ExecPluginClientTest, ConcurrentRequestsShareOneRun) {
  SetExpiry(std::chrono::system_clock::now() + 5s);
  std::unique_ptr<KubeClient> client = Client();
  ASSERT_NE(client, nullptr);
  api_.RequireToken("tok-2");
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (client->List(Pods(), "ml", ListOptions()).ok()) ++ok;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(Runs(), 2);
}

// A plugin that caches its token hands the refused one back: the requests
// refused while it ran take its answer, and it is not run again once per
// waiting request (each run may take seconds, before the request's timeout
// even starts).
TEST_F(ExecPluginClientTest, ACachedTokenHandedBackIsNotFetchedOncePerWaitingRequest) {
  SetExpiry(std::chrono::system_clock::now() + 1h);
  Script(R"sh(n=$(( $(cat "$DIR/count" 2>/dev/null || echo 0) + 1 ))
echo $n > "$DIR/count"
sleep 0.5
printf '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
printf '"status": {"token": "cached", "expirationTimestamp": "%s"}}\n' "$(cat "$DIR/expiry")"
)sh");
  std::unique_ptr<KubeClient> client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(Runs(), 1);
  api_.RequireToken("revoked-everywhere");
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (client->List(Pods(), "ml", ListOptions()).status().code() ==
          StatusCode::kUnauthenticated) {
        ++refused;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(refused.load(), 8);
  // One run for the eight (two should a request be refused only after that
  // run ended), not eight.
  EXPECT_LE(Runs(), 3);
}

}  // namespace
}  // namespace accelpool::kube
