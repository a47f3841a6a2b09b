#include "extender/server.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>

namespace accelpool::extender {
namespace {

http::Response ToResponse(const Reply& r) { return http::Response::Json(r.status, r.body); }

}  // namespace

bool FromLoopback(std::string_view peer) {
  const size_t colon = peer.rfind(':');
  const std::string_view host = colon == std::string_view::npos ? peer : peer.substr(0, colon);
  return host.starts_with("127.") || host == "::1" || host == "[::1]" ||
         host.starts_with("::ffff:127.");
}

std::function<std::string(const http::Request&)> SchedulerVerbGate(bool any) {
  if (any) return {};
  return [](const http::Request& req) -> std::string {
    if (FromLoopback(req.peer) || !req.client_cert_subject.empty()) return "";
    return "kube-scheduler's extender verbs are served here only to a kube-scheduler in this "
           "pod (loopback) or to a client with a certificate signed by --client-ca; " +
           req.peer +
           " has neither. Point kube-scheduler at --scheduler-listen, give it a "
           "client certificate (tlsConfig.certFile/keyFile), or start the extender with "
           "--scheduler-verbs-from-any if a network policy already keeps others out";
  };
}

void RegisterRoutes(http::HttpServer& server, const Routes& routes) {
  Handlers* h = routes.handlers;
  // The verbs' gate looks at the caller only (peer, client certificate), so
  // it runs on the request's head: a refused caller's body is never read.
  // Every verb has an admit check, an empty one where any caller is served:
  // the routes with one have a body budget of their own (ServerOptions::
  // max_body_bytes_in_flight), which the webhook's requests cannot take.
  http::RouteOptions verb_options;
  verb_options.admit =
      [gate = routes.scheduler_gate](const http::Request& head) -> std::optional<http::Response> {
    if (!gate) return std::nullopt;
    if (std::string why = gate(head); !why.empty()) {
      return ToResponse(Reply{403, nlohmann::json{{"Error", why}}.dump()});
    }
    return std::nullopt;
  };
  auto verb = [](Reply (Handlers::*call)(std::string_view), Handlers* handlers) {
    return [call, handlers](const http::Request& req) {
      return ToResponse((handlers->*call)(req.body));
    };
  };
  server.Handle("POST", "/filter", verb(&Handlers::Filter, h), verb_options);
  server.Handle("POST", "/prioritize", verb(&Handlers::Prioritize, h), verb_options);
  server.Handle("POST", "/bind", verb(&Handlers::Bind, h), verb_options);
  server.Handle("POST", "/preempt", verb(&Handlers::Preempt, h), verb_options);
  const http::RouteOptions webhook_options{kWebhookMaxBodyBytes, {}};
  const http::RouteOptions get_options{kGetMaxBodyBytes, {}};
  if (routes.webhook != nullptr) {
    const Webhook* w = routes.webhook;
    server.Handle(
        "POST", "/mutate",
        [w](const http::Request& req) { return ToResponse(w->Mutate(req.body)); }, webhook_options);
    server.Handle(
        "POST", "/mutate-host-pods",
        [w](const http::Request& req) { return ToResponse(w->MutateHostPod(req.body)); },
        webhook_options);
  }
  server.Handle(
      "GET", "/healthz",
      [](const http::Request&) {
        http::Response r;
        r.headers["content-type"] = "text/plain";
        r.body = "ok\n";
        return r;
      },
      get_options);
  auto not_ready = routes.not_ready;
  server.Handle(
      "GET", "/readyz",
      [not_ready](const http::Request&) {
        http::Response r;
        r.headers["content-type"] = "text/plain";
        const std::string why = not_ready ? not_ready() : "";
        r.status = why.empty() ? 200 : 503;
        r.body = why.empty() ? "ok\n" : why + "\n";
        return r;
      },
      get_options);
  const MetricsRegistry* metrics = routes.metrics;
  auto before = routes.before_metrics;
  server.Handle(
      "GET", "/metrics",
      [metrics, before](const http::Request&) {
        if (before) {
          before();
        }
        http::Response r;
        r.headers["content-type"] = kMetricsContentType;
        r.body = metrics != nullptr ? metrics->Serialize() : "";
        return r;
      },
      get_options);
}

}  // namespace accelpool::extender
