// Routes of accelpool-extender on an http::HttpServer:
//   POST /filter /prioritize /bind /preempt   kube-scheduler extender v1
//   POST /mutate                              admission webhook (AdmissionReview v1)
//   GET  /healthz                             200 while the process serves
//   GET  /readyz                              200 once caches synced (and, with
//                                             leader election, while leading)
//   GET  /metrics                             Prometheus text format
//
// Thread-safety: RegisterRoutes is called once before the server starts; the
// routes may then run concurrently. Everything referenced must outlive the
// server.
#ifndef ACCELPOOL_EXTENDER_SERVER_H_
#define ACCELPOOL_EXTENDER_SERVER_H_

#include <functional>
#include <string>

#include "common/metrics.h"
#include "extender/handlers.h"
#include "extender/webhook.h"
#include "http/http.h"

namespace accelpool::extender {

struct Routes {
  Handlers* handlers = nullptr;
  const Webhook* webhook = nullptr;  // null: no /mutate
  const MetricsRegistry* metrics = nullptr;
  // Called before /metrics renders (refreshes gauges); may be empty.
  std::function<void()> before_metrics;
  // Readiness; empty means always ready. Returns "" when ready, else why not.
  std::function<std::string()> not_ready;
};

void RegisterRoutes(http::HttpServer& server, const Routes& routes);

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_SERVER_H_
