// NodePublisher: writes the node's inventory (accelpool.io/inventory, the
// versioned vendor-neutral document of docs/protocol.md) and the node labels
// accelpool.io/vendor.<vendor>=true, accelpool.io/model.<vendor>=<model>,
// accelpool.io/shared.<vendor>=true (a device of that vendor takes more than
// one container: shares are served there) and accelpool.io/super-node=<id>
// (where the hardware reports one).
//
// Only changes are written: the document is compared, without its
// generation, with the last one written (or found on the Node at start), and
// the generation is bumped only when it differs. What was written may be
// removed from outside (the Node deleted and registered again by kubelet, an
// operator removing the annotation or a label), so every `check_every` (five
// minutes, plus a part of up to a quarter of it drawn per publisher so that
// the nodes of a cluster do not all read at once) a Publish of an unchanged
// document reads the Node anyway and writes again when the document or a
// label it derives is not there as written; that read also refreshes the key
// ids annotation PublishKeyIds compares with.
//
// A failed read or write (a Node that is missing, an admission webhook or
// RBAC refusing the patch, an overloaded apiserver) is tried again with
// exponential backoff: a Publish of the same document (PublishKeyIds of the
// same ids) within 5 s of a failure, then 10 s, 20 s ... up to 5 minutes
// (each stretched by up to a fifth, drawn per failure), returns false at
// once without a request. A success, or another document (other ids) to
// write, starts over at once. When the apiserver asked for a longer wait
// while the failed call ran (a 429 or 5xx with Retry-After,
// KubeClient::RetryNotBefore), the failed document waits that long instead,
// stretched by up to a fifth.
//
// A node with accelerators of two vendors runs one plugin per vendor (the
// chart's per-vendor DaemonSets), each publishing into the same annotation.
// A publisher owns the vendors it is given (all when none are): a write reads
// the Node, keeps the inventories of vendors it does not own as they are
// there, replaces its own, and is conditional on the Node's resourceVersion
// (a concurrent write by the other plugin makes it read and merge again). Model label values are
// sanitised to the label-value alphabet ("MTT S4000" -> "MTT_S4000").
//
// Labels of a vendor, model or super node that is no longer in the inventory
// are removed in the same merge patch (a null value deletes a key): exactly
// the labels NodeLabels() gave for the previous document (the one on the
// Node, and the last one this publisher wrote) that it no longer gives for
// the merged one.
// Labels this publisher never derived are left alone, accelpool.io/ ones
// included (a hand-set accelpool.io/vendor.<v> of another DaemonSet).
//
// PublishKeyIds writes accelpool.io/assignment-keys, the ids of the assignment
// keys the plugin verifies with (api/assignment_signature.h), the same way:
// only when they differ from the last ones written or found on the Node; no
// ids removes the annotation. A key rotation (accelpool-keys) reads it to
// know when a new key has reached every node.
//
// Thread-safety: Publish() and PublishKeyIds() may be called from any thread;
// calls are serialised.
#ifndef ACCELPOOL_PLUGIN_NODE_PUBLISHER_H_
#define ACCELPOOL_PLUGIN_NODE_PUBLISHER_H_

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "core/types.h"
#include "kube/client.h"
#include "kube/rate_limiter.h"

namespace accelpool::plugin {

// The labels for `inventories` (pure; exposed for tests).
std::map<std::string, std::string> NodeLabels(const std::vector<core::NodeInventory>& inventories);

class NodePublisher {
 public:
  // `owned`: the vendors this plugin serves (empty: every vendor).
  NodePublisher(kube::KubeClient* client, std::string node, Logger log,
                std::set<core::Vendor> owned = {});

  // Writes the document and labels when they changed. Returns whether it
  // wrote. Errors from the apiserver are returned (the caller retries on the
  // next change or timer); while backing off after one, false (see above).
  StatusOr<bool> Publish(const std::vector<core::NodeInventory>& inventories);

  // Writes the key ids (sorted) when they changed; returns whether it wrote.
  StatusOr<bool> PublishKeyIds(const std::vector<std::string>& ids);

  int64_t generation() const;

  // How often an unchanged document or key id list is checked against the
  // Node (default five minutes, plus this publisher's jitter of up to a
  // quarter of it; 0: at every call). Set before the first call.
  void SetCheckEvery(std::chrono::milliseconds every);

  // The inventories of owned vendors found on the Node before this publisher
  // first wrote (read now when not read yet): what a previous run of the
  // plugin published. Empty when there were none or they did not parse.
  StatusOr<std::vector<core::NodeInventory>> Found();

  // The clock the checks and the backoff read (null: steady_clock); for
  // tests. Set before the first call.
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  void SetClock(Clock now);

 private:
  // When to write again what failed to be written.
  struct Retry {
    kube::Backoff backoff{std::chrono::seconds(5), std::chrono::minutes(5), 0.2};
    std::optional<std::string> failed;  // what the last failed call was to write
    std::chrono::steady_clock::time_point retry_at{};
    // True while `what` failed and its backoff has not passed. Another `what`
    // starts over.
    bool Waiting(const std::string& what, std::chrono::steady_clock::time_point now);
    // Waits the backoff's next step, or `asked` (what a Retry-After the
    // failed call got still asks for), stretched as the backoff's steps are,
    // when longer.
    void Failed(const std::string& what, std::chrono::steady_clock::time_point now,
                std::chrono::steady_clock::duration asked);
    void Succeeded();
  };

  StatusOr<bool> PublishLocked(const std::vector<core::NodeInventory>& inventories,
                               std::string body, std::chrono::steady_clock::time_point now);
  StatusOr<bool> PublishKeyIdsLocked(std::string value, std::chrono::steady_clock::time_point now);
  // Reads the Node's current document once (generation, body, labels).
  // REQUIRES: mu_ held.
  Status LoadLocked();
  // How long the client is still asked to wait (RetryNotBefore) when an
  // answer asked for a wait since `asks` (its RetryAsks() then); zero when
  // none did.
  std::chrono::steady_clock::duration AskedWait(uint64_t asks) const;
  bool Owns(core::Vendor v) const { return owned_.empty() || owned_.count(v) > 0; }
  std::vector<core::NodeInventory> OwnedOf(std::vector<core::NodeInventory> invs) const;
  kube::KubeClient* const client_;
  const std::string node_;
  const Logger log_;
  const std::set<core::Vendor> owned_;
  mutable std::mutex mu_;
  bool loaded_ = false;     // guarded by mu_
  int64_t generation_ = 0;  // guarded by mu_
  std::string last_body_;   // owned inventories serialised with generation 0; guarded by mu_
  std::map<std::string, std::string> last_labels_;  // NodeLabels of last_body_; guarded by mu_
  std::vector<core::NodeInventory> found_;          // the document found at load; guarded by mu_
  bool keys_loaded_ = false;                        // guarded by mu_
  std::string last_keys_;  // the key ids annotation ("" when absent); guarded by mu_
  std::chrono::milliseconds check_every_{std::chrono::minutes(5)};  // jitter included
  // When the Node was last read for the document and for the key ids;
  // guarded by mu_.
  std::chrono::steady_clock::time_point checked_{};
  std::chrono::steady_clock::time_point keys_checked_{};
  Retry publish_retry_;                                          // guarded by mu_
  Retry keys_retry_;                                             // guarded by mu_
  Clock now_ = [] { return std::chrono::steady_clock::now(); };  // guarded by mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_NODE_PUBLISHER_H_
