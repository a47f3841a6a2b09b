// FakeApiServer: an in-memory Kubernetes apiserver on HttpServer, for tests.
//
// Serves list (with label/field selectors of the form k=v, k!=v and
// spec.nodeName / metadata.name / metadata.namespace fields; in the
// metadata-only form, a meta.k8s.io/v1 PartialObjectMetadataList, when the
// Accept header asks for it as kube-apiserver reads it), watch streams
// (with bookmarks), get, create (incl. pods/binding), update (PUT with a
// resourceVersion precondition), patch (merge and JSON patch with "test"),
// delete, for any resource path under /api/v1 and /apis/<group>/<version>.
// Tests drive failures: Compact() makes older versions answer 410,
// DropWatches() cuts every open watch, FailNext() answers the next requests
// with a given status, ExpireContinueTokens() the next page request 410,
// RequireToken() other bearer tokens 401.
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_KUBE_FAKE_APISERVER_H_
#define ACCELPOOL_KUBE_FAKE_APISERVER_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "http/http.h"

namespace accelpool::kube {

class FakeApiServer {
 public:
  FakeApiServer();
  ~FakeApiServer();

  // Listens on 127.0.0.1 port 0 (plain HTTP).
  Status Start();
  void Stop();
  std::string url() const;  // "http://127.0.0.1:<port>"

  // Stores an object directly (as if created), sending watch events.
  // `collection` is the path without a name, e.g. "/api/v1/namespaces/ns/pods"
  // or "/api/v1/nodes". Returns the stored object (with resourceVersion).
  nlohmann::json Put(const std::string& collection, nlohmann::json object);
  void Remove(const std::string& collection, const std::string& name);
  std::optional<nlohmann::json> Object(const std::string& collection,
                                       const std::string& name) const;

  // Events older than the current version answer 410 to watches and lists
  // with a resourceVersion.
  void Compact();
  // Ends every open watch stream abruptly.
  void DropWatches();
  // Every watch answers 410 Expired at once, whatever version it starts
  // from (an apiserver whose watch cache lags behind its lists).
  void ExpireEveryWatch(bool on);
  // The next `n` requests (any path) get HTTP `status`, with a Retry-After
  // header of `retry_after` when it is not empty.
  void FailNext(int n, int status, const std::string& retry_after = "");
  // While on, every request waits (unanswered) until it is turned off, as
  // an apiserver that does not answer; Held() counts those that waited.
  void HoldRequests(bool on);
  int64_t Held() const;
  // The next watch gets, inside its 200 stream, the ERROR event
  // kube-apiserver's watch cache sends for a resourceVersion it has not
  // reached: a 504 Timeout Status with details.retryAfterSeconds.
  void TooLargeNextWatch(int retry_after_seconds);
  // The next list request that carries a continue token gets 410 Expired,
  // as kube-apiserver answers a token whose version was compacted.
  void ExpireContinueTokens();
  // Requests without "Authorization: Bearer <token>" get 401 ("" accepts
  // any); Unauthorized() counts those answers.
  void RequireToken(const std::string& token);
  int64_t Unauthorized() const;
  // Lists answer full objects whatever the Accept header asks for, as a
  // server that cannot transform its answers does.
  void ServeFullListsOnly(bool on);
  // Sends a BOOKMARK with the current version on every open watch.
  void SendBookmarks();

  // Requests seen, "METHOD path?query", for assertions.
  std::vector<std::string> Requests() const;
  int64_t OpenWatches() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace accelpool::kube

#endif  // ACCELPOOL_KUBE_FAKE_APISERVER_H_
