// Many binds racing with filters on a small cluster never over-commit a
// device: every bound pod's assignment, re-applied from scratch, must fit and
// add up to exactly what the cache holds. Pods leave through their deletion
// event, or through a filter's read (ReleaseGone) followed by a late event.
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "core/usage.h"
#include "extender/extender.h"
#include "extender/test_util.h"

namespace accelpool::extender {
namespace {

using testing::AddGpuNode;
using testing::Gpu;
using testing::MakePod;

TEST(StressTest, RacingBindsNeverOvercommit) {
  Cache cache;
  const std::vector<std::string> nodes = {"n0", "n1", "n2"};
  for (const auto& n : nodes) AddGpuNode(cache, n, 4);
  ExtenderOptions o;
  o.policy = "binpack";
  auto ext = Extender::Create(cache, o, nullptr, nullptr, nullptr, Logger());
  ASSERT_TRUE(ext.ok());

  std::mutex mu;
  std::map<std::string, PodAssignment> live;  // guarded by mu
  std::atomic<int> binds{0}, refused{0};
  constexpr int kThreads = 8;
  constexpr int kPodsPerThread = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(1234 + t));
      std::vector<std::string> mine;
      for (int i = 0; i < kPodsPerThread; ++i) {
        const std::string uid = "t" + std::to_string(t) + "-" + std::to_string(i);
        PodInfo pod = rng() % 2 == 0
                          ? MakePod(uid, {Gpu(1 + static_cast<int32_t>(rng() % 3))})
                          : MakePod(uid, {Gpu(1, 8192 * (1 + static_cast<int64_t>(rng() % 6)),
                                              100 * (1 + static_cast<int32_t>(rng() % 5)))});
        FilterDecision d = (*ext)->Filter(pod, nodes);
        if (!d.fits.empty()) {
          std::vector<HostPriority> ranked = (*ext)->Prioritize(pod, d.fits);
          // Several threads aim at the same node on purpose.
          const std::string& target = ranked[rng() % std::min<size_t>(2, ranked.size())].host;
          StatusOr<PodAssignment> a = (*ext)->Bind(pod, target);
          if (a.ok()) {
            ++binds;
            std::lock_guard<std::mutex> lock(mu);
            live[uid] = *a;
            mine.push_back(uid);
          } else {
            ++refused;
          }
        }
        if (!mine.empty() && rng() % 3 == 0) {  // pods finish
          const std::string gone = mine[rng() % mine.size()];
          PodAssignment held;
          {
            std::lock_guard<std::mutex> lock(mu);
            auto it = live.find(gone);
            if (it == live.end()) continue;
            held = it->second;
            live.erase(it);
          }
          if (rng() % 2 == 0) {
            cache.Release(gone);  // the watch delivers the deletion
          } else {
            // A filter's read found it gone first; the watch then delivers an
            // older event of it, and perhaps the deletion: nothing is booked.
            cache.ReleaseGone(gone);
            (void)cache.ObservePod(PodRef{gone, "ns", "pod-" + gone, ""}, held.node, held);
            if (rng() % 2 == 0) cache.Release(gone);
          }
          mine.erase(std::find(mine.begin(), mine.end(), gone));
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  // Rebuild usage from the live assignments alone; ApplyPart refuses any
  // overcommit or double-used slot.
  std::map<std::string, NodeSnapshot> rebuilt;
  for (const auto& n : nodes) {
    NodeSnapshot s = *cache.Node(n);
    for (auto& st : s.inventories) st = InventoryState::Empty(st.inventory);
    s.pods = 0;
    rebuilt.emplace(n, std::move(s));
  }
  for (const auto& [uid, a] : live) {
    Status st = ApplyAssignment(a, &rebuilt.at(a.node));
    ASSERT_TRUE(st.ok()) << uid << ": " << st.ToString();
  }
  for (const auto& n : nodes) {
    NodeSnapshotPtr cached = cache.Node(n);
    const InventoryState& want = rebuilt.at(n).inventories[0];
    const InventoryState& got = cached->inventories[0];
    EXPECT_TRUE(core::UsageWithinCapacity(*got.inventory, got.usage)) << n;
    EXPECT_EQ(got.usage, want.usage) << n;
    EXPECT_EQ(got.slots, want.slots) << n;
  }
  EXPECT_GT(binds.load(), 100);
  std::printf("stress: %d binds, %d refused at bind, %zu live\n", binds.load(), refused.load(),
              live.size());
}

}  // namespace
}  // namespace accelpool::extender
