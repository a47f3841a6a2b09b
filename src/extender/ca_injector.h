// CaInjector: keeps the caBundle of the extender's own
// MutatingWebhookConfiguration equal to the CA of its serving certificate
// (--webhook-ca-file, the TLS Secret's ca.crt).
//
// Why: with the chart's built-in certificate the caBundle used to come only
// from a post-install hook Job, and Helm runs post-install hooks after
// `helm install --wait` (and Flux's and Argo CD's health waits) find every
// pod ready. Until then the apiserver could not verify the webhook and pods
// asking for accelerators went unrouted. The extender has the CA as soon as
// it starts, so it writes it itself, and puts it back if it is changed.
//
// Every `period` (every `retry` until the first pass succeeds) one pass reads
// the CA file, gets the configuration and, where a webhook's
// clientConfig.caBundle differs, writes it with one JSON patch guarded by the
// configuration's resourceVersion. `may_write` (when set) gates the write, so
// that of several replicas only the active one writes. Errors are logged when
// they change (not every pass) and the pass is retried.
//
// Thread-safety: SyncOnce() runs on the caller's thread; Start() runs it on
// a thread of its own until Stop(). Current() may be read from any thread.
#ifndef ACCELPOOL_EXTENDER_CA_INJECTOR_H_
#define ACCELPOOL_EXTENDER_CA_INJECTOR_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/log.h"
#include "common/metrics.h"
#include "common/status.h"
#include "kube/client.h"

namespace accelpool::extender {

// admissionregistration.k8s.io/v1 mutatingwebhookconfigurations.
const kube::Resource& MutatingWebhookConfigurations();

struct CaInjectorOptions {
  std::string webhook;  // the MutatingWebhookConfiguration's name
  std::string ca_file;  // PEM: one or more certificates
  std::chrono::milliseconds period{std::chrono::seconds(60)};
  std::chrono::milliseconds retry{std::chrono::seconds(2)};
  std::function<bool()> may_write;  // nullptr: always
};

class CaInjector {
 public:
  // `writes` (may be null): accelpool_extender_webhook_ca_writes_total{result}.
  CaInjector(kube::KubeClient& client, CaInjectorOptions options, Logger log,
             CounterFamily* writes = nullptr);
  ~CaInjector();

  // One pass. Returns how many webhooks' caBundle it wrote (0: all agree, or
  // may_write said no). kInvalidArgument when the CA file is not PEM
  // certificates, kNotFound when the configuration does not exist, kAborted
  // when it changed during the pass, the apiserver's error otherwise (a
  // kPermissionDenied message says which RBAC rule to add).
  StatusOr<int> SyncOnce();

  void Start();
  void Stop();
  // Whether the last pass found (or left) every caBundle equal to the file.
  bool Current() const { return current_.load(); }

 private:
  void Loop();

  kube::KubeClient& client_;
  const CaInjectorOptions options_;
  const Logger log_;
  CounterFamily* const writes_;
  std::atomic<bool> current_{false};
  std::string last_error_;  // the loop thread's
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_CA_INJECTOR_H_
