#include "kube/client.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "common/metrics.h"
#include "http/http.h"
#include "kube/objects.h"
#include "kube/rate_limiter.h"

namespace accelpool::kube {

using nlohmann::json;

std::string Resource::Path(const std::string& ns, const std::string& name,
                           const std::string& subresource) const {
  std::string p = api_prefix;
  if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
  p += "/" + plural;
  if (!name.empty()) p += "/" + name;
  if (!subresource.empty()) p += "/" + subresource;
  return p;
}

namespace {

// A namespace, name or subresource becomes one segment of the request's
// path: one that could step out of it ('/', "..", a query or fragment, an
// escape) would send the request, with this client's credentials, to
// another API path. Kubernetes names never need those characters.
Status CheckSegment(std::string_view what, const std::string& s) {
  if (s.empty()) return Status::Ok();
  const bool dots = s == "." || s == "..";
  const bool bad =
      dots || std::any_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u >= 0x7f || c == '/' || c == '?' || c == '#' || c == '%' || c == '\\';
      });
  if (!bad) return Status::Ok();
  return InvalidArgumentError(std::string(what) + " \"" + s.substr(0, 64) +
                              "\" is not a Kubernetes object name (it would change the request's "
                              "path); nothing was sent");
}

Status CheckSegments(const std::string& ns, const std::string& name,
                     const std::string& subresource = "") {
  ACCELPOOL_RETURN_IF_ERROR(CheckSegment("namespace", ns));
  ACCELPOOL_RETURN_IF_ERROR(CheckSegment("name", name));
  return CheckSegment("subresource", subresource);
}

}  // namespace

const Resource& Pods() {
  static const Resource kR{"/api/v1", "pods", true};
  return kR;
}
const Resource& Nodes() {
  static const Resource kR{"/api/v1", "nodes", false};
  return kR;
}
const Resource& Namespaces() {
  static const Resource kR{"/api/v1", "namespaces", false};
  return kR;
}
const Resource& PersistentVolumeClaims() {
  static const Resource kR{"/api/v1", "persistentvolumeclaims", true};
  return kR;
}
const Resource& PersistentVolumes() {
  static const Resource kR{"/api/v1", "persistentvolumes", false};
  return kR;
}
const Resource& StorageClasses() {
  static const Resource kR{"/apis/storage.k8s.io/v1", "storageclasses", false};
  return kR;
}
const Resource& CsiDrivers() {
  static const Resource kR{"/apis/storage.k8s.io/v1", "csidrivers", false};
  return kR;
}
const Resource& CsiStorageCapacities() {
  static const Resource kR{"/apis/storage.k8s.io/v1", "csistoragecapacities", true};
  return kR;
}
const Resource& CsiNodes() {
  static const Resource kR{"/apis/storage.k8s.io/v1", "csinodes", false};
  return kR;
}
const Resource& VolumeAttachments() {
  static const Resource kR{"/apis/storage.k8s.io/v1", "volumeattachments", false};
  return kR;
}
const Resource& Leases() {
  static const Resource kR{"/apis/coordination.k8s.io/v1", "leases", true};
  return kR;
}
const Resource& Events() {
  static const Resource kR{"/apis/events.k8s.io/v1", "events", true};
  return kR;
}
const Resource& CoreEvents() {
  static const Resource kR{"/api/v1", "events", true};
  return kR;
}
const Resource& ConfigMaps() {
  static const Resource kR{"/api/v1", "configmaps", true};
  return kR;
}

const Resource& Secrets() {
  static const Resource kR{"/api/v1", "secrets", true};
  return kR;
}

Status StatusFromHttp(int http_status, const std::string& body, const std::string& what) {
  std::string message, reason;
  json j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (j.contains("message") && j["message"].is_string())
      message = j["message"].get<std::string>();
    if (j.contains("reason") && j["reason"].is_string()) reason = j["reason"].get<std::string>();
  }
  if (message.empty()) message = body.substr(0, 200);
  const std::string m = what + ": HTTP " + std::to_string(http_status) +
                        (reason.empty() ? "" : " " + reason) + ": " + message;
  switch (http_status) {
    case 400:
    case 422:
      return InvalidArgumentError(m);
    case 401:
      return Status(StatusCode::kUnauthenticated, m + "; check the token or client certificate");
    case 403:
      return Status(StatusCode::kPermissionDenied,
                    m + "; check the RBAC rules of this service account");
    case 404:
      return NotFoundError(m);
    case 409:
      if (reason == "AlreadyExists") return AlreadyExistsError(m);
      return AbortedError(m + "; re-read the object and retry");
    case 410:
      return OutOfRangeError(m + "; relist");
    case 504:
      // The apiserver's own timeout: the request may still complete.
      return DeadlineExceededError(m + "; the apiserver timed out, the request may still complete");
    case 429:
      return UnavailableError(m + "; the apiserver is throttling, retry later");
    default:
      break;
  }
  if (http_status >= 500) return UnavailableError(m);
  return Status(StatusCode::kUnknown, m);
}

std::chrono::seconds RetryAfterOf(const std::string& retry_after_header, const std::string& body) {
  int64_t seconds = 0;
  bool found = false;
  // delta-seconds (RFC 9110 10.2.3): digits only. An HTTP-date, a sign or a
  // fraction is not what kube-apiserver writes, and is ignored.
  if (!retry_after_header.empty() &&
      std::all_of(retry_after_header.begin(), retry_after_header.end(),
                  [](unsigned char c) { return c >= '0' && c <= '9'; })) {
    // Past 9 digits it is past the cap anyway (and past what stoll reads).
    seconds =
        retry_after_header.size() <= 9 ? std::stoll(retry_after_header) : kMaxRetryAfter.count();
    found = true;
  }
  if (!found && !body.empty()) {
    const json j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("details") && j["details"].is_object()) {
      const json& d = j["details"];
      if (d.contains("retryAfterSeconds") && d["retryAfterSeconds"].is_number_integer()) {
        seconds = d["retryAfterSeconds"].get<int64_t>();
      }
    }
  }
  return std::chrono::seconds(std::clamp<int64_t>(seconds, 0, kMaxRetryAfter.count()));
}

namespace {

using Ms = std::chrono::milliseconds;

std::string Query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [k, v] : params) {
    if (v.empty()) continue;
    q += (q.empty() ? "?" : "&") + k + "=" + http::UrlEncode(v);
  }
  return q;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// What a metadata-only list asks for: kube-apiserver's PartialObjectMetadataList
// form first, plain JSON (full objects) from a server that cannot transform.
constexpr const char* kMetadataListAccept =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

// A parser callback that drops metadata.managedFields of the objects whose
// "metadata" key sits at `depth` (2 in a watch event
// {"type":..,"object":{"metadata":..}}, 3 in a list {"items":[{"metadata":..}]}):
// nothing here reads them, and they are often the larger part of an object.
// Every parse works on its own copy of the callback, so the flag starts
// false each time.
json::parser_callback_t DropManagedFields(int depth) {
  return [depth, in_metadata = false](int d, json::parse_event_t event, json& parsed) mutable {
    if (event != json::parse_event_t::key) return true;
    if (d == depth) in_metadata = parsed == "metadata";
    return !(d == depth + 1 && in_metadata && parsed == "managedFields");
  };
}

std::string NameOf(const json& obj) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  const json& m = obj["metadata"];
  if (m.contains("name") && m["name"].is_string()) return m["name"].get<std::string>();
  return "";
}

class ClientImpl final : public KubeClient {
 public:
  // `make_http` builds a client for another certificate (PEM certificate and
  // key), when an exec plugin hands out a new one.
  using HttpFactory = std::function<StatusOr<std::unique_ptr<http::HttpClient>>(
      const std::string& cert_pem, const std::string& key_pem)>;
  // `requests` and `latency` may be null (nothing counted).
  ClientImpl(KubeConfig config, std::unique_ptr<http::HttpClient> http, HttpFactory make_http,
             CounterFamily* requests, HistogramFamily* latency)
      : requests_(requests),
        latency_(latency),
        config_(std::move(config)),
        make_http_(std::move(make_http)),
        bucket_(config_.qps, config_.burst),
        http_(std::move(http)),
        cert_pem_(config_.client_cert_pem),
        token_(config_.token),
        exec_expiry_(config_.token_expiry) {}

  StatusOr<ListResult> List(const Resource& r, const std::string& ns,
                            const ListOptions& options) override;
  std::chrono::steady_clock::time_point RetryNotBefore() const override {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(retry_not_before_.load(std::memory_order_relaxed)));
  }
  uint64_t RetryAsks() const override { return retry_asks_.load(std::memory_order_relaxed); }
  Status Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
               const std::function<void(WatchEvent&)>& on_event,
               std::stop_token stop) override;
  Status WatchOnce(const Resource& r, const std::string& ns, const WatchOptions& options,
                   const std::function<void(WatchEvent&)>& on_event, std::stop_token stop,
                   const std::string& what, int& status, uint64_t& generation);
  StatusOr<json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    ACCELPOOL_RETURN_IF_ERROR(CheckSegments(ns, name));
    return Call("GET", r.Path(ns, name), "", "", "get " + r.plural + " " + Key(ns, name));
  }
  StatusOr<json> Create(const Resource& r, const std::string& ns, const json& object,
                        const std::string& name, const std::string& subresource,
                        std::optional<std::chrono::milliseconds> within) override {
    ACCELPOOL_RETURN_IF_ERROR(CheckSegments(ns, name, subresource));
    std::string path = r.Path(ns, name, subresource);
    if (within.has_value()) {
      within = std::max(*within, std::chrono::milliseconds(1));
      path += "?timeout=" + std::to_string(within->count()) + "ms";
    }
    return Call("POST", path, Dump(object), "application/json",
                "create " + r.plural + (subresource.empty() ? "" : "/" + subresource) + " " +
                    Key(ns, name.empty() ? NameOf(object) : name),
                "application/json", nullptr, within);
  }
  StatusOr<json> Update(const Resource& r, const std::string& ns, const std::string& name,
                        const json& object) override {
    ACCELPOOL_RETURN_IF_ERROR(CheckSegments(ns, name));
    return Call("PUT", r.Path(ns, name), Dump(object), "application/json",
                "update " + r.plural + " " + Key(ns, name));
  }
  StatusOr<json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                       PatchType type, const json& patch, const std::string& subresource) override;
  Status Delete(const Resource& r, const std::string& ns, const std::string& name) override {
    ACCELPOOL_RETURN_IF_ERROR(CheckSegments(ns, name));
    auto res = Call("DELETE", r.Path(ns, name), "", "", "delete " + r.plural + " " + Key(ns, name));
    return res.ok() ? Status::Ok() : res.status();
  }

 private:
  static std::string Key(const std::string& ns, const std::string& name) {
    return ns.empty() ? name : ns + "/" + name;
  }

  // `generation` (may be null) gets the generation of the credentials sent,
  // for RefreshToken after a 401; `http` (may be null) the client that holds
  // the current client certificate.
  http::Headers AuthHeaders(const std::string& accept = "application/json",
                            uint64_t* generation = nullptr,
                            std::shared_ptr<http::HttpClient>* http = nullptr) {
    MaybeRereadToken();
    std::lock_guard<std::mutex> lock(mu_);
    if (generation != nullptr) *generation = token_generation_;
    if (http != nullptr) *http = http_;
    http::Headers h;
    h["Accept"] = accept;
    if (!token_.empty()) h["Authorization"] = "Bearer " + token_;
    return h;
  }

  // Reads the token file again when token_reread has passed since the last
  // read; one caller reads, the others go on with the token they have.
  void MaybeRereadToken() {
    if (config_.exec) {
      uint64_t seen = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const auto now = std::chrono::system_clock::now();
        if (!exec_expiry_ || now + kExecEarly < *exec_expiry_ || now < exec_retry_) return;
        seen = token_generation_;
      }
      RerunExec(seen);
      return;
    }
    if (config_.token_file.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (token_read_ && now - *token_read_ < config_.token_reread) return;
      token_read_ = now;
    }
    RefreshToken();
  }

  // Runs the exec plugin again, one caller at a time; a caller that waited
  // for another's run takes its credentials. True when they changed since
  // the caller's generation `seen`. A failed run keeps the old ones and is not
  // repeated for kExecRetry (the request goes on and fails on its own). A new
  // client certificate gets a new HTTP client: requests from then on connect
  // with it, while those in flight finish on the old one.
  bool RerunExec(uint64_t seen) {
    uint64_t runs = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      runs = exec_runs_;
    }
    std::lock_guard<std::mutex> run(exec_mu_);
    std::string cert;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (token_generation_ != seen) return true;
      // A run that ended while this caller waited answered for it too, even
      // when it handed back the same credentials (a plugin that caches its
      // token): running it again, once per waiting request, gets no other.
      if (exec_runs_ != runs) return false;
      if (std::chrono::system_clock::now() < exec_retry_) return false;
      cert = cert_pem_;
    }
    StatusOr<ExecCredential> cred = RunExecPlugin(*config_.exec);
    const bool usable = cred.ok() && (!cred->token.empty() || !cred->client_cert_pem.empty());
    const bool new_cert = usable && !cred->client_cert_pem.empty() && cred->client_cert_pem != cert;
    std::shared_ptr<http::HttpClient> renewed;
    if (new_cert) {
      StatusOr<std::unique_ptr<http::HttpClient>> made =
          make_http_(cred->client_cert_pem, cred->client_key_pem);
      if (made.ok()) renewed = std::move(*made);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++exec_runs_;
    if (!usable || (new_cert && !renewed)) {
      exec_retry_ = std::chrono::system_clock::now() + kExecRetry;
      return false;
    }
    exec_expiry_ = cred->expiry;
    // Credentials that are already (nearly) expired are not asked for again
    // at every request.
    const auto now = std::chrono::system_clock::now();
    if (cred->expiry && *cred->expiry <= now + kExecEarly) exec_retry_ = now + kExecRetry;
    bool changed = false;
    if (cred->token != token_) {
      token_ = cred->token;
      changed = true;
    }
    if (renewed) {
      http_ = std::move(renewed);
      cert_pem_ = cred->client_cert_pem;
      changed = true;
    }
    if (changed) ++token_generation_;
    return changed;
  }

  // After a 401: the exec plugin's next token (unless another request already
  // got one since `seen`), or a rotated token file. True when the token changed.
  bool RefreshToken(uint64_t seen) {
    if (config_.exec) return RerunExec(seen);
    const bool changed = RefreshToken();
    // Read by another request (its 401, or the periodic re-read) since this
    // one was sent: the token it was sent with is still stale, retry it.
    std::lock_guard<std::mutex> lock(mu_);
    return changed || token_generation_ != seen;
  }

  // Re-reads a rotated token file; true when the token changed.
  bool RefreshToken() {
    if (config_.token_file.empty()) return false;
    std::ifstream in(config_.token_file);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string t = ss.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    std::lock_guard<std::mutex> lock(mu_);
    token_read_ = std::chrono::steady_clock::now();
    if (t.empty() || t == token_) return false;
    token_ = t;
    ++token_generation_;
    return true;
  }

  // Sends with the rate limit and one retry after a token refresh on 401.
  StatusOr<http::ClientResponse> Send(
      const std::string& method, const std::string& path, const std::string& body,
      const std::string& content_type, const std::string& accept = "application/json",
      std::optional<std::chrono::milliseconds> within = std::nullopt) {
    for (int attempt = 0;; ++attempt) {
      bucket_.Acquire();
      uint64_t generation = 0;
      std::shared_ptr<http::HttpClient> http;
      http::ClientRequest req;
      req.method = method;
      req.path = path;
      req.body = body;
      req.headers = AuthHeaders(accept, &generation, &http);
      if (!content_type.empty()) req.headers["Content-Type"] = content_type;
      req.timeout = within.has_value() ? std::min(config_.timeout, *within) : config_.timeout;
      const auto sent = std::chrono::steady_clock::now();
      auto resp = http->Send(req);
      Count(method, resp.ok() ? resp->status : 0, std::chrono::steady_clock::now() - sent);
      if (resp.ok() && resp->status == 401 && attempt == 0 && RefreshToken(generation)) continue;
      if (resp.ok()) NoteRetryAfter(resp->status, resp->headers, resp->body);
      return resp;
    }
  }

  // Counts one request by its HTTP status (0: no answer, counted as
  // "error"); `took` is observed unless the request was a watch.
  void Count(const std::string& verb, int status,
             std::optional<std::chrono::steady_clock::duration> took) {
    if (requests_ != nullptr) {
      requests_
          ->WithLabels({config_.metrics_client, verb,
                        status == 0 ? std::string("error") : std::to_string(status)})
          .Inc();
    }
    if (latency_ != nullptr && took.has_value()) {
      latency_->WithLabels({config_.metrics_client, verb})
          .Observe(std::chrono::duration<double>(*took).count());
    }
  }

  // Keeps the wait a 429 or 5xx asks for (RetryNotBefore).
  void NoteRetryAfter(int status, const http::Headers& headers, const std::string& body) {
    if (status != 429 && status < 500) return;
    const auto h = headers.find("retry-after");
    const std::chrono::seconds wait =
        RetryAfterOf(h == headers.end() ? std::string() : h->second, body);
    if (wait.count() <= 0) return;
    retry_asks_.fetch_add(1, std::memory_order_relaxed);
    const int64_t until = (std::chrono::steady_clock::now() + wait).time_since_epoch().count();
    int64_t seen = retry_not_before_.load(std::memory_order_relaxed);
    while (seen < until &&
           !retry_not_before_.compare_exchange_weak(seen, until, std::memory_order_relaxed)) {
    }
  }

  // `accept` and `parse_cb` (may be null) serve List's metadata-only form.
  StatusOr<json> Call(const std::string& method, const std::string& path, const std::string& body,
                      const std::string& content_type, const std::string& what,
                      const std::string& accept = "application/json",
                      const json::parser_callback_t& parse_cb = nullptr,
                      std::optional<std::chrono::milliseconds> within = std::nullopt) {
    auto resp = Send(method, path, body, content_type, accept, within);
    if (!resp.ok()) return resp.status().WithPrefix(what);
    if (resp->status < 200 || resp->status >= 300)
      return StatusFromHttp(resp->status, resp->body, what);
    json j = json::parse(resp->body, parse_cb, false);
    if (j.is_discarded()) {
      if (resp->body.empty()) return json::object();
      return InternalError(what + ": the apiserver answered with invalid JSON");
    }
    return j;
  }

  CounterFamily* const requests_;
  HistogramFamily* const latency_;
  const KubeConfig config_;
  const HttpFactory make_http_;
  TokenBucket bucket_;
  std::mutex mu_;
  // The client with the current client certificate, and that certificate;
  // guarded by mu_ (replaced when an exec plugin renews the certificate).
  std::shared_ptr<http::HttpClient> http_;
  std::string cert_pem_;
  std::string token_;  // guarded by mu_
  // When the token file was last read; guarded by mu_. Unset at first, so the
  // first request reads it (the token in the config may be older).
  std::optional<std::chrono::steady_clock::time_point> token_read_;
  // The exec plugin's token: when it expires, and when a failed run may be
  // retried; guarded by mu_. exec_mu_ lets one caller run the plugin.
  static constexpr std::chrono::seconds kExecEarly{10};
  static constexpr std::chrono::seconds kExecRetry{10};
  std::mutex exec_mu_;
  uint64_t token_generation_ = 0;  // counts token (and client cert) changes
  // RetryNotBefore(), as steady_clock ticks since its epoch.
  std::atomic<int64_t> retry_not_before_{0};
  std::atomic<uint64_t> retry_asks_{0};  // RetryAsks()
  uint64_t exec_runs_ = 0;         // exec plugin runs finished
  std::optional<std::chrono::system_clock::time_point> exec_expiry_;
  std::chrono::system_clock::time_point exec_retry_{};
};

StatusOr<ListResult> ClientImpl::List(const Resource& r, const std::string& ns,
                                      const ListOptions& options) {
  ACCELPOOL_RETURN_IF_ERROR(CheckSegments(ns, ""));
  ListResult out;
  std::string cont;
  // A continue token expires when its version is compacted (410 Expired on a
  // later page); then the list is taken again in one piece, as client-go's
  // pager does (FullListIfExpired).
  int64_t limit = options.limit;
  const std::string what = "list " + r.plural + (ns.empty() ? "" : " in " + ns);
  const std::string accept = options.metadata_only ? kMetadataListAccept : "application/json";
  const json::parser_callback_t parse_cb = options.metadata_only ? DropManagedFields(3) : nullptr;
  for (int page = 0; page < 100000; ++page) {
    const std::string path =
        r.Path(ns) +
        Query({{"labelSelector", options.label_selector},
               {"fieldSelector", options.field_selector},
               {"limit", limit > 0 ? std::to_string(limit) : ""},
               {"continue", cont},
               {"resourceVersion", cont.empty() ? options.resource_version : ""},
               {"resourceVersionMatch", cont.empty() ? options.resource_version_match : ""}});
    auto j = Call("GET", path, "", "", what, accept, parse_cb);
    if (!j.ok() && j.status().code() == StatusCode::kOutOfRange && !cont.empty()) {
      out = ListResult();
      cont.clear();
      limit = 0;
      page = -1;
      continue;
    }
    if (!j.ok()) return j.status();
    // kube-apiserver writes an empty PartialObjectMetadataList's items as
    // null (a nil Go slice), where a PodList has [].
    if (!j->is_object() || !j->contains("items") ||
        !((*j)["items"].is_array() || (*j)["items"].is_null())) {
      return InternalError(what + ": the answer has no items array");
    }
    // Which form the server chose; a caller that reads more than metadata
    // must know, so one list never mixes the two.
    const bool partial = options.metadata_only &&
                         StringAt(*j, json::json_pointer("/kind")) == "PartialObjectMetadataList" &&
                         StringAt(*j, json::json_pointer("/apiVersion")) == "meta.k8s.io/v1";
    if (page == 0) {
      out.metadata_only = partial;
    } else if (partial != out.metadata_only) {
      return InternalError(what + ": the apiserver answered pages of one list in two forms " +
                           "(metadata only and full objects)");
    }
    if ((*j)["items"].is_array()) {
      for (json& item : (*j)["items"]) {
        if (!options.keep || options.keep(item)) out.items.push_back(std::move(item));
      }
    }
    out.resource_version = StringAt(*j, json::json_pointer("/metadata/resourceVersion"));
    cont = StringAt(*j, json::json_pointer("/metadata/continue"));
    if (cont.empty()) return out;
  }
  return InternalError(what + ": too many pages");
}

Status ClientImpl::Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                         const std::function<void(WatchEvent&)>& on_event,
                         std::stop_token stop) {
  ACCELPOOL_RETURN_IF_ERROR(CheckSegments(ns, ""));
  const std::string what = "watch " + r.plural + (ns.empty() ? "" : " in " + ns);
  if (!bucket_.Acquire(stop)) return Status(StatusCode::kCancelled, what + ": stopped");
  // A 401 before the stream starts: read a rotated token file and try once
  // more, as Send does for other requests.
  // (An ERROR event inside a stream is never retried here: its events were
  // delivered, and the caller re-watches from the last version it saw.)
  for (int attempt = 0;; ++attempt) {
    int status = 0;
    uint64_t generation = 0;
    Status st = WatchOnce(r, ns, options, on_event, stop, what, status, generation);
    if (status == 401 && attempt == 0 && RefreshToken(generation)) continue;
    return st;
  }
}

Status ClientImpl::WatchOnce(const Resource& r, const std::string& ns, const WatchOptions& options,
                             const std::function<void(WatchEvent&)>& on_event, std::stop_token stop,
                             const std::string& what, int& status, uint64_t& generation) {
  http::ClientRequest req;
  req.method = "GET";
  req.path = r.Path(ns) + Query({{"watch", "true"},
                                 {"allowWatchBookmarks", options.allow_bookmarks ? "true" : ""},
                                 {"resourceVersion", options.resource_version},
                                 {"timeoutSeconds", std::to_string(options.server_timeout.count())},
                                 {"labelSelector", options.label_selector},
                                 {"fieldSelector", options.field_selector}});
  std::shared_ptr<http::HttpClient> http;
  req.headers = AuthHeaders("application/json", &generation, &http);
  req.timeout = config_.timeout;
  status = 0;
  std::string error_body;
  http::Headers error_headers;
  Status result;
  const json::parser_callback_t drop_managed_fields = DropManagedFields(2);
  Status st = http->StreamLines(
      req,
      [&](const http::ClientResponse& head) {
        status = head.status;
        if (status != 200) error_headers = head.headers;
      },
      [&](std::string_view line) {
        if (status != 200) {
          error_body.append(line);
          return error_body.size() < 65536;
        }
        if (line.empty()) return true;
        json ev = json::parse(line.begin(), line.end(), drop_managed_fields, false);
        if (!ev.is_object() || !ev.contains("type") || !ev["type"].is_string() ||
            !ev.contains("object")) {
          result = InternalError(what + ": malformed watch event; the stream is restarted");
          return false;
        }
        const std::string type = ev["type"].get<std::string>();
        WatchEvent out;
        if (type == "ADDED") {
          out.type = WatchEventType::kAdded;
        } else if (type == "MODIFIED") {
          out.type = WatchEventType::kModified;
        } else if (type == "DELETED") {
          out.type = WatchEventType::kDeleted;
        } else if (type == "BOOKMARK") {
          out.type = WatchEventType::kBookmark;
        } else if (type == "ERROR") {
          const json& o = ev["object"];
          const int code = o.is_object() && o.contains("code") && o["code"].is_number_integer()
                               ? o["code"].get<int>()
                               : 500;
          const std::string body = Dump(o);
          // kube-apiserver's watch cache asks for a wait this way too (a 504
          // with retryAfterSeconds for a version it has not reached yet).
          NoteRetryAfter(code, {}, body);
          result = StatusFromHttp(code, body, what);
          return false;
        } else {
          return true;  // an event type this client does not know: skip it
        }
        out.object = std::move(ev["object"]);
        on_event(out);
        return true;
      },
      stop, Ms(options.server_timeout) + Ms(30000));
  if (status != 0 || !stop.stop_requested()) Count("WATCH", status, std::nullopt);
  // Also when the refusal's body was cut short: its header was read.
  if (status != 0 && status != 200) NoteRetryAfter(status, error_headers, error_body);
  if (!st.ok()) return st.WithPrefix(what);
  if (status != 200) return StatusFromHttp(status, error_body, what);
  return result;
}

StatusOr<json> ClientImpl::Patch(const Resource& r, const std::string& ns, const std::string& name,
                                 PatchType type, const json& patch,
                                 const std::string& subresource) {
  const char* ct = type == PatchType::kMerge  ? "application/merge-patch+json"
                   : type == PatchType::kJson ? "application/json-patch+json"
                                              : "application/strategic-merge-patch+json";
  const std::string what = "patch " + r.plural + " " + Key(ns, name);
  ACCELPOOL_RETURN_IF_ERROR(CheckSegments(ns, name, subresource));
  auto resp = Send("PATCH", r.Path(ns, name, subresource), Dump(patch), ct);
  if (!resp.ok()) return resp.status().WithPrefix(what);
  if (resp->status == 422 && type == PatchType::kJson) {
    // A failed "test" operation is a precondition failure, like a 409. It is
    // told by the Status message kube-apiserver's JSON-patch library writes
    // ("testing value <path> failed: test failed"), not by "test" anywhere in
    // the body: an object named "...-test" failing validation is no conflict.
    const json status = json::parse(resp->body, nullptr, false);
    std::string message =
        status.is_object() && status.contains("message") && status["message"].is_string()
            ? status["message"].get<std::string>()
            : std::string();
    std::transform(message.begin(), message.end(), message.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (message.find("test failed") != std::string::npos ||
        message.find("testing value") != std::string::npos) {
      return AbortedError(what + ": a JSON-patch test failed (the object changed); re-read and " +
                          "retry");
    }
  }
  if (resp->status < 200 || resp->status >= 300)
    return StatusFromHttp(resp->status, resp->body, what);
  json j = json::parse(resp->body, nullptr, false);
  if (j.is_discarded()) return InternalError(what + ": the apiserver answered with invalid JSON");
  return j;
}

}  // namespace

StatusOr<std::unique_ptr<KubeClient>> NewKubeClient(const KubeConfig& config) {
  http::ClientOptions o;
  o.base_url = config.server;
  o.ca_file = config.ca_file;
  o.ca_pem = config.ca_pem;
  o.client_cert_file = config.client_cert_file;
  o.client_key_file = config.client_key_file;
  o.client_cert_pem = config.client_cert_pem;
  o.client_key_pem = config.client_key_pem;
  o.insecure_skip_verify = config.insecure_skip_verify;
  o.tls_server_name = config.tls_server_name;
  o.timeout = config.timeout;
  o.user_agent = "accelpool/0.1";
  o.max_connections = config.max_connections;
  // Every connection a burst opened stays for the next one (within the idle TTL).
  o.max_idle_connections = config.max_connections;
  StatusOr<http::ClientOptions::Transport> transport = http::ParseTransport(config.transport);
  if (!transport.ok()) return transport.status();
  o.transport = *transport;
  auto http = http::NewHttpClient(o);
  if (!http.ok()) return http.status();
  auto make_http = [o](const std::string& cert_pem, const std::string& key_pem) {
    http::ClientOptions renewed = o;
    renewed.client_cert_file.clear();
    renewed.client_key_file.clear();
    renewed.client_cert_pem = cert_pem;
    renewed.client_key_pem = key_pem;
    return http::NewHttpClient(renewed);
  };
  CounterFamily* requests = nullptr;
  HistogramFamily* latency = nullptr;
  if (config.metrics != nullptr) {
    StatusOr<CounterFamily*> r = config.metrics->AddCounter(
        "accelpool_kube_requests_total",
        "Requests to the Kubernetes API by client, verb (the HTTP method; WATCH for watches) and "
        "HTTP status (error: no answer).",
        {"client", "verb", "code"});
    if (!r.ok()) return r.status();
    // Up to 60 s: the request timeout is 30 s by default, and a slow list
    // or a timeout would otherwise sit above the last bucket.
    StatusOr<HistogramFamily*> l = config.metrics->AddHistogram(
        "accelpool_kube_request_seconds",
        "Latency of requests to the Kubernetes API from send to answer (not the wait for the "
        "client's own rate limit; watches not included), by client and verb.",
        {"client", "verb"}, {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
    if (!l.ok()) return l.status();
    requests = *r;
    latency = *l;
  }
  return std::unique_ptr<KubeClient>(std::make_unique<ClientImpl>(
      config, std::move(*http), std::move(make_http), requests, latency));
}

}  // namespace accelpool::kube
