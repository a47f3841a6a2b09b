// The extender's Kubernetes side, over kube::KubeClient and kube::Informer:
//
//   KubePodWriter  PodWriter: pods/binding, with the assignment annotation in
//                  the Binding (the apiserver adds it to the pod), and its
//                  signature when a key ring is given.
//   KubePodSource  PodSource: the pod informer's store, else (absent, or of
//                  another uid) a GET.
//   AsyncEvents    EventSink: a bounded queue drained by one thread that posts
//                  Events; the same (pod, reason) is not repeated within
//                  `min_interval`; a full queue drops (and counts) events so
//                  filter never waits on the apiserver.
//   CacheFeeder    informer callbacks that keep the Cache current: nodes
//                  (inventory annotation, domain labels) and pods (assignment
//                  annotation, spec.nodeName, phase). Finished and deleted pods
//                  give their devices back.
//   NodeRefresher  re-reads one node for a filter (cordoned devices).
//   PodRechecker   re-reads one node's pods for a filter (pods gone).
//
// Thread-safety: all classes may be used from any thread; CacheFeeder's
// callbacks are called by informer threads.
#ifndef ACCELPOOL_EXTENDER_KUBE_ADAPTERS_H_
#define ACCELPOOL_EXTENDER_KUBE_ADAPTERS_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "api/assignment_signature.h"
#include "common/log.h"
#include "extender/cache.h"
#include "extender/convert.h"
#include "extender/extender.h"
#include "extender/handlers.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "kube/rate_limiter.h"

namespace accelpool::extender {

class KubePodWriter : public PodWriter {
 public:
  // `keys` (may be null: assignments go unsigned) must outlive the writer.
  KubePodWriter(kube::KubeClient& client, const Cache& cache,
                api::AssignmentKeyRing* keys = nullptr)
      : client_(client), cache_(cache), keys_(keys) {}

  // PodWriter. With a key ring the Binding also carries
  // accelpool.io/assignment-signature; a pod without a uid is then not bound
  // (kInvalidArgument: kube-scheduler always sends it). An empty `a` (a pod
  // that asks for no pooled device) is a Binding without annotations.
  Status Bind(const PodInfo& pod, const PodAssignment& a) override;
  // A GET of the pod (never the informer's copy).
  StatusOr<std::string> BoundNode(const PodInfo& pod) override;

  // Asked right before each Binding is written: a non-empty answer (why this
  // replica may not bind) fails the bind with kUnavailable instead. The bind
  // verb's own gate runs when the request arrives; a leadership that ends
  // during the pod read and the signing then writes nothing.
  void SetWriteGate(std::function<std::string()> gate) { write_gate_ = std::move(gate); }
  // How long this replica still leads for certain (LeaderElector::LeadLeft).
  // A Binding is sent bounded by it (client and apiserver side), so one sent
  // just before leadership ends cannot commit long after another replica
  // started binding; with under kMinWriteTime left none is sent.
  void SetWriteTimeLeft(std::function<std::chrono::milliseconds()> left) {
    write_left_ = std::move(left);
  }
  static constexpr std::chrono::milliseconds kMinWriteTime{1000};

 private:
  // Creates the Binding to a.node; a conflict from an earlier attempt that
  // did bind the same pod to a.node with `a` is success (kAlreadyExists when
  // it carries another assignment). An error that does not say whether the
  // write landed (a 5xx, a timeout, a dropped connection) is settled by
  // reading the pod back; kUnknown when that read fails too.
  Status BindPod(const PodInfo& pod, const PodAssignment& a,
                 const std::map<std::string, std::string>& annotations);

  kube::KubeClient& client_;
  const Cache& cache_;
  api::AssignmentKeyRing* const keys_;
  std::function<std::string()> write_gate_;                // set before serving
  std::function<std::chrono::milliseconds()> write_left_;  // set before serving
};

class KubePodSource : public PodSource {
 public:
  // `informer` may be null.
  KubePodSource(kube::KubeClient& client, const kube::Informer* informer)
      : client_(client), informer_(informer) {}

  // PodSource
  StatusOr<nlohmann::json> GetPod(const std::string& ns, const std::string& name,
                                  const std::string& uid) override;

 private:
  kube::KubeClient& client_;
  const kube::Informer* const informer_;
};

class AsyncEvents : public EventSink {
 public:
  AsyncEvents(kube::KubeClient& client, Logger log, size_t max_queue = 1000,
              std::chrono::seconds min_interval = std::chrono::seconds(60));
  ~AsyncEvents() override;  // drains nothing; stops the thread

  // EventSink
  void PodEvent(const PodRef& pod, bool warning, const std::string& reason,
                const std::string& message) override;

  int64_t dropped() const { return dropped_.load(); }

 private:
  struct Item {
    PodRef pod;
    bool warning;
    std::string reason, message;
  };
  void Run(std::stop_token stop);

  kube::KubeClient& client_;
  const Logger log_;
  const size_t max_queue_;
  const std::chrono::seconds min_interval_;
  std::atomic<int64_t> dropped_{0};
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Item> queue_;                                                 // guarded by mu_
  std::map<std::string, std::chrono::steady_clock::time_point> last_sent_;  // guarded by mu_
  std::jthread thread_;
};

class CacheFeeder {
 public:
  // `metrics` (may be null) counts node updates applied and skipped.
  CacheFeeder(Cache& cache, Logger log, ExtenderMetrics* metrics = nullptr)
      : cache_(cache), log_(std::move(log)), metrics_(metrics) {}

  kube::InformerHandlers NodeHandlers();
  kube::InformerHandlers PodHandlers();

  // Applies one node / pod object from the watch (exposed for tests).
  void OnNode(const nlohmann::json& node);
  void OnNodeDeleted(const nlohmann::json& node);
  // A mark of the node watch events applied so far, to pass to OnNodeRead.
  uint64_t NodeEvents() const;
  // Applies a node read from the apiserver (NodeRefresher) unless a watch
  // event of that node was applied since NodeEvents() answered
  // `events_before` (read before the GET): that event is newer, or the node's
  // deletion, and the read must not undo it. False when dropped.
  bool OnNodeRead(const nlohmann::json& node, uint64_t events_before);
  // How long a deleted node is remembered, so that a read begun before its
  // deletion cannot bring it back (10 minutes by default; reads take seconds).
  // After that, a read begun before the deletion is dropped, whatever node it
  // reads: the record of a cluster's node churn stays bounded.
  void SetDeletedNodeMemory(std::chrono::steady_clock::duration d);
  // Nodes with a record of their last event (live ones, and deleted ones
  // within the memory).
  size_t NodesRemembered() const;
  // Node updates applied to the cache, and those skipped as changing nothing
  // it holds (a heartbeat: status conditions, images, resourceVersion).
  uint64_t NodeUpdatesApplied() const;
  uint64_t NodeUpdatesUnchanged() const;
  void OnPod(const nlohmann::json& pod);
  // A change of uid (deleted and re-created under the same name during a
  // relist) releases the old pod first.
  void OnPodUpdated(const nlohmann::json& old, const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);

 private:
  // Logs a node's cordoned devices and unknown cordon entries when they
  // change (a node object is updated often; the log is not).
  void ReportCordon(const NodeEntry& e);
  void ForgetCordon(const std::string& node);
  // Both with node_mu_ held.
  void ApplyNode(const nlohmann::json& node);
  void ApplyNodeDeleted(const nlohmann::json& node);
  void NoteNodeEvent(const std::string& name, bool deleted);

  Cache& cache_;
  const Logger log_;
  ExtenderMetrics* const metrics_;
  // Node watch events are numbered in the order applied; node_mu_ also orders
  // a read's apply against the watch's. All guarded by node_mu_.
  mutable std::mutex node_mu_;
  uint64_t node_seq_ = 0;
  std::map<std::string, uint64_t> last_event_;  // node -> number of its last event
  struct Deleted {
    std::chrono::steady_clock::time_point when;
    std::string node;
    uint64_t seq;
  };
  std::deque<Deleted> deleted_;  // oldest first
  std::chrono::steady_clock::duration deleted_memory_ = std::chrono::minutes(10);
  uint64_t forgotten_seq_ = 0;  // the newest deletion no longer remembered
  // A digest of NodeInputs of each node whose devices the cache holds, as
  // last applied (the text itself, with the inventory annotation and any
  // last-applied-configuration, would be kilobytes a node).
  struct InputsDigest {
    size_t size = 0;
    uint64_t hash = 0;
    uint64_t fnv = 0;
    bool operator==(const InputsDigest&) const = default;
  };
  static InputsDigest Digest(std::string_view inputs);
  std::map<std::string, InputsDigest> applied_inputs_;
  uint64_t updates_applied_ = 0;
  uint64_t updates_unchanged_ = 0;
  std::mutex cordon_mu_;
  std::map<std::string, std::string> cordon_logged_;  // node -> what was logged; by cordon_mu_
};

// How often a filter may read one node, and all nodes, from the apiserver:
// at most once per node per `per_node`, and `qps` reads a second in all.
// Thread-safety: Allow may be called from any thread.
class ReadLimiter {
 public:
  ReadLimiter(std::chrono::milliseconds per_node, double qps)
      : per_node_(per_node), bucket_(qps, std::max(1, static_cast<int>(qps))) {}
  // True, and counted as a read of `node` now, when both limits allow one.
  bool Allow(const std::string& node);

 private:
  const std::chrono::milliseconds per_node_;
  kube::TokenBucket bucket_;
  std::mutex mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> last_;  // guarded by mu_
};

// Re-reads a node from the apiserver into the cache through the feeder
// (ExtenderOptions::refresh_node), at most once per node per `min_interval`
// and `qps` times a second over all nodes.
// Thread-safety: Refresh may be called from any thread.
class NodeRefresher {
 public:
  NodeRefresher(kube::KubeClient& client, CacheFeeder& feeder,
                std::chrono::milliseconds min_interval, Logger log, double qps = 5.0)
      : client_(client), feeder_(feeder), limit_(min_interval, qps), log_(std::move(log)) {}

  // True when the node was read and applied, or its watch delivered a newer
  // state (or its deletion) during the read, which is kept; false when it was
  // read less than `min_interval` ago, or the read failed (logged).
  bool Refresh(const std::string& node);

 private:
  kube::KubeClient& client_;
  CacheFeeder& feeder_;
  ReadLimiter limit_;
  const Logger log_;
};

// Reads the pods bound to one node from the apiserver and frees in the cache
// those that are gone or finished (ExtenderOptions::recheck_pods): at most
// once per node per `per_node`, and `qps` reads a second over all nodes.
// Only pods the cache knew bound before the read are freed when the read
// lacks them: the read is a consistent list, so such a pod was deleted; a
// pod bound while the read was in flight is left alone. Freed pods go
// through Cache::ReleaseGone, so their late watch events book nothing.
// Thread-safety: Recheck may be called from any thread.
class PodRechecker {
 public:
  PodRechecker(kube::KubeClient& client, Cache& cache, std::string scheduler_name,
               std::chrono::milliseconds per_node, double qps, Logger log);

  RecheckResult Recheck(const std::string& node);

 private:
  kube::KubeClient& client_;
  Cache& cache_;
  const std::string scheduler_name_;
  ReadLimiter limit_;
  const Logger log_;
};

}  // namespace accelpool::extender

#endif  // ACCELPOOL_EXTENDER_KUBE_ADAPTERS_H_
