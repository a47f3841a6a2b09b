// The routes over real loopback HTTP (port 0).
#include "extender/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

TEST(ServerTest, ServesVerbsHealthAndMetrics) {
  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  MetricsRegistry registry;
  auto metrics = ExtenderMetrics::Register(registry);
  ASSERT_TRUE(metrics.ok());
  auto ext = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, &*metrics, Logger());
  ASSERT_TRUE(ext.ok());
  Handlers handlers(**ext, nullptr, &*metrics, Logger());
  Webhook webhook(WebhookOptions{}, &cache, Logger());
  std::atomic<bool> ready{false};
  http::ServerOptions so;
  so.host = "127.0.0.1";
  std::unique_ptr<http::HttpServer> server = http::NewHttpServer(so);
  RegisterRoutes(*server, Routes{&handlers, &webhook, &registry, [&] { (*ext)->UpdateGauges(); },
                                 [&] { return ready ? std::string() : std::string("syncing"); },
                                 SchedulerVerbGate(false)});
  ASSERT_TRUE(server->Start().ok());
  http::ClientOptions co;
  co.base_url = "http://127.0.0.1:" + std::to_string(server->port());
  auto client = http::NewHttpClient(co);
  ASSERT_TRUE(client.ok());
  struct Case {
    const char* method;
    const char* path;
    std::string body;
    int want_status;
    const char* want;
  };
  const std::string pod =
      R"({"metadata":{"name":"p","namespace":"ns","uid":"u"},"spec":{"containers":[)"
      R"({"name":"m","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})";
  const Case cases[] = {
      {"GET", "/healthz", "", 200, "ok"},
      {"GET", "/readyz", "", 503, "syncing"},
      {"POST", "/filter", R"({"Pod":)" + pod + R"(,"NodeNames":["node-a"]})", 200,
       R"("NodeNames":["node-a"])"},
      {"POST", "/prioritize", R"({"Pod":)" + pod + R"(,"NodeNames":["node-a"]})", 200,
       R"([{"Host":"node-a","Score":10}])"},
      {"POST", "/bind", R"({"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":"node-a"})", 200,
       R"({"Error":""})"},
      {"POST", "/filter", "{", 400, "malformed"},
      {"POST", "/mutate", "{}", 400, "AdmissionReview"},
      {"POST", "/mutate-host-pods", "{}", 400, "AdmissionReview"},
      {"GET", "/metrics", "", 200, "accelpool_extender_request_seconds_bucket"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.method) + " " + c.path);
    http::ClientRequest req;
    req.method = c.method;
    req.path = c.path;
    req.body = c.body;
    req.headers["content-type"] = "application/json";
    StatusOr<http::ClientResponse> r = (*client)->Send(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, c.want_status) << r->body;
    EXPECT_NE(r->body.find(c.want), std::string::npos) << r->body;
  }
  ready = true;
  http::ClientRequest req;
  req.path = "/readyz";
  EXPECT_EQ((*client)->Send(req)->status, 200);
  http::ClientRequest metrics_req;
  metrics_req.path = "/metrics";
  StatusOr<http::ClientResponse> page = (*client)->Send(metrics_req);
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->body.find("accelpool_extender_device_memory_allocated_mib"), std::string::npos);
  server->Stop();
}

// The listener other hosts reach serves kube-scheduler's verbs only to a
// loopback peer or a client with a verified certificate: bind writes
// Bindings with the extender's own credentials.
TEST(ServerTest, SchedulerVerbsAreServedOnlyToLoopbackOrCertifiedPeers) {
  for (const char* p : {"127.0.0.1:5000", "127.8.9.1:1", "::1:5000", "::ffff:127.0.0.1:80"}) {
    EXPECT_TRUE(FromLoopback(p)) << p;
  }
  for (const char* p : {"10.0.0.7:5000", "::ffff:10.0.0.7:80", "fe80::1:5000", "1.127.0.0:1", ""}) {
    EXPECT_FALSE(FromLoopback(p)) << p;
  }
  const auto gate = SchedulerVerbGate(false);
  http::Request req;
  req.peer = "10.0.0.7:5000";
  EXPECT_NE(gate(req).find("--scheduler-listen"), std::string::npos);
  req.client_cert_subject = "CN=kube-scheduler";
  EXPECT_EQ(gate(req), "");
  req.client_cert_subject.clear();
  req.peer = "127.0.0.1:5000";
  EXPECT_EQ(gate(req), "");
  EXPECT_FALSE(SchedulerVerbGate(true));  // --scheduler-verbs-from-any: no gate

  // A refused call is answered 403 with the reason, and nothing is bound.
  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  testing::FakeWriter writer;
  auto ext = Extender::Create(cache, ExtenderOptions{}, &writer, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  Handlers handlers(**ext, nullptr, nullptr, Logger());
  http::ServerOptions so;
  so.host = "127.0.0.1";
  std::unique_ptr<http::HttpServer> server = http::NewHttpServer(so);
  RegisterRoutes(*server, Routes{&handlers, nullptr, nullptr, {}, {}, [](const http::Request&) {
                                   return std::string("not you");
                                 }});
  ASSERT_TRUE(server->Start().ok());
  http::ClientOptions co;
  co.base_url = "http://127.0.0.1:" + std::to_string(server->port());
  auto client = http::NewHttpClient(co);
  ASSERT_TRUE(client.ok());
  for (const char* path : {"/filter", "/prioritize", "/bind", "/preempt"}) {
    SCOPED_TRACE(path);
    http::ClientRequest r;
    r.method = "POST";
    r.path = path;
    r.body = R"({"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":"node-a"})";
    auto resp = (*client)->Send(r);
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    EXPECT_EQ(resp->status, 403);
    EXPECT_NE(resp->body.find("not you"), std::string::npos) << resp->body;
  }
  EXPECT_TRUE(writer.calls().empty());
  server->Stop();
}

// Sends only a request's head (no body) and returns all the server says
// before it closes the connection (or 5 s pass).
std::string HeadOnly(uint16_t port, const std::string& head) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size())) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return got;
}

// Whoever reaches the listener cannot make the extender hold a large body:
// the webhook takes at most kWebhookMaxBodyBytes, the GET routes
// kGetMaxBodyBytes, and a verb from a caller the gate refuses is answered
// 403 from its head, whatever its Content-Length. Each is answered without
// the body being sent.
TEST(ServerTest, BodiesAreRefusedFromTheirHead) {
  Cache cache;
  testing::AddGpuNode(cache, "node-a");
  auto ext = Extender::Create(cache, ExtenderOptions{}, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());
  Handlers handlers(**ext, nullptr, nullptr, Logger());
  Webhook webhook(WebhookOptions{}, &cache, Logger());
  http::ServerOptions so;
  so.host = "127.0.0.1";
  so.max_body_bytes = size_t{64} << 20;  // --max-body-bytes' default
  std::unique_ptr<http::HttpServer> server = http::NewHttpServer(so);
  RegisterRoutes(*server, Routes{&handlers, &webhook, nullptr, {}, {}, [](const http::Request&) {
                                   return std::string("not you");
                                 }});
  ASSERT_TRUE(server->Start().ok());
  const std::string webhook_over = std::to_string(kWebhookMaxBodyBytes + 1);
  struct Case {
    std::string head;
    const char* status;
    std::string says;
  };
  const Case cases[] = {
      {"POST /mutate HTTP/1.1\r\nContent-Length: " + webhook_over + "\r\n\r\n", "413",
       "exceeds the limit of " + std::to_string(kWebhookMaxBodyBytes) + " on /mutate"},
      {"POST /mutate-host-pods HTTP/1.1\r\nContent-Length: " + webhook_over + "\r\n\r\n", "413",
       "on /mutate-host-pods"},
      {"GET /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n", "413", "on /metrics"},
      {"POST /filter HTTP/1.1\r\nContent-Length: 60000000\r\n\r\n", "403", "not you"},
      {"POST /bind HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n", "403",
       "not you"},  // the gate first: over any limit, a refused caller hears why
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.head);
    const std::string got = HeadOnly(server->port(), c.head);
    EXPECT_EQ(got.rfind(std::string("HTTP/1.1 ") + c.status + " ", 0), 0u) << got;
    EXPECT_NE(got.find(c.says), std::string::npos) << got;
  }
  server->Stop();
}

}  // namespace
}  // namespace accelpool::extender
