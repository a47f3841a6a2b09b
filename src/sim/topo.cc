#include "sim/topo.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <queue>
#include <random>
#include <set>

#include "core/fit.h"
#include "core/policy.h"
#include "core/profiles.h"
#include "core/select.h"
#include "core/usage.h"

namespace accelpool::sim {
namespace {

struct TopoNode {
  core::NodeInventory inv;    // with topology
  core::NodeInventory blind;  // the same devices, topology stripped
  core::NodeUsage usage;
  int32_t super = 0;
};

using Job = TopoJob;

core::PodRequest Request(const TopoNode& n, const Job& j) {
  core::DeviceRequest r;
  r.container = "main";
  r.vendor = n.inv.vendor;
  r.count = j.count;
  r.compute = j.compute;
  r.model_include = {n.inv.devices.at(0).model};
  core::PodRequest p;
  p.containers.push_back(std::move(r));
  return p;
}

bool Free(const core::DeviceUsage& u) { return u.shares == 0 && !u.exclusive && u.compute == 0; }

// Largest number of free devices inside one group (0 when no groups).
int32_t RoomInOneGroup(const TopoNode& n) {
  int32_t best = 0;
  for (const auto& g : n.inv.topology.groups) {
    int32_t f = 0;
    for (int32_t d : g) f += Free(n.usage.devices[static_cast<size_t>(d)]);
    best = std::max(best, f);
  }
  return best;
}

int32_t GroupsSpanned(const TopoNode& n, const core::Placement& p) {
  std::set<size_t> groups;
  for (const auto& c : p.containers) {
    for (const core::Grant& g : c.grants) {
      for (size_t k = 0; k < n.inv.topology.groups.size(); ++k) {
        const auto& grp = n.inv.topology.groups[k];
        if (std::find(grp.begin(), grp.end(), g.device) != grp.end()) groups.insert(k);
      }
    }
  }
  return static_cast<int32_t>(groups.size());
}

class Sim {
 public:
  Sim(const TopoConfig& cfg, bool aware, const core::Policy* policy)
      : cfg_(cfg), aware_(aware), policy_(policy) {}

  Status Build() {
    const int32_t total = cfg_.super_nodes * cfg_.nodes_per_super;
    for (int32_t i = 0; i < total; ++i) {
      const std::string& prof = cfg_.profiles[static_cast<size_t>(i) % cfg_.profiles.size()];
      StatusOr<core::NodeInventory> inv = core::MakeProfileNode(prof, "node-" + std::to_string(i));
      if (!inv.ok()) return inv.status().WithPrefix("profile " + prof);
      TopoNode n;
      n.super = i / cfg_.nodes_per_super;
      n.inv = std::move(*inv);
      n.inv.topology.super_node = "sn-" + std::to_string(n.super);
      // What a topology-blind but otherwise competent scheduler (HAMi's
      // binpack) knows: the devices with their memory, compute and NUMA node,
      // and the vendor's slice templates; not the groups, rings, modules,
      // links, legal counts or the super-node.
      n.blind = n.inv;
      n.blind.topology = core::Topology{};
      n.blind.topology.slices = n.inv.topology.slices;
      for (core::Device& d : n.blind.devices) d.module = -1;
      n.usage = core::NodeUsage::Empty(n.inv);
      devices_ += static_cast<int64_t>(n.inv.devices.size());
      nodes_.push_back(std::move(n));
    }
    return Status::Ok();
  }

  // Places one pod; returns the node index or -1. Both policies score every
  // node that takes the pod with the accelpool policy's node score and keep
  // the best, the lowest index on ties; the blind policy fits and scores on
  // the stripped inventory.
  int64_t PlaceOne(const Job& j, const std::set<size_t>& exclude, int32_t only_super,
                   core::Placement* out) {
    int64_t best = -1;
    int32_t best_score = -1;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      TopoNode& n = nodes_[i];
      if (i % cfg_.profiles.size() != j.profile || exclude.count(i)) continue;
      if (only_super >= 0 && n.super != only_super) continue;
      const core::NodeInventory& view = aware_ ? n.inv : n.blind;
      const core::FitResult fit = core::Fit(Request(n, j), view, n.usage, policy_);
      if (!fit.fits()) continue;
      const int32_t s = policy_->NodeScore(view, n.usage, fit.placement);
      if (s > best_score) {
        best_score = s;
        best = static_cast<int64_t>(i);
        *out = fit.placement;
      }
    }
    return best;
  }

  // Counts a placement that breaks the real topology's rules as a violation.
  void Check(size_t i, const Job& j, const core::Placement& p, TopoMetrics* m) const {
    const TopoNode& n = nodes_[i];
    if (!core::CheckPlacement(Request(n, j), n.inv, n.usage, p).ok()) ++m->violations;
  }

  // True when the node would take the placement (no device overcommitted);
  // the blind policy's choices on the stripped inventory may not be.
  bool Applies(size_t i, const core::Placement& p) const {
    core::NodeUsage copy = nodes_[i].usage;
    return core::ApplyPlacement(p, nodes_[i].inv, &copy).ok();
  }

  // Applies a placement that Applies() accepted and holds it until j.leave.
  void Commit(size_t i, const Job& j, const core::Placement& p, TopoMetrics* m) {
    TopoNode& n = nodes_[i];
    if (j.count > 1 && j.gang == 0) {
      ++m->multi_card;
      if (GroupsSpanned(n, p) > 1 && RoomInOneGroup(n) >= j.count) ++m->cross_group_with_room;
    }
    if (core::ApplyPlacement(p, n.inv, &n.usage).ok()) {
      in_use_ += Footprint(p);
      held_.push({j.leave, i, p});
    }
  }

  static double Footprint(const core::Placement& p) {
    double d = 0;
    for (const auto& c : p.containers) {
      for (const core::Grant& g : c.grants) d += g.exclusive ? 1.0 : g.compute / 1000.0;
    }
    return d;
  }

  // Adds devices in use x time up to t to the utilisation integral.
  void Integrate(double t) {
    weighted_ += in_use_ * (t - last_t_);
    last_t_ = t;
  }

  // Releases every placement that leaves by t, integrating up to each departure.
  void ReleaseUntil(double t) {
    while (!held_.empty() && held_.top().leave <= t) {
      const Held h = held_.top();
      held_.pop();
      Integrate(std::max(h.leave, last_t_));
      if (core::ReleasePlacement(h.placement, nodes_[h.node].inv, &nodes_[h.node].usage).ok()) {
        in_use_ -= Footprint(h.placement);
      }
    }
    Integrate(std::max(t, last_t_));
  }

  // True when some legal set of `count` devices drawn from `free` includes d;
  // marks the members of the set found in *usable.
  static bool InLegalSet(const core::NodeInventory& inv, const std::vector<int32_t>& free,
                         int32_t d, int32_t count, std::vector<bool>* usable) {
    std::vector<int32_t> others;
    for (int32_t f : free) {
      if (f != d) others.push_back(f);
    }
    const size_t r = static_cast<size_t>(count) - 1;  // count >= 2
    if (others.size() < r) return false;
    const core::internal::SetQuery q{count, false, false};
    std::vector<size_t> pick(r);
    std::iota(pick.begin(), pick.end(), size_t{0});
    std::vector<int32_t> set(static_cast<size_t>(count));
    for (;;) {
      set[0] = d;
      for (size_t k = 0; k < r; ++k) set[k + 1] = others[pick[k]];
      std::sort(set.begin(), set.end());
      if (core::internal::IsLegalSet(inv, set, q)) {
        for (int32_t x : set) (*usable)[static_cast<size_t>(x)] = true;
        return true;
      }
      size_t k = r;  // next combination of r of others, in lexicographic order
      while (k > 0 && pick[k - 1] == others.size() - r + k - 1) --k;
      if (k == 0) return false;
      ++pick[k - 1];
      for (size_t t = k; t < r; ++t) pick[t] = pick[t - 1] + 1;
    }
  }

  // Share of free devices that no multi-device shape of the mix can use
  // (TopoMetrics::stranded_pct): every free device either joins a legal set
  // of free devices of some whole-device count above one the mix asks of its
  // profile, or is stranded. Sets are checked with core's own rule, the one
  // CheckPlacement applies, over every combination that includes the device.
  double StrandedPct(const std::vector<Job>& shapes) const {
    int64_t free_total = 0, stranded = 0;
    std::vector<int32_t> free;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const TopoNode& n = nodes_[i];
      free.clear();
      for (size_t d = 0; d < n.inv.devices.size(); ++d) {
        if (Free(n.usage.devices[d])) free.push_back(static_cast<int32_t>(d));
      }
      free_total += static_cast<int64_t>(free.size());
      std::vector<bool> usable(n.inv.devices.size(), false);
      for (const Job& s : shapes) {
        if (s.profile != i % cfg_.profiles.size() || s.compute != 0 || s.count < 2) continue;
        for (int32_t d : free) {
          if (!usable[static_cast<size_t>(d)]) InLegalSet(n.inv, free, d, s.count, &usable);
        }
      }
      for (int32_t d : free) stranded += !usable[static_cast<size_t>(d)];
    }
    return free_total == 0
               ? 0
               : 100.0 * static_cast<double>(stranded) / static_cast<double>(free_total);
  }

  // `progress` (when set) gets base + arrivals placed, out of total.
  TopoMetrics Run(const std::vector<Job>& jobs, const std::vector<Job>& shapes,
                  const Progress& progress, size_t base, size_t total) {
    TopoMetrics m;
    m.policy = aware_ ? "accelpool" : "topology-blind";
    double stranded_sum = 0;
    int64_t samples = 0;
    const size_t every = static_cast<size_t>(std::max(1, cfg_.sample_every));
    for (size_t k = 0; k < jobs.size(); ++k) {
      const Job& j = jobs[k];
      ReleaseUntil(j.arrive);
      if (j.gang == 0) {
        core::Placement p;
        const int64_t i = PlaceOne(j, {}, -1, &p);
        if (i >= 0) Check(static_cast<size_t>(i), j, p, &m);
        if (i < 0 || !Applies(static_cast<size_t>(i), p)) {
          ++m.failed;
        } else {
          ++m.pods;
          Commit(static_cast<size_t>(i), j, p, &m);
        }
      } else {
        PlaceGang(j, &m);
      }
      if (k % every == every - 1) {
        stranded_sum += StrandedPct(shapes);
        ++samples;
      }
      if (progress && ((k + 1) % std::max<size_t>(1, total / 1000) == 0 || k + 1 == jobs.size())) {
        progress(base + k + 1, total);
      }
    }
    m.utilisation_pct =
        last_t_ > 0 ? 100.0 * weighted_ / last_t_ / static_cast<double>(devices_) : 0;
    if (samples > 0) m.stranded_pct = stranded_sum / static_cast<double>(samples);
    return m;
  }

  void PlaceGang(const Job& j, TopoMetrics* m) {
    // Aware: the super-nodes in index order, the first that takes the whole
    // gang; when none does, members anywhere in the cluster. Blind: it does
    // not know the super-nodes, so members anywhere, each the best node left.
    std::vector<int32_t> supers;
    for (int32_t s = 0; s < cfg_.super_nodes; ++s) supers.push_back(s);
    std::vector<std::pair<size_t, core::Placement>> members;
    std::set<size_t> used;
    auto try_in = [&](int32_t only_super) {
      while (static_cast<int32_t>(members.size()) < j.gang) {
        core::Placement p;
        const int64_t i = PlaceOne(j, used, only_super, &p);
        if (i < 0) return;
        used.insert(static_cast<size_t>(i));
        members.emplace_back(static_cast<size_t>(i), p);
      }
    };
    if (aware_) {
      for (int32_t s : supers) {
        members.clear();
        used.clear();
        try_in(s);
        if (static_cast<int32_t>(members.size()) == j.gang) break;
      }
      if (static_cast<int32_t>(members.size()) < j.gang) {
        members.clear();
        used.clear();
        try_in(-1);
      }
    } else {
      try_in(-1);
    }
    if (static_cast<int32_t>(members.size()) < j.gang) {
      ++m->failed;
      return;
    }
    // All or nothing: a member's node that refuses its placement fails the gang.
    bool applies = true;
    for (const auto& [i, p] : members) {
      Check(i, j, p, m);
      applies = applies && Applies(i, p);
    }
    if (!applies) {
      ++m->failed;
      return;
    }
    std::set<int32_t> spanned;
    for (const auto& [i, p] : members) {
      spanned.insert(nodes_[i].super);
      Commit(i, j, p, m);
    }
    ++m->gangs;
    const int32_t needed = (j.gang + cfg_.nodes_per_super - 1) / cfg_.nodes_per_super;
    if (static_cast<int32_t>(spanned.size()) > needed) ++m->gangs_spread;
  }

 private:
  struct Held {
    double leave;
    size_t node;
    core::Placement placement;
    bool operator<(const Held& o) const { return leave > o.leave; }  // min-heap
  };
  const TopoConfig& cfg_;
  bool aware_;
  const core::Policy* policy_;
  std::vector<TopoNode> nodes_;
  std::priority_queue<Held> held_;
  double in_use_ = 0;
  double weighted_ = 0;  // devices in use x time, up to last_t_
  double last_t_ = 0;
  int64_t devices_ = 0;
};

std::vector<Job> Workload(const TopoConfig& cfg, std::vector<Job>* shapes) {
  std::mt19937_64 rng(cfg.seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::exponential_distribution<double> gap(1.0), life(1.0 / 400.0);
  const size_t np = cfg.profiles.size();
  std::vector<Job> jobs;
  double t = 0;
  for (int32_t k = 0; k < cfg.arrivals; ++k) {
    Job j;
    t += gap(rng);
    j.arrive = t;
    j.leave = t + life(rng);
    j.profile = static_cast<size_t>(rng() % np);
    const double x = u(rng);
    if (x < 0.35) {
      j.count = 1;  // single-card inference
    } else if (x < 0.60) {
      j.count = 1;  // fractional inference
      j.compute = rng() % 2 == 0 ? 250 : 500;
    } else if (x < 0.90) {
      j.count = std::vector<int32_t>{2, 4, 8}[rng() % 3];  // fine-tuning
    } else {
      j.count = 8;  // training gang member
      j.gang = std::vector<int32_t>{2, 4}[rng() % 2];
      j.leave = t + 3 * life(rng);
    }
    jobs.push_back(j);
  }
  for (size_t p = 0; p < np; ++p) {
    for (int32_t c : {1, 2, 4, 8}) shapes->push_back(Job{0, 0, p, c, 0, 0});
    shapes->push_back(Job{0, 0, p, 1, 250, 0});
  }
  return jobs;
}

}  // namespace

StatusOr<std::vector<TopoMetrics>> RunTopology(const TopoConfig& cfg, const Progress& progress) {
  if (cfg.profiles.empty() || cfg.super_nodes < 1 || cfg.nodes_per_super < 1) {
    return InvalidArgumentError("topology run needs profiles and at least one node");
  }
  std::vector<Job> shapes;
  const std::vector<Job> jobs = Workload(cfg, &shapes);
  return RunTopologyJobs(cfg, jobs, shapes, progress);
}

StatusOr<std::vector<TopoMetrics>> RunTopologyJobs(const TopoConfig& cfg,
                                                   const std::vector<TopoJob>& jobs,
                                                   const std::vector<TopoJob>& shapes,
                                                   const Progress& progress) {
  if (cfg.profiles.empty() || cfg.super_nodes < 1 || cfg.nodes_per_super < 1) {
    return InvalidArgumentError("topology run needs profiles and at least one node");
  }
  for (const TopoJob& j : jobs) {
    if (j.profile >= cfg.profiles.size()) {
      return InvalidArgumentError("a job names profile " + std::to_string(j.profile) + " of " +
                                  std::to_string(cfg.profiles.size()));
    }
  }
  StatusOr<core::PolicyPtr> policy = core::MakePolicy("accelpool");
  if (!policy.ok()) return policy.status();
  std::vector<TopoMetrics> out;
  for (bool aware : {true, false}) {
    Sim sim(cfg, aware, policy->get());
    ACCELPOOL_RETURN_IF_ERROR(sim.Build());
    out.push_back(sim.Run(jobs, shapes, progress, aware ? 0 : jobs.size(), 2 * jobs.size()));
  }
  return out;
}

StatusOr<nlohmann::json> RunTopologyCli(const TopoOptions& o, const Progress& progress) {
  TopoConfig cfg;
  cfg.super_nodes = o.super_nodes;
  cfg.arrivals = o.arrivals;
  cfg.seed = o.seed;
  StatusOr<std::vector<TopoMetrics>> r = RunTopology(cfg, progress);
  if (!r.ok()) return r.status();
  nlohmann::json out = nlohmann::json::array();
  for (const TopoMetrics& m : *r) {
    out.push_back({{"policy", m.policy},
                   {"pods", m.pods},
                   {"gangs", m.gangs},
                   {"failed", m.failed},
                   {"vendor_rule_violations", m.violations},
                   {"stranded_free_devices_pct",
                    m.stranded_pct ? nlohmann::json(*m.stranded_pct) : nlohmann::json(nullptr)},
                   {"multi_card_pods", m.multi_card},
                   {"cross_group_when_one_group_had_room", m.cross_group_with_room},
                   {"gangs_spread_over_extra_super_nodes", m.gangs_spread},
                   {"utilisation_pct", m.utilisation_pct}});
  }
  if (!o.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    std::ofstream f(o.out_dir + "/topo.json");
    if (!f) return InternalError("cannot write " + o.out_dir + "/topo.json; check permissions");
    f << out.dump(2) << "\n";
  }
  return out;
}

}  // namespace accelpool::sim
