// The routes over real loopback HTTP (port 0).
#include "extender/server.h"

#include <atomic>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace accelpool::extender
