// Loopback figures for the HTTP layer and the Kubernetes client: one request
// round trip, a 500-object list from the test apiserver, and rendering a
// metrics page. Measured on whatever machine runs it; nothing is asserted.
#include <benchmark/benchmark.h>

#include "common/metrics.h"
#include "http/http.h"
#include "kube/client.h"
#include "kube/fake_apiserver.h"

namespace accelpool {
namespace {

void BM_HttpRoundTrip(benchmark::State& state) {
  http::ServerOptions so;
  so.host = "127.0.0.1";
  auto server = http::NewHttpServer(so);
  const std::string body(static_cast<size_t>(state.range(0)), 'x');
  server->Handle("POST", "/filter", [](const http::Request& r) {
    return http::Response::Json(200, "{\"n\":" + std::to_string(r.body.size()) + "}");
  });
  if (!server->Start().ok()) {
    state.SkipWithError("server did not start");
    return;
  }
  http::ClientOptions co;
  co.base_url = "http://127.0.0.1:" + std::to_string(server->port());
  auto client = http::NewHttpClient(co);
  http::ClientRequest req;
  req.method = "POST";
  req.path = "/filter";
  req.body = body;
  for (auto _ : state) {
    auto resp = (*client)->Send(req);
    if (!resp.ok() || resp->status != 200) state.SkipWithError("request failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_HttpRoundTrip)->Arg(256)->Arg(64 << 10)->UseRealTime();

void BM_KubeList500Pods(benchmark::State& state) {
  kube::FakeApiServer api;
  if (!api.Start().ok()) {
    state.SkipWithError("fake apiserver did not start");
    return;
  }
  for (int i = 0; i < 500; ++i) {
    api.Put("/api/v1/namespaces/ml/pods",
            {{"metadata", {{"name", "p" + std::to_string(i)}, {"namespace", "ml"}}},
             {"spec", {{"nodeName", "node-" + std::to_string(i % 50)}}}});
  }
  kube::KubeConfig cfg;
  cfg.server = api.url();
  cfg.qps = 0;
  auto client = kube::NewKubeClient(cfg);
  kube::ListOptions lo;
  lo.limit = 500;
  for (auto _ : state) {
    auto r = (*client)->List(kube::Pods(), "ml", lo);
    if (!r.ok() || r->items.size() != 500) state.SkipWithError("list failed");
  }
}
BENCHMARK(BM_KubeList500Pods)->UseRealTime();

void BM_MetricsSerialize(benchmark::State& state) {
  MetricsRegistry reg;
  auto c = reg.AddCounter("accelpool_requests_total", "Requests.", {"verb", "code"});
  auto h = reg.AddHistogram("accelpool_request_seconds", "Latency.", {"verb"});
  for (const char* verb : {"filter", "prioritize", "bind"}) {
    for (const char* code : {"200", "400", "500"}) (*c)->WithLabels({verb, code}).Inc();
    (*h)->WithLabels({verb}).Observe(0.003);
  }
  for (int n = 0; n < state.range(0); ++n) {
    auto g = reg.AddGauge("accelpool_node_free_" + std::to_string(n), "Free.", {"node"});
    for (int i = 0; i < 10; ++i) (*g)->WithLabels({"node-" + std::to_string(i)}).Set(i);
  }
  for (auto _ : state) benchmark::DoNotOptimize(reg.Serialize());
}
BENCHMARK(BM_MetricsSerialize)->Arg(10)->Arg(100);

}  // namespace
}  // namespace accelpool

BENCHMARK_MAIN();
