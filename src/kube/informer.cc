#include "kube/informer.h"

#include <algorithm>
#include <condition_variable>
#include <random>
#include <set>

#include "kube/rate_limiter.h"

namespace accelpool::kube {

using nlohmann::json;

namespace {

// A list's resourceVersion that any state answers (the watch cache's).
constexpr const char* kAnyVersion = "0";

// A watch that ends sooner than this without an event counts as failed.
constexpr std::chrono::seconds kShortWatch{1};

std::string Meta(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  const json& m = obj["metadata"];
  return m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : "";
}

// Sleeps for `d` unless `stop` fires first; false when stopped.
bool SleepFor(std::chrono::milliseconds d, std::stop_token stop) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock<std::mutex> lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

}  // namespace

std::string Informer::KeyOf(const json& obj) {
  const std::string ns = Meta(obj, "namespace");
  const std::string name = Meta(obj, "name");
  return ns.empty() ? name : ns + "/" + name;
}

Informer::Informer(KubeClient& client, InformerOptions options, InformerHandlers handlers,
                   Logger log)
    : client_(client),
      options_(std::move(options)),
      handlers_(std::move(handlers)),
      log_(std::move(log)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

void Informer::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  thread_.join();
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!synced_.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return synced_.load();
}

namespace {

// `failed` is told when the transform throws: the object is then kept as the
// transform left it (a transform trims what nothing reads, so that is the
// object with less or nothing trimmed; dropping it instead would hide it
// from every handler, and copying every object first costs too much).
std::shared_ptr<const json> Stored(json obj, const std::function<void(json&)>& transform,
                                   const std::function<void(const std::string&)>& failed) {
  if (auto m = obj.find("metadata"); m != obj.end() && m->is_object()) {
    m->erase("managedFields");
  }
  if (transform) {
    try {
      transform(obj);
    } catch (const std::exception& e) {
      failed(e.what());
    } catch (...) {
      failed("unknown exception");
    }
  }
  return std::make_shared<const json>(std::move(obj));
}

}  // namespace

std::optional<json> Informer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = store_.find(key);
  if (it == store_.end()) return std::nullopt;
  return *it->second;
}

std::vector<std::string> Informer::Keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, v] : store_) out.push_back(k);
  return out;
}

std::string Informer::last_resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rv_;
}

Status Informer::ListAndReplace(bool consistent) {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  // As client-go's reflector: "0" is served from the apiserver's watch cache
  // (a consistent read is served from etcd on apiservers without
  // ConsistentListFromCache, which scans the whole resource for a field
  // selector). After 410 Gone the cache may lag behind the version the
  // watch had reached, so that relist is a consistent read.
  if (!consistent && options_.list_from_watch_cache) {
    lo.resource_version = std::string(kAnyVersion);
  }
  auto list = client_.List(options_.resource, options_.ns, lo);
  if (!list.ok()) return list.status();
  ++lists_;
  using Ptr = std::shared_ptr<const json>;
  std::map<std::string, Ptr> fresh;
  for (json& item : list->items) {
    std::string key = KeyOf(item);
    fresh[key] = Stored(std::move(item), options_.transform, TransformFailed());
  }
  std::vector<Ptr> added, deleted;
  std::vector<std::pair<Ptr, Ptr>> updated;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, obj] : fresh) {
      auto it = store_.find(key);
      if (it == store_.end()) {
        added.push_back(obj);
      } else if (Meta(*it->second, "resourceVersion") != Meta(*obj, "resourceVersion")) {
        updated.emplace_back(it->second, obj);
      }
    }
    for (const auto& [key, obj] : store_) {
      if (fresh.count(key) == 0) deleted.push_back(obj);
    }
    store_ = std::move(fresh);
    rv_ = list->resource_version;
  }
  for (const Ptr& o : added) {
    Guarded("add", [&] {
      if (handlers_.on_add) handlers_.on_add(*o);
    });
  }
  for (const auto& change : updated) {  // not a structured binding: lambdas capture it
    Guarded("update", [&] {
      if (handlers_.on_update) handlers_.on_update(*change.first, *change.second);
    });
  }
  for (const Ptr& o : deleted) {
    Guarded("delete", [&] {
      if (handlers_.on_delete) handlers_.on_delete(*o);
    });
  }
  return Status::Ok();
}

void Informer::Guarded(const char* what, const std::function<void()>& call) {
  // A handler that throws on an object it did not expect (a JSON type error)
  // loses that one event, not the process: this runs on the informer's own
  // thread, where an escaping exception is std::terminate.
  try {
    call();
  } catch (const std::exception& e) {
    ++handler_errors_;
    log_.Error("a handler failed on an object; the event is skipped",
               {{"resource", options_.resource.plural}, {"event", what}, {"error", e.what()}});
  } catch (...) {
    ++handler_errors_;
    log_.Error("a handler failed on an object; the event is skipped",
               {{"resource", options_.resource.plural},
                {"event", what},
                {"error", std::string("unknown exception")}});
  }
}

std::function<void(const std::string&)> Informer::TransformFailed() {
  return [this](const std::string& error) {
    ++handler_errors_;
    log_.Error("the transform failed on an object; it is stored whole",
               {{"resource", options_.resource.plural}, {"error", error}});
  };
}

void Informer::Apply(WatchEvent& ev) {
  const std::string rv = Meta(ev.object, "resourceVersion");
  if (ev.type == WatchEventType::kBookmark) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!rv.empty()) rv_ = rv;
    return;
  }
  const std::string key = KeyOf(ev.object);
  std::shared_ptr<const json> old;
  std::shared_ptr<const json> now;
  if (ev.type != WatchEventType::kDeleted) {
    now = Stored(std::move(ev.object), options_.transform, TransformFailed());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = store_.find(key);
    if (it != store_.end()) old = it->second;
    if (ev.type == WatchEventType::kDeleted) {
      store_.erase(key);
    } else {
      store_[key] = now;
    }
    if (!rv.empty()) rv_ = rv;
  }
  Guarded(ev.type == WatchEventType::kDeleted ? "delete"
          : old                               ? "update"
                                              : "add",
          [&] {
            if (ev.type == WatchEventType::kDeleted) {
              if (handlers_.on_delete) handlers_.on_delete(old ? *old : ev.object);
            } else if (old) {
              if (handlers_.on_update) handlers_.on_update(*old, *now);
            } else {
              if (handlers_.on_add) handlers_.on_add(*now);
            }
          });
}

std::chrono::milliseconds Informer::NextWait(Backoff& backoff, uint64_t asks) const {
  const std::chrono::milliseconds wait = backoff.Next();
  if (client_.RetryAsks() == asks) {
    return wait;  // the apiserver asked nothing while this informer's request ran
  }
  // It asked this client to wait (Retry-After on a 429 or 5xx): no sooner
  // than that, up to the backoff's ceiling, stretched as the backoff's steps
  // are (so the informers of many nodes told the same wait spread out).
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(client_.RetryNotBefore() -
                                                                 std::chrono::steady_clock::now());
  if (left <= wait) {
    return wait;
  }
  return std::max(wait, backoff.Stretch(std::min(left, options_.backoff_max)));
}

void Informer::Run(std::stop_token stop) {
  Backoff backoff(options_.backoff_initial, options_.backoff_max);
  std::mt19937_64 rng{std::random_device{}()};
  const int64_t timeout_s = options_.watch_timeout.count();
  bool need_list = true;
  // The next list must be a consistent read: a watch ended with 410 Gone
  // and no list has succeeded since.
  bool consistent_list = false;
  // The last watch expired (410) at once, from the version the list just
  // gave: the next list keeps the backoff growing rather than resetting it,
  // so an apiserver whose watch cache lags is not listed in a tight loop.
  bool expired_at_once = false;
  // The next watch starts from the version a list just gave (not from one
  // an earlier watch reached): only then does its expiring at once say the
  // apiserver's watch cache lags. A watch resumed from an older version
  // expires at once after an apiserver restart (the new watch cache holds
  // no history from before it started), and is relisted at once, not after
  // the backoff that the connection failures of the restart built up.
  bool from_list = false;
  while (!stop.stop_requested()) {
    if (need_list) {
      const uint64_t asks = client_.RetryAsks();
      Status st = ListAndReplace(consistent_list);
      if (!st.ok()) {
        const auto wait = NextWait(backoff, asks);
        log_.Warn("list failed; retrying", {{"resource", options_.resource.plural},
                                            {"error", st.ToString()},
                                            {"retry_ms", static_cast<int64_t>(wait.count())}});
        if (!SleepFor(wait, stop)) return;
        continue;
      }
      need_list = false;
      consistent_list = false;
      from_list = true;
      synced_ = true;
      if (!expired_at_once) backoff.Reset();
    }
    WatchOptions wo;
    wo.label_selector = options_.label_selector;
    wo.field_selector = options_.field_selector;
    wo.resource_version = last_resource_version();
    wo.allow_bookmarks = true;
    // Drawn per watch in [T, 2T), as client-go's reflector does: after an
    // apiserver restart, the watches of every node do not end and come back
    // together every T from then on.
    // A watch_timeout of 0 is sent as it is (the apiserver picks).
    wo.server_timeout = std::chrono::seconds(
        timeout_s <= 0 ? 0
                       : std::uniform_int_distribution<int64_t>(timeout_s, 2 * timeout_s - 1)(rng));
    ++watches_;
    int64_t events = 0;
    const auto began = std::chrono::steady_clock::now();
    const uint64_t asks = client_.RetryAsks();
    Status st = client_.Watch(
        options_.resource, options_.ns, wo,
        [&](WatchEvent& ev) {
          ++events;
          Apply(ev);
        },
        stop);
    if (stop.stop_requested() || st.code() == StatusCode::kCancelled) return;
    const bool listed_just_before = from_list;
    from_list = false;
    if (st.ok() && events == 0 && std::chrono::steady_clock::now() - began < kShortWatch) {
      // Ended at once without an event (client-go's "very short watch"): back
      // off rather than spend the client's rate limit re-watching in a loop.
      st = UnavailableError("the watch ended at once without an event");
    }
    if (st.ok()) {
      backoff.Reset();  // the server ended the watch; continue from the last version
      continue;
    }
    if (st.code() == StatusCode::kOutOfRange) {
      need_list = true;
      consistent_list = true;
      expired_at_once = listed_just_before && events == 0 &&
                        std::chrono::steady_clock::now() - began < kShortWatch;
      if (!expired_at_once) {
        log_.Info("watch expired; relisting", {{"resource", options_.resource.plural}});
        continue;
      }
      const auto wait = NextWait(backoff, asks);
      log_.Warn("watch expired at once from the version just listed; relisting after a pause",
                {{"resource", options_.resource.plural},
                 {"retry_ms", static_cast<int64_t>(wait.count())}});
      if (!SleepFor(wait, stop)) return;
      continue;
    }
    expired_at_once = false;
    if (events > 0) backoff.Reset();
    const auto wait = NextWait(backoff, asks);
    log_.Warn("watch failed; reconnecting", {{"resource", options_.resource.plural},
                                             {"error", st.ToString()},
                                             {"retry_ms", static_cast<int64_t>(wait.count())}});
    if (!SleepFor(wait, stop)) return;
  }
}

}  // namespace accelpool::kube
