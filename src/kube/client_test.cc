#include "kube/client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "common/metrics.h"
#include "http/http.h"
#include "kube/fake_api_test.h"
#include "kube/fake_apiserver.h"
#include "kube/objects.h"

namespace accelpool::kube {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using kube::testing::WaitUntil;

json Pod(const std::string& name, const std::string& node = "",
         const json& labels = json::object()) {
  json p = {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"namespace", "ml"}, {"labels", labels}}},
            {"spec", {{"containers", json::array()}}}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return p;
}

class KubeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    KubeConfig cfg;
    cfg.server = api_.url();
    cfg.token = "t0ken";
    cfg.qps = 0;  // unlimited in tests
    cfg.timeout = 5000ms;
    auto c = NewKubeClient(cfg);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
  }
  FakeApiServer api_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(KubeClientTest, EitherTransportReadsAndWritesAndABadOneIsRefused) {
  api_.Put("/api/v1/namespaces/ml/pods", Pod("p0"));
  for (const char* transport : {"sockets", "cpprestsdk"}) {
    KubeConfig cfg;
    cfg.server = api_.url();
    cfg.qps = 0;
    cfg.transport = transport;
    cfg.max_connections = 2;
    auto c = NewKubeClient(cfg);
    ASSERT_TRUE(c.ok()) << transport << ": " << c.status().ToString();
    auto got = (*c)->Get(Pods(), "ml", "p0");
    ASSERT_TRUE(got.ok()) << transport << ": " << got.status().ToString();
    EXPECT_EQ((*got)["metadata"]["name"], "p0");
    // More concurrent callers than connections: they take turns.
    std::vector<std::future<bool>> calls;
    for (int i = 0; i < 6; ++i) {
      calls.push_back(std::async(std::launch::async, [&c] {
        return (*c)->Get(Pods(), "ml", "p0").ok();
      }));
    }
    for (auto& f : calls) EXPECT_TRUE(f.get()) << transport;
  }
  KubeConfig bad;
  bad.server = api_.url();
  bad.transport = "curl";
  auto c = NewKubeClient(bad);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("use sockets or cpprestsdk"), std::string::npos)
      << c.status().message();
}

TEST_F(KubeClientTest, ListFollowsContinueTokensAndSelectors) {
  for (int i = 0; i < 7; ++i) {
    api_.Put("/api/v1/namespaces/ml/pods",
             Pod("p" + std::to_string(i), i % 2 ? "node-a" : "", {{"app", i < 3 ? "x" : "y"}}));
  }
  api_.Put("/api/v1/namespaces/other/pods", Pod("q"));
  ListOptions lo;
  lo.limit = 2;
  auto all = client_->List(Pods(), "ml", lo);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->items.size(), 7u);
  EXPECT_FALSE(all->resource_version.empty());
  int pages = 0;
  for (const auto& r : api_.Requests()) pages += r.find("GET /api/v1/namespaces/ml/pods") == 0;
  EXPECT_EQ(pages, 4);

  struct Case {
    std::string ns, labels, fields;
    size_t want;
  };
  const std::vector<Case> cases = {
      {"", "", "", 8},
      {"ml", "app=x", "", 3},
      {"ml", "app!=x", "", 4},
      {"ml", "", "spec.nodeName=node-a", 3},
      {"ml", "app=y", "spec.nodeName=", 2},
      {"ml", "missing", "", 0},
  };
  for (const Case& c : cases) {
    ListOptions o;
    o.label_selector = c.labels;
    o.field_selector = c.fields;
    auto r = client_->List(Pods(), c.ns, o);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->items.size(), c.want) << c.ns << " " << c.labels << " " << c.fields;
  }
}

TEST_F(KubeClientTest, ListKeepsOnlyWhatItsCallerKeepsPageByPage) {
  for (int i = 0; i < 7; ++i) {
    api_.Put("/api/v1/namespaces/ml/pods", Pod("p" + std::to_string(i), i % 2 ? "node-a" : ""));
  }
  ListOptions lo;
  lo.limit = 2;
  int seen = 0;
  lo.keep = [&seen](nlohmann::json& item) {
    ++seen;
    item.erase("spec");  // trimmed in place
    return item["metadata"]["name"] != "p3";
  };
  auto kept = client_->List(Pods(), "ml", lo);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(seen, 7);
  ASSERT_EQ(kept->items.size(), 6u);
  for (const auto& item : kept->items) {
    EXPECT_FALSE(item.contains("spec"));
    EXPECT_NE(item["metadata"]["name"], "p3");
  }
}

TEST_F(KubeClientTest, MetadataOnlyListsCarryOnlyMetadata) {
  for (int i = 0; i < 5; ++i) {
    json p = Pod("p" + std::to_string(i), i < 3 ? "node-a" : "node-b");
    p["metadata"]["annotations"] = {
        {"accelpool.io/assignment", "{\"n\":" + std::to_string(i) + "}"}};
    p["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
    api_.Put("/api/v1/namespaces/ml/pods", p);
  }
  ListOptions o;
  o.metadata_only = true;
  o.field_selector = "spec.nodeName=node-a";
  o.limit = 2;  // two pages: every page in the same form
  auto meta = client_->List(Pods(), "ml", o);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_TRUE(meta->metadata_only);
  EXPECT_FALSE(meta->resource_version.empty());
  ASSERT_EQ(meta->items.size(), 3u);
  for (const json& item : meta->items) {
    EXPECT_EQ(item["kind"], "PartialObjectMetadata") << item.dump();
    EXPECT_EQ(item["apiVersion"], "meta.k8s.io/v1");
    EXPECT_FALSE(item.contains("spec")) << item.dump();
    const json& m = item["metadata"];
    EXPECT_EQ(m["namespace"], "ml");
    EXPECT_FALSE(m.value("uid", "").empty());
    EXPECT_FALSE(m.value("resourceVersion", "").empty());
    EXPECT_TRUE(m["annotations"].contains("accelpool.io/assignment"));
    EXPECT_FALSE(m.contains("managedFields")) << "dropped while parsing";
  }
  int pages = 0;
  for (const auto& r : api_.Requests()) pages += r.find("GET /api/v1/namespaces/ml/pods?") == 0;
  EXPECT_EQ(pages, 2);

  // Nothing matches: kube-apiserver answers "items": null, an empty list.
  o.field_selector = "spec.nodeName=node-z";
  auto none = client_->List(Pods(), "ml", o);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->metadata_only);
  EXPECT_TRUE(none->items.empty());
  o.field_selector = "spec.nodeName=node-a";

  // A plain list is unchanged: full objects, managedFields included.
  o.metadata_only = false;
  auto full = client_->List(Pods(), "ml", o);
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(full->metadata_only);
  ASSERT_EQ(full->items.size(), 3u);
  EXPECT_TRUE(full->items[0].contains("spec"));
  EXPECT_TRUE(full->items[0]["metadata"].contains("managedFields"));

  // A server that ignores the Accept header's parameters answers full
  // objects; the result says so.
  api_.ServeFullListsOnly(true);
  o.metadata_only = true;
  auto ignored = client_->List(Pods(), "ml", o);
  ASSERT_TRUE(ignored.ok());
  EXPECT_FALSE(ignored->metadata_only);
  ASSERT_EQ(ignored->items.size(), 3u);
  EXPECT_EQ(ignored->items[0]["kind"], "Pod");
  EXPECT_TRUE(ignored->items[0].contains("spec"));
}

TEST(FakeApiServerTest, NegotiatesTheListFormLikeKubeApiserver) {
  FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  api.Put("/api/v1/namespaces/ml/pods", Pod("p0", "node-a"));
  http::ClientOptions co;
  co.base_url = api.url();
  auto c = http::NewHttpClient(co);
  ASSERT_TRUE(c.ok());
  struct Case {
    std::string accept;
    int status;
    std::string kind;
  };
  const std::vector<Case> cases = {
      {"", 200, "List"},
      {"application/json", 200, "List"},
      {"*/*", 200, "List"},
      {"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", 200,
       "PartialObjectMetadataList"},
      {"application/json; as=PartialObjectMetadataList; g=meta.k8s.io; v=v1, application/json", 200,
       "PartialObjectMetadataList"},
      // A form this server does not serve is skipped for the next one.
      {"application/json;as=Table;g=meta.k8s.io;v=v1,application/json", 200, "List"},
      {"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v2,application/json", 200,
       "List"},
      {"application/json;as=Table;g=meta.k8s.io;v=v1", 406, ""},
      {"application/yaml", 406, ""},
  };
  for (const Case& k : cases) {
    http::ClientRequest r;
    r.path = "/api/v1/namespaces/ml/pods";
    if (!k.accept.empty()) r.headers["Accept"] = k.accept;
    auto resp = (*c)->Send(r);
    ASSERT_TRUE(resp.ok()) << k.accept;
    EXPECT_EQ(resp->status, k.status) << k.accept << ": " << resp->body;
    if (k.status != 200) continue;
    json body = json::parse(resp->body);
    EXPECT_EQ(body["kind"], k.kind) << k.accept;
    ASSERT_EQ(body["items"].size(), 1u);
    EXPECT_EQ(body["items"][0].contains("spec"), k.kind == "List") << k.accept;
  }
  api.Stop();
}

// A server whose pages of one list disagree on the form (a list served by
// two apiservers of different versions, say): the list fails rather than
// hand the caller metadata where it expects whole objects.
TEST(KubeClientMixedFormsTest, PagesInTwoFormsFailTheList) {
  http::ServerOptions so;
  so.host = "127.0.0.1";
  auto server = http::NewHttpServer(so);
  server->HandlePrefix("GET", "/api/", [](const http::Request& req) {
    const bool first = req.Query("continue").empty();
    json page = first ? json{{"kind", "PartialObjectMetadataList"},
                             {"apiVersion", "meta.k8s.io/v1"},
                             {"metadata", {{"continue", "1"}}},
                             {"items", json::array({{{"metadata", {{"name", "a"}}}}})}}
                      : json{{"kind", "PodList"},
                             {"apiVersion", "v1"},
                             {"metadata", json::object()},
                             {"items", json::array({Pod("b")})}};
    return http::Response::Json(200, page.dump());
  });
  ASSERT_TRUE(server->Start().ok());
  KubeConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(server->port());
  cfg.qps = 0;
  auto c = NewKubeClient(cfg);
  ASSERT_TRUE(c.ok());
  ListOptions o;
  o.metadata_only = true;
  auto r = (*c)->List(Pods(), "", o);
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
  server->Stop();
}

TEST_F(KubeClientTest, GetCreateUpdateDeleteAndErrorCodes) {
  auto created = client_->Create(Pods(), "ml", Pod("a"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string rv = (*created)["metadata"]["resourceVersion"];
  EXPECT_EQ(client_->Create(Pods(), "ml", Pod("a")).status().code(), StatusCode::kAlreadyExists);
  auto got = client_->Get(Pods(), "ml", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["metadata"]["resourceVersion"], rv);
  EXPECT_EQ(client_->Get(Pods(), "ml", "zz").status().code(), StatusCode::kNotFound);

  json upd = *got;
  upd["metadata"]["labels"]["v"] = "2";
  auto updated = client_->Update(Pods(), "ml", "a", upd);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  // The same stale version again: a conflict.
  auto stale = client_->Update(Pods(), "ml", "a", upd);
  EXPECT_EQ(stale.status().code(), StatusCode::kAborted) << stale.status().ToString();

  EXPECT_TRUE(client_->Delete(Pods(), "ml", "a").ok());
  EXPECT_EQ(client_->Delete(Pods(), "ml", "a").code(), StatusCode::kNotFound);

  struct Case {
    int http;
    StatusCode want;
  };
  for (const Case& c : std::vector<Case>{{500, StatusCode::kUnavailable},
                                         {503, StatusCode::kUnavailable},
                                         {504, StatusCode::kDeadlineExceeded},
                                         {429, StatusCode::kUnavailable},
                                         {403, StatusCode::kPermissionDenied},
                                         {401, StatusCode::kUnauthenticated},
                                         {410, StatusCode::kOutOfRange},
                                         {422, StatusCode::kInvalidArgument}}) {
    api_.FailNext(1, c.http);
    EXPECT_EQ(client_->Get(Pods(), "ml", "x").status().code(), c.want) << c.http;
  }
}

TEST(RetryAfterOfTest, ReadsTheHeaderThenTheStatusAndCapsTheWait) {
  EXPECT_EQ(RetryAfterOf("3", ""), 3s);
  EXPECT_EQ(RetryAfterOf("0", ""), 0s);
  EXPECT_EQ(RetryAfterOf("600", ""), kMaxRetryAfter);
  EXPECT_EQ(RetryAfterOf("99999999999999999999", ""), kMaxRetryAfter);
  const std::string status = R"({"kind":"Status","details":{"retryAfterSeconds":7}})";
  EXPECT_EQ(RetryAfterOf("", status), 7s);
  EXPECT_EQ(RetryAfterOf("2", status), 2s);  // the header wins
  // An HTTP-date, a sign, a fraction or a bad body ask for nothing.
  EXPECT_EQ(RetryAfterOf("Wed, 21 Oct 2026 07:28:00 GMT", ""), 0s);
  EXPECT_EQ(RetryAfterOf("-5", ""), 0s);
  EXPECT_EQ(RetryAfterOf("1.5", ""), 0s);
  EXPECT_EQ(RetryAfterOf("", R"({"details":{"retryAfterSeconds":-3}})"), 0s);
  EXPECT_EQ(RetryAfterOf("", R"({"details":{"retryAfterSeconds":"7"}})"), 0s);
  EXPECT_EQ(RetryAfterOf("", R"({"details":{"retryAfterSeconds":1e300}})"), 0s);
  EXPECT_EQ(RetryAfterOf("", "{not json"), 0s);
  EXPECT_EQ(RetryAfterOf("", R"({"details":7})"), 0s);
}

TEST_F(KubeClientTest, AThrottledAnswerTellsCallersHowLongToWait) {
  using std::chrono::steady_clock;
  EXPECT_EQ(client_->RetryNotBefore(), steady_clock::time_point{});
  // Only a 429 or a 5xx asks for a wait.
  api_.FailNext(1, 404, "30");
  EXPECT_EQ(client_->Get(Pods(), "ml", "x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->RetryNotBefore(), steady_clock::time_point{});
  auto sent = steady_clock::now();
  api_.FailNext(1, 429, "20");
  const Status st = client_->Get(Pods(), "ml", "x").status();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << "the client answers at once, no wait";
  EXPECT_GE(client_->RetryNotBefore(), sent + 20s);
  EXPECT_LE(client_->RetryNotBefore(), steady_clock::now() + 20s);
  // A shorter wait asked later does not shorten it, but is counted as asked.
  const uint64_t asks = client_->RetryAsks();
  EXPECT_EQ(asks, 1u);
  api_.FailNext(1, 503, "1");
  EXPECT_FALSE(client_->Get(Pods(), "ml", "x").ok());
  EXPECT_GE(client_->RetryNotBefore(), sent + 20s);
  EXPECT_EQ(client_->RetryAsks(), asks + 1);
  api_.FailNext(1, 503);  // no wait asked
  EXPECT_FALSE(client_->Get(Pods(), "ml", "x").ok());
  EXPECT_EQ(client_->RetryAsks(), asks + 1);
  // A refused watch asks too.
  sent = steady_clock::now();
  api_.FailNext(1, 429, "45");
  WatchOptions wo;
  const Status watched = client_->Watch(
      Pods(), "ml", wo, [](WatchEvent&) {}, std::stop_token());
  EXPECT_EQ(watched.code(), StatusCode::kUnavailable) << watched.ToString();
  EXPECT_GE(client_->RetryNotBefore(), sent + 45s);
  EXPECT_LE(client_->RetryNotBefore(), steady_clock::now() + 45s);
}

TEST(KubeClientWatchCacheTest, AWatchErrorEventThatAsksForAWaitIsKept) {
  FakeApiServer api;
  ASSERT_TRUE(api.Start().ok());
  KubeConfig cfg;
  cfg.server = api.url();
  cfg.qps = 0;
  auto c = NewKubeClient(cfg);
  ASSERT_TRUE(c.ok());
  api.TooLargeNextWatch(5);
  const auto sent = std::chrono::steady_clock::now();
  WatchOptions wo;
  wo.resource_version = "999999";
  const auto ignore = [](WatchEvent&) {};
  const Status st = (*c)->Watch(Pods(), "ml", wo, ignore, std::stop_token());
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("Too large resource version"), std::string::npos) << st.ToString();
  EXPECT_GE((*c)->RetryNotBefore(), sent + 5s);
  EXPECT_LE((*c)->RetryNotBefore(), std::chrono::steady_clock::now() + 5s);
}

TEST_F(KubeClientTest, RequestsAreCountedByClientVerbAndStatus) {
  MetricsRegistry registry;
  KubeConfig cfg;
  cfg.server = api_.url();
  cfg.qps = 0;
  cfg.timeout = 5000ms;
  cfg.metrics = &registry;
  cfg.metrics_client = "reads";
  auto c = NewKubeClient(cfg);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  KubeClient& client = **c;
  ASSERT_TRUE(client.Create(Pods(), "ml", Pod("a")).ok());
  ASSERT_TRUE(client.Get(Pods(), "ml", "a").ok());
  EXPECT_EQ(client.Get(Pods(), "ml", "missing").status().code(), StatusCode::kNotFound);
  api_.FailNext(1, 429, "1");
  EXPECT_FALSE(client.Get(Pods(), "ml", "a").ok());
  api_.FailNext(1, 503);
  const auto ignore = [](WatchEvent&) {};
  EXPECT_FALSE(client.Watch(Pods(), "ml", WatchOptions{}, ignore, std::stop_token()).ok());
  // A second client of the process counts into the same families.
  KubeConfig other = cfg;
  other.metrics_client = "api";
  auto c2 = NewKubeClient(other);
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  ASSERT_TRUE((*c2)->Get(Pods(), "ml", "a").ok());

  const std::string page = registry.Serialize();
  for (const std::string line :
       {R"(accelpool_kube_requests_total{client="reads",verb="POST",code="201"} 1)",
        R"(accelpool_kube_requests_total{client="reads",verb="GET",code="200"} 1)",
        R"(accelpool_kube_requests_total{client="reads",verb="GET",code="404"} 1)",
        R"(accelpool_kube_requests_total{client="reads",verb="GET",code="429"} 1)",
        R"(accelpool_kube_requests_total{client="reads",verb="WATCH",code="503"} 1)",
        R"(accelpool_kube_requests_total{client="api",verb="GET",code="200"} 1)",
        R"(accelpool_kube_request_seconds_count{client="reads",verb="GET"} 3)"}) {
    EXPECT_NE(page.find(line + "\n"), std::string::npos) << line << "\n" << page;
  }
  EXPECT_EQ(page.find(R"(accelpool_kube_request_seconds_count{client="reads",verb="WATCH"})"),
            std::string::npos)
      << "a watch's time is not a request latency";

  // An apiserver that cannot be reached counts as "error".
  KubeConfig gone = cfg;
  gone.server = "http://127.0.0.1:1";
  gone.metrics_client = "gone";
  auto c3 = NewKubeClient(gone);
  ASSERT_TRUE(c3.ok());
  EXPECT_FALSE((*c3)->Get(Pods(), "ml", "a").ok());
  EXPECT_NE(registry.Serialize().find(
                R"(accelpool_kube_requests_total{client="gone",verb="GET",code="error"} 1)"),
            std::string::npos);
}

TEST_F(KubeClientTest, NamesThatWouldChangeTheRequestsPathAreRefusedUnsent) {
  // The extender's bind takes a pod's namespace and name from the request
  // body: neither may step out of the object's path.
  const size_t before = api_.Requests().size();
  for (const std::string bad : {"a/../b", "..", ".", "a?watch=1", "a#x", "a%2Fb", "a b", "a\\b"}) {
    SCOPED_TRACE(bad);
    const StatusOr<json> got = client_->Get(Pods(), bad, "x");
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find("not a Kubernetes object name"), std::string::npos);
    EXPECT_EQ(client_->Get(Pods(), "ml", bad).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(client_->Delete(Pods(), "ml", bad).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(client_->Create(Pods(), "ml", Pod("p"), bad).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(client_->Patch(Pods(), "ml", bad, PatchType::kMerge, json::object()).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(client_->List(Pods(), bad, ListOptions{}).status().code(),
              StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(api_.Requests().size(), before);
  // Ordinary names (dots, dashes, colons as in system:... names) still go.
  EXPECT_EQ(client_->Get(Pods(), "ml", "web-0.v1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Get(Pods(), "kube-system", "system:node-a").status().code(),
            StatusCode::kNotFound);
}

TEST_F(KubeClientTest, PatchesWithPreconditions) {
  json pod = api_.Put("/api/v1/namespaces/ml/pods", Pod("p"));
  const std::string rv = pod["metadata"]["resourceVersion"];

  // JSON patch guarded by a test op on resourceVersion.
  json jp =
      json::array({{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", rv}},
                   {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{"a", "1"}}}}});
  auto ok = client_->Patch(Pods(), "ml", "p", PatchType::kJson, jp);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["metadata"]["annotations"]["a"], "1");
  auto again = client_->Patch(Pods(), "ml", "p", PatchType::kJson, jp);
  EXPECT_EQ(again.status().code(), StatusCode::kAborted) << again.status().ToString();
  // Another 422 that merely has "test" in it (here the key it names) is no
  // failed test: it keeps the apiserver's message, as invalid.
  json bad = json::array({{{"op", "remove"}, {"path", "/metadata/annotations/attest"}}});
  auto invalid = client_->Patch(Pods(), "ml", "p", PatchType::kJson, bad);
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument) << invalid.status().ToString();
  EXPECT_NE(invalid.status().message().find("attest"), std::string::npos)
      << invalid.status().ToString();

  // Merge patch with a stale resourceVersion: 409 -> kAborted.
  Status st = PatchAnnotations(*client_, Pods(), "ml", "p", {{"b", "2"}}, rv);
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st.ToString();
  st = PatchAnnotations(*client_, Pods(), "ml", "p", {{"b", "2"}, {"a", std::nullopt}});
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto now = api_.Object("/api/v1/namespaces/ml/pods", "p");
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ((*now)["metadata"]["annotations"], json({{"b", "2"}}));
}

TEST_F(KubeClientTest, BindingEventsAndLeases) {
  json pod = api_.Put("/api/v1/namespaces/ml/pods", Pod("p"));
  EXPECT_EQ(CreatePodBinding(*client_, "ml", "p", "node-a", "wrong-uid").code(),
            StatusCode::kAborted);
  ASSERT_TRUE(CreatePodBinding(*client_, "ml", "p", "node-a", pod["metadata"]["uid"]).ok());
  EXPECT_EQ((*api_.Object("/api/v1/namespaces/ml/pods", "p"))["spec"]["nodeName"], "node-a");
  EXPECT_EQ(CreatePodBinding(*client_, "ml", "p", "node-b", "").code(), StatusCode::kAborted);
  EXPECT_EQ(CreatePodBinding(*client_, "ml", "gone", "node-b", "").code(), StatusCode::kNotFound);

  ObjectRef ref;
  ref.ns = "ml";
  ref.name = "p";
  ref.uid = pod["metadata"]["uid"];
  ASSERT_TRUE(CreateEvent(*client_, ref, EventKind::kWarning, "AccelpoolAllocateFailed",
                          "no device", "accelpool-device-plugin", "Allocate")
                  .ok());
  auto events = client_->List(Events(), "ml", {});
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->items.size(), 1u);
  EXPECT_EQ(events->items[0]["reason"], "AccelpoolAllocateFailed");
  EXPECT_EQ(events->items[0]["regarding"]["uid"], ref.uid);
  EXPECT_EQ(events->items[0]["type"], "Warning");

  // An apiserver without events.k8s.io/v1 (404): the event goes to core/v1.
  api_.FailNext(1, 404);
  ASSERT_TRUE(CreateEvent(*client_, ref, EventKind::kNormal, "AccelpoolAllocated", "ok",
                          "accelpool-device-plugin", "Allocate")
                  .ok());
  auto core_events = client_->List(CoreEvents(), "ml", {});
  ASSERT_TRUE(core_events.ok());
  ASSERT_EQ(core_events->items.size(), 1u);
  EXPECT_EQ(core_events->items[0]["reason"], "AccelpoolAllocated");
  EXPECT_EQ(core_events->items[0]["involvedObject"]["name"], "p");
  EXPECT_EQ(core_events->items[0]["source"]["component"], "accelpool-device-plugin");

  Lease l;
  l.ns = "kube-system";
  l.name = "accelpool-extender";
  l.holder = "pod-1";
  l.renew_time = FormatMicroTime(std::chrono::system_clock::now());
  EXPECT_EQ(GetLease(*client_, l.ns, l.name).status().code(), StatusCode::kNotFound);
  auto created = CreateLease(*client_, l);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(CreateLease(*client_, l).status().code(), StatusCode::kAlreadyExists);
  auto mine = *created;
  auto theirs = *created;
  theirs.holder = "pod-2";
  ASSERT_TRUE(UpdateLease(*client_, theirs).ok());
  mine.renew_time = FormatMicroTime(std::chrono::system_clock::now());
  EXPECT_EQ(UpdateLease(*client_, mine).status().code(), StatusCode::kAborted);
  auto got = GetLease(*client_, l.ns, l.name);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->holder, "pod-2");
  auto t = ParseMicroTime(got->renew_time);
  ASSERT_TRUE(t.ok()) << got->renew_time;
  EXPECT_EQ(FormatMicroTime(*t), got->renew_time);
  EXPECT_FALSE(ParseMicroTime("yesterday").ok());
  // Years the clock or a difference with now cannot hold.
  EXPECT_FALSE(ParseMicroTime("9999-12-31T23:59:59.000000Z").ok());
  EXPECT_FALSE(ParseMicroTime("1700-01-01T00:00:00.000000Z").ok());
  EXPECT_TRUE(ParseMicroTime("2199-12-31T23:59:59.000000Z").ok());
}

TEST_F(KubeClientTest, ALeaseUpdateKeepsTheFieldsItDoesNotOwn) {
  // A Lease someone labelled and gave coordinated-election fields: renewing
  // it must not drop them (a PUT replaces the whole object).
  api_.Put("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
           {{"apiVersion", "coordination.k8s.io/v1"},
            {"kind", "Lease"},
            {"metadata",
             {{"name", "l"},
              {"namespace", "kube-system"},
              {"labels", {{"team", "platform"}}},
              {"annotations", {{"keep", "me"}, {"drop", "me"}}}}},
            {"spec",
             {{"holderIdentity", "a"},
              {"leaseDurationSeconds", 15},
              {"strategy", "OldestEmulationVersion"},
              {"preferredHolder", "b"}}}});
  auto lease = GetLease(*client_, "kube-system", "l");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  lease->holder = "b";
  lease->renew_time = FormatMicroTime(std::chrono::system_clock::now());
  lease->annotations.erase("drop");
  lease->annotations["mine"] = "x";
  ASSERT_TRUE(UpdateLease(*client_, *lease).ok());
  std::optional<json> stored =
      api_.Object("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", "l");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ((*stored)["metadata"]["labels"], (json{{"team", "platform"}}));
  EXPECT_EQ((*stored)["metadata"]["annotations"], (json{{"keep", "me"}, {"mine", "x"}}));
  EXPECT_EQ((*stored)["spec"]["strategy"], "OldestEmulationVersion");
  EXPECT_EQ((*stored)["spec"]["preferredHolder"], "b");
  EXPECT_EQ((*stored)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*stored)["spec"]["renewTime"], lease->renew_time);
}

// The apiserver refuses a note over 1024 bytes. A cut through a multibyte
// character would leave half of it, which the JSON encoder writes as U+FFFD
// (3 bytes): the note must end on a whole character and stay within 1024.
TEST_F(KubeClientTest, ALongEventNoteIsCutOnACharacterBoundary) {
  std::string message(1020, 'a');
  message += "\xC3\xA9";  // "é" at bytes 1020 and 1021
  message += std::string(1100 - message.size(), 'b');
  ObjectRef ref;
  ref.ns = "ml";
  ref.name = "p";
  ASSERT_TRUE(CreateEvent(*client_, ref, EventKind::kWarning, "AccelpoolAllocateFailed", message,
                          "accelpool-device-plugin", "Allocate")
                  .ok());
  auto events = client_->List(Events(), "ml", {});
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->items.size(), 1u);
  const std::string note = events->items[0]["note"];
  EXPECT_LE(note.size(), 1024u);
  EXPECT_EQ(note, std::string(1020, 'a') + "...");

  // Bad bytes count as the replacement character they become.
  const std::string bad = EventNote(std::string(600, '\xFF') + std::string(600, 'c'));
  EXPECT_LE(bad.size(), 1024u);
  EXPECT_EQ(bad.substr(bad.size() - 3), "...");
  EXPECT_EQ(bad.substr(0, 3), "\xEF\xBF\xBD");
  EXPECT_EQ(EventNote("short \xC3\xA9"), "short \xC3\xA9");
  EXPECT_EQ(EventNote(std::string(1024, 'x')), std::string(1024, 'x'));
}

TEST_F(KubeClientTest, WatchEventsArriveWithoutManagedFields) {
  json first = api_.Put("/api/v1/namespaces/ml/pods", Pod("p0"));
  WatchOptions wo;
  wo.resource_version = first["metadata"]["resourceVersion"];
  json p1 = Pod("p1");
  p1["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  p1["spec"]["managedFields"] = "not metadata: kept";  // only metadata's is dropped
  std::stop_source stop;
  std::optional<json> got;
  std::mutex mu;
  std::thread watcher([&] {
    (void)client_->Watch(
        Pods(), "ml", wo,
        [&](WatchEvent& ev) {
          std::lock_guard<std::mutex> lock(mu);
          got = std::move(ev.object);  // the callback may take the object
        },
        stop.get_token());
  });
  if (!WaitUntil([&] { return api_.OpenWatches() > 0; })) {
    stop.request_stop();
    watcher.join();
    FAIL() << "the watch never opened";
  }
  api_.Put("/api/v1/namespaces/ml/pods", p1);
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (got.has_value()) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  stop.request_stop();
  watcher.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ((*got)["metadata"]["name"], "p1");
  EXPECT_FALSE((*got)["metadata"].contains("managedFields")) << got->dump();
  EXPECT_EQ((*got)["spec"]["managedFields"], "not metadata: kept");
}

TEST_F(KubeClientTest, WatchDeliversEventsBookmarksAndExpiry) {
  json first = api_.Put("/api/v1/namespaces/ml/pods", Pod("p0"));
  std::vector<std::string> seen;
  std::mutex mu;
  std::stop_source stop;
  WatchOptions wo;
  wo.resource_version = first["metadata"]["resourceVersion"];
  Status result;
  std::thread watcher([&] {
    result = client_->Watch(
        Pods(), "ml", wo,
        [&](const WatchEvent& ev) {
          std::lock_guard<std::mutex> lock(mu);
          const char* names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"};
          seen.push_back(std::string(names[static_cast<int>(ev.type)]) + ":" +
                         ev.object["metadata"].value("name", std::string("")));
        },
        stop.get_token());
  });
  if (!WaitUntil([&] { return api_.OpenWatches() > 0; })) {
    stop.request_stop();
    watcher.join();
    FAIL() << "the watch never opened";
  }
  api_.Put("/api/v1/namespaces/ml/pods", Pod("p1"));
  api_.Put("/api/v1/namespaces/ml/pods", Pod("p1", "node-a"));
  api_.Put("/api/v1/namespaces/other/pods", Pod("not-mine"));
  api_.Remove("/api/v1/namespaces/ml/pods", "p1");
  api_.SendBookmarks();
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (seen.size() >= 4) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  stop.request_stop();
  watcher.join();
  EXPECT_EQ(result.code(), StatusCode::kCancelled) << result.ToString();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED:p1", "MODIFIED:p1", "DELETED:p1", "BOOKMARK:"}));

  // A compacted version: the watch ends with kOutOfRange so the caller relists.
  api_.Compact();
  api_.Put("/api/v1/namespaces/ml/pods", Pod("p2"));
  Status expired = client_->Watch(Pods(), "ml", wo, [](const WatchEvent&) {}, {});
  EXPECT_EQ(expired.code(), StatusCode::kOutOfRange) << expired.ToString();
  ListOptions old;
  old.resource_version = wo.resource_version;
  EXPECT_EQ(client_->List(Pods(), "ml", old).status().code(), StatusCode::kOutOfRange);
}

TEST_F(KubeClientTest, WatchEndsWhenTheConnectionDrops) {
  std::atomic<bool> done{false};
  Status result;
  std::thread watcher([&] {
    result = client_->Watch(Pods(), "", WatchOptions(), [](const WatchEvent&) {}, {});
    done = true;
  });
  if (!WaitUntil([&] { return api_.OpenWatches() > 0; })) {
    const bool returned = done.load();
    api_.Stop();  // ends a watch still on its way, so that the thread can be joined
    watcher.join();
    FAIL() << "the watch never opened"
           << (returned ? "; Watch returned " + result.ToString() : std::string());
  }
  api_.DropWatches();
  watcher.join();
  EXPECT_TRUE(done.load());
  EXPECT_TRUE(result.ok()) << result.ToString();  // the server ended the stream: re-watch
}

// A paginated list whose continue token expired (its version was compacted
// between pages) is taken again in one piece, as client-go's pager does with
// FullListIfExpired: the pages read so far may be stale and are dropped.
TEST_F(KubeClientTest, AnExpiredContinueTokenFallsBackToAFullList) {
  for (int i = 0; i < 5; ++i) api_.Put("/api/v1/namespaces/ml/pods", Pod("p" + std::to_string(i)));
  api_.ExpireContinueTokens();
  ListOptions lo;
  lo.limit = 2;
  auto all = client_->List(Pods(), "ml", lo);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->items.size(), 5u);
  const std::vector<std::string> requests = api_.Requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_NE(requests[1].find("continue="), std::string::npos) << requests[1];
  EXPECT_EQ(requests[2], "GET /api/v1/namespaces/ml/pods");
  // An expired version on the first page is the caller's to handle (relist).
  api_.Compact();
  ListOptions old;
  old.resource_version = "1";
  EXPECT_EQ(client_->List(Pods(), "ml", old).status().code(), StatusCode::kOutOfRange);
}

// A projected service-account token is rewritten by the kubelet (about
// hourly); the client reads the file again after a 401, for watches as for
// other requests, and without waiting for one at most every token_reread.
class KubeClientTokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    path_ = std::filesystem::temp_directory_path() /
            ("accelpool-token-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    Write("old-token\n");
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void Write(const std::string& token) {
    std::ofstream out(path_, std::ios::trunc);
    out << token;
  }
  std::unique_ptr<KubeClient> Client(std::chrono::milliseconds reread) {
    KubeConfig cfg;
    cfg.server = api_.url();
    cfg.token = "old-token";
    cfg.token_file = path_.string();
    cfg.token_reread = reread;
    cfg.qps = 0;
    cfg.timeout = 5000ms;
    auto c = NewKubeClient(cfg);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  FakeApiServer api_;
  std::filesystem::path path_;
};

TEST_F(KubeClientTokenFileTest, AWatchAnsweredUnauthorizedReadsTheTokenFileAgain) {
  std::unique_ptr<KubeClient> client = Client(std::chrono::hours(1));
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->List(Pods(), "ml", ListOptions()).ok());  // reads the file: old-token
  Write("new-token\n");
  api_.RequireToken("new-token");
  WatchOptions wo;
  wo.server_timeout = 1s;  // the fake ends the stream after a second: OK
  const Status st = client->Watch(Pods(), "ml", wo, [](const WatchEvent&) {}, {});
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(api_.Unauthorized(), 1);
}

TEST_F(KubeClientTokenFileTest, TheTokenFileIsReadAgainBeforeTheOldTokenIsRefused) {
  std::unique_ptr<KubeClient> client = Client(0ms);  // every request reads it
  ASSERT_NE(client, nullptr);
  api_.Put("/api/v1/namespaces/ml/pods", Pod("p0"));
  Write("new-token\n");
  api_.RequireToken("new-token");
  EXPECT_TRUE(client->Get(Pods(), "ml", "p0").ok());
  EXPECT_EQ(api_.Unauthorized(), 0);
  // A file that cannot be read (being swapped) keeps the last token.
  std::filesystem::remove(path_);
  EXPECT_TRUE(client->Get(Pods(), "ml", "p0").ok());
}

// Two requests in flight with the old token when the file rotates: the one
// refused second finds the token already read again by the first, and is
// sent again with it too, not failed.
TEST_F(KubeClientTokenFileTest, EveryRequestRefusedWithTheOldTokenIsSentAgain) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int slow_seen = 0;
  http::ServerOptions so;
  so.host = "127.0.0.1";
  auto server = http::NewHttpServer(so);
  const json pod = Pod("p");
  server->HandlePrefix("GET", "/api/", [&](const http::Request& req) {
    const bool fresh = req.Header("authorization") == "Bearer new-token";
    if (req.path.ends_with("/slow") && !fresh) {
      std::unique_lock<std::mutex> lock(mu);
      ++slow_seen;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    return fresh || req.path.ends_with("/first")
               ? http::Response::Json(200, pod.dump())
               : http::Response::Json(401, R"({"kind":"Status","reason":"Unauthorized"})");
  });
  ASSERT_TRUE(server->Start().ok());
  KubeConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(server->port());
  cfg.token = "old-token";
  cfg.token_file = path_.string();
  cfg.token_reread = std::chrono::hours(1);
  cfg.qps = 0;
  cfg.timeout = 5000ms;
  auto client = NewKubeClient(cfg);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->Get(Pods(), "ml", "first").ok());  // reads the file: old-token
  StatusOr<json> slow = UnavailableError("not run");
  std::thread a([&] { slow = (*client)->Get(Pods(), "ml", "slow"); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return slow_seen == 1; });
  }
  Write("new-token\n");
  EXPECT_TRUE((*client)->Get(Pods(), "ml", "fast").ok());  // refused, reads new-token, retried
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  a.join();
  EXPECT_TRUE(slow.ok()) << slow.status().ToString();
  server->Stop();
}

// Objects from the apiserver are read leniently: a field of another type is
// unset, never an exception.
TEST(StringAtTest, ReadsStringsAndTreatsAnythingElseAsUnset) {
  const nlohmann::json obj = nlohmann::json::parse(
      R"({"metadata":{"name":"p","uid":7,"labels":null,"annotations":{"a/b":"x"}}})");
  using Ptr = nlohmann::json::json_pointer;
  EXPECT_EQ(StringAt(obj, Ptr("/metadata/name")), "p");
  EXPECT_EQ(StringAt(obj, Ptr("/metadata/annotations/a~1b")), "x");
  EXPECT_EQ(StringAt(obj, Ptr("/metadata/uid")), "");
  EXPECT_EQ(StringAt(obj, Ptr("/metadata/labels")), "");
  EXPECT_EQ(StringAt(obj, Ptr("/metadata/labels/x")), "");
  EXPECT_EQ(StringAt(obj, Ptr("/spec/nodeName")), "");
  EXPECT_EQ(StringAt(nlohmann::json::array(), Ptr("/0")), "");
}
}  // namespace
}  // namespace accelpool::kube
