#include "core/rank.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/node_order.h"

namespace accelpool::core {
namespace {

RankCandidate Cand(std::string_view node, int32_t score, uint64_t order) {
  RankCandidate c;
  c.node = node;
  c.policy_score = score;
  c.order = order;
  return c;
}

TEST(RankTest, CombinedScoreAppliesLocalityAndKeepWholePenalty) {
  struct Case {
    const char* name;
    int32_t score, locality, pod_devices, node_devices;
    bool node_idle, super_idle;
    int64_t want;
  };
  const RankPenalties p{15, 10};
  const Case cases[] = {
      {"busy node: score only", 60, 0, 1, 8, false, false, 60},
      {"locality adds", 60, 30, 1, 8, false, false, 90},
      {"idle node, smaller pod", 60, 0, 1, 8, true, false, 45},
      {"idle node and idle super-node", 60, 0, 2, 8, true, true, 35},
      {"pod takes the whole node", 60, 0, 8, 8, true, true, 60},
      {"pod asks for no device", 60, 0, 0, 8, true, true, 60},
      {"idle super-node alone does not apply", 60, 0, 1, 8, false, true, 60},
      {"clamped at zero", 10, 0, 1, 8, true, true, 0},
      {"locality offsets the penalty", 50, 20, 4, 8, true, false, 55},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    RankCandidate c = Cand("n", tc.score, 0);
    c.locality = tc.locality;
    c.pod_devices = tc.pod_devices;
    c.node_devices = tc.node_devices;
    c.node_idle = tc.node_idle;
    c.super_node_idle = tc.super_idle;
    EXPECT_EQ(CombinedScore(c, p), tc.want);
  }
}

TEST(RankTest, ExtenderScoreGivesTenToTheFirstOnly) {
  struct Case {
    size_t position;
    int64_t combined, best;
    int64_t want;
  };
  const Case cases[] = {
      {0, 80, 80, 10}, {1, 80, 80, 9}, {2, 40, 80, 4}, {1, 79, 80, 8},
      {0, 0, 0, 10},   {1, 0, 0, 0},   {3, 1, 100, 0}, {1, 100, 100, 9},
  };
  for (const Case& tc : cases) {
    EXPECT_EQ(ExtenderScore(tc.position, tc.combined, tc.best), tc.want)
        << "position " << tc.position << " combined " << tc.combined << " best " << tc.best;
  }
}

TEST(RankTest, OrdersByCombinedThenStableOrderThenName) {
  const std::vector<RankCandidate> in = {Cand("c", 40, 1), Cand("b", 80, 7), Cand("a", 80, 3),
                                         Cand("d", 80, 3)};
  const std::vector<RankedNode> out = Rank(in);
  ASSERT_EQ(out.size(), 4u);
  const std::vector<std::string> want_names = {"a", "d", "b", "c"};
  const std::vector<int64_t> want_scores = {10, 9, 9, 4};
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(in[out[i].index].node, want_names[i]) << i;
    EXPECT_EQ(out[i].score, want_scores[i]) << i;
  }
  EXPECT_TRUE(Rank({}).empty());
}

// RankRule::tied_best (a pod that asks for no device): every node with the
// best combined score gets 10, in the same order; the rest are scaled as
// before. With all scores 0 every node ties.
TEST(RankTest, TiedBestGivesTenToEveryNodeWithTheBestScore) {
  const std::vector<RankCandidate> in = {Cand("c", 40, 1), Cand("b", 80, 7), Cand("a", 80, 3),
                                         Cand("d", 80, 3)};
  const std::vector<RankedNode> out = Rank(in, RankRule{RankPenalties{}, true});
  ASSERT_EQ(out.size(), 4u);
  const std::vector<std::string> want_names = {"a", "d", "b", "c"};
  const std::vector<int64_t> want_scores = {10, 10, 10, 4};
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(in[out[i].index].node, want_names[i]) << i;
    EXPECT_EQ(out[i].score, want_scores[i]) << i;
  }
  const std::vector<RankCandidate> zeros = {Cand("x", 0, 2), Cand("y", 0, 1)};
  for (const RankedNode& r : Rank(zeros, RankRule{RankPenalties{}, true})) {
    EXPECT_EQ(r.score, kMaxRankScore);
  }
  // Without it, the rule is Rank's.
  const std::vector<RankedNode> plain = Rank(in, RankRule{});
  ASSERT_EQ(plain.size(), out.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i].score, Rank(in)[i].score);
}

TEST(RankTest, PenaltyMovesSmallPodsOffIdleNodes) {
  // The idle node leads by 10 policy points; the 15-point penalty hands the
  // pod to the busy node, unless the pod needs the whole node.
  RankCandidate idle = Cand("idle", 70, 0);
  idle.node_devices = 8;
  idle.node_idle = true;
  RankCandidate busy = Cand("busy", 60, 1);
  busy.node_devices = 8;
  struct Case {
    int32_t pod_devices;
    RankPenalties penalties;
    const char* want_first;
  };
  const Case cases[] = {
      {1, {15, 10}, "busy"},
      {1, {0, 0}, "idle"},
      {8, {15, 10}, "idle"},
  };
  for (const Case& tc : cases) {
    idle.pod_devices = busy.pod_devices = tc.pod_devices;
    const std::vector<RankCandidate> in = {idle, busy};
    EXPECT_EQ(in[Rank(in, tc.penalties).front().index].node, tc.want_first)
        << "pod devices " << tc.pod_devices << " penalty " << tc.penalties.idle_node;
  }
}

TEST(RankTest, LinearArgmaxWithRanksBeforeMatchesRankFront) {
  // The simulator picks the first node with one pass of RanksBefore over
  // CombinedScore; it must be the node Rank puts first.
  std::mt19937_64 rng(7);
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("node-" + std::to_string(i));
  for (int round = 0; round < 200; ++round) {
    std::vector<RankCandidate> in;
    for (const std::string& name : names) {
      RankCandidate c = Cand(name, static_cast<int32_t>(rng() % 12) * 5, StableNodeOrder(round, name));
      c.pod_devices = static_cast<int32_t>(rng() % 9);
      c.node_devices = 8;
      c.node_idle = rng() % 2 == 0;
      in.push_back(c);
    }
    const RankPenalties p{static_cast<int32_t>(rng() % 30), 10};
    size_t best = in.size();
    int64_t best_key = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t key = CombinedScore(in[i], p);
      if (best == in.size() || RanksBefore(key, in[i].order, in[i].node, best_key,
                                           in[best].order, in[best].node)) {
        best = i;
        best_key = key;
      }
    }
    const std::vector<RankedNode> ranked = Rank(in, p);
    ASSERT_EQ(ranked.front().index, best) << "round " << round;
    int tens = 0;
    for (const RankedNode& r : ranked) tens += r.score == kMaxRankScore;
    EXPECT_EQ(tens, 1) << "round " << round;
  }
}

}  // namespace
}  // namespace accelpool::core
