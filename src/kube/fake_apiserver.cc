#include "kube/fake_apiserver.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

namespace accelpool::kube {

using http::Request;
using http::Response;
using nlohmann::json;

namespace {

// Where a request path points: <prefix>/[namespaces/<ns>/]<plural>[/<name>[/<sub>]].
struct Target {
  std::string prefix, plural, ns, name, sub;
  std::string kind_key() const { return prefix + "|" + plural; }
};

bool ParseTarget(const std::string& path, Target& t) {
  std::vector<std::string> seg;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) seg.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  size_t i = 0;
  if (seg.size() >= 2 && seg[0] == "api") {
    t.prefix = "/api/" + seg[1];
    i = 2;
  } else if (seg.size() >= 3 && seg[0] == "apis") {
    t.prefix = "/apis/" + seg[1] + "/" + seg[2];
    i = 3;
  } else {
    return false;
  }
  if (seg.size() >= i + 3 && seg[i] == "namespaces") {
    t.ns = seg[i + 1];
    i += 2;
  }
  if (i >= seg.size()) return false;
  t.plural = seg[i++];
  if (i < seg.size()) t.name = seg[i++];
  if (i < seg.size()) t.sub = seg[i++];
  return i == seg.size();
}

std::string Key(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

std::string MetaStr(const json& o, const char* k) {
  if (!o.is_object() || !o.contains("metadata") || !o["metadata"].is_object()) return "";
  const json& m = o["metadata"];
  return m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : "";
}

Response StatusResponse(int code, const std::string& reason, const std::string& message) {
  json s = {{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
            {"message", message}, {"reason", reason},   {"code", code}};
  return Response::Json(code, s.dump());
}

// Selector terms: "k=v", "k==v", "k!=v", "k" (exists), "!k".
bool MatchSelector(const std::string& sel,
                   const std::function<std::optional<std::string>(const std::string&)>& get) {
  size_t start = 0;
  while (start < sel.size()) {
    size_t end = sel.find(',', start);
    if (end == std::string::npos) end = sel.size();
    const std::string term = sel.substr(start, end - start);
    start = end + 1;
    if (term.empty()) continue;
    size_t op;
    if ((op = term.find("!=")) != std::string::npos) {
      auto v = get(term.substr(0, op));
      if (v && *v == term.substr(op + 2)) return false;
    } else if ((op = term.find("==")) != std::string::npos) {
      auto v = get(term.substr(0, op));
      if (!v || *v != term.substr(op + 2)) return false;
    } else if ((op = term.find('=')) != std::string::npos) {
      auto v = get(term.substr(0, op));
      if (!v || *v != term.substr(op + 1)) return false;
    } else if (term[0] == '!') {
      if (get(term.substr(1))) return false;
    } else if (!get(term)) {
      return false;
    }
  }
  return true;
}

// The form a list answer takes, from the request's Accept header.
enum class ListForm { kFull, kMetadata, kNotAcceptable };

// Content negotiation as kube-apiserver does it for a list: the first media
// type of the Accept header that it can serve wins. application/json (or a
// wildcard) without parameters is the full list; with
// as=PartialObjectMetadataList;g=meta.k8s.io;v=v1 the metadata-only form.
// Another "as" (Table, another group or version) is skipped, as one this
// fake does not serve.
ListForm NegotiateList(const std::string& accept) {
  if (accept.empty()) return ListForm::kFull;
  auto trim = [](std::string v) {
    const size_t b = v.find_first_not_of(" \t");
    const size_t e = v.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
  };
  size_t start = 0;
  while (start <= accept.size()) {
    size_t end = accept.find(',', start);
    if (end == std::string::npos) end = accept.size();
    const std::string media = accept.substr(start, end - start);
    start = end + 1;
    std::map<std::string, std::string> params;
    std::string type;
    size_t p = 0;
    for (bool first = true; p <= media.size(); first = false) {
      size_t q = media.find(';', p);
      if (q == std::string::npos) q = media.size();
      const std::string part = trim(media.substr(p, q - p));
      p = q + 1;
      if (first) {
        type = part;
        continue;
      }
      const size_t eq = part.find('=');
      if (eq != std::string::npos) params[trim(part.substr(0, eq))] = trim(part.substr(eq + 1));
    }
    if (type != "application/json" && type != "application/*" && type != "*/*") continue;
    params.erase("q");
    if (params.empty()) return ListForm::kFull;
    if (params.size() == 3 && params["as"] == "PartialObjectMetadataList" &&
        params["g"] == "meta.k8s.io" && params["v"] == "v1") {
      return ListForm::kMetadata;
    }
  }
  return ListForm::kNotAcceptable;
}

bool Matches(const json& obj, const Request& req) {
  const std::string labels = req.Query("labelSelector");
  const std::string fields = req.Query("fieldSelector");
  auto label = [&](const std::string& k) -> std::optional<std::string> {
    const json* m = obj.contains("metadata") ? &obj["metadata"] : nullptr;
    if (m == nullptr || !m->contains("labels") || !(*m)["labels"].is_object()) return std::nullopt;
    const json& l = (*m)["labels"];
    if (!l.contains(k) || !l[k].is_string()) return std::nullopt;
    return l[k].get<std::string>();
  };
  auto field = [&](const std::string& k) -> std::optional<std::string> {
    json::json_pointer p("/" + [&] {
      std::string s = k;
      for (char& c : s) {
        if (c == '.') c = '/';
      }
      return s;
    }());
    if (!obj.contains(p) || !obj[p].is_string()) return std::string();
    return obj[p].get<std::string>();
  };
  return MatchSelector(labels, label) && MatchSelector(fields, field);
}

}  // namespace

struct FakeApiServer::Impl {
  struct Event {
    int64_t rv;
    std::string kind_key, ns;
    std::string type;
    json object;
  };

  std::unique_ptr<http::HttpServer> server;
  mutable std::mutex mu;
  std::condition_variable cv;
  int64_t rv = 100;                                          // guarded by mu
  int64_t compacted = 0;                                     // guarded by mu
  int64_t drop_gen = 0, bookmark_gen = 0;                    // guarded by mu
  bool stopping = false;                                     // guarded by mu
  std::map<std::string, std::map<std::string, json>> store;  // kind_key -> key -> obj
  std::vector<Event> events;                                 // guarded by mu
  int fail_n = 0, fail_status = 0;                           // guarded by mu
  std::string fail_retry_after;                              // guarded by mu
  bool expire_continue = false;                              // guarded by mu
  std::string required_token;                                // guarded by mu
  int64_t unauthorized = 0;                                  // guarded by mu
  bool full_lists_only = false;                              // guarded by mu
  bool expire_every_watch = false;                           // guarded by mu
  bool too_large_next_watch = false;                         // guarded by mu
  int too_large_retry_after = 0;                             // guarded by mu
  bool holding = false;                                      // guarded by mu
  int64_t held = 0;                                          // guarded by mu
  std::vector<std::string> requests;                         // guarded by mu
  int64_t uid_seq = 0;                                       // guarded by mu
  std::atomic<int64_t> open_watches{0};

  // REQUIRES: mu held.
  json Store(const Target& t, json obj, const std::string& type) {
    obj["metadata"]["resourceVersion"] = std::to_string(++rv);
    if (!t.ns.empty()) obj["metadata"]["namespace"] = t.ns;
    const std::string key = Key(t.ns, MetaStr(obj, "name"));
    if (type == "DELETED") {
      store[t.kind_key()].erase(key);
    } else {
      store[t.kind_key()][key] = obj;
    }
    events.push_back({rv, t.kind_key(), t.ns, type, obj});
    cv.notify_all();
    return obj;
  }

  Response Handle(const Request& req);
  Response List(const Target& t, const Request& req);
  Response Watch(const Target& t, const Request& req);
  Response Mutate(const Target& t, const Request& req);
};

Response FakeApiServer::Impl::List(const Target& t, const Request& req) {
  std::lock_guard<std::mutex> lock(mu);
  const std::string from = req.Query("resourceVersion");
  if (!from.empty() && from != "0" && std::stoll(from) < compacted) {
    return StatusResponse(410, "Expired", "too old resource version: " + from);
  }
  if (!req.Query("continue").empty() && expire_continue) {
    expire_continue = false;
    return StatusResponse(410, "Expired",
                          "The provided continue parameter is too old to display a consistent "
                          "list result. You can start a new list without the continue parameter, "
                          "or use the continue token in this response to retrieve the remainder "
                          "of the results.");
  }
  const ListForm form = full_lists_only ? ListForm::kFull : NegotiateList(req.Header("accept"));
  if (form == ListForm::kNotAcceptable) {
    return StatusResponse(406, "NotAcceptable",
                          "only the following media types are accepted: application/json, "
                          "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1");
  }
  std::vector<const json*> all;
  for (const auto& [key, obj] : store[t.kind_key()]) {
    if (!t.ns.empty() && MetaStr(obj, "namespace") != t.ns) continue;
    if (Matches(obj, req)) all.push_back(&obj);
  }
  size_t offset = req.Query("continue").empty() ? 0 : std::stoul(req.Query("continue"));
  const size_t limit = req.Query("limit").empty() ? all.size() : std::stoul(req.Query("limit"));
  json items = json::array();
  for (size_t i = offset; i < all.size() && items.size() < limit; ++i) {
    if (form == ListForm::kMetadata) {
      // As kube-apiserver converts each item: its whole metadata, nothing else.
      items.push_back({{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", all[i]->value("metadata", json::object())}});
    } else {
      items.push_back(*all[i]);
    }
  }
  json meta = {{"resourceVersion", std::to_string(rv)}};
  if (offset + items.size() < all.size()) meta["continue"] = std::to_string(offset + items.size());
  const bool partial = form == ListForm::kMetadata;
  // kube-apiserver (1.37) writes an empty metadata-only list's items as null.
  return Response::Json(200, json{{"kind", partial ? "PartialObjectMetadataList" : "List"},
                                  {"apiVersion", partial ? "meta.k8s.io/v1" : "v1"},
                                  {"metadata", meta},
                                  {"items", partial && items.empty() ? json() : items}}
                                 .dump());
}

Response FakeApiServer::Impl::Watch(const Target& t, const Request& req) {
  Response r;
  r.headers["content-type"] = "application/json";
  const std::string from_s = req.Query("resourceVersion");
  const bool bookmarks = req.Query("allowWatchBookmarks") == "true";
  const int64_t timeout_s =
      req.Query("timeoutSeconds").empty() ? 300 : std::stoll(req.Query("timeoutSeconds"));
  r.stream = [this, t, req, from_s, bookmarks, timeout_s](const http::ChunkWriter& write) {
    std::unique_lock<std::mutex> lock(mu);
    int64_t from = from_s.empty() || from_s == "0" ? rv : std::stoll(from_s);
    if (too_large_next_watch) {
      // What kube-apiserver's watch cache sends for a version it has not
      // reached within its wait: a 504 inside the stream, with a wait.
      too_large_next_watch = false;
      lock.unlock();
      json s = {{"kind", "Status"},
                {"apiVersion", "v1"},
                {"status", "Failure"},
                {"message", "Too large resource version: " + from_s},
                {"reason", "Timeout"},
                {"details",
                 {{"causes", json::array({{{"reason", "ResourceVersionTooLarge"},
                                           {"message", "Too large resource version"}}})},
                  {"retryAfterSeconds", too_large_retry_after}}},
                {"code", 504}};
      write(json{{"type", "ERROR"}, {"object", s}}.dump() + "\n");
      return;
    }
    if (from < compacted || expire_every_watch) {
      lock.unlock();
      json s = {{"kind", "Status"},    {"apiVersion", "v1"},
                {"status", "Failure"}, {"message", "too old resource version"},
                {"reason", "Expired"}, {"code", 410}};
      write(json{{"type", "ERROR"}, {"object", s}}.dump() + "\n");
      return;
    }
    const int64_t my_drop = drop_gen;
    int64_t my_bookmark = bookmark_gen;
    // Counted open only once the drop and bookmark generations it answers
    // to are taken: a test that sees it open and drops it at once is heard.
    ++open_watches;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    size_t next = 0;
    while (!stopping && drop_gen == my_drop) {
      std::vector<std::string> out;
      for (; next < events.size(); ++next) {
        const Event& e = events[next];
        if (e.rv <= from || e.kind_key != t.kind_key()) continue;
        if (!t.ns.empty() && e.ns != t.ns) continue;
        if (!Matches(e.object, req)) continue;
        out.push_back(json{{"type", e.type}, {"object", e.object}}.dump() + "\n");
        from = e.rv;
      }
      if (bookmarks && bookmark_gen != my_bookmark) {
        my_bookmark = bookmark_gen;
        out.push_back(
            json{{"type", "BOOKMARK"},
                 {"object",
                  {{"kind", "Pod"}, {"metadata", {{"resourceVersion", std::to_string(rv)}}}}}}
                .dump() +
            "\n");
      }
      if (!out.empty()) {
        lock.unlock();
        for (const auto& line : out) {
          if (!write(line)) {
            --open_watches;
            return;
          }
        }
        lock.lock();
        continue;
      }
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= deadline) {
        break;
      }
    }
    --open_watches;
  };
  return r;
}

Response FakeApiServer::Impl::Mutate(const Target& t, const Request& req) {
  std::lock_guard<std::mutex> lock(mu);
  auto& objects = store[t.kind_key()];
  const std::string key = Key(t.ns, t.name);
  if (req.method == "POST" && t.sub == "binding") {
    auto it = objects.find(key);
    if (it == objects.end())
      return StatusResponse(404, "NotFound", "pods \"" + t.name + "\" not found");
    json b = json::parse(req.body);
    const std::string uid = MetaStr(b, "uid");
    if (!uid.empty() && uid != MetaStr(it->second, "uid")) {
      return StatusResponse(409, "Conflict", "Precondition failed: UID in precondition: " + uid);
    }
    json pod = it->second;
    if (pod.contains("spec") && pod["spec"].contains("nodeName") &&
        !pod["spec"]["nodeName"].get<std::string>().empty()) {
      return StatusResponse(409, "Conflict",
                            "pod " + t.name + " is already assigned to node " +
                                pod["spec"]["nodeName"].get<std::string>());
    }
    pod["spec"]["nodeName"] = b["target"]["name"];
    // Like kube-apiserver: the Binding's annotations are added to the pod.
    if (b.contains("metadata") && b["metadata"].is_object() &&
        b["metadata"].contains("annotations") && b["metadata"]["annotations"].is_object()) {
      for (const auto& [k, v] : b["metadata"]["annotations"].items()) {
        pod["metadata"]["annotations"][k] = v;
      }
    }
    Store(t, pod, "MODIFIED");
    return Response::Json(201,
                          json{{"kind", "Status"}, {"status", "Success"}, {"code", 201}}.dump());
  }
  if (req.method == "POST") {
    json obj = json::parse(req.body);
    if (!obj.is_object()) return StatusResponse(400, "BadRequest", "body must be an object");
    std::string name = MetaStr(obj, "name");
    if (name.empty()) {
      const std::string gen = MetaStr(obj, "generateName");
      if (gen.empty()) return StatusResponse(422, "Invalid", "metadata.name: Required value");
      name = gen + std::to_string(++uid_seq);
      obj["metadata"]["name"] = name;
    }
    if (objects.count(Key(t.ns, name)) != 0) {
      return StatusResponse(409, "AlreadyExists", t.plural + " \"" + name + "\" already exists");
    }
    obj["metadata"]["uid"] = "uid-" + std::to_string(++uid_seq);
    return Response::Json(201, Store(t, obj, "ADDED").dump());
  }
  auto it = objects.find(key);
  if (it == objects.end()) {
    return StatusResponse(404, "NotFound", t.plural + " \"" + t.name + "\" not found");
  }
  const std::string current_rv = MetaStr(it->second, "resourceVersion");
  if (req.method == "GET") return Response::Json(200, it->second.dump());
  if (req.method == "DELETE") {
    json old = it->second;
    Store(t, old, "DELETED");
    return Response::Json(200, old.dump());
  }
  if (req.method == "PUT") {
    json obj = json::parse(req.body);
    const std::string want = MetaStr(obj, "resourceVersion");
    if (!want.empty() && want != current_rv) {
      return StatusResponse(409, "Conflict",
                            "the object has been modified; please apply your changes to the latest "
                            "version and try again");
    }
    obj["metadata"]["uid"] = MetaStr(it->second, "uid");
    return Response::Json(200, Store(t, obj, "MODIFIED").dump());
  }
  if (req.method == "PATCH") {
    const json patch = json::parse(req.body);
    const std::string ct = req.Header("content-type");
    json obj = it->second;
    if (ct.find("json-patch") != std::string::npos) {
      try {
        obj = obj.patch(patch);
      } catch (const json::exception& e) {
        return StatusResponse(
            422, "Invalid",
            std::string("the JSON patch could not be applied: ") +
                (std::string(e.what()).find("unsuccessful") != std::string::npos ? "test failed"
                                                                                 : e.what()));
      }
    } else {
      // Merge and strategic-merge patches are both applied as RFC 7386 merges here.
      const std::string want = MetaStr(patch, "resourceVersion");
      if (!want.empty() && want != current_rv) {
        return StatusResponse(409, "Conflict",
                              "the object has been modified; please apply your changes to the "
                              "latest version and try again");
      }
      obj.merge_patch(patch);
    }
    return Response::Json(200, Store(t, obj, "MODIFIED").dump());
  }
  return StatusResponse(405, "MethodNotAllowed", req.method + " is not supported");
}

Response FakeApiServer::Impl::Handle(const Request& req) {
  {
    std::unique_lock<std::mutex> lock(mu);
    if (holding) {
      ++held;
      cv.notify_all();
      cv.wait(lock, [&] { return !holding || stopping; });
    }
    std::string q;
    for (const auto& [k, v] : req.query) q += (q.empty() ? "?" : "&") + k + "=" + v;
    requests.push_back(req.method + " " + req.path + q);
    if (!required_token.empty() && req.Header("authorization") != "Bearer " + required_token) {
      ++unauthorized;
      return StatusResponse(401, "Unauthorized", "Unauthorized");
    }
    if (fail_n > 0) {
      --fail_n;
      Response r = StatusResponse(fail_status, "InternalError", "injected failure");
      if (!fail_retry_after.empty()) r.headers["retry-after"] = fail_retry_after;
      return r;
    }
  }
  Target t;
  if (!ParseTarget(req.path, t)) return StatusResponse(404, "NotFound", "unknown path " + req.path);
  if (req.method == "GET" && t.name.empty()) {
    const std::string w = req.Query("watch");
    if (w == "true" || w == "1") return Watch(t, req);
    return List(t, req);
  }
  return Mutate(t, req);
}

FakeApiServer::FakeApiServer() : impl_(std::make_unique<Impl>()) {}
FakeApiServer::~FakeApiServer() { Stop(); }

Status FakeApiServer::Start() {
  http::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  impl_->server = http::NewHttpServer(o);
  for (const char* m : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
    for (const char* prefix : {"/api/", "/apis/"}) {
      impl_->server->HandlePrefix(m, prefix, [this](const Request& r) { return impl_->Handle(r); });
    }
  }
  return impl_->server->Start();
}

void FakeApiServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->cv.notify_all();
  }
  if (impl_->server) impl_->server->Stop();
}

std::string FakeApiServer::url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->server ? impl_->server->port() : 0);
}

json FakeApiServer::Put(const std::string& collection, json object) {
  Target t;
  ParseTarget(collection, t);
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::string key = Key(t.ns, MetaStr(object, "name"));
  const bool exists = impl_->store[t.kind_key()].count(key) != 0;
  if (MetaStr(object, "uid").empty())
    object["metadata"]["uid"] = "uid-" + std::to_string(++impl_->uid_seq);
  return impl_->Store(t, std::move(object), exists ? "MODIFIED" : "ADDED");
}

void FakeApiServer::Remove(const std::string& collection, const std::string& name) {
  Target t;
  ParseTarget(collection, t);
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& objects = impl_->store[t.kind_key()];
  auto it = objects.find(Key(t.ns, name));
  if (it == objects.end()) return;
  impl_->Store(t, it->second, "DELETED");
}

std::optional<json> FakeApiServer::Object(const std::string& collection,
                                          const std::string& name) const {
  Target t;
  ParseTarget(collection, t);
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto kit = impl_->store.find(t.kind_key());
  if (kit == impl_->store.end()) return std::nullopt;
  auto it = kit->second.find(Key(t.ns, name));
  if (it == kit->second.end()) return std::nullopt;
  return it->second;
}

void FakeApiServer::Compact() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->compacted = impl_->rv;
}

void FakeApiServer::ExpireEveryWatch(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->expire_every_watch = on;
}

void FakeApiServer::DropWatches() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->drop_gen;
  impl_->cv.notify_all();
}

void FakeApiServer::HoldRequests(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->holding = on;
  impl_->cv.notify_all();
}

int64_t FakeApiServer::Held() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->held;
}

void FakeApiServer::FailNext(int n, int status, const std::string& retry_after) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fail_n = n;
  impl_->fail_status = status;
  impl_->fail_retry_after = retry_after;
}

void FakeApiServer::TooLargeNextWatch(int retry_after_seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->too_large_next_watch = true;
  impl_->too_large_retry_after = retry_after_seconds;
}

void FakeApiServer::ExpireContinueTokens() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->expire_continue = true;
}

void FakeApiServer::RequireToken(const std::string& token) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->required_token = token;
}

int64_t FakeApiServer::Unauthorized() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->unauthorized;
}

void FakeApiServer::ServeFullListsOnly(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->full_lists_only = on;
}

void FakeApiServer::SendBookmarks() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->bookmark_gen;
  impl_->cv.notify_all();
}

std::vector<std::string> FakeApiServer::Requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requests;
}

int64_t FakeApiServer::OpenWatches() const { return impl_->open_watches.load(); }

}  // namespace accelpool::kube
