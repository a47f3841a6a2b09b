// Routes of accelpool-extender on an http::HttpServer:
//   POST /filter /prioritize /bind /preempt   kube-scheduler extender v1
//   POST /mutate                              admission webhook (AdmissionReview v1)
//   POST /mutate-host-pods                    its host-pod route (Webhook::MutateHostPod)
//   GET  /healthz                             200 while the process serves
//   GET  /readyz                              200 once caches synced (and, with
//                                             leader election, while leading)
//   GET  /metrics                             Prometheus text format
//
// Bodies: the scheduler verbs take up to the server's max_body_bytes
// (--max-body-bytes) and are refused by scheduler_gate before their body is
// read; the webhook routes take up to kWebhookMaxBodyBytes (an apiserver
// accepts no request over 3 MiB, so no AdmissionReview of a pod comes near
// it), the GET routes up to kGetMaxBodyBytes: a caller that reaches the port
// cannot make the extender hold more.
//
// Thread-safety: RegisterRoutes is called once before the server starts; the
// routes may then run concurrently. Everything referenced must outlive the
// server.
#ifndef ACCELPOOL_EXTENDER_SERVER_H_
#define ACCELPOOL_EXTENDER_SERVER_H_

#include <cstddef>
#include <functional>
#include <string>

#include "common/metrics.h"
#include "extender/handlers.h"
#include "extender/webhook.h"
#include "http/http.h"

namespace accelpool::extender {

inline constexpr size_t kWebhookMaxBodyBytes = size_t{8} << 20;
inline constexpr size_t kGetMaxBodyBytes = size_t{64} << 10;

struct Routes {
  Handlers* handlers = nullptr;
  const Webhook* webhook = nullptr;  // null: no /mutate, /mutate-host-pods
  const MetricsRegistry* metrics = nullptr;
  // Called before /metrics renders (refreshes gauges); may be empty.
  std::function<void()> before_metrics;
  // Readiness; empty means always ready. Returns "" when ready, else why not.
  std::function<std::string()> not_ready;
  // Who may call filter/prioritize/bind/preempt: "" to serve the request,
  // else why not (answered 403). Empty: everyone (a loopback-only server).
  std::function<std::string(const http::Request&)> scheduler_gate;
};

void RegisterRoutes(http::HttpServer& server, const Routes& routes);

// True when `peer` ("host:port" as the server gives it) is a loopback
// address: 127.0.0.0/8, ::1, or 127.x mapped into IPv6.
bool FromLoopback(std::string_view peer);

// The gate of a listener that other hosts reach: kube-scheduler's verbs are
// served to a loopback peer (a kube-scheduler in the same pod) or a peer that
// presented a client certificate the server verified (--client-ca); to any
// peer only with `any`. Bind writes Bindings with the extender's own
// credentials, so without this anyone who reaches the port could place pods.
std::function<std::string(const http::Request&)> SchedulerVerbGate(bool any);

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_SERVER_H_
