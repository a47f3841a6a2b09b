#include "core/fit.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <span>
#include <string>

#include "core/policy.h"
#include "core/select.h"
#include "core/usage.h"

namespace accelpool::core {

namespace {

using internal::CandidateSet;
using internal::SetQuery;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Model filters match case-insensitively as substrings (ModelMatches).
bool AnyModelMatches(const std::string& model, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (ModelMatches(model, p)) return true;
  }
  return false;
}

bool IdListed(const std::string& id, const std::vector<std::string>& ids) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

bool Whole(const DeviceRequest& r) { return !r.Fractional(); }

// Per-request facts computed once (the CycleState of this request).
struct PerDevice {
  int64_t mem = 0;        // effective memory on this device
  int32_t compute = 0;    // effective compute on this device
  bool eligible = false;  // static: model, id, memory size, health
  // Holds memory no grant accounts for (Device::foreign_mib): no whole grant.
  // Kept here so the whole-device path reads no Device.
  bool foreign = false;
};

struct RequestState {
  const DeviceRequest* req = nullptr;
  std::vector<PerDevice> dev;  // one entry per inventory device
};

struct ContainerOutcome {
  FitCode code = FitCode::kFits;
  std::vector<FitReason> reasons;
  ContainerPlacement placement;
};

void Fail(ContainerOutcome* o, FitCode code, FitReason r) {
  o->code = code;
  o->reasons.push_back(r);
}

// Static checks that do not depend on usage. Returns false (with reasons)
// when the request can never fit this inventory.
bool StaticFilter(const DeviceRequest& r, const NodeInventory& inv, RequestState* st,
                  ContainerOutcome* o) {
  const size_t n = inv.devices.size();
  if (n == 0) {
    Fail(o, FitCode::kUnresolvable, {Reason::kNoDevices, r.count, 0});
    return false;
  }
  if (static_cast<size_t>(r.count) > n) {
    Fail(o, FitCode::kUnresolvable, {Reason::kTooFewDevices, r.count, static_cast<int64_t>(n)});
    return false;
  }
  const auto& valid = inv.topology.valid_counts;
  if (!valid.empty() && std::find(valid.begin(), valid.end(), r.count) == valid.end()) {
    Fail(o, FitCode::kUnresolvable, {Reason::kInvalidCount, r.count, 0});
    return false;
  }
  if (r.Fractional() && r.count > 1 && inv.topology.slices.fraction_single_device) {
    Fail(o, FitCode::kUnresolvable, {Reason::kInvalidCount, r.count, 1});
    return false;
  }
  st->req = &r;
  st->dev.assign(n, PerDevice{});
  int32_t partition_ok = 0, model_ok = 0, id_ok = 0, healthy = 0, in_service = 0, mem_ok = 0;
  int64_t largest = 0;
  int64_t least_need = -1;  // the smallest effective memory of a matching device
  for (size_t i = 0; i < n; ++i) {
    const Device& d = inv.devices[i];
    if (d.partition != r.partition) continue;
    ++partition_ok;
    if (!r.model_include.empty() && !AnyModelMatches(d.model, r.model_include)) continue;
    if (!r.model_exclude.empty() && AnyModelMatches(d.model, r.model_exclude)) continue;
    ++model_ok;
    if (!r.id_include.empty() && !IdListed(d.id, r.id_include)) continue;
    if (!r.id_exclude.empty() && IdListed(d.id, r.id_exclude)) continue;
    ++id_ok;
    st->dev[i].mem = EffectiveMemory(r, d, inv.topology.slices);
    st->dev[i].compute = EffectiveCompute(r, d, inv.topology.slices);
    largest = std::max(largest, d.memory_mib);
    if (least_need < 0 || st->dev[i].mem < least_need) least_need = st->dev[i].mem;
    if (st->dev[i].mem > d.memory_mib) continue;
    ++mem_ok;
    if (!d.healthy) continue;
    ++healthy;
    if (d.cordoned) continue;
    ++in_service;
    st->dev[i].eligible = true;
    st->dev[i].foreign = d.foreign_mib > 0;
  }
  if (partition_ok < r.count) {
    Fail(o, FitCode::kUnresolvable, {Reason::kPartitionMismatch, r.count, partition_ok});
    return false;
  }
  if (model_ok < r.count) {
    Fail(o, FitCode::kUnresolvable, {Reason::kModelMismatch, r.count, model_ok});
    return false;
  }
  if (id_ok < r.count) {
    Fail(o, FitCode::kUnresolvable, {Reason::kIdMismatch, r.count, id_ok});
    return false;
  }
  if (mem_ok < r.count) {
    // The memory after percent, compute share and slice rounding (what a
    // device would have to give), not the request's MiB (0 for those).
    Fail(o, FitCode::kUnresolvable, {Reason::kMemoryTooLarge, least_need, largest});
    return false;
  }
  if (healthy < r.count) {
    Fail(o, FitCode::kUnschedulable, {Reason::kUnhealthy, r.count, healthy});
    return false;
  }
  if (in_service < r.count) {
    // Only the operator brings a cordoned device back; no pod leaving does.
    Fail(o, FitCode::kUnresolvable, {Reason::kCordoned, r.count, in_service});
    return false;
  }
  return true;
}

// Devices that can take the request now, given `work`. Collects the reason
// each rejected device gives, keeping the most promising example.
void FreeDevices(const RequestState& st, const NodeInventory& inv, const NodeUsage& work,
                 std::vector<FitReason>* reasons, std::vector<int32_t>* out) {
  const DeviceRequest& r = *st.req;
  std::vector<int32_t>& free = *out;
  free.clear();
  FitReason best_mem{Reason::kInsufficientMemory, 0, -1};
  FitReason best_cmp{Reason::kInsufficientCompute, 0, -1};
  int32_t busy = 0, exclusive = 0, share_cap = 0, slice_mismatch = 0, foreign = 0;
  int64_t mismatch_mib = 0;  // the slice size asked of the first device refused for it
  int32_t slices_used = 0;
  for (const auto& u : work.devices) slices_used += u.slices;
  const int32_t budget = inv.topology.slices.node_handle_budget;
  const bool budget_ok =
      budget <= 0 || !r.Fractional() ||
      static_cast<int32_t>(inv.devices.size()) + slices_used + r.count <= budget;
  for (size_t i = 0; i < inv.devices.size(); ++i) {
    if (!st.dev[i].eligible) continue;
    const DeviceUsage& u = work.devices[i];
    if (Whole(r)) {
      if (u.shares > 0) {
        ++busy;
        continue;
      }
      if (st.dev[i].foreign) {
        ++foreign;
        continue;
      }
      free.push_back(static_cast<int32_t>(i));
      continue;
    }
    const Device& d = inv.devices[i];
    if (u.exclusive) {
      ++exclusive;
      continue;
    }
    if (u.shares >= std::max(1, d.max_shares)) {
      ++share_cap;
      continue;
    }
    if (inv.topology.slices.one_size_per_device && u.slice_mib != 0 && u.slice_mib != st.dev[i].mem) {
      if (slice_mismatch++ == 0) mismatch_mib = st.dev[i].mem;
      continue;
    }
    const int64_t fm = FreeMemory(d, u);
    const int32_t fc = FreeCompute(d, u);
    if (fm < st.dev[i].mem) {
      if (fm > best_mem.available) best_mem = {Reason::kInsufficientMemory, st.dev[i].mem, fm};
      continue;
    }
    if (fc < st.dev[i].compute) {
      if (fc > best_cmp.available) best_cmp = {Reason::kInsufficientCompute, st.dev[i].compute, fc};
      continue;
    }
    free.push_back(static_cast<int32_t>(i));
  }
  if (!budget_ok) {
    reasons->push_back({Reason::kHandleBudget, r.count, 0});
    free.clear();
  }
  if (static_cast<int32_t>(free.size()) < r.count) {
    if (Whole(r)) reasons->push_back({Reason::kInsufficientDevices, r.count, static_cast<int64_t>(free.size())});
    if (best_mem.available >= 0) reasons->push_back(best_mem);
    if (best_cmp.available >= 0) reasons->push_back(best_cmp);
    if (exclusive > 0) reasons->push_back({Reason::kExclusiveTaken, r.count, 0});
    if (share_cap > 0) reasons->push_back({Reason::kShareLimit, r.count, 0});
    if (foreign > 0) reasons->push_back({Reason::kForeignMemory, r.count, foreign});
    if (slice_mismatch > 0) reasons->push_back({Reason::kSliceSizeMismatch, mismatch_mib, 0});
    if (reasons->empty()) reasons->push_back({Reason::kInsufficientDevices, r.count, static_cast<int64_t>(free.size())});
  }
}

// Fills cp->grants for `set` (the name and kind are set by the caller once).
void FillGrants(const RequestState& st, const NodeInventory& inv, std::span<const int32_t> set,
                ContainerPlacement* cp) {
  const DeviceRequest& r = *st.req;
  cp->grants.clear();
  for (int32_t d : set) {
    Grant g;
    g.device = d;
    if (Whole(r)) {
      g.memory_mib = inv.devices[static_cast<size_t>(d)].memory_mib;
      g.compute = kComputeWhole;
      g.exclusive = true;
    } else {
      g.memory_mib = st.dev[static_cast<size_t>(d)].mem;
      g.compute = st.dev[static_cast<size_t>(d)].compute;
    }
    cp->grants.push_back(g);
  }
}

ContainerPlacement MakeContainerPlacement(const RequestState& st, const NodeInventory& inv,
                                          std::span<const int32_t> set) {
  ContainerPlacement cp{st.req->container, st.req->kind, {}};
  FillGrants(st, inv, set, &cp);
  return cp;
}

ContainerOutcome PlanContainer(const DeviceRequest& r, const HostResources& host,
                               const NodeInventory& inv, const NodeUsage& work,
                               const Policy* policy) {
  ContainerOutcome o;
  // Per-thread scratch, reused from node to node so that planning a node
  // allocates only what it returns (the cluster-wide filter plans thousands
  // of nodes per call). Never re-entered: policies score, they do not plan.
  thread_local RequestState st;
  thread_local std::vector<int32_t> free;
  thread_local std::vector<bool> used;
  thread_local Placement probe;
  thread_local std::vector<bool> rejected;
  if (!StaticFilter(r, inv, &st, &o)) return o;
  std::vector<FitReason> reasons;
  FreeDevices(st, inv, work, &reasons, &free);
  if (static_cast<int32_t>(free.size()) < r.count) {
    o.code = FitCode::kUnschedulable;
    o.reasons = std::move(reasons);
    return o;
  }
  used.assign(inv.devices.size(), false);
  for (size_t i = 0; i < inv.devices.size(); ++i) used[i] = work.devices[i].shares > 0;
  FitReason why{Reason::kInsufficientDevices, r.count, static_cast<int64_t>(free.size())};
  const SetQuery q{r.count, r.numa_bind, r.Fractional()};
  const std::vector<CandidateSet> sets = internal::GenerateSets(inv, free, used, q, &why);
  if (sets.empty()) {
    Fail(&o, FitCode::kUnschedulable, why);
    return o;
  }
  // Topology rank first, then the policy's value, then the lowest indices.
  probe.containers.resize(1);
  probe.containers[0].kind = r.kind;
  probe.host = host;
  rejected.assign(sets.size(), false);
  for (;;) {
    const CandidateSet* best = nullptr;
    size_t best_index = 0;
    double best_value = 0;
    for (size_t k = 0; k < sets.size(); ++k) {
      const CandidateSet& c = sets[k];
      if (rejected[k] || (best != nullptr && c.rank < best->rank)) continue;
      FillGrants(st, inv, c.devices, &probe.containers[0]);
      const double value = policy != nullptr ? policy->PlacementValue(inv, work, probe) : 0.0;
      if (best == nullptr || c.rank > best->rank || value > best_value ||
          (value == best_value && c.devices < best->devices)) {
        best = &c;
        best_index = k;
        best_value = value;
      }
    }
    if (best == nullptr) {
      Fail(&o, FitCode::kUnschedulable, why);
      return o;
    }
    // The sets are legal by construction on inventories the profiles build;
    // the one chosen is checked all the same (an inventory the validation
    // lets through, but no profile makes, must not get a short or illegal
    // set), and the next best is taken where it fails.
    if (static_cast<int32_t>(best->devices.size()) == r.count &&
        internal::IsLegalSet(inv, best->devices, q)) {
      o.placement = MakeContainerPlacement(st, inv, best->devices);
      return o;
    }
    rejected[best_index] = true;
  }
}

void AddGrants(const ContainerPlacement& cp, const NodeInventory& inv, NodeUsage* work) {
  for (const Grant& g : cp.grants) {
    DeviceUsage& u = work->devices[static_cast<size_t>(g.device)];
    u.memory_mib += g.memory_mib;
    u.compute += g.compute;
    u.shares += 1;
    u.exclusive = u.exclusive || g.exclusive;
    if (!g.exclusive) {
      u.slices += 1;
      if (inv.topology.slices.one_size_per_device) u.slice_mib = g.memory_mib;
    }
  }
}

// The containers whose whole devices a vendor's rules govern as one set: the
// whole-device requests of the steady state (regular containers and
// sidecars). The rules count devices per pod (VENDORS.md section 11): two
// containers of a 910A pod asking 1 chip each must share a ring, as a pod
// asking 2 must; 1 + 2 chips is a pod of 3, which 910A refuses.
std::vector<size_t> PodSetMembers(const PodRequest& pod, Vendor v) {
  std::vector<size_t> out;
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    const DeviceRequest& r = pod.containers[i];
    if (r.vendor == v && r.count > 0 && r.kind != ContainerKind::kInit && Whole(r)) {
      out.push_back(i);
    }
  }
  return out;
}

// The devices of `members`, ascending, read from each member's placement.
std::vector<int32_t> PodSet(const std::vector<const ContainerPlacement*>& members) {
  std::vector<int32_t> devs;
  for (const ContainerPlacement* cp : members) {
    for (const Grant& g : cp->grants) devs.push_back(g.device);
  }
  std::sort(devs.begin(), devs.end());
  return devs;
}

bool SameDevicesAllowed(const DeviceRequest& a, const DeviceRequest& b) {
  return a.model_include == b.model_include && a.model_exclude == b.model_exclude &&
         a.id_include == b.id_include && a.id_exclude == b.id_exclude &&
         a.partition == b.partition && a.numa_bind == b.numa_bind;
}

// Splits `devs` among the containers `reqs` so that each one's part is a
// legal set of its own: largest parts first, depth first over the subsets of
// what is left, at most kMaxSplitChecks legality checks. `parts[i]` gets
// reqs[i]->count devices.
constexpr int kMaxSplitChecks = 20000;

bool SplitLegally(const NodeInventory& inv, const std::vector<const DeviceRequest*>& reqs,
                  const std::vector<size_t>& order, size_t k, std::vector<int32_t>& left,
                  std::vector<std::vector<int32_t>>* parts, int* checks) {
  if (k == order.size()) return true;
  const DeviceRequest& r = *reqs[order[k]];
  const size_t n = left.size(), want = static_cast<size_t>(r.count);
  if (want > n) return false;
  std::vector<size_t> pick(want);
  for (size_t i = 0; i < want; ++i) pick[i] = i;
  while (true) {
    std::vector<int32_t> part;
    for (size_t i : pick) part.push_back(left[i]);
    if (++*checks > kMaxSplitChecks) return false;
    if (internal::IsLegalSet(inv, part, SetQuery{r.count, r.numa_bind, false})) {
      std::vector<int32_t> rest;
      for (size_t i = 0, p = 0; i < n; ++i) {
        if (p < want && pick[p] == i) {
          ++p;
        } else {
          rest.push_back(left[i]);
        }
      }
      std::swap(left, rest);
      (*parts)[order[k]] = part;
      if (SplitLegally(inv, reqs, order, k + 1, left, parts, checks)) return true;
      std::swap(left, rest);
    }
    // The next combination of `want` out of `n`, in lexicographic order.
    size_t i = want;
    while (i > 0 && pick[i - 1] == n - want + i - 1) --i;
    if (i == 0) return false;
    ++pick[i - 1];
    for (size_t j = i; j < want; ++j) pick[j] = pick[j - 1] + 1;
  }
}

// Plans `members` (PodSetMembers, at least two) as one request of their
// total count on `base`, and hands the set out so that each container's part
// is a legal set of its own as well: in container order, lowest devices
// first, else by SplitLegally. Fails when the members allow different
// devices or no split keeps every part legal (a Box16 pod of 8 + 2 chips: 10
// chips are mirrored pairs, 5 in each ring, so the 8 cannot stay in one
// ring).
ContainerOutcome PlanPodSet(const PodRequest& pod, const std::vector<size_t>& members,
                            const NodeInventory& inv, const NodeUsage& base, const Policy* policy,
                            std::vector<ContainerPlacement>* planned) {
  const DeviceRequest& first = pod.containers[members.front()];
  DeviceRequest merged = first;
  merged.count = 0;
  for (size_t m : members) merged.count += pod.containers[m].count;
  ContainerOutcome o;
  for (size_t m : members) {
    if (!SameDevicesAllowed(first, pod.containers[m])) {
      Fail(&o, FitCode::kUnschedulable, {Reason::kNoTopologyGroup, merged.count, 0});
      return o;
    }
  }
  o = PlanContainer(merged, pod.host, inv, base, policy);
  if (o.code != FitCode::kFits) return o;
  std::vector<Grant> grants = o.placement.grants;
  std::sort(grants.begin(), grants.end(),
            [](const Grant& a, const Grant& b) { return a.device < b.device; });
  std::vector<const DeviceRequest*> reqs;
  std::vector<std::vector<int32_t>> parts(members.size());
  bool legal = true;
  size_t next = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const DeviceRequest& r = pod.containers[members[i]];
    reqs.push_back(&r);
    for (int32_t k = 0; k < r.count; ++k, ++next) parts[i].push_back(grants[next].device);
    legal = legal && internal::IsLegalSet(inv, parts[i], SetQuery{r.count, r.numa_bind, false});
  }
  if (!legal) {
    // Lowest first broke a rule (a pair across two modules): another split
    // of the same devices may keep every part legal.
    std::vector<size_t> order(members.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return reqs[a]->count > reqs[b]->count; });
    std::vector<int32_t> left;
    for (const Grant& g : grants) left.push_back(g.device);
    int checks = 0;
    if (!SplitLegally(inv, reqs, order, 0, left, &parts, &checks)) {
      o = ContainerOutcome{};
      Fail(&o, FitCode::kUnschedulable, {Reason::kNoTopologyGroup, merged.count, 0});
      return o;
    }
  }
  for (size_t i = 0; i < members.size(); ++i) {
    const DeviceRequest& r = *reqs[i];
    ContainerPlacement cp{r.container, r.kind, {}};
    for (int32_t d : parts[i]) {
      cp.grants.push_back(*std::find_if(grants.begin(), grants.end(),
                                        [d](const Grant& g) { return g.device == d; }));
    }
    (*planned)[members[i]] = std::move(cp);
  }
  return o;
}

}  // namespace

int64_t EffectiveMemory(const DeviceRequest& r, const Device& d, const SliceRule& s) {
  if (!r.Fractional()) return d.memory_mib;
  int64_t mem = 0;
  if (r.memory_mib > 0) {
    mem = r.memory_mib;
  } else if (r.memory_percent > 0) {
    // Rounded down (at least 1 MiB), so N shares of 100/N percent fit one
    // device: rounded up, four 25% shares of an H200's 143771 MiB need
    // 143772 and the fourth goes elsewhere.
    mem = std::max<int64_t>(1, d.memory_mib * r.memory_percent / 100);
  } else {
    mem = std::max<int64_t>(1, d.memory_mib * r.compute / kComputeWhole);
  }
  // A slice whose compute follows its memory (Kunlunxin vXPU, Ascend vNPU
  // templates) must also be large enough for the compute asked for.
  if (s.compute_follows_memory && r.compute > 0) {
    mem = std::max(mem, (d.memory_mib * r.compute + kComputeWhole - 1) / kComputeWhole);
  }
  if (s.memory_step_mib > 1) mem = (mem + s.memory_step_mib - 1) / s.memory_step_mib * s.memory_step_mib;
  if (!s.memory_sizes.empty()) {
    const auto it = std::lower_bound(s.memory_sizes.begin(), s.memory_sizes.end(), mem);
    // Past the largest size: the whole device, or more than it has (then
    // the device does not fit, below).
    mem = it == s.memory_sizes.end() ? std::max(mem, d.memory_mib) : *it;
  }
  return mem;
}

int32_t EffectiveCompute(const DeviceRequest& r, const Device& d, const SliceRule& s) {
  if (!r.Fractional()) return kComputeWhole;
  if (s.compute_follows_memory && d.memory_mib > 0) {
    // Rounded down: still at least the compute asked for (the memory was
    // made large enough for it, above), and a chip's templates add up to no
    // more than the whole chip (15 x 2184 MiB of a 32768 MiB 910A, each
    // 66.6 thousandths: rounded up, the 15th would not fit).
    const int64_t mem = EffectiveMemory(r, d, s);
    const int64_t c = mem * kComputeWhole / d.memory_mib;
    return static_cast<int32_t>(std::min<int64_t>(c, kComputeWhole));
  }
  return r.compute;
}

Status ValidateRequest(const DeviceRequest& r) {
  const std::string who = "container \"" + r.container + "\": ";
  if (r.vendor == Vendor::kUnknown) {
    return InvalidArgumentError(who + "unknown accelerator vendor; use a resource name from the "
                                      "vendor table (e.g. nvidia.com/gpu)");
  }
  if (r.count < 1) {
    return InvalidArgumentError(who + "device count must be at least 1, got " +
                                std::to_string(r.count));
  }
  if (r.memory_mib < 0) {
    return InvalidArgumentError(who + "memory must not be negative, got " +
                                std::to_string(r.memory_mib) + " MiB");
  }
  if (r.memory_mib > kMaxMemoryMib) {
    return InvalidArgumentError(who + "memory of " + std::to_string(r.memory_mib) +
                                " MiB is more than any device has (at most 2^40 MiB)");
  }
  if (r.memory_percent < 0 || r.memory_percent > 100) {
    return InvalidArgumentError(who + "memory percentage must be 1-100, got " +
                                std::to_string(r.memory_percent));
  }
  if (r.compute < 0 || r.compute > kComputeWhole) {
    return InvalidArgumentError(who + "compute must be 1-100% of a device, got " +
                                std::to_string(r.compute / 10.0) + "%");
  }
  if (r.memory_mib > 0 && r.memory_percent > 0) {
    return InvalidArgumentError(who + "give memory in MiB or in percent, not both");
  }
  if (!r.partition.empty() && r.Fractional()) {
    return InvalidArgumentError(who + "a MIG instance (" + r.partition +
                                ") is granted whole; drop the memory and compute requests, or "
                                "ask for a share of a whole GPU through nvidia.com/gpu");
  }
  for (const auto& m : r.model_include) {
    for (const auto& x : r.model_exclude) {
      if (Lower(m) == Lower(x)) {
        return InvalidArgumentError(who + "model \"" + m + "\" is both included and excluded");
      }
    }
  }
  for (const auto& id : r.id_include) {
    if (IdListed(id, r.id_exclude)) {
      return InvalidArgumentError(who + "device \"" + id + "\" is both included and excluded");
    }
  }
  if (!r.id_include.empty() && static_cast<int32_t>(std::set<std::string>(r.id_include.begin(), r.id_include.end()).size()) < r.count) {
    return InvalidArgumentError(who + "asks for " + std::to_string(r.count) +
                                " devices but allows only " + std::to_string(r.id_include.size()) +
                                " device ids");
  }
  return Status::Ok();
}

Status ValidatePodRequest(const PodRequest& p) {
  std::set<std::string> names;
  for (const auto& c : p.containers) {
    ACCELPOOL_RETURN_IF_ERROR(ValidateRequest(c));
    if (!names.insert(c.container + "/" + std::string(VendorName(c.vendor))).second) {
      return InvalidArgumentError("container \"" + c.container +
                                  "\" appears twice for the same vendor");
    }
  }
  return Status::Ok();
}

Status ValidateInventory(const NodeInventory& inv) {
  const size_t n = inv.devices.size();
  const std::string who = "inventory of node \"" + inv.node + "\": ";
  std::set<std::string> ids;
  for (size_t i = 0; i < n; ++i) {
    const Device& d = inv.devices[i];
    if (d.index != static_cast<int32_t>(i)) {
      return InvalidArgumentError(who + "device " + std::to_string(i) + " has index " +
                                  std::to_string(d.index));
    }
    if (d.id.empty() || !ids.insert(d.id).second) {
      return InvalidArgumentError(who + "device " + std::to_string(i) + " has an empty or duplicate id");
    }
    if (d.memory_mib < 0 || d.memory_mib > kMaxMemoryMib || d.max_shares < 1) {
      return InvalidArgumentError(who + "device " + d.id +
                                  " has negative memory, more than 2^40 MiB, or max_shares < 1");
    }
    if (d.foreign_mib < 0 || d.foreign_mib > kMaxMemoryMib) {
      // Negative, it would add room that FreeMemory hands out and the usage
      // checks then refuse.
      return InvalidArgumentError(who + "device " + d.id +
                                  " has negative foreign memory or more than 2^40 MiB of it");
    }
    if (d.vendor != inv.vendor) {
      return InvalidArgumentError(who + "device " + d.id + " is of another vendor");
    }
    if (d.module >= static_cast<int32_t>(inv.topology.modules.size()) || d.module < -1) {
      return InvalidArgumentError(who + "device " + d.id + " names module " + std::to_string(d.module));
    }
  }
  auto check_sets = [&](const std::vector<std::vector<int32_t>>& sets, const char* what) {
    std::vector<int> seen(n, 0);
    for (const auto& s : sets) {
      if (s.empty()) return InvalidArgumentError(who + "an empty " + what);
      for (int32_t d : s) {
        if (d < 0 || static_cast<size_t>(d) >= n) {
          return InvalidArgumentError(who + std::string(what) + " names device " + std::to_string(d));
        }
        if (++seen[static_cast<size_t>(d)] > 1) {
          return InvalidArgumentError(who + "device " + std::to_string(d) + " is in two " + what + "s");
        }
      }
    }
    return Status::Ok();
  };
  ACCELPOOL_RETURN_IF_ERROR(check_sets(inv.topology.groups, "group"));
  ACCELPOOL_RETURN_IF_ERROR(check_sets(inv.topology.modules, "module"));
  if (inv.topology.module_rule == ModuleRule::kWholeForEven) {
    // Whole modules are taken count / size at a time: a module of another
    // size would hand a request more (or fewer) devices than it asked for.
    for (const auto& m : inv.topology.modules) {
      if (m.size() != inv.topology.modules.front().size()) {
        return InvalidArgumentError(who + "modules taken whole must all be of one size (" +
                                    std::to_string(inv.topology.modules.front().size()) + " and " +
                                    std::to_string(m.size()) + ")");
      }
    }
  }
  if (!inv.topology.links.empty() && inv.topology.links.size() != n * n) {
    return InvalidArgumentError(who + "link matrix must be N x N");
  }
  for (int32_t c : inv.topology.valid_counts) {
    if (c < 1) return InvalidArgumentError(who + "valid counts must be positive");
  }
  return Status::Ok();
}

namespace {

// The steady state planned again in another order: the whole-device
// containers first (as one set when there are several, PlanPodSet; else in
// pod order), then the shares, the largest memory first (then compute).
// Fills `planned` and `work` (base plus every grant); false when something
// still does not fit.
bool PlanWholeFirst(const PodRequest& pod, const std::vector<bool>& relevant,
                    const NodeInventory& inv, const NodeUsage& base, const Policy* policy,
                    std::vector<ContainerPlacement>* planned, NodeUsage* work) {
  const size_t nc = pod.containers.size();
  planned->assign(nc, ContainerPlacement{});
  *work = base;
  const std::vector<size_t> members = PodSetMembers(pod, inv.vendor);
  bool as_set = false;
  if (members.size() >= 2) {
    std::vector<ContainerPlacement> trial(nc);
    if (PlanPodSet(pod, members, inv, base, policy, &trial).code == FitCode::kFits) {
      for (size_t m : members) {
        AddGrants(trial[m], inv, work);
        (*planned)[m] = std::move(trial[m]);
      }
      as_set = true;
    }
  }
  if (!as_set) {
    for (size_t m : members) {
      ContainerOutcome o = PlanContainer(pod.containers[m], pod.host, inv, *work, policy);
      if (o.code != FitCode::kFits) return false;
      AddGrants(o.placement, inv, work);
      (*planned)[m] = std::move(o.placement);
    }
  }
  std::vector<size_t> shares;
  for (size_t i = 0; i < nc; ++i) {
    const DeviceRequest& r = pod.containers[i];
    if (relevant[i] && r.kind != ContainerKind::kInit && r.Fractional()) shares.push_back(i);
  }
  std::stable_sort(shares.begin(), shares.end(), [&](size_t a, size_t b) {
    const DeviceRequest& x = pod.containers[a];
    const DeviceRequest& y = pod.containers[b];
    return std::tie(x.memory_mib, x.memory_percent, x.compute) >
           std::tie(y.memory_mib, y.memory_percent, y.compute);
  });
  for (size_t i : shares) {
    ContainerOutcome o = PlanContainer(pod.containers[i], pod.host, inv, *work, policy);
    if (o.code != FitCode::kFits) return false;
    AddGrants(o.placement, inv, work);
    (*planned)[i] = std::move(o.placement);
  }
  return true;
}

}  // namespace

FitResult Fit(const PodRequest& pod, const NodeInventory& inv, const NodeUsage& usage,
              const Policy* policy) {
  FitResult res;
  if (policy == nullptr) policy = &DefaultPolicy();
  NodeUsage resized;
  if (usage.devices.size() != inv.devices.size()) {
    resized = usage;
    resized.devices.resize(inv.devices.size());
  }
  const NodeUsage& base = usage.devices.size() == inv.devices.size() ? usage : resized;
  const size_t nc = pod.containers.size();
  // Fast path: one container planned directly on the node's usage (the
  // common pod); the planner's sets are legal and fitting by construction.
  size_t relevant_count = 0, only = 0;
  for (size_t i = 0; i < nc; ++i) {
    if (pod.containers[i].vendor == inv.vendor && pod.containers[i].count > 0) {
      ++relevant_count;
      only = i;
    }
  }
  if (relevant_count == 0) {
    res.code = FitCode::kFits;
    return res;
  }
  if (relevant_count == 1) {
    ContainerOutcome o = PlanContainer(pod.containers[only], pod.host, inv, base, policy);
    res.code = o.code;
    res.reasons = std::move(o.reasons);
    if (o.code == FitCode::kFits) {
      res.placement.containers.push_back(std::move(o.placement));
      res.placement.host = pod.host;
    }
    return res;
  }
  std::vector<ContainerPlacement> planned(nc);
  std::vector<bool> relevant(nc, false);
  for (size_t i = 0; i < nc; ++i) {
    relevant[i] = pod.containers[i].vendor == inv.vendor && pod.containers[i].count > 0;
  }
  auto fail = [&](ContainerOutcome& o) {
    res.code = o.code;
    res.reasons = std::move(o.reasons);
    res.placement = {};
    return res;
  };
  // Steady state: regular containers beside every sidecar, in pod order.
  NodeUsage work = base;
  for (size_t i = 0; i < nc; ++i) {
    const DeviceRequest& r = pod.containers[i];
    if (!relevant[i] || r.kind == ContainerKind::kInit) continue;
    ContainerOutcome o = PlanContainer(r, pod.host, inv, work, policy);
    if (o.code != FitCode::kFits) {
      // In pod order a share may take the one device a whole-device
      // container after it needed (the share's best rank was there), or
      // a small share the room a larger one needed. Planned again: the
      // whole-device containers first, then the shares, largest first.
      if (!PlanWholeFirst(pod, relevant, inv, base, policy, &planned, &work)) return fail(o);
      break;
    }
    AddGrants(o.placement, inv, &work);
    planned[i] = std::move(o.placement);
  }
  // The vendor's rules hold for the pod's whole devices together. Planned
  // one container at a time they may break them (1 + 1 chips in two 910A
  // rings); then the whole-device containers are planned as one set, and the
  // shares after them.
  // A single-container pod (most) has no set to check, and allocates nothing.
  const std::vector<size_t> members =
      nc >= 2 ? PodSetMembers(pod, inv.vendor) : std::vector<size_t>{};
  if (members.size() >= 2) {
    std::vector<const ContainerPlacement*> parts;
    for (size_t m : members) parts.push_back(&planned[m]);
    const std::vector<int32_t> devs = PodSet(parts);
    if (!internal::IsLegalSet(inv, devs,
                              SetQuery{static_cast<int32_t>(devs.size()), false, false})) {
      ContainerOutcome o = PlanPodSet(pod, members, inv, base, policy, &planned);
      if (o.code != FitCode::kFits) return fail(o);
      work = base;
      for (size_t m : members) AddGrants(planned[m], inv, &work);
      for (size_t i = 0; i < nc; ++i) {
        const DeviceRequest& r = pod.containers[i];
        if (!relevant[i] || r.kind == ContainerKind::kInit || !r.Fractional()) continue;
        ContainerOutcome share = PlanContainer(r, pod.host, inv, work, policy);
        if (share.code != FitCode::kFits) return fail(share);
        AddGrants(share.placement, inv, &work);
        planned[i] = std::move(share.placement);
      }
    }
  }
  // Each init container alone, beside the sidecars declared before it. Where
  // a device hosts one slice size only, the pod keeps to one size on each
  // device over all its phases: the sizes of the steady state and of the
  // init containers before are seen as in use (a slice of another size
  // would share the device with them, or with a later pod of their size).
  const bool one_size = inv.topology.slices.one_size_per_device;
  std::vector<int64_t> pod_slice;
  if (one_size) {
    pod_slice.resize(inv.devices.size());
    for (size_t d = 0; d < pod_slice.size(); ++d) pod_slice[d] = work.devices[d].slice_mib;
  }
  for (size_t i = 0; i < nc; ++i) {
    const DeviceRequest& r = pod.containers[i];
    if (!relevant[i] || r.kind != ContainerKind::kInit) continue;
    NodeUsage phase = base;
    for (size_t j = 0; j < i; ++j) {
      if (relevant[j] && pod.containers[j].kind == ContainerKind::kSidecar) {
        AddGrants(planned[j], inv, &phase);
      }
    }
    for (size_t d = 0; d < pod_slice.size(); ++d) {
      if (phase.devices[d].slice_mib == 0) phase.devices[d].slice_mib = pod_slice[d];
    }
    ContainerOutcome o = PlanContainer(r, pod.host, inv, phase, policy);
    if (o.code != FitCode::kFits) return fail(o);
    if (one_size) {
      for (const Grant& g : o.placement.grants) {
        if (!g.exclusive && pod_slice[static_cast<size_t>(g.device)] == 0) {
          pod_slice[static_cast<size_t>(g.device)] = g.memory_mib;
        }
      }
    }
    planned[i] = std::move(o.placement);
  }
  for (size_t i = 0; i < nc; ++i) {
    if (relevant[i]) res.placement.containers.push_back(std::move(planned[i]));
  }
  NodeUsage check = base;
  const Status applied = ApplyPlacement(res.placement, inv, &check);
  if (!applied.ok()) {
    // The planner and the accountant disagree: never hand out such a placement.
    res.code = FitCode::kUnschedulable;
    res.reasons = {{Reason::kInsufficientDevices, 0, 0}};
    res.placement = {};
    return res;
  }
  res.placement.host = pod.host;
  res.code = FitCode::kFits;
  return res;
}

Status CheckPlacement(const PodRequest& pod, const NodeInventory& inv, const NodeUsage& usage,
                      const Placement& placement) {
  std::set<std::string> expected, named;
  for (const auto& c : placement.containers) {
    // Every entry is booked, but only one would be checked below.
    if (!named.insert(c.container).second) {
      return FailedPreconditionError("placement names container \"" + c.container + "\" twice");
    }
  }
  {
    // ApplyPlacement counts the pod's phases (each init container beside the
    // sidecars started before it) in the placement's order: it must be the
    // pod's, or an init container listed before a sidecar would be counted
    // without it.
    std::map<std::string, size_t> at;
    for (size_t i = 0; i < pod.containers.size(); ++i) at.emplace(pod.containers[i].container, i);
    const ContainerPlacement* prev = nullptr;
    for (const auto& c : placement.containers) {
      auto it = at.find(c.container);
      if (it == at.end()) continue;  // refused below: it asks for nothing here
      if (prev != nullptr && it->second < at.at(prev->container)) {
        return FailedPreconditionError("placement lists container \"" + c.container +
                                       "\" after \"" + prev->container +
                                       "\", against the pod's order, in which its init and "
                                       "sidecar phases are counted");
      }
      prev = &c;
    }
  }
  for (const DeviceRequest& r : pod.containers) {
    if (r.vendor != inv.vendor || r.count <= 0) continue;
    expected.insert(r.container);
    const ContainerPlacement* cp = nullptr;
    for (const auto& c : placement.containers) {
      if (c.container == r.container) cp = &c;
    }
    const std::string who = "container \"" + r.container + "\" on " + inv.node + ": ";
    if (cp == nullptr) return FailedPreconditionError(who + "has no placement");
    if (cp->kind != r.kind) {
      // The kind decides the phase its grants are counted in.
      return FailedPreconditionError(who + "placed as another kind of container");
    }
    if (static_cast<int32_t>(cp->grants.size()) != r.count) {
      return FailedPreconditionError(who + "placement has " + std::to_string(cp->grants.size()) +
                                     " devices, request " + std::to_string(r.count));
    }
    RequestState st;
    ContainerOutcome o;
    if (!StaticFilter(r, inv, &st, &o)) {
      return FailedPreconditionError(who + DescribeReason(o.reasons.front()));
    }
    std::vector<int32_t> devs;
    for (const Grant& g : cp->grants) {
      if (g.device < 0 || static_cast<size_t>(g.device) >= inv.devices.size()) {
        return FailedPreconditionError(who + "device index " + std::to_string(g.device) + " is not on the node");
      }
      const size_t d = static_cast<size_t>(g.device);
      if (!st.dev[d].eligible) {
        return FailedPreconditionError(who + "device " + inv.devices[d].id +
                                       " does not match the request or is unhealthy");
      }
      const bool whole = Whole(r);
      const bool amounts_ok = whole ? (g.exclusive && g.memory_mib == inv.devices[d].memory_mib &&
                                       g.compute == kComputeWhole)
                                    : (!g.exclusive && g.memory_mib == st.dev[d].mem &&
                                       g.compute == st.dev[d].compute);
      if (!amounts_ok) {
        return FailedPreconditionError(who + "amounts on device " + inv.devices[d].id +
                                       " do not match the request");
      }
      devs.push_back(g.device);
    }
    std::sort(devs.begin(), devs.end());
    if (!internal::IsLegalSet(inv, devs, SetQuery{r.count, r.numa_bind, r.Fractional()})) {
      return FailedPreconditionError(who + "device set breaks the node's topology rules (" +
                                     inv.topology.kind + ")");
    }
  }
  // The rules count the pod's whole devices of the steady state together.
  std::vector<const ContainerPlacement*> parts;
  for (size_t m : PodSetMembers(pod, inv.vendor)) {
    for (const auto& c : placement.containers) {
      if (c.container == pod.containers[m].container) parts.push_back(&c);
    }
  }
  if (parts.size() >= 2) {
    const std::vector<int32_t> devs = PodSet(parts);
    if (!internal::IsLegalSet(inv, devs,
                              SetQuery{static_cast<int32_t>(devs.size()), false, false})) {
      return FailedPreconditionError("pod's " + std::to_string(devs.size()) + " whole devices on " +
                                     inv.node + " break the node's topology rules (" +
                                     inv.topology.kind +
                                     "), which count the devices of all its containers together");
    }
  }
  for (const auto& c : placement.containers) {
    if (!expected.count(c.container)) {
      return FailedPreconditionError("placement names container \"" + c.container +
                                     "\" that asks for no " + std::string(VendorName(inv.vendor)) +
                                     " devices");
    }
  }
  NodeUsage copy = usage;
  ACCELPOOL_RETURN_IF_ERROR(ApplyPlacement(placement, inv, &copy));
  return CheckForeignRoom(placement, inv, copy);
}

Status CheckForeignRoom(const Placement& placement, const NodeInventory& inv,
                        const NodeUsage& counted) {
  // Refused as Fit refuses it: no whole grant on such a device, shares only in
  // the memory left beside it.
  const std::vector<DeviceUsage> fp = Footprint(placement, inv);
  for (size_t i = 0; i < fp.size() && i < inv.devices.size(); ++i) {
    const Device& d = inv.devices[i];
    if (fp[i].shares == 0 || d.foreign_mib <= 0) continue;
    if (fp[i].exclusive) {
      return FailedPreconditionError("device " + d.id + " on " + inv.node + " holds " +
                                     std::to_string(d.foreign_mib) +
                                     " MiB no grant accounts for: it is not granted whole");
    }
    if (i < counted.devices.size() &&
        counted.devices[i].memory_mib > d.memory_mib - d.foreign_mib) {
      return FailedPreconditionError("device " + d.id + " on " + inv.node +
                                     " has too little memory left beside " +
                                     std::to_string(d.foreign_mib) + " MiB no grant accounts for");
    }
  }
  return Status::Ok();
}

}  // namespace accelpool::core
