#include "extender/server.h"

#include <utility>

namespace accelpool::extender {
namespace {

http::Response ToResponse(const Reply& r) { return http::Response::Json(r.status, r.body); }

}  // namespace

void RegisterRoutes(http::HttpServer& server, const Routes& routes) {
  Handlers* h = routes.handlers;
  server.Handle("POST", "/filter",
                [h](const http::Request& req) { return ToResponse(h->Filter(req.body)); });
  server.Handle("POST", "/prioritize",
                [h](const http::Request& req) { return ToResponse(h->Prioritize(req.body)); });
  server.Handle("POST", "/bind",
                [h](const http::Request& req) { return ToResponse(h->Bind(req.body)); });
  server.Handle("POST", "/preempt",
                [h](const http::Request& req) { return ToResponse(h->Preempt(req.body)); });
  if (routes.webhook != nullptr) {
    const Webhook* w = routes.webhook;
    server.Handle("POST", "/mutate",
                  [w](const http::Request& req) { return ToResponse(w->Mutate(req.body)); });
  }
  server.Handle("GET", "/healthz", [](const http::Request&) {
    http::Response r;
    r.headers["content-type"] = "text/plain";
    r.body = "ok\n";
    return r;
  });
  auto not_ready = routes.not_ready;
  server.Handle("GET", "/readyz", [not_ready](const http::Request&) {
    http::Response r;
    r.headers["content-type"] = "text/plain";
    const std::string why = not_ready ? not_ready() : "";
    r.status = why.empty() ? 200 : 503;
    r.body = why.empty() ? "ok\n" : why + "\n";
    return r;
  });
  const MetricsRegistry* metrics = routes.metrics;
  auto before = routes.before_metrics;
  server.Handle("GET", "/metrics", [metrics, before](const http::Request&) {
    if (before) {
      before();
    }
    http::Response r;
    r.headers["content-type"] = kMetricsContentType;
    r.body = metrics != nullptr ? metrics->Serialize() : "";
    return r;
  });
}

}  // namespace accelpool::extender
