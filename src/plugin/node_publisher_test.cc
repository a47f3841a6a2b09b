#include "plugin/node_publisher.h"

#include <gtest/gtest.h>

#include <thread>

#include "api/inventory_codec.h"
#include "core/profiles.h"
#include "kube/fake_api_test.h"
#include "kube/fake_apiserver.h"

namespace accelpool::plugin {
namespace {

using nlohmann::json;

constexpr const char* kNodes = "/api/v1/nodes";

// Longer than the first backoff after a failure (5 s, stretched by up to a
// fifth).
constexpr std::chrono::seconds kPastFirstBackoff{7};

class NodePublisherTest : public kube::testing::FakeApiTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(FakeApiTest::SetUp());
    // Labels accelpool did not derive: the vendor's own, and a hand-set
    // accelpool.io/vendor.<v> that selects another vendor's DaemonSet.
    api_.Put(kNodes,
             {{"apiVersion", "v1"},
              {"kind", "Node"},
              {"metadata",
               {{"name", "node-a"},
                {"labels",
                 {{"nvidia.com/gpu.present", "true"}, {"accelpool.io/vendor.metax", "true"}}}}}});
  }

  json Labels() {
    auto node = api_.Object(kNodes, "node-a");
    EXPECT_TRUE(node.has_value());
    return node.has_value() ? (*node)["metadata"]["labels"] : json::object();
  }

  static core::NodeInventory VnpuNode(core::NodeInventory inv) {
    for (core::Device& d : inv.devices) d.max_shares = 4;
    return inv;
  }

  static core::NodeInventory Node(const std::string& profile, const std::string& super_node = "") {
    auto inv = core::MakeProfileNode(profile, "node-a");
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    inv->topology.super_node = super_node;
    return *inv;
  }
};

TEST_F(NodePublisherTest, RemovesLabelsOfWhatDisappeared) {
  NodePublisher pub(client_.get(), "node-a", Logger());
  struct Step {
    std::string name;
    std::vector<core::NodeInventory> inventories;
    json want;  // accelpool's labels after the step; null: absent
  };
  const std::vector<Step> steps = {
      {"two vendors, a super node",
       {Node("ascend-910c-x16", "sp-3"), Node("nvidia-hgx-8")},
       {{"accelpool.io/vendor.ascend", "true"},
        {"accelpool.io/model.ascend", "Ascend910C"},
        {"accelpool.io/shared.ascend", nullptr},  // one slot per die
        {"accelpool.io/super-node", "sp-3"},
        {"accelpool.io/vendor.nvidia", "true"},
        {"accelpool.io/model.nvidia", "H200"},
        {"accelpool.io/shared.nvidia", "true"}}},
      {"the dies serve vNPU shares",
       {VnpuNode(Node("ascend-910c-x16", "sp-3")), Node("nvidia-hgx-8")},
       {{"accelpool.io/shared.ascend", "true"}, {"accelpool.io/shared.nvidia", "true"}}},
      {"the super node is gone, and the vNPU shares (the plugin runs without --ascend-vnpu)",
       {Node("ascend-910c-x16"), Node("nvidia-hgx-8")},
       {{"accelpool.io/vendor.ascend", "true"},
        {"accelpool.io/model.ascend", "Ascend910C"},
        {"accelpool.io/shared.ascend", nullptr},
        {"accelpool.io/super-node", nullptr},
        {"accelpool.io/vendor.nvidia", "true"}}},
      {"the Ascend NPUs are gone",
       {Node("nvidia-hgx-8")},
       {{"accelpool.io/vendor.ascend", nullptr},
        {"accelpool.io/model.ascend", nullptr},
        {"accelpool.io/vendor.nvidia", "true"},
        {"accelpool.io/model.nvidia", "H200"}}},
  };
  for (const Step& s : steps) {
    SCOPED_TRACE(s.name);
    auto wrote = pub.Publish(s.inventories);
    ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
    EXPECT_TRUE(*wrote);
    const json labels = Labels();
    for (const auto& [k, v] : s.want.items()) {
      if (v.is_null()) {
        EXPECT_FALSE(labels.contains(k)) << k;
      } else {
        EXPECT_EQ(labels.value(k, json()), v) << k;
      }
    }
    // Never touched: labels accelpool did not derive.
    EXPECT_EQ(labels.value("nvidia.com/gpu.present", ""), "true");
    EXPECT_EQ(labels.value("accelpool.io/vendor.metax", ""), "true");
  }
}

TEST_F(NodePublisherTest, ARestartedPluginRemovesWhatThePreviousRunLabelled) {
  {
    NodePublisher first(client_.get(), "node-a", Logger());
    ASSERT_TRUE(first.Publish({Node("ascend-910c-x16", "sp-3")}).ok());
  }
  EXPECT_EQ(Labels().value("accelpool.io/super-node", ""), "sp-3");
  // After a restart the node is out of its super pod, and now has NVIDIA GPUs.
  NodePublisher again(client_.get(), "node-a", Logger());
  auto wrote = again.Publish({Node("nvidia-hgx-8")});
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  EXPECT_EQ(again.generation(), 2);
  const json labels = Labels();
  for (const char* gone :
       {"accelpool.io/super-node", "accelpool.io/vendor.ascend", "accelpool.io/model.ascend"}) {
    EXPECT_FALSE(labels.contains(gone)) << gone;
  }
  EXPECT_EQ(labels.value("accelpool.io/vendor.nvidia", ""), "true");
  EXPECT_EQ(labels.value("accelpool.io/vendor.metax", ""), "true");
  EXPECT_EQ(labels.value("nvidia.com/gpu.present", ""), "true");
}

// A restarted plugin reads what the previous run published (its foreign
// memory figures are kept until the new run has read the devices), and the
// read counts as the load its first Publish would make.
TEST_F(NodePublisherTest, ARestartedPluginFindsWhatThePreviousRunPublished) {
  {
    NodePublisher fresh(client_.get(), "node-a", Logger());
    auto none = fresh.Found();
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_TRUE(none->empty());
    core::NodeInventory inv = Node("nvidia-hgx-8");
    inv.devices[3].foreign_mib = 8192;
    ASSERT_TRUE(fresh.Publish({inv}).ok());
  }
  NodePublisher again(client_.get(), "node-a", Logger());
  auto found = again.Found();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].devices[3].foreign_mib, 8192);
  EXPECT_EQ(again.generation(), 1);
  core::NodeInventory same = Node("nvidia-hgx-8");
  same.devices[3].foreign_mib = 8192;
  auto wrote = again.Publish({same});
  ASSERT_TRUE(wrote.ok());
  EXPECT_FALSE(*wrote) << "an unchanged document is not written again";
  // An unreachable Node is an error, not an empty answer.
  NodePublisher other(client_.get(), "node-missing", Logger());
  EXPECT_FALSE(other.Found().ok());
}

// Two vendors on one node: one plugin each (the chart's per-vendor
// DaemonSets), both writing the one annotation. Each keeps the other's
// inventory and labels, and removes only what left its own.
TEST_F(NodePublisherTest, PluginsOfTwoVendorsOnOneNodeKeepEachOthersInventory) {
  NodePublisher nvidia(client_.get(), "node-a", Logger(), {core::Vendor::kNvidia});
  NodePublisher ascend(client_.get(), "node-a", Logger(), {core::Vendor::kAscend});
  ASSERT_TRUE(nvidia.Publish({Node("nvidia-hgx-8")}).ok());
  auto wrote = ascend.Publish({Node("ascend-910c-x16", "sp-3")});
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  auto vendors_on_node = [this] {
    std::vector<std::string> out;
    auto node = api_.Object(kNodes, "node-a");
    const std::string text = (*node)["metadata"]["annotations"]["accelpool.io/inventory"];
    auto doc = api::ParseInventory(text, "node-a");
    EXPECT_TRUE(doc.ok()) << doc.status().ToString();
    if (doc.ok()) {
      for (const core::NodeInventory& inv : doc->inventories) {
        out.emplace_back(core::VendorName(inv.vendor));
      }
    }
    return out;
  };
  EXPECT_EQ(vendors_on_node(), (std::vector<std::string>{"nvidia", "ascend"}));
  json labels = Labels();
  EXPECT_EQ(labels.value("accelpool.io/vendor.nvidia", ""), "true");
  EXPECT_EQ(labels.value("accelpool.io/model.nvidia", ""), "H200");
  EXPECT_EQ(labels.value("accelpool.io/vendor.ascend", ""), "true");
  EXPECT_EQ(labels.value("accelpool.io/super-node", ""), "sp-3");
  // The NVIDIA plugin's next change keeps the Ascend half and its labels.
  core::NodeInventory busy = Node("nvidia-hgx-8");
  busy.devices[0].foreign_mib = 1024;
  wrote = nvidia.Publish({busy});
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  EXPECT_EQ(vendors_on_node(), (std::vector<std::string>{"nvidia", "ascend"}));
  EXPECT_EQ(Labels().value("accelpool.io/super-node", ""), "sp-3");
  EXPECT_EQ(nvidia.generation(), 3);
  // The NPUs go: only the Ascend labels go with them.
  ASSERT_TRUE(ascend.Publish({}).ok());
  EXPECT_EQ(vendors_on_node(), (std::vector<std::string>{"nvidia"}));
  labels = Labels();
  EXPECT_FALSE(labels.contains("accelpool.io/vendor.ascend"));
  EXPECT_FALSE(labels.contains("accelpool.io/super-node"));
  EXPECT_EQ(labels.value("accelpool.io/vendor.nvidia", ""), "true");
  EXPECT_EQ(labels.value("accelpool.io/shared.nvidia", ""), "true");
  // A restarted Ascend plugin finds none of its own, and not NVIDIA's.
  NodePublisher again(client_.get(), "node-a", Logger(), {core::Vendor::kAscend});
  auto found = again.Found();
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->empty());
}

// Both plugins write at once: every write is conditional on the Node's
// version, so neither loses the other's last inventory.
TEST_F(NodePublisherTest, ConcurrentWritesOfTwoVendorsLoseNothing) {
  NodePublisher nvidia(client_.get(), "node-a", Logger(), {core::Vendor::kNvidia});
  NodePublisher ascend(client_.get(), "node-a", Logger(), {core::Vendor::kAscend});
  constexpr int kRounds = 25;
  auto run = [](NodePublisher& pub, core::NodeInventory inv) {
    // The publisher's clock moves an hour at each look, so a publish that
    // lost every try is retried at once: within its backoff, Publish writes
    // nothing and says so without an error (the plugin's timer tries again).
    auto t = std::make_shared<std::chrono::steady_clock::time_point>();
    pub.SetClock([t] { return *t += std::chrono::hours(1); });
    for (int i = 1; i <= kRounds; ++i) {
      inv.devices[0].foreign_mib = i;
      // A publish that lost every try is retried, as the plugin's timer does.
      while (!pub.Publish({inv}).ok()) {
      }
    }
  };
  std::thread a(run, std::ref(nvidia), Node("nvidia-hgx-8"));
  std::thread b(run, std::ref(ascend), Node("ascend-910c-x16"));
  a.join();
  b.join();
  auto node = api_.Object(kNodes, "node-a");
  ASSERT_TRUE(node.has_value());
  auto doc = api::ParseInventory(
      (*node)["metadata"]["annotations"]["accelpool.io/inventory"].get<std::string>(), "node-a");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  ASSERT_EQ(doc->inventories.size(), 2u);
  for (const core::NodeInventory& inv : doc->inventories) {
    EXPECT_EQ(inv.devices[0].foreign_mib, kRounds) << core::VendorName(inv.vendor);
  }
}

TEST_F(NodePublisherTest, AFailedWriteRemovesTheStaleLabelsOnTheRetry) {
  NodePublisher pub(client_.get(), "node-a", Logger());
  auto now = std::chrono::steady_clock::now();
  pub.SetClock([&] { return now; });
  ASSERT_TRUE(pub.Publish({Node("ascend-910c-x16", "sp-3")}).ok());
  api_.FailNext(1, 500);
  EXPECT_FALSE(pub.Publish({Node("ascend-910c-x16")}).ok());
  EXPECT_EQ(Labels().value("accelpool.io/super-node", ""), "sp-3");
  now += kPastFirstBackoff;
  auto wrote = pub.Publish({Node("ascend-910c-x16")});
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  EXPECT_FALSE(Labels().contains("accelpool.io/super-node"));
}

// What the plugin wrote may be removed from outside: an operator removes the
// annotation or a label, or the Node is deleted and kubelet registers it
// again. An unchanged document is checked against the Node now and then and
// written again when it is not there.
TEST_F(NodePublisherTest, WhatWasRemovedFromOutsideIsWrittenAgain) {
  const auto annotation = [&](const char* key) -> json {
    auto node = api_.Object(kNodes, "node-a");
    const json::json_pointer ptr(std::string("/metadata/annotations/") + key);
    return node.has_value() && node->contains(ptr) ? node->at(ptr) : json();
  };
  NodePublisher pub(client_.get(), "node-a", Logger());
  auto now = std::chrono::steady_clock::now();
  pub.SetClock([&] { return now; });
  pub.SetCheckEvery(std::chrono::milliseconds(0));
  const std::vector<core::NodeInventory> invs = {Node("nvidia-hgx-8")};
  ASSERT_TRUE(*pub.Publish(invs));
  ASSERT_TRUE(*pub.PublishKeyIds({"k1"}));
  // In place: read, not written.
  size_t before = api_.Requests().size();
  EXPECT_FALSE(*pub.Publish(invs));
  EXPECT_FALSE(*pub.PublishKeyIds({"k1"}));
  EXPECT_EQ(api_.Requests().size(), before + 2);
  // An operator removes the annotations and a label.
  json node = *api_.Object(kNodes, "node-a");
  node["metadata"]["annotations"].erase("accelpool.io/inventory");
  node["metadata"]["annotations"].erase("accelpool.io/assignment-keys");
  node["metadata"]["labels"].erase("accelpool.io/vendor.nvidia");
  api_.Put(kNodes, node);
  EXPECT_TRUE(*pub.Publish(invs));
  EXPECT_TRUE(*pub.PublishKeyIds({"k1"}));
  EXPECT_FALSE(annotation("accelpool.io~1inventory").is_null());
  EXPECT_EQ(annotation("accelpool.io~1assignment-keys"), "k1");
  EXPECT_EQ(Labels().value("accelpool.io/vendor.nvidia", ""), "true");
  EXPECT_EQ(pub.generation(), 2);
  // A label alone.
  node = *api_.Object(kNodes, "node-a");
  node["metadata"]["labels"].erase("accelpool.io/model.nvidia");
  api_.Put(kNodes, node);
  EXPECT_TRUE(*pub.Publish(invs));
  EXPECT_EQ(Labels().value("accelpool.io/model.nvidia", ""), "H200");
  // The Node is deleted; kubelet registers it again, bare.
  api_.Remove(kNodes, "node-a");
  EXPECT_FALSE(pub.Publish(invs).ok());
  api_.Put(kNodes, {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "node-a"}}}});
  now += kPastFirstBackoff;
  EXPECT_TRUE(*pub.Publish(invs));
  EXPECT_TRUE(*pub.PublishKeyIds({"k1"}));
  auto doc =
      api::ParseInventory(annotation("accelpool.io~1inventory").get<std::string>(), "node-a");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->inventories.size(), 1u);
  EXPECT_GT(doc->generation, 2) << "generations only grow";
  EXPECT_EQ(Labels().value("accelpool.io/vendor.nvidia", ""), "true");
  EXPECT_EQ(annotation("accelpool.io~1assignment-keys"), "k1");
  // Between checks (a minute by default) an unchanged document costs nothing.
  NodePublisher lazy(client_.get(), "node-a", Logger());
  ASSERT_FALSE(*lazy.Publish(invs));
  before = api_.Requests().size();
  EXPECT_FALSE(*lazy.Publish(invs));
  EXPECT_EQ(api_.Requests().size(), before);
}

TEST_F(NodePublisherTest, PublishesTheAssignmentKeyIdsOnlyWhenTheyChange) {
  const auto annotation = [&]() -> json {
    auto node = api_.Object(kNodes, "node-a");
    EXPECT_TRUE(node.has_value());
    const json::json_pointer ptr("/metadata/annotations/accelpool.io~1assignment-keys");
    return node.has_value() && node->contains(ptr) ? node->at(ptr) : json();
  };
  {
    NodePublisher pub(client_.get(), "node-a", Logger());
    auto now = std::chrono::steady_clock::now();
    pub.SetClock([&] { return now; });
    EXPECT_FALSE(*pub.PublishKeyIds({}));  // absent already: nothing to write
    EXPECT_TRUE(*pub.PublishKeyIds({"k1"}));
    EXPECT_EQ(annotation(), "k1");
    EXPECT_FALSE(*pub.PublishKeyIds({"k1"}));
    api_.FailNext(1, 500);
    EXPECT_FALSE(pub.PublishKeyIds({"k1", "k2"}).ok());
    EXPECT_EQ(annotation(), "k1");
    now += kPastFirstBackoff;
    EXPECT_TRUE(*pub.PublishKeyIds({"k1", "k2"}));  // the retry writes
    EXPECT_EQ(annotation(), "k1,k2");
  }
  // A restarted plugin finds what the last run wrote and does not rewrite it;
  // a plugin that checks no signature any more removes it.
  NodePublisher again(client_.get(), "node-a", Logger());
  const size_t before = api_.Requests().size();
  EXPECT_FALSE(*again.PublishKeyIds({"k1", "k2"}));
  EXPECT_EQ(api_.Requests().size(), before + 1);  // the one read of the Node
  EXPECT_TRUE(*again.PublishKeyIds({}));
  EXPECT_TRUE(annotation().is_null());
  // The inventory's own annotation and labels are untouched by all this.
  EXPECT_EQ(Labels().value("nvidia.com/gpu.present", ""), "true");
}

// A write the apiserver keeps refusing (an admission webhook's 422, a missing
// Node, RBAC, overload) is not sent again at every 5 s tick: the retries back
// off from 5 s to 5 minutes, and another document starts over at once.
TEST_F(NodePublisherTest, AWriteThatKeepsFailingIsRetriedWithBackoff) {
  NodePublisher pub(client_.get(), "node-a", Logger());
  auto now = std::chrono::steady_clock::now();
  pub.SetClock([&] { return now; });
  const std::vector<core::NodeInventory> invs = {Node("nvidia-hgx-8")};
  api_.FailNext(1000000, 422);
  size_t before = api_.Requests().size();
  EXPECT_FALSE(pub.Publish(invs).ok());
  EXPECT_FALSE(pub.PublishKeyIds({"k1"}).ok());
  const size_t per_try = api_.Requests().size() - before;
  // An hour of 5 s ticks.
  int failures = 1;
  for (int tick = 0; tick < 720; ++tick) {
    now += std::chrono::seconds(5);
    StatusOr<bool> wrote = pub.Publish(invs);
    if (!wrote.ok()) {
      ++failures;
    } else {
      EXPECT_FALSE(*wrote);  // backing off: nothing sent
    }
    static_cast<void>(pub.PublishKeyIds({"k1"}));
  }
  // 5, 10, 20 ... 320 s (capped at 300 s, each up to a fifth more): about
  // 18 tries in an hour, not 720.
  EXPECT_GE(failures, 12);
  EXPECT_LE(failures, 24);
  EXPECT_LE(api_.Requests().size() - before, per_try * 24);
  // Another document is tried at once.
  before = api_.Requests().size();
  EXPECT_FALSE(pub.Publish({Node("ascend-910c-x16")}).ok());
  EXPECT_GT(api_.Requests().size(), before);
  // A success starts the backoff over.
  api_.FailNext(0, 0);
  now += std::chrono::minutes(10);
  EXPECT_TRUE(*pub.Publish(invs));
  api_.FailNext(1, 422);
  EXPECT_FALSE(pub.Publish({Node("ascend-910c-x16")}).ok());
  now += kPastFirstBackoff;
  EXPECT_TRUE(*pub.Publish({Node("ascend-910c-x16")}));
}

TEST_F(NodePublisherTest, AThrottledWriteWaitsAsLongAsTheApiserverAsked) {
  NodePublisher pub(client_.get(), "node-a", Logger());
  auto now = std::chrono::steady_clock::now();
  pub.SetClock([&] { return now; });
  const std::vector<core::NodeInventory> invs = {Node("nvidia-hgx-8")};
  // A throttled answer that asks for less than the backoff (5 s) keeps the
  // backoff.
  api_.FailNext(1, 429, "1");
  EXPECT_EQ(pub.Publish(invs).status().code(), StatusCode::kUnavailable);
  size_t before = api_.Requests().size();
  now += std::chrono::seconds(2);
  ASSERT_TRUE(pub.Publish(invs).ok());
  EXPECT_EQ(api_.Requests().size(), before);
  now += kPastFirstBackoff;
  EXPECT_TRUE(*pub.Publish(invs));
  // Retry-After: 40, longer than the backoff: nothing is sent before it.
  const std::vector<core::NodeInventory> other = {Node("ascend-910c-x16")};
  api_.FailNext(1, 429, "40");
  EXPECT_FALSE(pub.Publish(other).ok());
  before = api_.Requests().size();
  now += std::chrono::seconds(35);
  ASSERT_TRUE(pub.Publish(other).ok());
  EXPECT_EQ(api_.Requests().size(), before) << "sent before the apiserver's Retry-After";
  // Up to a fifth more (48 s): callers told the same wait spread out.
  now += std::chrono::seconds(14);
  EXPECT_TRUE(*pub.Publish(other));
}

TEST_F(NodePublisherTest, AFailureKeepsItsOwnBackoffWhenAnotherCallWasThrottled) {
  NodePublisher pub(client_.get(), "node-a", Logger());
  auto now = std::chrono::steady_clock::now();
  pub.SetClock([&] { return now; });
  // Another user of the client was told to wait 60 s before this write.
  api_.FailNext(1, 429, "60");
  EXPECT_FALSE(client_->Get(kube::Nodes(), "", "node-a").ok());
  api_.FailNext(1, 422);
  const std::vector<core::NodeInventory> invs = {Node("nvidia-hgx-8")};
  EXPECT_FALSE(pub.Publish(invs).ok());
  now += kPastFirstBackoff;
  EXPECT_TRUE(*pub.Publish(invs)) << "the write waited for another call's Retry-After";
}

}  // namespace
}  // namespace accelpool::plugin
