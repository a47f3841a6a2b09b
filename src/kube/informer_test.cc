#include "kube/informer.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "kube/fake_api_test.h"
#include "kube/fake_apiserver.h"

namespace accelpool::kube {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using kube::testing::WaitUntil;

json Node(const std::string& name, const std::string& ann = "") {
  json n = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  if (!ann.empty()) n["metadata"]["annotations"]["accelpool.io/inventory"] = ann;
  return n;
}

// Records callbacks as "add:n1", "update:n1", "delete:n1".
class Recorder {
 public:
  InformerHandlers Handlers() {
    InformerHandlers h;
    h.on_add = [this](const json& o) { Push("add:" + Informer::KeyOf(o)); };
    h.on_update = [this](const json&, const json& n) { Push("update:" + Informer::KeyOf(n)); };
    h.on_delete = [this](const json& o) { Push("delete:" + Informer::KeyOf(o)); };
    return h;
  }
  std::vector<std::string> Snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  // Waits until `n` events arrived (or 5 s) and returns them all.
  std::vector<std::string> WaitFor(size_t n) {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (events_.size() >= n) return events_;
      }
      std::this_thread::sleep_for(5ms);
    }
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  void Push(std::string s) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(s));
  }
  std::mutex mu_;
  std::vector<std::string> events_;
};

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    KubeConfig cfg;
    cfg.server = api_.url();
    cfg.qps = 0;
    auto c = NewKubeClient(cfg);
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
  }
  InformerOptions Options() {
    InformerOptions o;
    o.resource = Nodes();
    o.backoff_initial = 10ms;
    o.backoff_max = 50ms;
    return o;
  }
  FakeApiServer api_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(InformerTest, ListThenWatch) {
  api_.Put("/api/v1/nodes", Node("n1"));
  api_.Put("/api/v1/nodes", Node("n2"));
  Recorder rec;
  Informer inf(*client_, Options(), rec.Handlers());
  EXPECT_FALSE(inf.Synced());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  EXPECT_EQ(rec.WaitFor(2), (std::vector<std::string>{"add:n1", "add:n2"}));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  api_.Put("/api/v1/nodes", Node("n3"));
  api_.Put("/api/v1/nodes", Node("n1", "{}"));
  api_.Remove("/api/v1/nodes", "n2");
  EXPECT_EQ(rec.WaitFor(5),
            (std::vector<std::string>{"add:n1", "add:n2", "add:n3", "update:n1", "delete:n2"}));
  EXPECT_EQ(inf.Keys(), (std::vector<std::string>{"n1", "n3"}));
  auto n1 = inf.Get("n1");
  ASSERT_TRUE(n1.has_value());
  EXPECT_EQ((*n1)["metadata"]["annotations"]["accelpool.io/inventory"], "{}");
  EXPECT_EQ(inf.lists(), 1);
}

TEST_F(InformerTest, ObjectsAreKeptAndHandedOnWithoutManagedFields) {
  auto with_fields = [](const std::string& name, const std::string& ann) {
    json n = Node(name, ann);
    n["metadata"]["managedFields"] = json::array({{{"manager", "kubelet"}, {"operation", "Update"}}});
    return n;
  };
  api_.Put("/api/v1/nodes", with_fields("n1", ""));
  std::mutex mu;
  std::vector<json> seen;  // every object a handler got, old ones included
  InformerHandlers h;
  h.on_add = [&](const json& o) { std::lock_guard<std::mutex> l(mu); seen.push_back(o); };
  h.on_update = [&](const json& o, const json& n) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(o);
    seen.push_back(n);
  };
  Informer inf(*client_, Options(), h);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  api_.Put("/api/v1/nodes", with_fields("n1", "{}"));  // an update through the watch
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (seen.size() >= 3) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(seen.size(), 3u);
  for (const json& o : seen) EXPECT_FALSE(o["metadata"].contains("managedFields")) << o.dump();
  EXPECT_EQ(seen[2]["metadata"]["annotations"]["accelpool.io/inventory"], "{}");
  auto n1 = inf.Get("n1");
  ASSERT_TRUE(n1.has_value());
  EXPECT_FALSE((*n1)["metadata"].contains("managedFields"));
  EXPECT_EQ((*n1)["metadata"]["name"], "n1");
}

TEST_F(InformerTest, ATransformTrimsEveryObjectBeforeItIsKeptOrHandedOn) {
  api_.Put("/api/v1/nodes", Node("n1", "big"));
  InformerOptions o = Options();
  o.transform = [](json& obj) { obj["metadata"].erase("annotations"); };
  std::mutex mu;
  std::vector<json> seen;
  InformerHandlers h;
  h.on_add = [&](const json& obj) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(obj);
  };
  h.on_update = [&](const json&, const json& n) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(n);
  };
  Informer inf(*client_, o, h);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  api_.Put("/api/v1/nodes", Node("n1", "bigger"));
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (seen.size() >= 2) break;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(seen.size(), 2u);
  for (const json& obj : seen) {
    EXPECT_FALSE(obj["metadata"].contains("annotations")) << obj.dump();
    EXPECT_EQ(obj["metadata"]["name"], "n1");
  }
  auto n1 = inf.Get("n1");
  ASSERT_TRUE(n1.has_value());
  EXPECT_FALSE((*n1)["metadata"].contains("annotations"));
}

TEST_F(InformerTest, BookmarksAdvanceTheResumeVersion) {
  Recorder rec;
  Informer inf(*client_, Options(), rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  const std::string before = inf.last_resource_version();
  api_.Put("/api/v1/namespaces/x/pods",
           {{"metadata", {{"name", "other-kind"}}}});  // bumps the version
  api_.SendBookmarks();
  for (int i = 0; i < 2000 && inf.last_resource_version() == before; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_NE(inf.last_resource_version(), before);
  EXPECT_TRUE(rec.Snapshot().empty());  // a bookmark is not an object change
}

TEST_F(InformerTest, ExpiredVersionRelistsAndDiffs) {
  api_.Put("/api/v1/nodes", Node("keep"));
  api_.Put("/api/v1/nodes", Node("drop"));
  Recorder rec;
  Informer inf(*client_, Options(), rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  rec.WaitFor(2);
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  // Changes happen while the watch is cut and history is compacted away: the
  // informer must relist and report the difference.
  api_.FailNext(1000, 503);
  api_.DropWatches();
  std::this_thread::sleep_for(50ms);
  api_.Put("/api/v1/nodes", Node("keep", "changed"));
  api_.Remove("/api/v1/nodes", "drop");
  api_.Put("/api/v1/nodes", Node("new"));
  api_.Compact();
  api_.FailNext(0, 0);
  auto events = rec.WaitFor(5);
  EXPECT_EQ(std::vector<std::string>(events.begin() + 2, events.end()),
            (std::vector<std::string>{"add:new", "update:keep", "delete:drop"}));
  EXPECT_EQ(inf.lists(), 2);
  EXPECT_EQ(inf.Keys(), (std::vector<std::string>{"keep", "new"}));
}

// The lists of the informer, "GET /api/v1/nodes?..." as the apiserver saw them.
std::vector<std::string> NodeLists(const FakeApiServer& api) {
  std::vector<std::string> out;
  for (const std::string& r : api.Requests()) {
    if (r.rfind("GET /api/v1/nodes", 0) == 0 && r.find("watch=true") == std::string::npos) {
      out.push_back(r);
    }
  }
  return out;
}

// As client-go's reflector: the first list is served from the watch cache
// (resourceVersion=0); after 410 Gone the cache may lag behind the version
// the watch had reached, so the relist is a consistent read (none).
TEST_F(InformerTest, TheFirstListReadsTheWatchCacheAndARelistAfterGoneIsConsistent) {
  api_.Put("/api/v1/nodes", Node("a"));
  Recorder rec;
  InformerOptions o = Options();
  o.list_from_watch_cache = true;
  Informer inf(*client_, o, rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  std::vector<std::string> lists = NodeLists(api_);
  ASSERT_EQ(lists.size(), 1u);
  EXPECT_NE(lists[0].find("resourceVersion=0"), std::string::npos) << lists[0];

  api_.FailNext(1000, 503);
  api_.DropWatches();
  std::this_thread::sleep_for(50ms);
  api_.Put("/api/v1/nodes", Node("b"));
  api_.Compact();
  api_.FailNext(0, 0);
  EXPECT_EQ(rec.WaitFor(2), (std::vector<std::string>{"add:a", "add:b"}));
  lists = NodeLists(api_);
  ASSERT_GE(lists.size(), 2u);
  EXPECT_EQ(lists.back().find("resourceVersion"), std::string::npos) << lists.back();
}

// The extender's informers (the default) list consistently: their cache
// decides bookings on its own, and a lagging watch cache would hide a pod
// bound a moment before.
TEST_F(InformerTest, ByDefaultEveryListIsConsistent) {
  api_.Put("/api/v1/nodes", Node("a"));
  Recorder rec;
  Informer inf(*client_, Options(), rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  std::vector<std::string> lists = NodeLists(api_);
  ASSERT_EQ(lists.size(), 1u);
  EXPECT_EQ(lists[0].find("resourceVersion"), std::string::npos) << lists[0];
}

// Each watch asks for its own timeoutSeconds in [T, 2T): the watches of many
// nodes cut off together do not come back in step every T.
TEST_F(InformerTest, EachWatchDrawsItsServerTimeout) {
  Informer inf(*client_, Options(), InformerHandlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  // Counted from the requests the server recorded: the informer counts a
  // watch before its request is sent, and Stop could cancel the last one
  // before it reached the server.
  const auto recorded = [&] {
    int n = 0;
    for (const std::string& r : api_.Requests()) n += r.find("watch=true") != std::string::npos;
    return n;
  };
  for (int i = 0; i < 2000 && recorded() < 21; ++i) {
    if (api_.OpenWatches() > 0) api_.DropWatches();
    std::this_thread::sleep_for(5ms);
  }
  inf.Stop();
  std::set<int64_t> seen;
  int watches = 0;
  for (const std::string& r : api_.Requests()) {
    if (r.find("watch=true") == std::string::npos) continue;
    const size_t at = r.find("timeoutSeconds=");
    ASSERT_NE(at, std::string::npos) << r;
    const int64_t t = std::stoll(r.substr(at + 15));
    EXPECT_GE(t, 300) << r;
    EXPECT_LT(t, 600) << r;
    seen.insert(t);
    ++watches;
  }
  EXPECT_GE(watches, 21);
  EXPECT_GT(seen.size(), 1u);
}

TEST_F(InformerTest, DroppedConnectionReconnectsFromLastVersion) {
  Recorder rec;
  Informer inf(*client_, Options(), rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  api_.Put("/api/v1/nodes", Node("a"));
  rec.WaitFor(1);
  api_.DropWatches();
  api_.Put("/api/v1/nodes", Node("b"));  // made while no watch is open
  EXPECT_EQ(rec.WaitFor(2), (std::vector<std::string>{"add:a", "add:b"}));
  EXPECT_EQ(inf.lists(), 1);  // no relist: it resumed from the last version
  EXPECT_GE(inf.watches(), 2);
}

// After an apiserver restart the informer resumes its watch from the last
// version it saw, and the new watch cache, which holds no history from
// before it started, expires it at once: that says nothing of a lagging
// cache (the version was not a list's), so it relists at once instead of
// pausing for the backoff the restart's connection failures built up.
TEST_F(InformerTest, AResumedWatchThatExpiresRelistsWithoutAPause) {
  InformerOptions o = Options();
  // Longer than the bound below, with room for a loaded machine or
  // ThreadSanitizer: a relist that waited for the backoff cannot pass it.
  o.backoff_initial = 5s;
  o.backoff_max = 5s;
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  api_.DropWatches();  // the informer waits out one backoff, then resumes
  api_.Put("/api/v1/nodes", Node("made-meanwhile"));
  api_.Compact();
  for (int i = 0; i < 30000 && inf.watches() < 2; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_GE(inf.watches(), 2) << "never resumed its watch";
  const auto resumed = std::chrono::steady_clock::now();
  while (inf.lists() < 2 && std::chrono::steady_clock::now() - resumed < 10s) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(inf.lists(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - resumed, 3s)
      << "relisted after a pause of the backoff (5 s or more)";
  EXPECT_EQ(rec.WaitFor(1), (std::vector<std::string>{"add:made-meanwhile"}));
}

// A watch that the server (or a proxy on the way) ends at once, without an
// event, is a failure, as in client-go's reflector ("very short watch"): it
// backs off instead of re-watching in a loop that spends the client's shared
// rate limit, which bindings need.
TEST_F(InformerTest, AWatchEndedAtOnceBacksOff) {
  InformerOptions o = Options();
  o.watch_timeout = 0s;  // the fake then ends every watch at once
  o.backoff_initial = 200ms;
  o.backoff_max = 200ms;
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  const auto started = std::chrono::steady_clock::now();
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return inf.watches() >= 3; })) << "never watched a third time";
  // Two waits of the backoff between the first and the third watch.
  EXPECT_GE(std::chrono::steady_clock::now() - started, 400ms);
  EXPECT_EQ(inf.lists(), 1);
}

// An apiserver that expires every watch at once, even from the version its
// list just gave: relisting right away would list everything in a loop.
TEST_F(InformerTest, AWatchThatExpiresAtOnceRelistsAfterABackoff) {
  api_.Put("/api/v1/nodes", Node("a"));
  api_.ExpireEveryWatch(true);
  InformerOptions o = Options();
  o.backoff_initial = 100ms;
  o.backoff_max = 100ms;
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  const auto started = std::chrono::steady_clock::now();
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  std::this_thread::sleep_for(1s);
  // It relists (a loaded machine or ThreadSanitizer may take longer than the
  // second above to get there).
  while (inf.lists() < 2 && std::chrono::steady_clock::now() - started < 10s) {
    std::this_thread::sleep_for(5ms);
  }
  inf.Stop();
  const auto ran = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  // One list per 100 ms pause at most (plus the first, and one for rounding);
  // without the pause, hundreds a second.
  EXPECT_GE(inf.lists(), 2);
  EXPECT_LE(inf.lists(), 2 + ran.count() / 100) << "in " << ran.count() << " ms";
  EXPECT_EQ(rec.Snapshot(), (std::vector<std::string>{"add:a"}));
}

// A handler that throws on an object loses that event, not the process.
TEST_F(InformerTest, AHandlerThatThrowsSkipsTheEvent) {
  InformerHandlers h;
  std::atomic<int> added{0};
  h.on_add = [&](const json& o) {
    if (Informer::KeyOf(o) == "bad") (void)o.at("no such field");  // json::out_of_range
    ++added;
  };
  api_.Put("/api/v1/nodes", Node("bad"));
  Informer inf(*client_, Options(), h);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  api_.Put("/api/v1/nodes", Node("good"));
  for (int i = 0; i < 1000 && added.load() < 1; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(added.load(), 1);
  EXPECT_EQ(inf.handler_errors(), 1);
  EXPECT_EQ(inf.Keys(), (std::vector<std::string>{"bad", "good"}));
}

// A transform that throws (on a listed object and on a watched one) keeps the
// informer running and the object stored, as the transform left it.
TEST_F(InformerTest, ATransformThatThrowsKeepsTheObject) {
  api_.Put("/api/v1/nodes", Node("odd-listed"));
  api_.Put("/api/v1/nodes", Node("plain"));
  InformerOptions o = Options();
  o.transform = [](json& obj) {
    const std::string name = obj["metadata"]["name"];
    if (name.rfind("odd", 0) == 0) throw 42;  // not even a std::exception
    obj["metadata"]["labels"]["trimmed"] = "yes";
  };
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  api_.Put("/api/v1/nodes", Node("odd-watched"));
  for (int i = 0; i < 1000 && inf.Keys().size() < 3; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(inf.Keys(), (std::vector<std::string>{"odd-listed", "odd-watched", "plain"}));
  EXPECT_EQ(inf.handler_errors(), 2);
  ASSERT_TRUE(inf.Get("plain").has_value());
  EXPECT_EQ((*inf.Get("plain"))["metadata"]["labels"]["trimmed"], "yes");
  ASSERT_TRUE(inf.Get("odd-watched").has_value());
  EXPECT_FALSE((*inf.Get("odd-watched"))["metadata"].contains("labels") &&
               (*inf.Get("odd-watched"))["metadata"]["labels"].contains("trimmed"));
  inf.Stop();
}

TEST_F(InformerTest, ApiserverDownAtStartRetriesWithBackoff) {
  api_.FailNext(3, 500);
  api_.Put("/api/v1/nodes", Node("late"));
  Recorder rec;
  Informer inf(*client_, Options(), rec.Handlers());
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(5s));
  EXPECT_EQ(rec.WaitFor(1), (std::vector<std::string>{"add:late"}));
  inf.Stop();
  inf.Stop();  // idempotent
}

TEST_F(InformerTest, AThrottledListOrWatchWaitsAsLongAsTheApiserverAsked) {
  api_.Put("/api/v1/nodes", Node("n1"));
  InformerOptions o = Options();
  o.backoff_max = 5s;  // above the Retry-After below: the wait is the apiserver's
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  api_.FailNext(1, 429, "1");
  const auto began = std::chrono::steady_clock::now();
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(10s));
  // The backoff alone would have listed again after 10 ms.
  EXPECT_GE(std::chrono::steady_clock::now() - began, 900ms);
  EXPECT_EQ(inf.lists(), 1);

  ASSERT_TRUE(WaitUntil([&] { return api_.OpenWatches() > 0; }))
      << "the informer never opened its watch";
  // The watch breaks and the next watch request is throttled too: the one
  // after it waits for the Retry-After.
  const auto watch_requests = [&] {
    const std::vector<std::string> reqs = api_.Requests();
    return std::count_if(reqs.begin(), reqs.end(), [](const std::string& r) {
      return r.find("watch=true") != std::string::npos;
    });
  };
  const auto before = watch_requests();
  api_.FailNext(1, 503, "1");
  const auto dropped = std::chrono::steady_clock::now();
  api_.DropWatches();
  ASSERT_TRUE(WaitUntil([&] { return watch_requests() >= before + 2; }))
      << "the informer never watched again after the throttled watch";
  EXPECT_GE(std::chrono::steady_clock::now() - dropped, 900ms);
  inf.Stop();
}

TEST_F(InformerTest, AFailureKeepsItsOwnBackoffWhenAnotherCallWasThrottled) {
  api_.Put("/api/v1/nodes", Node("n1"));
  // Another user of the client was told to wait 60 s before the informer
  // started; the informer's own failure asks for nothing.
  api_.FailNext(1, 429, "60");
  EXPECT_FALSE(client_->Get(Nodes(), "", "n1").ok());
  InformerOptions o = Options();
  o.backoff_max = 5s;
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  api_.FailNext(1, 500);
  inf.Start();
  EXPECT_TRUE(inf.WaitForSync(3s)) << "the list waited for another call's Retry-After";
  inf.Stop();
}

TEST_F(InformerTest, ItsOwnRetryAfterCountsAfterALongerOneGivenToAnotherCall) {
  api_.Put("/api/v1/nodes", Node("n1"));
  // Another user of the client was told to wait 2 s; then the informer's own
  // list is told 1 s, which does not move the client's wait.
  api_.FailNext(1, 429, "2");
  EXPECT_FALSE(client_->Get(Nodes(), "", "n1").ok());
  InformerOptions o = Options();
  o.backoff_max = 5s;
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  api_.FailNext(1, 429, "1");
  const auto began = std::chrono::steady_clock::now();
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(10s));
  EXPECT_GE(std::chrono::steady_clock::now() - began, 900ms);
  inf.Stop();
}

TEST_F(InformerTest, TheApiserversRetryAfterWaitsNoLongerThanTheBackoffCeiling) {
  api_.Put("/api/v1/nodes", Node("n1"));
  InformerOptions o = Options();
  o.backoff_max = 200ms;
  Recorder rec;
  Informer inf(*client_, o, rec.Handlers());
  api_.FailNext(1, 429, "60");
  const auto began = std::chrono::steady_clock::now();
  inf.Start();
  EXPECT_TRUE(inf.WaitForSync(10s)) << "waited out the whole Retry-After (60 s)";
  // The ceiling itself was waited (the backoff alone: 10 ms).
  EXPECT_GE(std::chrono::steady_clock::now() - began, 150ms);
  inf.Stop();
}

}  // namespace
}  // namespace accelpool::kube
