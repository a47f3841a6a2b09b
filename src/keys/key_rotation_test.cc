#include "keys/key_rotation.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kube/config.h"
#include "kube/fake_api_test.h"
#include "kube/fake_apiserver.h"
#include "kube/objects.h"

namespace accelpool::keys {
namespace {

using nlohmann::json;
using std::chrono::seconds;

constexpr const char* kSecrets = "/api/v1/namespaces/accelpool-system/secrets";
constexpr const char* kNodes = "/api/v1/nodes";
constexpr const char* kPods = "/api/v1/namespaces/ml/pods";
const std::string kKey1 = "first-key-0123456789-0123456789-0123456789";

json SecretJson(const std::map<std::string, std::string>& files) {
  json data = json::object();
  for (const auto& [k, v] : files) data[k] = kube::Base64Encode(v);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", {{"name", "accelpool-assignment-key"}, {"namespace", "accelpool-system"}}},
          {"data", data}};
}

// A node; `keys` null: its plugin reports none; `inventory`: it has devices.
json NodeJson(const std::string& name, const json& keys, bool ready = true, bool inventory = true) {
  json ann = json::object();
  if (!keys.is_null()) ann["accelpool.io/assignment-keys"] = keys;
  if (inventory) ann["accelpool.io/inventory"] = "{}";
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", name}, {"annotations", ann}}},
      {"status",
       {{"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
}

constexpr const char* kPluginPods = "/api/v1/namespaces/accelpool-system/pods";

// A device-plugin pod of the chart's DaemonSet on `node`.
json PluginPodJson(const std::string& node, const std::string& phase = "Running",
                   const std::string& component = "device-plugin") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "accelpool-device-plugin-" + node},
            {"namespace", "accelpool-system"},
            {"labels",
             {{"app.kubernetes.io/name", "accelpool"},
              {"app.kubernetes.io/component", component},
              {"accelpool.io/vendor", "nvidia"}}}}},
          {"spec", {{"nodeName", node}}},
          {"status", {{"phase", phase}}}};
}

constexpr const char* kAssignmentText = R"({"version":1,"node":"node-a","containers":[]})";

// A pod bound to node-a whose assignment is signed as the extender signs it,
// with key `kid` (bytes `key`); `signature` given instead is used as it is.
json PodJson(const std::string& name, const std::string& kid, const std::string& key,
             bool admitted = false, const std::string& signature = "") {
  const std::string uid = "uid-" + name;
  std::string sig = signature;
  if (sig.empty()) {
    api::SigningKeys keys{kid, {{kid, key}}};
    StatusOr<std::string> signed_text = api::SignAssignment(keys, uid, "node-a", kAssignmentText);
    EXPECT_TRUE(signed_text.ok()) << signed_text.status().ToString();
    sig = signed_text.ok() ? *signed_text : "";
  }
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name},
                {"namespace", "ml"},
                {"uid", uid},
                {"annotations",
                 {{"accelpool.io/assignment", kAssignmentText},
                  {"accelpool.io/assignment-signature", sig}}}}},
              {"spec", {{"nodeName", "node-a"}}},
              {"status", {{"phase", "Pending"}}}};
  if (admitted) pod["status"]["containerStatuses"] = json::array({{{"name", "main"}}});
  return pod;
}

class KeyRotationTest : public kube::testing::FakeApiTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(FakeApiTest::SetUp());
    api_.Put(kSecrets, SecretJson({{"signing", "k1"}, {"k1", kKey1}}));
    options_.ns = "accelpool-system";
    options_.secret = "accelpool-assignment-key";
    options_.poll = seconds(10);
    options_.node_timeout = seconds(300);
    options_.settle = seconds(120);
    options_.drain_timeout = seconds(600);
  }

  // A rotation on a fake clock: each sleep moves it on by the poll interval
  // and then calls on_sleep_, which plays the cluster (plugins reporting
  // keys, pods admitted).
  KeyRotation Rotation() {
    Clock c;
    c.now = [this] { return now_; };
    c.sleep = [this](seconds d) {
      now_ += d;
      ++sleeps_;
      if (on_sleep_) on_sleep_();
    };
    return KeyRotation(client_.get(), options_, Logger(), c);
  }

  // The Secret's data, decoded.
  std::map<std::string, std::string> Files() {
    std::map<std::string, std::string> out;
    auto s = api_.Object(kSecrets, "accelpool-assignment-key");
    EXPECT_TRUE(s.has_value());
    for (const auto& [k, v] : (*s)["data"].items())
      out[k] = *kube::Base64Decode(v.get<std::string>());
    return out;
  }
  json Annotations() {
    auto s = api_.Object(kSecrets, "accelpool-assignment-key");
    return s.has_value() ? (*s)["metadata"].value("annotations", json::object()) : json::object();
  }
  int SecretWrites() {
    int n = 0;
    for (const std::string& r : api_.Requests()) {
      if (r.rfind(std::string("PATCH ") + kSecrets, 0) == 0) ++n;
    }
    return n;
  }

  RotationOptions options_;
  std::chrono::system_clock::time_point now_ =
      std::chrono::system_clock::from_time_t(1'795'000'000);
  int sleeps_ = 0;
  std::function<void()> on_sleep_;
};

TEST(KeyIdsTest, NumbersAndTimes) {
  EXPECT_EQ(KeyNumber("k1"), 1);
  EXPECT_EQ(KeyNumber("k42"), 42);
  EXPECT_EQ(KeyNumber("k"), -1);
  EXPECT_EQ(KeyNumber("key"), -1);
  EXPECT_EQ(KeyNumber("k1a"), -1);
  api::SigningKeys keys;
  keys.keys = {{"k2", "x"}, {"k10", "y"}, {"blue", "z"}};
  EXPECT_EQ(NextKeyId(keys), "k11");
  keys.keys = {{"blue", "z"}};
  EXPECT_EQ(NextKeyId(keys), "k1");
  keys.keys = {{"k999999999999999998", "z"}};
  EXPECT_EQ(NextKeyId(keys), "k999999999999999999");
  keys.keys = {{"k999999999999999999", "z"}};
  EXPECT_EQ(NextKeyId(keys), "") << "no 19-digit ids";
  EXPECT_EQ(KeyNumber("k1234567890123456789"), -1);

  const auto t = std::chrono::system_clock::from_time_t(1'795'000'000);
  EXPECT_EQ(FormatTime(t), "2026-11-18T11:06:40Z");
  EXPECT_EQ(*ParseTime("2026-11-18T11:06:40Z"), t);
  for (const char* bad : {"", "2026-11-18", "2026-11-18T07:33:20", "2026-11-18T07:33:20+01:00",
                          "2026-13-18T07:33:20Z", "2026-11-18T11:06:40Zjunk",
                          // Past what system_clock holds in 64-bit nanoseconds.
                          "2500-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z",
                          "-999-01-01T00:00:00Z",
                          // Held by the clock, but now minus it would not be.
                          "1700-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2200-01-01T00:00:00Z"}) {
    EXPECT_EQ(ParseTime(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  for (const char* good : {"1970-01-01T00:00:00Z", "2199-12-31T23:59:59Z"}) {
    EXPECT_TRUE(ParseTime(good).ok()) << good;
  }
}

// The whole rotation: each step waits for what makes it safe, and at no
// point does the extender sign with a key a Ready node lacks, nor is a key
// dropped that a pod awaiting admission is signed with.
TEST_F(KeyRotationTest, RotatesOnlyAsFastAsTheClusterAllows) {
  options_.skip_not_ready = true;  // node-down is not waited for
  api_.Put(kNodes, NodeJson("node-a", "k1"));
  api_.Put(kNodes, NodeJson("node-b", "k1"));
  api_.Put(kNodes, NodeJson("node-down", "k1", /*ready=*/false));
  api_.Put(kNodes, NodeJson("node-old", nullptr));  // a plugin that reports no keys
  api_.Put(kNodes, NodeJson("cpu-node", nullptr, true, /*inventory=*/false));
  api_.Put(kPods, PodJson("waiting", "k1", kKey1));
  api_.Put(kPods, PodJson("running", "k1", kKey1, /*admitted=*/true));

  std::vector<std::string> violations;
  std::string switched_when;
  on_sleep_ = [&] {
    const std::map<std::string, std::string> f = Files();
    // The plugins on node-a and node-b pick the new key up at different times.
    if (f.count("k2") != 0 && sleeps_ == 3) api_.Put(kNodes, NodeJson("node-a", "k1,k2"));
    if (f.count("k2") != 0 && sleeps_ == 6) api_.Put(kNodes, NodeJson("node-b", "k1,k2"));
    if (f.at("signing") == "k2" && sleeps_ < 6) violations.push_back("switched too early");
    if (f.at("signing") == "k2" && switched_when.empty()) {
      switched_when = Annotations().value("accelpool.io/assignment-key-switched-at", "");
    }
    // The waiting pod is admitted well after the settling time.
    if (!switched_when.empty() && now_ - *ParseTime(switched_when) > seconds(200)) {
      api_.Put(kPods, PodJson("waiting", "k1", kKey1, /*admitted=*/true));
    }
  };
  KeyRotation rotation = Rotation();
  Status st = rotation.Rotate();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(violations.empty()) << violations.front();

  const std::map<std::string, std::string> f = Files();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f.at("signing"), "k2");
  EXPECT_GE(f.at("k2").size(), api::kMinSigningKeyBytes);
  EXPECT_NE(f.at("k2"), kKey1);
  EXPECT_FALSE(Annotations().contains("accelpool.io/assignment-key-switched-at"));
  EXPECT_EQ(SecretWrites(), 3) << "add, switch, drop";
  // Nodes are listed metadata only; a Node is read whole only to see whether
  // one still without the new key is Ready.
  std::map<std::string, int> node_reads;
  for (const std::string& r : api_.Requests()) {
    if (r.rfind(std::string("GET ") + kNodes + "/", 0) == 0) ++node_reads[r.substr(18)];
  }
  EXPECT_EQ(node_reads.count("cpu-node") + node_reads.count("node-old"), 0u);
  EXPECT_GT(node_reads["node-down"], 0);
  // The drop waited for the pod: admitted after 200 s, so at least that long
  // after the switch (120 s of settling alone would have been too early).
  ASSERT_FALSE(switched_when.empty());
  EXPECT_GT(now_ - *ParseTime(switched_when), seconds(200));

  // A second run starts the next rotation.
  on_sleep_ = [&] {
    if (Files().count("k3") != 0) {
      api_.Put(kNodes, NodeJson("node-a", "k2,k3"));
      api_.Put(kNodes, NodeJson("node-b", "k2,k3"));
    }
  };
  KeyRotation next = Rotation();
  ASSERT_TRUE(next.Rotate().ok());
  EXPECT_EQ(Files().at("signing"), "k3");
  EXPECT_EQ(Files().count("k2"), 0u);
}

// A node whose plugin never gets the new key stops the rotation at step 1
// with the node named; once fixed, the next run resumes without adding
// another key.
TEST_F(KeyRotationTest, ANodeWithoutTheNewKeyStopsTheRotationAtStepOne) {
  api_.Put(kNodes, NodeJson("node-a", "k1"));
  api_.Put(kNodes, NodeJson("node-stuck", "k1"));
  on_sleep_ = [&] {
    if (Files().count("k2") != 0) api_.Put(kNodes, NodeJson("node-a", "k1,k2"));
  };
  KeyRotation rotation = Rotation();
  Status st = rotation.Rotate();
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("node-stuck"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("node-a"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("stays at step 1"), std::string::npos);
  EXPECT_NE(st.message().find("run accelpool-keys rotate again"), std::string::npos);
  std::map<std::string, std::string> f = Files();
  EXPECT_EQ(f.at("signing"), "k1");
  EXPECT_EQ(f.count("k2"), 1u);

  StatusOr<RotationState> s = rotation.Read();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->phase, RotationPhase::kAdded);
  EXPECT_EQ(s->newest, "k2");
  EXPECT_EQ(s->NodesWithout("k2"), std::vector<std::string>{"node-stuck"});
  // A node without a Ready condition yet is waited for; so is one whose
  // kubelet stopped reporting (Unknown), listed as not Ready.
  json fresh = NodeJson("node-fresh", "k1");
  fresh.erase("status");
  api_.Put(kNodes, fresh);
  json gone = NodeJson("node-gone", "k1");
  gone["status"]["conditions"][0]["status"] = "Unknown";
  api_.Put(kNodes, gone);
  s = rotation.Read();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->NodesWithout("k2"),
            (std::vector<std::string>{"node-fresh", "node-gone", "node-stuck"}));
  EXPECT_EQ(s->not_ready, std::vector<std::string>{"node-gone"});
  api_.Remove(kNodes, "node-fresh");
  api_.Remove(kNodes, "node-gone");

  api_.Put(kNodes, NodeJson("node-stuck", "k1,k2"));
  on_sleep_ = nullptr;
  KeyRotation resumed = Rotation();
  ASSERT_TRUE(resumed.Rotate().ok());
  f = Files();
  EXPECT_EQ(f.at("signing"), "k2");
  EXPECT_EQ(f.size(), 2u) << "k1 dropped, no k3 added";
}

// A node whose device plugin is gone (its DaemonSet left it) keeps its last
// accelpool.io/assignment-keys report: it is not waited for, and the
// rotation switches. A node whose plugin pod runs and lacks the key still
// stops it at step 1.
TEST_F(KeyRotationTest, AStaleReportOfANodeWithoutAPluginIsNotWaitedFor) {
  api_.Put(kNodes, NodeJson("node-a", "k1"));
  api_.Put(kNodes, NodeJson("node-b", "k1"));
  api_.Put(kNodes, NodeJson("node-stale", "k1"));
  api_.Put(kNodes, NodeJson("node-ended", "k1"));
  api_.Put(kPluginPods, PluginPodJson("node-a"));
  api_.Put(kPluginPods, PluginPodJson("node-b", "Pending"));  // starting: it will check
  // Neither another component's pod nor an ended plugin pod is a plugin.
  api_.Put(kPluginPods, PluginPodJson("node-stale", "Running", "scheduler"));
  json ended = PluginPodJson("node-ended", "Failed");
  ended["metadata"]["name"] = "accelpool-device-plugin-old";
  api_.Put(kPluginPods, ended);
  on_sleep_ = [&] {
    if (Files().count("k2") != 0) api_.Put(kNodes, NodeJson("node-a", "k1,k2"));
  };
  KeyRotation rotation = Rotation();
  Status st = rotation.Rotate();
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("node-b"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("node-stale"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("node-ended"), std::string::npos) << st.message();
  EXPECT_EQ(Files().at("signing"), "k1");

  StatusOr<RotationState> s = rotation.Read();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->no_plugin, (std::vector<std::string>{"node-ended", "node-stale"}));
  EXPECT_FALSE(s->plugins_unseen);

  // node-b's plugin gone as well: nothing left lacks the key.
  api_.Remove(kPluginPods, "accelpool-device-plugin-node-b");
  KeyRotation resumed = Rotation();
  st = resumed.Rotate();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Files().at("signing"), "k2");
  EXPECT_EQ(Files().count("k1"), 0u);
}

// A node that is not Ready and lacks the new key is waited for, up to
// --node-timeout (back, its kubelet admits pods before it refreshes the
// plugin's Secret volume); --skip-not-ready switches without it.
TEST_F(KeyRotationTest, ANotReadyNodeIsWaitedForUnlessSkipped) {
  api_.Put(kNodes, NodeJson("node-a", "k1"));
  api_.Put(kNodes, NodeJson("node-down", "k1", /*ready=*/false));
  api_.Put(kPluginPods, PluginPodJson("node-a"));
  api_.Put(kPluginPods, PluginPodJson("node-down"));
  on_sleep_ = [&] {
    if (Files().count("k2") != 0) api_.Put(kNodes, NodeJson("node-a", "k1,k2"));
  };
  KeyRotation rotation = Rotation();
  Status st = rotation.Rotate();
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("Not Ready among them: node-down"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("--skip-not-ready"), std::string::npos) << st.message();
  EXPECT_EQ(Files().at("signing"), "k1");

  options_.skip_not_ready = true;
  KeyRotation skipping = Rotation();
  st = skipping.Rotate();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Files().at("signing"), "k2");
}

// Keys not named k<N> (a Secret made by hand) are no rotation under way, even
// with more than one: rotate starts one (k1, the first k<N>) and drops them
// at its end, instead of dropping all but "signing" and calling that done.
TEST_F(KeyRotationTest, HandNamedKeysStartARotation) {
  api_.Put(kSecrets,
           SecretJson({{"signing", "primary"}, {"primary", kKey1}, {"backup", kKey1 + "-backup"}}));
  api_.Put(kNodes, NodeJson("node-a", "backup,primary"));
  KeyRotation rotation = Rotation();
  StatusOr<RotationState> s = rotation.Read();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->phase, RotationPhase::kSteady);
  EXPECT_EQ(s->newest, "primary");

  bool switched_early = false;
  on_sleep_ = [&] {
    const std::map<std::string, std::string> f = Files();
    if (f.at("signing") == "k1" && sleeps_ < 3) switched_early = true;
    if (f.count("k1") != 0 && sleeps_ == 3)
      api_.Put(kNodes, NodeJson("node-a", "backup,k1,primary"));
  };
  Status st = rotation.Rotate();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(switched_early);
  const std::map<std::string, std::string> f = Files();
  EXPECT_EQ(f.at("signing"), "k1");
  EXPECT_EQ(f.size(), 2u) << "primary and backup dropped at step 3";
  EXPECT_NE(f.at("k1"), kKey1);

  // With "signing" a k<N> above the others, it is step 2 of a rotation.
  api_.Put(kSecrets, SecretJson({{"signing", "k1"}, {"k1", kKey1}, {"backup", kKey1 + "-b"}}));
  s = rotation.Read();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->phase, RotationPhase::kSwitched);
  // Not when another key ranks as high (k01 is number 1 as well).
  api_.Put(kSecrets, SecretJson({{"signing", "k1"}, {"k1", kKey1}, {"k01", kKey1 + "-b"}}));
  s = rotation.Read();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->phase, RotationPhase::kSteady);
}

// A pod signed with the old key that is never admitted stops the rotation
// at step 2; deleting it lets the next run finish.
TEST_F(KeyRotationTest, APodStuckBeforeAdmissionStopsTheRotationAtStepTwo) {
  api_.Put(kNodes, NodeJson("node-a", "k1,k2"));
  api_.Put(kSecrets, SecretJson({{"signing", "k1"}, {"k1", kKey1}, {"k2", kKey1 + "-2"}}));
  api_.Put(kPods, PodJson("stuck", "k1", kKey1));
  api_.Put(kPods, PodJson("fresh", "k2", kKey1 + "-2"));  // the new key: no reason to wait
  // Naming the old key is not enough: a signature no node would accept (made
  // up by someone who may annotate pods), or one on a pod never bound, holds
  // nothing.
  api_.Put(kPods, PodJson("forged", "k1", kKey1, false, "v1.k1.AAAA"));
  json unbound = PodJson("unbound", "k1", kKey1);
  unbound["spec"].erase("nodeName");
  api_.Put(kPods, unbound);
  KeyRotation rotation = Rotation();
  Status st = rotation.Rotate();
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("ml/stuck (key k1, node node-a)"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("fresh"), std::string::npos);
  EXPECT_EQ(st.message().find("forged"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("unbound"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("stays at step 2"), std::string::npos);
  EXPECT_EQ(Files().at("signing"), "k2");
  EXPECT_EQ(Files().count("k1"), 1u);

  api_.Remove(kPods, "stuck");
  KeyRotation resumed = Rotation();
  ASSERT_TRUE(resumed.Rotate().ok());
  EXPECT_EQ(Files().size(), 2u);
  EXPECT_EQ(Files().count("k1"), 0u);
}

// Two runs at once (the CronJob and one started by hand): the second finds
// the first's rotation under way, follows it, and ends with it; it starts
// no rotation of its own.
TEST_F(KeyRotationTest, ARunThatFindsARotationUnderWayEndsWithIt) {
  api_.Put(kNodes, NodeJson("node-a", "k1"));
  KeyRotation first = Rotation();
  KeyRotation second = Rotation();
  bool second_ran = false;
  on_sleep_ = [&] {
    if (Files().count("k2") != 0) api_.Put(kNodes, NodeJson("node-a", "k1,k2"));
    if (!second_ran && Files().at("signing") == "k2") {
      second_ran = true;
      // The second run takes over from here and finishes the rotation.
      ASSERT_TRUE(second.Rotate().ok());
    }
  };
  ASSERT_TRUE(first.Rotate().ok());
  EXPECT_TRUE(second_ran);
  const std::map<std::string, std::string> f = Files();
  EXPECT_EQ(f.at("signing"), "k2");
  EXPECT_EQ(f.size(), 2u) << "k1 dropped once; no k3";
}

// Where the extender's leader reports the key it signs with on its Lease,
// the old key is dropped only once that is the new one, even after the
// settling time; an expired Lease (its leader gone) is not waited for.
TEST_F(KeyRotationTest, TheOldKeyIsDroppedOnlyOnceTheLeaderSignsWithTheNewOne) {
  constexpr const char* kLeases = "/apis/coordination.k8s.io/v1/namespaces/accelpool-system/leases";
  options_.lease_ns = "accelpool-system";
  options_.lease_name = "accelpool-extender";
  api_.Put(kSecrets, SecretJson({{"signing", "k2"}, {"k1", kKey1}, {"k2", kKey1 + "-2"}}));
  const auto lease = [&](const std::string& key, std::chrono::system_clock::time_point renewed) {
    api_.Put(kLeases, {{"apiVersion", "coordination.k8s.io/v1"},
                       {"kind", "Lease"},
                       {"metadata",
                        {{"name", "accelpool-extender"},
                         {"namespace", "accelpool-system"},
                         {"annotations", {{"accelpool.io/assignment-signing-key", key}}}}},
                       {"spec",
                        {{"holderIdentity", "extender-0"},
                         {"leaseDurationSeconds", 15},
                         {"renewTime", kube::FormatMicroTime(renewed)}}}});
  };
  lease("k1", now_);
  const auto start = now_;
  on_sleep_ = [&] {
    // The leader keeps renewing with k1 for 300 s, then re-reads the Secret.
    lease(now_ - start < seconds(300) ? "k1" : "k2", now_);
  };
  KeyRotation rotation = Rotation();
  ASSERT_TRUE(rotation.Rotate().ok());
  EXPECT_GE(now_ - start, seconds(300)) << "not after the 120 s settle alone";
  EXPECT_EQ(Files().count("k1"), 0u);

  // A leader stuck on k1 stops the rotation at step 2, named.
  api_.Put(kSecrets, SecretJson({{"signing", "k3"}, {"k2", kKey1 + "-2"}, {"k3", kKey1 + "-3"}}));
  on_sleep_ = [&] { lease("k2", now_); };
  KeyRotation stuck = Rotation();
  Status st = stuck.Rotate();
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("leader still signs with k2"), std::string::npos) << st.message();
  EXPECT_EQ(Files().count("k2"), 1u);

  // Its leader gone (the Lease expired), the report no longer holds it back.
  on_sleep_ = nullptr;
  lease("k2", now_ - seconds(60));
  KeyRotation after = Rotation();
  ASSERT_TRUE(after.Rotate().ok());
  EXPECT_EQ(Files().count("k2"), 0u);
}

// A switch made by hand has no time on record: the settling time counts
// from when the rotation first sees it.
TEST_F(KeyRotationTest, AHandMadeSwitchSettlesFromWhenItIsSeen) {
  api_.Put(kSecrets, SecretJson({{"signing", "k2"}, {"k1", kKey1}, {"k2", kKey1 + "-2"}}));
  KeyRotation rotation = Rotation();
  const auto start = now_;
  ASSERT_TRUE(rotation.Rotate().ok());
  EXPECT_GE(now_ - start, options_.settle);
  EXPECT_EQ(Files().count("k1"), 0u);
}

// A switch time on record that is still to come, or that the clock cannot
// hold, counts as none: the settling time counts from when it is seen,
// neither skipped (a time past 2262 read back as one long gone) nor waited
// for until that far day.
TEST_F(KeyRotationTest, ASwitchTimeStillToComeSettlesFromWhenItIsSeen) {
  for (const char* when :
       {"2500-01-01T00:00:00Z", "2100-01-01T00:00:00Z", "1700-01-01T00:00:00Z"}) {
    json secret = SecretJson({{"signing", "k2"}, {"k1", kKey1}, {"k2", kKey1 + "-2"}});
    secret["metadata"]["annotations"] = {{"accelpool.io/assignment-key-switched-at", when}};
    api_.Put(kSecrets, secret);
    bool runaway = false;
    sleeps_ = 0;
    on_sleep_ = [&] {
      if (sleeps_ > 100 && !runaway) {  // waiting for that day: end the run
        runaway = true;
        api_.Put(kSecrets, SecretJson({{"signing", "k2"}, {"k2", kKey1 + "-2"}}));
      }
    };
    KeyRotation rotation = Rotation();
    const auto start = now_;
    ASSERT_TRUE(rotation.Rotate().ok()) << when;
    EXPECT_FALSE(runaway) << when << ": waited for that time";
    EXPECT_GE(now_ - start, options_.settle) << when << ": the old key went without settling";
    EXPECT_EQ(Files().count("k1"), 0u) << when;
  }
}

TEST_F(KeyRotationTest, ABrokenOrMissingSecretIsRefusedAndLeftAlone) {
  api_.Put(kSecrets, SecretJson({{"signing", "k9"}, {"k1", kKey1}}));
  KeyRotation rotation = Rotation();
  Status st = rotation.Rotate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("not a usable key set"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("k9"), std::string::npos) << st.message();

  api_.Put(kSecrets, SecretJson({{"signing", "k1"}, {"k1", "short"}}));
  EXPECT_EQ(rotation.Rotate().code(), StatusCode::kInvalidArgument);
  json not_base64 = SecretJson({{"signing", "k1"}});
  not_base64["data"]["k1"] = "!!!";
  api_.Put(kSecrets, not_base64);
  EXPECT_EQ(rotation.Rotate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SecretWrites(), 0);

  api_.Remove(kSecrets, "accelpool-assignment-key");
  st = rotation.Rotate();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("assignmentSigning.enabled=true"), std::string::npos);
}

// A transient apiserver outage is waited out; a persistent error ends the run.
TEST_F(KeyRotationTest, AnApiserverOutageIsWaitedOut) {
  api_.Put(kNodes, NodeJson("node-a", "k1,k2"));
  api_.Put(kSecrets, SecretJson({{"signing", "k2"}, {"k1", kKey1}, {"k2", kKey1 + "-2"}}));
  api_.FailNext(3, 503);
  KeyRotation rotation = Rotation();
  ASSERT_TRUE(rotation.Rotate().ok());
  EXPECT_EQ(Files().count("k1"), 0u);
  api_.FailNext(1, 403);
  EXPECT_EQ(rotation.Read().status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace accelpool::keys
