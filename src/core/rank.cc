#include "core/rank.h"

#include <algorithm>

namespace accelpool::core {

int64_t CombinedScore(const RankCandidate& c, const RankPenalties& penalties) {
  int64_t combined = static_cast<int64_t>(c.policy_score) + c.locality;
  if (c.node_idle && c.pod_devices > 0 && c.pod_devices < c.node_devices) {
    combined -= penalties.idle_node;
    if (c.super_node_idle) combined -= penalties.idle_super_node;
  }
  return std::max<int64_t>(combined, 0);
}

int64_t ExtenderScore(size_t position, int64_t combined, int64_t best_combined) {
  if (position == 0) return kMaxRankScore;
  if (best_combined <= 0) return 0;
  return std::clamp<int64_t>((kMaxRankScore - 1) * combined / best_combined, 0,
                             kMaxRankScore - 1);
}

std::vector<RankedNode> Rank(std::span<const RankCandidate> candidates,
                             const RankPenalties& penalties) {
  return Rank(candidates, RankRule{penalties, false});
}

std::vector<RankedNode> Rank(std::span<const RankCandidate> candidates, const RankRule& rule) {
  const RankPenalties& penalties = rule.penalties;
  // Sort keys inline (combined, order, index) so that comparisons read one
  // contiguous array; names are read only when both keys tie.
  struct Key {
    int64_t combined;
    uint64_t order;
    size_t index;
  };
  std::vector<Key> keys(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    keys[i] = Key{CombinedScore(candidates[i], penalties), candidates[i].order, i};
  }
  std::sort(keys.begin(), keys.end(), [&](const Key& a, const Key& b) {
    return RanksBefore(a.combined, a.order, candidates[a.index].node, b.combined, b.order,
                       candidates[b.index].node);
  });
  std::vector<RankedNode> out(keys.size());
  const int64_t best = keys.empty() ? 0 : keys.front().combined;
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t position = rule.tied_best && keys[i].combined == best ? 0 : i;
    out[i] = RankedNode{keys[i].index, keys[i].combined,
                        ExtenderScore(position, keys[i].combined, best)};
  }
  return out;
}

}  // namespace accelpool::core
