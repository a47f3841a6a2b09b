// KubeClient: the Kubernetes API as accelpool uses it.
//
// Objects travel as nlohmann::json (the apiserver's JSON, unchanged). The
// interface is small on purpose; leases, events and bindings are helpers in
// kube/objects.h built on it, and Informer (kube/informer.h) builds
// list-then-watch caches on List + Watch.
//
// Errors map from HTTP as: 404 kNotFound, 409 kAborted (a conflict: re-read
// and retry the read-modify-write) or kAlreadyExists (Create of an existing
// name), 410 kOutOfRange (resource version expired: relist), 400/422
// kInvalidArgument, 401 kUnauthenticated, 403 kPermissionDenied, 429 and 5xx
// kUnavailable, no answer in time kDeadlineExceeded, no connection
// kUnavailable. Messages carry the apiserver's own message.
//
// A KubeConfig::token_file is read again at most every token_reread and
// after a 401 (the request, or a watch that has not started, goes once more
// with the new token). A token from an exec plugin (KubeConfig::exec) is
// fetched again 10 s before it expires and after a 401, by one caller while
// the others wait for it.
//
// Thread-safety: every method may be called from many threads at once. All
// requests pass one client-side token bucket (KubeConfig::qps / burst).
#ifndef ACCELPOOL_KUBE_CLIENT_H_
#define ACCELPOOL_KUBE_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <vector>

#include "common/status.h"
#include "kube/config.h"

namespace accelpool::kube {

// An API resource: where it lives and whether it is namespaced.
struct Resource {
  std::string api_prefix;  // "/api/v1" or "/apis/coordination.k8s.io/v1"
  std::string plural;      // "pods"
  bool namespaced = true;

  // "/api/v1/namespaces/<ns>/pods[/<name>[/<sub>]]" (ns ignored when not namespaced;
  // an empty ns on a namespaced resource lists across namespaces).
  std::string Path(const std::string& ns, const std::string& name = "",
                   const std::string& subresource = "") const;
};

const Resource& Pods();
const Resource& Nodes();
const Resource& Namespaces();
const Resource& PersistentVolumeClaims();
const Resource& PersistentVolumes();
const Resource& StorageClasses();        // storage.k8s.io/v1
const Resource& CsiDrivers();            // storage.k8s.io/v1
const Resource& CsiStorageCapacities();  // storage.k8s.io/v1
const Resource& CsiNodes();              // storage.k8s.io/v1
const Resource& VolumeAttachments();     // storage.k8s.io/v1
const Resource& Leases();      // coordination.k8s.io/v1
const Resource& Events();      // events.k8s.io/v1
const Resource& CoreEvents();  // v1 events
const Resource& ConfigMaps();
const Resource& Secrets();

struct ListOptions {
  std::string label_selector;  // "app=x,tier!=y"
  std::string field_selector;  // "spec.nodeName=node-a"
  int64_t limit = 500;         // page size; List follows continue tokens
  // Which state the list may show (kube-apiserver's resourceVersion
  // semantics):
  //  - "" (the default): the newest, a consistent read. Before
  //    ConsistentListFromCache (off by default up to Kubernetes 1.30) it is
  //    served from etcd, which has no index on field selectors such as
  //    spec.nodeName: every such list reads the whole keyspace of the
  //    resource.
  //  - "0": any state, served from the apiserver's watch cache (cheap, may
  //    lag). Older apiservers ignore `limit` then and answer in one page.
  //  - a version: with resource_version_match "NotOlderThan", a state at
  //    least that new, served from the watch cache once it has caught up;
  //    kube-apiserver before 1.31 reads etcd instead when `limit` is set too,
  //    so such lists set limit = 0.
  // Both are sent on the first page only (a continue token carries them).
  std::string resource_version;
  std::string resource_version_match;  // "", "NotOlderThan" or "Exact"
  // Asks for the objects' metadata only (Accept: application/json;
  // as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, then application/json):
  // kube-apiserver answers a meta.k8s.io/v1 PartialObjectMetadataList whose
  // items carry only kind PartialObjectMetadata, apiVersion and the whole
  // metadata (uid, resourceVersion, annotations, ...). A server that does not
  // know the form answers full objects instead; ListResult::metadata_only
  // says which arrived.
  bool metadata_only = false;
  // Called on each item as its page arrives, before the next page is read:
  // it may trim the item in place, and false leaves it out of the result. So
  // a caller that keeps little of a large list never holds all of it.
  std::function<bool(nlohmann::json& item)> keep;
};

struct ListResult {
  std::vector<nlohmann::json> items;
  std::string resource_version;  // the list's, to start a watch from
  // Every page was a PartialObjectMetadataList: the items hold metadata
  // only. False when full objects arrived (also when metadata_only was
  // asked for and the server ignored it).
  bool metadata_only = false;
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  nlohmann::json object;  // for kBookmark only metadata.resourceVersion is meaningful
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // start after this version
  bool allow_bookmarks = true;
  // Asks the apiserver to end the watch after this long (timeoutSeconds); the
  // caller then re-watches from the last version it saw.
  std::chrono::seconds server_timeout{300};
};

enum class PatchType {
  kMerge,      // application/merge-patch+json
  kJson,       // application/json-patch+json (RFC 6902; use a "test" op as precondition)
  kStrategic,  // application/strategic-merge-patch+json
};

class KubeClient {
 public:
  virtual ~KubeClient() = default;

  // Lists every object (following continue tokens; when a token has expired,
  // 410 on a later page, the list is taken again without paging, as
  // client-go's pager does). With
  // options.metadata_only the items arrive without metadata.managedFields
  // (dropped while parsing, as for Watch). kInternal when the pages of one
  // list disagree on the form (some metadata only, some full objects).
  virtual StatusOr<ListResult> List(const Resource& r, const std::string& ns,
                                    const ListOptions& options) = 0;

  // Watches from options.resource_version and calls `on_event` for each event
  // in order, on the calling thread. Returns OK when the server ends the
  // stream normally (re-watch from the last version seen), kOutOfRange on 410
  // Gone (an ERROR event with code 410 or an HTTP 410: relist), kCancelled when
  // `stop` fires, another error when the connection fails or an event cannot
  // be parsed. `on_event` may move the event's object away. Objects arrive
  // without metadata.managedFields (dropped while parsing: nothing here reads
  // them, and they are often the larger part of an object).
  virtual Status Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                       const std::function<void(WatchEvent&)>& on_event,
                       std::stop_token stop) = 0;

  virtual StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                                       const std::string& name) = 0;
  // POST to the collection (or to `subresource` of `name`, e.g. pods/binding).
  // `within`, when set, bounds the request: the client waits no longer, and
  // the apiserver is told the same (the `timeout` query parameter), so it
  // gives the request up past it instead of finishing it much later.
  virtual StatusOr<nlohmann::json> Create(
      const Resource& r, const std::string& ns, const nlohmann::json& object,
      const std::string& name = "", const std::string& subresource = "",
      std::optional<std::chrono::milliseconds> within = std::nullopt) = 0;
  // PUT; object.metadata.resourceVersion, when set, is a precondition (kAborted).
  virtual StatusOr<nlohmann::json> Update(const Resource& r, const std::string& ns,
                                          const std::string& name,
                                          const nlohmann::json& object) = 0;
  // PATCH. A failed JSON-patch "test" op or a metadata.resourceVersion in a
  // merge patch that no longer matches gives kAborted.
  virtual StatusOr<nlohmann::json> Patch(const Resource& r, const std::string& ns,
                                         const std::string& name, PatchType type,
                                         const nlohmann::json& patch,
                                         const std::string& subresource = "") = 0;
  // kNotFound when already gone.
  virtual Status Delete(const Resource& r, const std::string& ns, const std::string& name) = 0;

  // The time before which the apiserver asked this client not to send again:
  // the latest end of a wait it gave with a 429 or 5xx (its Retry-After
  // header, or details.retryAfterSeconds in its Status, also in a watch's
  // ERROR event), each capped at kMaxRetryAfter. The epoch when it never
  // asked. The client itself never waits (a 429 is the caller's answer at
  // once: docs/kube-layer.md); callers that retry on their own schedule
  // (informers, the inventory publisher) wait until then when their own
  // failed request was asked to wait (RetryAsks moved).
  virtual std::chrono::steady_clock::time_point RetryNotBefore() const { return {}; }
  // How many answers have asked for a wait so far (each counted, also one
  // that asks for less than RetryNotBefore() already holds): a caller
  // compares it before and after its own request to tell whether that
  // request was asked to wait.
  virtual uint64_t RetryAsks() const { return 0; }
};

// The longest wait RetryNotBefore() takes from one answer: a larger or
// malformed value cannot park the callers that honour it.
inline constexpr std::chrono::seconds kMaxRetryAfter{60};

// The wait an apiserver answer asks for: its Retry-After header (whole
// seconds, as kube-apiserver writes it; an HTTP-date or anything else is
// ignored), else details.retryAfterSeconds of a Status body, capped at
// kMaxRetryAfter. Zero when it asks for none.
std::chrono::seconds RetryAfterOf(const std::string& retry_after_header, const std::string& body);

// A client for `config`. kInvalidArgument when the server URL or a
// certificate is unusable (the message says which).
StatusOr<std::unique_ptr<KubeClient>> NewKubeClient(const KubeConfig& config);

// Maps an HTTP status + apiserver Status body to our Status (the table above).
Status StatusFromHttp(int http_status, const std::string& body, const std::string& what);

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_CLIENT_H_
