#include "plugin/foreign_memory.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>

#include "api/resources.h"

namespace accelpool::plugin {
namespace {

constexpr int64_t kGib = 1024;

struct Granted {
  int64_t memory_mib = 0;
  int32_t shares = 0;
  bool whole = false;
};

// What the allocated (or presumed) containers hold, by device id.
std::map<std::string, Granted> GrantedByDevice(const std::vector<PodAssignment>& assignments) {
  std::map<std::string, Granted> out;
  for (const PodAssignment& p : assignments) {
    for (const api::AssignedContainer& c : p.assignment.containers) {
      if (!Holds(p.allocated, c) && !Holds(p.presumed, c)) continue;
      for (const api::AssignedDevice& d : c.devices) {
        Granted& g = out[d.id];
        if (GrantsWholeDevice(d)) {
          g.whole = true;
        } else {
          g.memory_mib += d.memory_mib;
          g.shares += 1;
        }
      }
    }
  }
  return out;
}

std::string Gib(int64_t mib) {
  std::ostringstream out;
  if (mib % kGib == 0) {
    out << mib / kGib << " GiB";
  } else {
    out << mib << " MiB";
  }
  return out.str();
}

}  // namespace

ForeignMemory::ForeignMemory(ForeignMemoryOptions options) : options_(options) {}

std::vector<ForeignChange> ForeignMemory::Observe(
    const std::vector<core::NodeInventory>& inventories, const std::map<std::string, int64_t>& used,
    const std::vector<PodAssignment>& assignments) {
  const std::map<std::string, Granted> granted = GrantedByDevice(assignments);
  const size_t confirm = static_cast<size_t>(std::max(1, options_.confirm));
  std::vector<ForeignChange> changes;
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> present;
  for (const core::NodeInventory& inv : inventories) {
    for (const core::Device& d : inv.devices) {
      if (!d.partition.empty()) continue;
      present.insert(d.id);
      const auto reading = used.find(d.id);
      if (reading == used.end()) continue;
      DeviceState& s = devices_[d.id];
      s.vendor = inv.vendor;
      s.used = reading->second;
      const auto held = granted.find(d.id);
      const Granted g = held == granted.end() ? Granted{} : held->second;
      int64_t level = 0;
      if (!g.whole) {
        const int64_t foreign = reading->second - g.memory_mib -
                                static_cast<int64_t>(g.shares) * options_.per_share_mib;
        if (foreign >= options_.min_mib) {
          level = std::min(foreign / kGib * kGib, d.memory_mib);
        }
      }
      s.recent.push_back(level);
      while (s.recent.size() > confirm) s.recent.pop_front();
      if (s.recent.size() < confirm) continue;
      const auto [lo, hi] = std::minmax_element(s.recent.begin(), s.recent.end());
      int64_t next = s.published;
      if (s.published < *lo) next = *lo;
      if (s.published > *hi) next = *hi;
      if (next == s.published) continue;
      changes.push_back(ForeignChange{.device = d.id,
                                      .vendor = inv.vendor,
                                      .model = d.model,
                                      .before_mib = s.published,
                                      .after_mib = next,
                                      .used_mib = reading->second,
                                      .granted_mib = g.memory_mib,
                                      .shares = g.shares,
                                      .device_mib = d.memory_mib,
                                      .holders = {},
                                      .more_holders = 0});
      s.published = next;
    }
  }
  std::erase_if(devices_, [&](const auto& kv) { return !present.contains(kv.first); });
  return changes;
}

void ForeignMemory::Restore(const std::vector<core::NodeInventory>& published) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const core::NodeInventory& inv : published) {
    for (const core::Device& d : inv.devices) {
      if (d.foreign_mib <= 0 || !d.partition.empty() || devices_.contains(d.id)) continue;
      DeviceState& s = devices_[d.id];
      s.vendor = inv.vendor;
      s.published = d.foreign_mib;
    }
  }
}

void ForeignMemory::Apply(std::vector<core::NodeInventory>* inventories) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (core::NodeInventory& inv : *inventories) {
    for (core::Device& d : inv.devices) {
      const auto it = devices_.find(d.id);
      d.foreign_mib = it == devices_.end() || !d.partition.empty()
                          ? 0
                          : std::min(it->second.published, d.memory_mib);
    }
  }
}

std::map<std::string, ForeignReading> ForeignMemory::Readings() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, ForeignReading> out;
  for (const auto& [id, s] : devices_) {
    out[id] = ForeignReading{.vendor = s.vendor, .used_mib = s.used, .foreign_mib = s.published};
  }
  return out;
}

void NameHolders(const std::vector<vendors::ProcessMemory>& processes,
                 const std::function<ProcessOwner(int64_t pid)>& owner_of,
                 const std::function<std::string(const std::string& uid)>& pod_of,
                 const std::vector<PodAssignment>& assignments, size_t limit, ForeignChange* c) {
  std::vector<vendors::ProcessMemory> sorted = processes;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.used_mib > b.used_mib; });
  c->holders.clear();
  c->more_holders = sorted.size() > limit ? sorted.size() - limit : 0;
  sorted.resize(std::min(sorted.size(), limit));
  for (const vendors::ProcessMemory& p : sorted) {
    const ProcessOwner o = owner_of(p.pid);
    ForeignHolder h{.pid = p.pid,
                    .used_mib = p.used_mib,
                    .visible = o.visible,
                    .command = o.command,
                    .pod_uid = o.place.pod_uid,
                    .pod = "",
                    .granted = false};
    if (!h.pod_uid.empty()) {
      h.pod = pod_of(h.pod_uid);
      for (const PodAssignment& a : assignments) {
        if (a.pod.uid != h.pod_uid) continue;
        for (const api::AssignedContainer& ctr : a.assignment.containers) {
          for (const api::AssignedDevice& d : ctr.devices) {
            h.granted = h.granted || d.id == c->device;
          }
        }
      }
    }
    c->holders.push_back(std::move(h));
  }
}

namespace {

constexpr size_t kMaxPodText = 100;

// At most kMaxPodText bytes, cut before a UTF-8 continuation byte.
std::string Shorten(const std::string& s) {
  if (s.size() <= kMaxPodText) return s;
  size_t n = kMaxPodText - 3;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "...";
}

// "PID 4242 (python3) of pod team-a/nb-0, which has no grant on it: 8 GiB".
std::string DescribeHolder(const ForeignHolder& h) {
  std::ostringstream out;
  out << "PID " << h.pid;
  if (h.visible) {
    out << " (" << h.command << ")";
    if (h.pod_uid.empty()) {
      out << ", not in a pod";
    } else if (h.pod.empty()) {
      out << " of a pod that ended or left this node (uid " << h.pod_uid << "), left over";
    } else if (h.granted) {
      out << " of pod " << Shorten(h.pod) << ", which shares it beyond its grant";
    } else {
      out << " of pod " << Shorten(h.pod) << ", which has no grant on it";
    }
  } else {
    out << " (not found in the host's /proc)";
  }
  out << ": " << (h.used_mib < 0 ? std::string("memory not reported") : Gib(h.used_mib));
  return out.str();
}

// How a vendor's devices are looked at and reached, for the texts: its node
// tool, how a pod without a grant reaches a device (the runtime hook's
// variable, or the device nodes where the vendor's selector is in-process
// only), and the resources a pod asks for one with.
struct VendorWords {
  std::string tool;      // "nvidia-smi"
  std::string reaches;   // "sets NVIDIA_VISIBLE_DEVICES itself (...)"
  std::string reaching;  // "setting NVIDIA_VISIBLE_DEVICES itself"
  std::string request;   // "nvidia.com/gpu, or ..."
  bool soft_enforcement = false;
};

VendorWords WordsFor(core::Vendor v, const std::string& model) {
  const vendors::VendorTraits& t = vendors::TraitsFor(v);
  VendorWords w;
  w.tool = t.tool.empty() ? std::string("the vendor's tool") : t.tool;
  if (!t.visible_env.empty() &&
      t.visible_env.front().kind != vendors::VisibleIdKind::kContainerOrdinal) {
    const std::string& env = t.visible_env.front().name;
    w.reaches = "sets " + env + " itself";
    if (v == core::Vendor::kNvidia) w.reaches += " (" + env + "=all reaches every GPU)";
    w.reaching = "setting " + env + " itself";
  } else {
    w.reaches = "runs privileged or mounts the device nodes itself";
    w.reaching = "running privileged or mounting the device nodes itself";
  }
  w.request = std::string(api::DeviceResource(v, model));
  if (w.request.empty()) w.request = "the vendor's device resource";
  if (v == core::Vendor::kNvidia) {
    w.request += ", or nvidia.com/gpumem and nvidia.com/gpucores for a share";
  }
  w.soft_enforcement = t.soft_enforcement;
  return w;
}

// What to do about the holders named, one sentence per kind found.
std::string AdviseOnHolders(const std::vector<ForeignHolder>& holders, const VendorWords& w) {
  std::set<std::string> kinds;
  for (const ForeignHolder& h : holders) kinds.insert(HolderKind(h));
  const bool no_grant = kinds.contains("pod_without_grant");
  const bool beyond = kinds.contains("pod_beyond_grant");
  const bool left_over = kinds.contains("left_over");
  const bool host = kinds.contains("host");
  const bool unseen = kinds.contains("unknown");
  std::string out;
  if (no_grant) {
    out += " A pod without a grant on the device reaches it when it " + w.reaches +
           ": give it a device request, or delete it.";
  }
  if (beyond) {
    out += w.soft_enforcement
               ? " A pod sharing the device uses more than its grant: check that the enforcement "
                 "library is loaded in it (docs/enforcement.md)."
               : " A pod sharing the device uses more than its grant: check that it is not " +
                     w.reaching + ".";
  }
  if (left_over) out += " A process outlived its pod: stop it on the node.";
  if (host) out += " A host process: stop it, or keep it off accelerator nodes.";
  if (unseen) {
    out +=
        " For a PID not found (the plugin runs without --host-proc, or it exited), list "
        "the device's processes with " +
        w.tool + " on the node.";
  }
  return out;
}

}  // namespace

std::string HolderKind(const ForeignHolder& h) {
  if (!h.visible) return "unknown";
  if (h.pod_uid.empty()) return "host";
  if (h.pod.empty()) return "left_over";
  return h.granted ? "pod_beyond_grant" : "pod_without_grant";
}

std::vector<UngrantedUse> UngrantedUses::Observe(
    const std::vector<core::NodeInventory>& inventories,
    const std::map<std::string, std::vector<vendors::ProcessMemory>>& holders,
    const std::function<ProcessOwner(int64_t pid)>& owner_of,
    const std::function<std::string(const std::string& uid)>& pod_of,
    const std::vector<PodAssignment>& assignments) {
  std::vector<UngrantedUse> fresh;
  std::set<std::string> now;
  for (const core::NodeInventory& inv : inventories) {
    for (const core::Device& d : inv.devices) {
      const auto it = holders.find(d.id);
      if (it == holders.end() || it->second.empty()) continue;
      ForeignChange c;
      c.device = d.id;
      NameHolders(it->second, owner_of, pod_of, assignments, it->second.size(), &c);
      for (const ForeignHolder& h : c.holders) {  // largest first
        if (HolderKind(h) != "pod_without_grant") continue;
        const std::string key = h.pod_uid + "/" + d.id;
        if (!now.insert(key).second) continue;  // a smaller process of the same pod
        if (!seen_.contains(key)) fresh.push_back({d.id, inv.vendor, d.model, h});
      }
    }
  }
  seen_ = std::move(now);
  return fresh;
}

std::string DescribeUngrantedUse(const UngrantedUse& u, const std::string& node) {
  const ForeignHolder& h = u.holder;
  const VendorWords w = WordsFor(u.vendor, u.model);
  std::ostringstream out;
  out << "process " << h.pid << " (" << h.command << ") of this pod holds "
      << (h.used_mib < 0 ? std::string("memory") : Gib(h.used_mib)) << " on device " << u.device
      << " (" << core::VendorName(u.vendor) << ") of node " << node
      << ", which the scheduler did not grant it: the device may be given whole to another pod, "
      << "and this pod's memory on it is counted against nobody's quota. Ask for the device in "
      << "the pod's resources (" << w.request << "), or stop the pod from " << w.reaching;
  return out.str();
}

std::string DescribeForeignChange(const ForeignChange& c) {
  const VendorWords w = WordsFor(c.vendor, c.model);
  std::ostringstream out;
  const std::string vendor(core::VendorName(c.vendor));
  if (c.after_mib == 0) {
    out << "device " << c.device << " (" << vendor << "): the memory in use that no grant "
        << "accounted for is freed (" << Gib(c.used_mib) << " in use, " << Gib(c.granted_mib)
        << " granted); it takes whole-device pods again";
    return out.str();
  }
  out << "device " << c.device << " (" << vendor << "): " << Gib(c.after_mib)
      << " of its memory is in use and no grant on this node accounts for it (" << Gib(c.used_mib)
      << " in use, " << Gib(c.granted_mib) << " granted to " << c.shares
      << " container(s) sharing it).";
  if (!c.holders.empty()) {
    out << " Held by ";
    for (size_t i = 0; i < c.holders.size(); ++i) {
      out << (i > 0 ? "; " : "") << DescribeHolder(c.holders[i]);
    }
    if (c.more_holders > 0) out << "; and " << c.more_holders << " more process(es)";
    out << ".";
  }
  out << " Until it is freed the device takes no whole-device pod, "
      << "and shares only in the " << Gib(std::max<int64_t>(0, c.device_mib - c.after_mib))
      << " beside it.";
  if (!c.holders.empty()) {
    out << AdviseOnHolders(c.holders, w);
    return out.str();
  }
  out << " List the device's processes with " << w.tool << " on the node: a process left from "
      << "a container that ended, a host process, or a pod that asks for no device and "
      << w.reaches;
  return out.str();
}

}  // namespace accelpool::plugin
