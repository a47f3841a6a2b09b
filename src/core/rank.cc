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
  std::vector<RankedNode> out(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    out[i].index = i;
    out[i].combined = CombinedScore(candidates[i], penalties);
  }
  std::sort(out.begin(), out.end(), [&](const RankedNode& a, const RankedNode& b) {
    const RankCandidate& ca = candidates[a.index];
    const RankCandidate& cb = candidates[b.index];
    return RanksBefore(a.combined, ca.order, ca.node, b.combined, cb.order, cb.node);
  });
  const int64_t best = out.empty() ? 0 : out.front().combined;
  for (size_t i = 0; i < out.size(); ++i) out[i].score = ExtenderScore(i, out[i].combined, best);
  return out;
}

}  // namespace accelpool::core
