// Informer: a list-then-watch cache of one resource with change callbacks.
//
// Start() spawns one thread that lists, calls on_add for every object, sets
// Synced(), then watches from the list's resourceVersion (with bookmarks),
// re-watching from the last version seen when a watch ends, relisting on
// 410 Gone (emitting add/update/delete for the difference against the
// cache), and retrying failures with exponential backoff, waiting at least
// as long as the apiserver asked with a Retry-After while the failed request
// ran (KubeClient::RetryNotBefore; up to backoff_max). As client-go's
// reflector, the first list (and its retries) asks for resourceVersion=0,
// served from the apiserver's watch cache; a relist after 410 Gone asks for
// none, a consistent read. A watch that ends
// within a second without an event counts as a failure (client-go's "very
// short watch"), so a server or proxy that closes watches at once does not
// get a re-watch loop that spends the client's shared rate limit.
//
// Keys are "<namespace>/<name>" (or "<name>" for cluster-scoped objects).
//
// Thread-safety: callbacks run on the informer's thread, one at a time, in
// event order; they must not call Stop(). Synced(), Get(), Keys() and
// Stop() may be called from any thread.
#ifndef ACCELPOOL_KUBE_INFORMER_H_
#define ACCELPOOL_KUBE_INFORMER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "kube/client.h"

namespace accelpool::kube {

class Backoff;  // kube/rate_limiter.h

struct InformerHandlers {
  std::function<void(const nlohmann::json& obj)> on_add;
  std::function<void(const nlohmann::json& old_obj, const nlohmann::json& new_obj)> on_update;
  std::function<void(const nlohmann::json& obj)> on_delete;
};

struct InformerOptions {
  Resource resource;
  std::string ns;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  std::chrono::milliseconds backoff_initial{200};
  std::chrono::milliseconds backoff_max{30000};
  // Each watch asks the apiserver to end it after a time drawn uniformly
  // from [watch_timeout, 2 * watch_timeout), as client-go does, so that
  // watches started together (every node after an apiserver restart) do not
  // stay in step. The client's idle timeout follows the drawn time.
  std::chrono::seconds watch_timeout{300};
  // Lists (the first, and relists other than after 410 Gone) with
  // resourceVersion=0, served from the apiserver's watch cache, as
  // client-go's reflector does: cheap for a per-node field selector, which a
  // consistent read serves from etcd by scanning the whole resource. The
  // cache may lag a moment behind etcd, so a cache that decides bookings on
  // its own (the extender's) keeps consistent lists.
  bool list_from_watch_cache = false;
  // Applied to every object before it is stored and handed to the handlers,
  // to keep a cache of many objects small (keep only the fields the handlers
  // read). It must keep metadata.name, metadata.namespace and
  // metadata.resourceVersion. Empty: objects are kept whole. One that throws
  // leaves the object as it left it (logged, counted in handler_errors()).
  std::function<void(nlohmann::json& obj)> transform;
};

class Informer {
 public:
  Informer(KubeClient& client, InformerOptions options, InformerHandlers handlers,
           Logger log = Logger());
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();
  void Stop();  // idempotent; joins the thread

  // True once the first list has been delivered.
  bool Synced() const { return synced_.load(); }
  // Blocks until Synced() or the timeout; returns Synced().
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  std::optional<nlohmann::json> Get(const std::string& key) const;
  std::vector<std::string> Keys() const;
  // Counters for tests and metrics.
  int64_t lists() const { return lists_.load(); }
  int64_t watches() const { return watches_.load(); }
  // Events a handler threw on (each skipped, with an error log), and objects
  // the transform threw on.
  int64_t handler_errors() const { return handler_errors_.load(); }
  std::string last_resource_version() const;

  static std::string KeyOf(const nlohmann::json& obj);

 private:
  void Run(std::stop_token stop);
  // The backoff's next wait, stretched to the wait the apiserver asked for
  // (KubeClient::RetryNotBefore, when KubeClient::RetryAsks moved past
  // `asks`, its value before the failed request), up to
  // options_.backoff_max plus the backoff's random part.
  std::chrono::milliseconds NextWait(Backoff& backoff, uint64_t asks) const;
  // Lists from the watch cache (resourceVersion=0), or, when `consistent`,
  // the newest state (no resourceVersion).
  Status ListAndReplace(bool consistent);
  void Apply(WatchEvent& ev);  // moves ev.object into the store
  // Runs a handler; an exception it throws is logged and counted, not let
  // out of the informer's thread.
  void Guarded(const char* what, const std::function<void()>& call);
  // What Stored() tells when options_.transform throws: counted in
  // handler_errors() and logged.
  std::function<void(const std::string&)> TransformFailed();

  KubeClient& client_;
  const InformerOptions options_;
  const InformerHandlers handlers_;
  const Logger log_;

  std::atomic<bool> synced_{false};
  std::atomic<int64_t> lists_{0};
  std::atomic<int64_t> watches_{0};
  std::atomic<int64_t> handler_errors_{0};
  mutable std::mutex mu_;
  // Objects are shared, immutable and kept without metadata.managedFields
  // (field-ownership bookkeeping no handler reads, often the largest part of
  // a pod): an event stores one object and hands the previous one to the
  // handler without copying either.
  std::map<std::string, std::shared_ptr<const nlohmann::json>> store_;  // guarded by mu_
  std::string rv_;                                                      // guarded by mu_
  std::jthread thread_;
};

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_INFORMER_H_
