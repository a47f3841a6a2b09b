#include "core/select.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/profiles.h"

namespace accelpool::core::internal {

namespace {

// Best-fit key for a group (or module) with `free` devices taking `count`,
// higher first, in the order `fit` names (profiles.h): by default remainder 0
// first, then even remainders ascending, then odd ascending (VENDORS.md 2.2:
// 910A ring order for 1 is 1, 3, 2, 4 free; for 2: 2, 4, 3).
int64_t BestFitRank(int32_t free, int32_t count, GroupFit fit = GroupFit::kEvenRemainder) {
  const int32_t rem = free - count;
  const bool by_parity =
      fit == GroupFit::kEvenRemainder || (fit == GroupFit::kEvenRemainderForOdd && count % 2 != 0);
  return -((by_parity ? static_cast<int64_t>(rem % 2) * 100 : 0) + rem);
}

// Rank scales, from most to least important. A candidate's rank is a sum of
// terms whose ranges never overlap the next scale up.
constexpr int64_t kWholeModuleScale = 100'000'000'000;  // per whole module kept together
constexpr int64_t kInGroupScale = 10'000'000'000;       // inside one preferred group
constexpr int64_t kBestFitScale = 10'000'000;           // best-fit key (|key| <= 116)
constexpr int64_t kAffinityScale = 16;                  // pair affinity sum (< 600k)

bool Contains(std::span<const int32_t> v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

size_t MaxSize(const std::vector<std::vector<int32_t>>& sets) {
  size_t m = 0;
  for (const auto& s : sets) m = std::max(m, s.size());
  return m;
}

// Grows a set from `anchor` by repeatedly adding the device of `pool` with
// the highest total affinity to the set; ties go to devices already used by
// others (packing), then to the lower index.
std::vector<int32_t> GrowGreedy(const NodeInventory& inv, const std::vector<int32_t>& pool,
                                int32_t anchor, int32_t count,
                                const std::vector<bool>& used_by_others) {
  std::vector<int32_t> set{anchor};
  std::vector<bool> taken(inv.devices.size(), false);
  taken[static_cast<size_t>(anchor)] = true;
  while (static_cast<int32_t>(set.size()) < count) {
    int32_t best = -1;
    int64_t best_aff = 0;
    bool best_used = false;
    for (int32_t d : pool) {
      if (taken[static_cast<size_t>(d)]) continue;
      int64_t aff = 0;
      for (int32_t s : set) aff += Affinity(inv, s, d);
      const bool used = used_by_others[static_cast<size_t>(d)];
      if (best < 0 || aff > best_aff || (aff == best_aff && used && !best_used)) {
        best = d;
        best_aff = aff;
        best_used = used;
      }
    }
    if (best < 0) return {};
    taken[static_cast<size_t>(best)] = true;
    set.push_back(best);
  }
  std::sort(set.begin(), set.end());
  return set;
}

int64_t PairAffinity(const NodeInventory& inv, std::span<const int32_t> set) {
  int64_t sum = 0;
  for (size_t i = 0; i < set.size(); ++i) {
    for (size_t j = i + 1; j < set.size(); ++j) sum += Affinity(inv, set[i], set[j]);
  }
  return sum;
}

int32_t UsedCount(std::span<const int32_t> set, const std::vector<bool>& used) {
  int32_t n = 0;
  for (int32_t d : set) n += used[static_cast<size_t>(d)] ? 1 : 0;
  return n;
}

void AddUnique(std::vector<CandidateSet>* out, CandidateSet c) {
  if (c.devices.empty()) return;
  if (c.devices.size() == 1) {
    // A device proposed twice (in-group and cross-group) is harmless: the
    // higher rank wins in the planner, so skip the O(n) duplicate scan.
    out->push_back(std::move(c));
    return;
  }
  for (auto& existing : *out) {
    if (existing.devices == c.devices) {
      existing.rank = std::max(existing.rank, c.rank);
      return;
    }
  }
  out->push_back(std::move(c));
}

// Candidates from `pool` with no group constraint: one per anchor, ranked by
// total pair affinity, then by how many of the set's devices already host
// others (fractional packing).
void GenericSets(const NodeInventory& inv, const std::vector<int32_t>& pool, int32_t count,
                 const std::vector<bool>& used, int64_t base_rank,
                 std::vector<CandidateSet>* out) {
  if (static_cast<int32_t>(pool.size()) < count) return;
  if (count == 1) {
    for (int32_t d : pool) AddUnique(out, {{d}, base_rank});
    return;
  }
  for (int32_t anchor : pool) {
    std::vector<int32_t> set = GrowGreedy(inv, pool, anchor, count, used);
    if (set.empty()) continue;
    const int64_t rank = base_rank + PairAffinity(inv, set) * kAffinityScale + UsedCount(set, used);
    AddUnique(out, {DeviceSet(set), rank});
  }
}

// Modules fully contained in `pool`.
std::vector<int32_t> FreeModules(const NodeInventory& inv, const std::vector<bool>& in_pool) {
  std::vector<int32_t> mods;
  const auto& modules = inv.topology.modules;
  for (size_t m = 0; m < modules.size(); ++m) {
    bool whole = !modules[m].empty();
    for (int32_t d : modules[m]) whole = whole && in_pool[static_cast<size_t>(d)];
    if (whole) mods.push_back(static_cast<int32_t>(m));
  }
  return mods;
}

std::vector<CandidateSet> SetsFromPool(const NodeInventory& inv, const std::vector<int32_t>& pool,
                                       const std::vector<bool>& used, const SetQuery& q,
                                       FitReason* why) {
  const Topology& t = inv.topology;
  const int32_t count = q.count;
  std::vector<CandidateSet> out;
  out.reserve(pool.size());  // one candidate per free device in the common cases
  // Per-thread scratch: a node's plan allocates only what it returns.
  thread_local std::vector<bool> in_pool;
  in_pool.assign(inv.devices.size(), false);
  for (int32_t d : pool) in_pool[static_cast<size_t>(d)] = true;

  // Modules taken whole for even counts (Ascend 910C die pairs).
  if (t.module_rule == ModuleRule::kWholeForEven && !t.modules.empty() && count > 1) {
    const size_t msize = t.modules.front().size();
    const std::vector<int32_t> mods = FreeModules(inv, in_pool);
    const int32_t need = static_cast<int32_t>((static_cast<size_t>(count) + msize - 1) / msize);
    if (count % static_cast<int32_t>(msize) != 0 || static_cast<int32_t>(mods.size()) < need) {
      *why = {Reason::kNoWholeModule, need, static_cast<int64_t>(mods.size())};
      return {};
    }
    // One candidate per starting module, taking the next modules in order.
    for (size_t start = 0; start < mods.size(); ++start) {
      CandidateSet c;
      for (int32_t k = 0; k < need; ++k) {
        const int32_t m = mods[(start + static_cast<size_t>(k)) % mods.size()];
        for (int32_t d : t.modules[static_cast<size_t>(m)]) c.devices.push_back(d);
      }
      std::sort(c.devices.begin(), c.devices.end());
      c.rank = PairAffinity(inv, c.devices) * kAffinityScale;
      AddUnique(&out, std::move(c));
    }
    return out;
  }
  if (t.module_rule == ModuleRule::kWholeForEven && count == 1) {
    // A single die prefers a module whose sibling is already in use, or a
    // die in no module (its sibling left out at start): neither breaks a
    // free pair an even request could take.
    for (int32_t d : pool) {
      const int32_t m = inv.devices[static_cast<size_t>(d)].module;
      int64_t rank = 0;
      if (m < 0 || static_cast<size_t>(m) >= t.modules.size()) {
        rank = 1;
      } else {
        for (int32_t s : t.modules[static_cast<size_t>(m)]) {
          if (s != d && (used[static_cast<size_t>(s)] || !in_pool[static_cast<size_t>(s)])) rank = 1;
        }
      }
      AddUnique(&out, {{d}, rank});
    }
    return out;
  }

  // Small requests stay on one module (310P Duo, 310 cards), in the
  // profile's best-fit order.
  if (t.module_rule == ModuleRule::kStayInside && !t.modules.empty() &&
      static_cast<size_t>(count) <= MaxSize(t.modules)) {
    const GroupFit order = GroupFitOf(t.kind);
    for (const auto& mod : t.modules) {
      std::vector<int32_t> sub;
      for (int32_t d : mod) {
        if (in_pool[static_cast<size_t>(d)]) sub.push_back(d);
      }
      if (static_cast<int32_t>(sub.size()) < count) continue;
      const int64_t fit =
          BestFitRank(static_cast<int32_t>(sub.size()), count, order) * kBestFitScale;
      GenericSets(inv, sub, count, used, fit, &out);
    }
    if (out.empty()) *why = {Reason::kNoWholeModule, count, 0};
    return out;
  }

  const size_t gmax = MaxSize(t.groups);
  const bool grouped = !t.groups.empty() && t.group_rule != GroupRule::kNone;
  if (grouped && static_cast<size_t>(count) <= gmax) {
    const GroupFit order = GroupFitOf(t.kind);
    int32_t best_free = 0;
    for (const auto& g : t.groups) {
      std::vector<int32_t> sub;
      for (int32_t d : g) {
        if (in_pool[static_cast<size_t>(d)]) sub.push_back(d);
      }
      best_free = std::max(best_free, static_cast<int32_t>(sub.size()));
      if (static_cast<int32_t>(sub.size()) < count) continue;
      const int64_t fit =
          kInGroupScale +
          BestFitRank(static_cast<int32_t>(sub.size()), count, order) * kBestFitScale;
      GenericSets(inv, sub, count, used, fit, &out);
    }
    if (t.group_rule == GroupRule::kRequired) {
      if (out.empty()) *why = {Reason::kNoTopologyGroup, count, best_free};
      return out;
    }
    // kPrefer: cross-group sets are legal but rank below any in-group set.
    GenericSets(inv, pool, count, used, 0, &out);
    return out;
  }
  if (grouped && t.span_rule == SpanRule::kEvenMirrored) {
    // Larger than a group: mirrored pairs (i, i + group size) across two groups.
    const int32_t g = static_cast<int32_t>(gmax);
    std::vector<int32_t> pairs;
    for (int32_t i = 0; i < g; ++i) {
      const int32_t j = i + g;
      if (static_cast<size_t>(j) < inv.devices.size() && in_pool[static_cast<size_t>(i)] &&
          in_pool[static_cast<size_t>(j)]) {
        pairs.push_back(i);
      }
    }
    const int32_t need = count / 2;
    if (count % 2 != 0 || static_cast<int32_t>(pairs.size()) < need) {
      *why = {Reason::kNoMirroredPairs, need, static_cast<int64_t>(pairs.size())};
      return {};
    }
    for (size_t start = 0; start + static_cast<size_t>(need) <= pairs.size(); ++start) {
      CandidateSet c;
      for (int32_t k = 0; k < need; ++k) {
        const int32_t i = pairs[start + static_cast<size_t>(k)];
        c.devices.push_back(i);
        c.devices.push_back(i + g);
      }
      std::sort(c.devices.begin(), c.devices.end());
      c.rank = PairAffinity(inv, c.devices) * kAffinityScale;
      AddUnique(&out, std::move(c));
    }
    return out;
  }

  if (t.module_rule == ModuleRule::kStayInside && !t.modules.empty() &&
      ModuleSpanOf(t.kind) == ModuleSpan::kFewestFreeFirst) {
    // Larger than a module (310 cards, MindCluster chip310x4): the free
    // devices of the modules with the fewest free first, the last in part.
    std::vector<std::pair<size_t, size_t>> by_free;  // (free devices, module)
    for (size_t m = 0; m < t.modules.size(); ++m) {
      size_t k = 0;
      for (int32_t d : t.modules[m]) k += in_pool[static_cast<size_t>(d)] ? 1 : 0;
      if (k > 0) by_free.emplace_back(k, m);
    }
    std::sort(by_free.begin(), by_free.end());
    CandidateSet c;
    for (const auto& entry : by_free) {
      for (int32_t d : t.modules[entry.second]) {
        if (in_pool[static_cast<size_t>(d)] && static_cast<int32_t>(c.devices.size()) < count) {
          c.devices.push_back(d);
        }
      }
    }
    if (static_cast<int32_t>(c.devices.size()) == count) {
      std::sort(c.devices.begin(), c.devices.end());
      out.push_back(std::move(c));
      return out;
    }
  }
  if (t.module_rule == ModuleRule::kStayInside && !t.modules.empty() &&
      ModuleSpanOf(t.kind) == ModuleSpan::kWholeModules) {
    // Larger than a module (310P Duo, MindCluster chip310px2 for distributed
    // inference): count / size whole free modules in module order; the
    // remainder from the first module with exactly that many free (a
    // half-used card), else from the next whole free module, in part.
    const size_t msize = t.modules.front().size();
    const size_t rem = static_cast<size_t>(count) % msize;
    const size_t need = static_cast<size_t>(count) / msize;
    std::vector<size_t> whole;
    size_t part = t.modules.size();
    for (size_t m = 0; m < t.modules.size(); ++m) {
      size_t k = 0;
      for (int32_t d : t.modules[m]) k += in_pool[static_cast<size_t>(d)] ? 1 : 0;
      if (k == t.modules[m].size()) whole.push_back(m);
      if (rem > 0 && k == rem && k < t.modules[m].size() && part == t.modules.size()) part = m;
    }
    const size_t whole_needed = need + (rem > 0 && part == t.modules.size() ? 1 : 0);
    if (whole.size() < whole_needed) {
      *why = {Reason::kNoWholeModule, static_cast<int32_t>(whole_needed),
              static_cast<int64_t>(whole.size())};
      return out;
    }
    CandidateSet c;
    for (size_t i = 0; i < whole_needed; ++i) {
      for (int32_t d : t.modules[whole[i]]) {
        if (static_cast<int32_t>(c.devices.size()) < count) c.devices.push_back(d);
      }
    }
    if (part < t.modules.size()) {
      for (int32_t d : t.modules[part]) {
        if (in_pool[static_cast<size_t>(d)]) c.devices.push_back(d);
      }
    }
    std::sort(c.devices.begin(), c.devices.end());
    out.push_back(std::move(c));
    return out;
  }
  GenericSets(inv, pool, count, used, 0, &out);
  return out;
}

// Modules kept whole by a candidate outrank everything else (Cambricon X8
// boards, NVLink-bridged PCIe pairs).
void AddModuleBonus(const NodeInventory& inv, std::vector<CandidateSet>* sets) {
  if (inv.topology.module_rule != ModuleRule::kPreferTogether) return;
  for (auto& c : *sets) {
    for (const auto& mod : inv.topology.modules) {
      bool whole = !mod.empty();
      for (int32_t d : mod) whole = whole && Contains(c.devices, d);
      if (whole) c.rank += kWholeModuleScale;
    }
  }
}

}  // namespace

int32_t Affinity(const NodeInventory& inv, int32_t a, int32_t b) {
  if (!inv.topology.links.empty()) return inv.LinkScore(a, b);
  const int32_t na = inv.devices[static_cast<size_t>(a)].numa;
  const int32_t nb = inv.devices[static_cast<size_t>(b)].numa;
  return (na >= 0 && na == nb) ? 1 : 0;
}

std::vector<CandidateSet> GenerateSets(const NodeInventory& inv, const std::vector<int32_t>& free,
                                       const std::vector<bool>& used_by_others,
                                       const SetQuery& q, FitReason* why) {
  if (!q.numa_bind) {
    std::vector<CandidateSet> out = SetsFromPool(inv, free, used_by_others, q, why);
    AddModuleBonus(inv, &out);
    return out;
  }
  std::map<int32_t, std::vector<int32_t>> by_numa;
  for (int32_t d : free) by_numa[inv.devices[static_cast<size_t>(d)].numa].push_back(d);
  std::vector<CandidateSet> out;
  int64_t best = 0;
  FitReason inner{};
  for (const auto& [numa, pool] : by_numa) {
    best = std::max<int64_t>(best, static_cast<int64_t>(pool.size()));
    if (static_cast<int32_t>(pool.size()) < q.count) continue;
    for (auto& c : SetsFromPool(inv, pool, used_by_others, q, &inner)) out.push_back(std::move(c));
  }
  if (out.empty()) {
    *why = best >= q.count ? inner : FitReason{Reason::kNumaUnsatisfiable, q.count, best};
  }
  AddModuleBonus(inv, &out);
  return out;
}

bool IsLegalSet(const NodeInventory& inv, std::span<const int32_t> devices, const SetQuery& q) {
  const Topology& t = inv.topology;
  const int32_t count = static_cast<int32_t>(devices.size());
  if (count != q.count || count == 0) return false;
  std::vector<bool> in(inv.devices.size(), false);
  for (int32_t d : devices) {
    if (d < 0 || static_cast<size_t>(d) >= inv.devices.size() || in[static_cast<size_t>(d)]) {
      return false;
    }
    in[static_cast<size_t>(d)] = true;
  }
  if (!t.valid_counts.empty() && !Contains(t.valid_counts, count)) return false;
  if (q.numa_bind) {
    for (int32_t d : devices) {
      if (inv.devices[static_cast<size_t>(d)].numa != inv.devices[static_cast<size_t>(devices[0])].numa) {
        return false;
      }
    }
  }
  if (t.module_rule == ModuleRule::kWholeForEven && count > 1) {
    for (const auto& mod : t.modules) {
      int32_t k = 0;
      for (int32_t d : mod) k += in[static_cast<size_t>(d)] ? 1 : 0;
      if (k != 0 && k != static_cast<int32_t>(mod.size())) return false;
    }
  }
  auto inside_one = [&](const std::vector<std::vector<int32_t>>& sets) {
    for (const auto& s : sets) {
      int32_t k = 0;
      for (int32_t d : s) k += in[static_cast<size_t>(d)] ? 1 : 0;
      if (k == count) return true;
    }
    return false;
  };
  if (t.module_rule == ModuleRule::kStayInside && static_cast<size_t>(count) <= MaxSize(t.modules) &&
      !inside_one(t.modules)) {
    return false;
  }
  if (t.module_rule == ModuleRule::kStayInside && !t.modules.empty() &&
      static_cast<size_t>(count) > MaxSize(t.modules) &&
      ModuleSpanOf(t.kind) == ModuleSpan::kWholeModules) {
    // Whole modules, the remainder (count % size devices) from one module.
    const int32_t rem = count % static_cast<int32_t>(t.modules.front().size());
    int32_t parts = 0;
    for (const auto& mod : t.modules) {
      int32_t k = 0;
      for (int32_t d : mod) k += in[static_cast<size_t>(d)] ? 1 : 0;
      if (k == 0 || k == static_cast<int32_t>(mod.size())) continue;
      if (k != rem || ++parts > 1) return false;
    }
  }
  if (t.group_rule == GroupRule::kRequired && !t.groups.empty()) {
    const size_t gmax = MaxSize(t.groups);
    if (static_cast<size_t>(count) <= gmax) return inside_one(t.groups);
    if (t.span_rule == SpanRule::kEvenMirrored) {
      const int32_t g = static_cast<int32_t>(gmax);
      if (count % 2 != 0) return false;
      for (int32_t d : devices) {
        const int32_t mirror = d < g ? d + g : d - g;
        if (mirror < 0 || static_cast<size_t>(mirror) >= inv.devices.size() ||
            !in[static_cast<size_t>(mirror)]) {
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace accelpool::core::internal
