#include "core/profiles.h"

#include <algorithm>

namespace accelpool::core {

namespace {

// Pairwise link levels of a profile, by the relation between two devices.
// The first relation that holds decides; 0 means "unknown, fall back to NUMA".
struct LinkLevels {
  int32_t same_module = 0;  // dies of one module (Ascend SIO, board pairs)
  int32_t same_group = 0;   // one ring / wing / link zone
  int32_t mirrored = 0;     // (i, i + group size): Kunlunxin cross-wing links
  int32_t same_numa = 0;
  int32_t other = 0;
};

// One platform of VENDORS.md section 11, as data.
struct ProfileRow {
  ProfileInfo info;
  int32_t default_shares;
  int32_t group_size;  // 0: no groups
  GroupRule group_rule;
  SpanRule span_rule;
  int32_t module_size;  // 0: no modules
  ModuleRule module_rule;
  std::vector<int32_t> valid_counts;
  std::vector<int32_t> numa;  // default NUMA per device, repeated if shorter
  LinkLevels links;
  SliceRule slices;
  GroupFit group_fit;  // which group (or module) a request inside one takes
  // A node holds any number of modules (cards); info.devices is the size of
  // the node MakeProfileNode builds.
  bool any_module_count = false;
  ModuleSpan module_span = ModuleSpan::kWholeModules;  // a request larger than a module
};

std::vector<int32_t> Range(int32_t from, int32_t to) {
  std::vector<int32_t> v;
  for (int32_t i = from; i <= to; ++i) v.push_back(i);
  return v;
}

// The table is laid out by hand, a few fields a line.
// clang-format off
const std::vector<ProfileRow>& Rows() {
  static const std::vector<ProfileRow>* const kRows = [] {
    auto* rows = new std::vector<ProfileRow>();
    // NVIDIA HGX 8-GPU with NVSwitch: every pair has equal NVLink bandwidth;
    // PCIe root / NUMA locality still matters (prefer one NUMA half).
    rows->push_back({{"nvidia-hgx-8", Vendor::kNvidia, "H200", 8, 143771, 132,
                      "HGX NVSwitch: any subset; prefer one NUMA half (VENDORS 11, inferred)"},
                     10, 4, GroupRule::kPrefer, SpanRule::kAny, 0, ModuleRule::kNone, {},
                     {0, 0, 0, 0, 1, 1, 1, 1}, {0, 0, 0, 1010, 1000}, {},
                     GroupFit::kEvenRemainder});
    // PCIe cards with NVLink bridges on pairs (0,1) (2,3) ...: bridged pairs first.
    rows->push_back({{"nvidia-pcie-8", Vendor::kNvidia, "L40S", 8, 46068, 142,
                      "PCIe + NVLink bridge pairs: keep bridged pairs, then P2P level (HAMi links)"},
                     10, 4, GroupRule::kPrefer, SpanRule::kAny, 2, ModuleRule::kPreferTogether, {},
                     {0, 0, 0, 0, 1, 1, 1, 1}, {160, 0, 0, 40, 10}, {},
                     GroupFit::kEvenRemainder});
    // Ascend slices are vNPU templates, whose AI cores are the same share of
    // the chip as their memory: compute follows memory.
    // Ascend 910A x8: two HCCS rings, 1/2/4 inside one ring, 8 whole node.
    rows->push_back({{"ascend-910a-x8", Vendor::kAscend, "Ascend910A", 8, 32768, 32,
                      "910A rings {0-3} {4-7}; counts 1,2,4,8; small requests in one ring (doc)"},
                     1, 4, GroupRule::kRequired, SpanRule::kAny, 0, ModuleRule::kNone, {1, 2, 4, 8},
                     {0, 0, 0, 0, 1, 1, 1, 1}, {0, 100, 0, 0, 1},
                     {1, {2184, 4369, 8738, 17476}, false, 0, true, true},
                     GroupFit::kEvenRemainder});
    rows->push_back({{"ascend-910a-x4", Vendor::kAscend, "Ascend910A", 4, 32768, 32,
                      "910A half config: one ring; counts 1,2,4 (code)"},
                     1, 4, GroupRule::kRequired, SpanRule::kAny, 0, ModuleRule::kNone, {1, 2, 4},
                     {0}, {0, 100, 0, 0, 1}, {1, {2184, 4369, 8738, 17476}, false, 0, true, true},
                     GroupFit::kEvenRemainder});
    // 910B Atlas 800T A2: full HCCS mesh; any subset. NUMA from the documented
    // 910B2 sample (6,0,6,0,4,2,4,2): never derived from the index.
    rows->push_back({{"ascend-910b-x8", Vendor::kAscend, "Ascend910B3", 8, 65536, 20,
                      "910B x8 full HCCS mesh: any count 1-8 (doc)"},
                     1, 0, GroupRule::kNone, SpanRule::kAny, 0, ModuleRule::kNone, Range(1, 8),
                     {6, 0, 6, 0, 4, 2, 4, 2}, {0, 0, 0, 110, 100},
                     {1, {16384, 32768}, false, 0, true, true},
                     GroupFit::kEvenRemainder});
    // 910B Box16: rings {0-7} {8-15}; <=8 in one ring; 10/12/14 as mirrored pairs;
    // <=8 takes the ring with the fewest free NPUs that fits (ascend910b/base.go).
    {
      std::vector<int32_t> counts = Range(1, 8);
      for (int32_t c : {10, 12, 14, 16}) counts.push_back(c);
      rows->push_back({{"ascend-910b-x16", Vendor::kAscend, "Ascend910B4", 16, 32768, 20,
                        "910B Box16 rings of 8; 10/12/14 as pairs (i, i+8); 16 whole (doc+code)"},
                       1, 8, GroupRule::kRequired, SpanRule::kEvenMirrored, 0, ModuleRule::kNone,
                       counts, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                       {0, 100, 50, 0, 1}, {1, {8192, 16384}, false, 0, true, true},
                       GroupFit::kFewestFree});
    }
    // 910C / A3: 8 HiAM modules of 2 dies; even counts take whole modules.
    {
      std::vector<int32_t> counts = {1};
      for (int32_t c = 2; c <= 16; c += 2) counts.push_back(c);
      rows->push_back({{"ascend-910c-x16", Vendor::kAscend, "Ascend910C", 16, 65536, 24,
                        "910C dies 2k,2k+1 form a module; even counts take whole modules (doc)"},
                       1, 0, GroupRule::kNone, SpanRule::kAny, 2, ModuleRule::kWholeForEven, counts,
                       {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, {200, 0, 0, 100, 100},
                       {1, {16384, 32768}, false, 0, true, true},
                       GroupFit::kEvenRemainder});
    }
    // 310P Duo: Atlas 300I Duo cards of 2 chips, any number of cards a node;
    // a request of <= 2 stays on one card, 1 -> a card with 1 free, then 2
    // (MindCluster card310px2/task.go); more than 2 take whole cards, an odd
    // remainder a card with 1 free (chip310px2/frame.go, distributed=true).
    rows->push_back({{"ascend-310p-duo", Vendor::kAscend, "Ascend310P3", 8, 24576, 8,
                      "310P Duo: <=2 chips on one card; odd remainder to a half-used card (doc)"},
                     1, 0, GroupRule::kNone, SpanRule::kAny, 2, ModuleRule::kStayInside, {},
                     {0, 0, 0, 0, 1, 1, 1, 1}, {100, 0, 0, 10, 1},
                     {1, {3072, 6144, 12288}, false, 0, true, true},
                     GroupFit::kEvenRemainder, true, ModuleSpan::kWholeModules});
    // Ascend 310, Atlas 300I cards of 4 chips, any number of cards a node
    // (MindCluster allows 64 chips): <= 4 on one card, the card by free count
    // 1 -> 1,3,2,4; 2 -> 2,3,4; 3 -> 3,4 (card310x4/task.go); more than 4 take
    // the chips of the cards with the fewest free first (chip310x4/frame.go).
    rows->push_back({{"ascend-310-cards", Vendor::kAscend, "Ascend310", 16, 8192, 2,
                      "310 Atlas 300I cards of 4: <=4 on one card, best fit 1,3,2,4 (doc+code)"},
                     1, 0, GroupRule::kNone, SpanRule::kAny, 4, ModuleRule::kStayInside, {},
                     {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, {100, 0, 0, 10, 1},
                     {1, {}, false, 0, false, true},
                     GroupFit::kEvenRemainderForOdd, true, ModuleSpan::kFewestFreeFirst});
    // Kunlunxin P800: wings {0-3} {4-7} (= NUMA); 1/2/4 must not span NUMA (doc).
    // Wing order by free count: 1 -> 1,3,2,4; 2 -> 2,3,4; 4 -> 4 (HAMi kunlun/topo.go).
    rows->push_back({{"kunlunxin-p800-x8", Vendor::kKunlunxin, "P800", 8, 98304, 0,
                      "P800 wings {0-3} {4-7}; counts 1,2,4,8; small requests in one wing (doc)"},
                     4, 4, GroupRule::kRequired, SpanRule::kAny, 0, ModuleRule::kNone, {1, 2, 4, 8},
                     {0, 0, 0, 0, 1, 1, 1, 1}, {0, 100, 50, 0, 0},
                     {1, {24576, 49152}, true, 32, true, false},
                     GroupFit::kEvenRemainderForOdd});
    // MetaX C500: MetaXLink zones {0-3} {4-7}; staying inside one is preferred.
    rows->push_back({{"metax-c500-x8", Vendor::kMetax, "C500", 8, 65536, 104,
                      "C500 MetaXLink zones {0-3} {4-7}: keep within one zone (doc+sample)"},
                     10, 4, GroupRule::kPrefer, SpanRule::kAny, 0, ModuleRule::kNone, {},
                     {0, 0, 0, 0, 1, 1, 1, 1}, {0, 100, 0, 0, 10}, {1, {}, false, 0, false, true},
                     GroupFit::kEvenRemainder});
    // Moore Threads S4000: no documented rule; NUMA halves; 512 MiB steps.
    rows->push_back({{"mthreads-s4000-x8", Vendor::kMthreads, "MTT S4000", 8, 49152, 128,
                      "S4000: no documented rule, NUMA halves preferred; 512 MiB slices (unsure)"},
                     16, 4, GroupRule::kPrefer, SpanRule::kAny, 0, ModuleRule::kNone, {},
                     {0, 0, 0, 0, 1, 1, 1, 1}, {}, {512, {}, false, 0, false, true},
                     GroupFit::kEvenRemainder});
    // Cambricon MLU370-X8: 2 chips per board kept together; ring counts 1/2/4/8.
    rows->push_back({{"cambricon-mlu370-x8", Vendor::kCambricon, "MLU370-X8", 8, 24576, 0,
                      "MLU370-X8 boards of 2 chips kept together; ring counts 1,2,4,8 (doc+code)"},
                     10, 4, GroupRule::kPrefer, SpanRule::kAny, 2, ModuleRule::kPreferTogether,
                     {1, 2, 4, 8}, {0, 0, 0, 0, 1, 1, 1, 1}, {200, 100, 0, 0, 10},
                     {256, {}, false, 0, false, true},
                     GroupFit::kEvenRemainder});
    // T-Head PPU: ICN all-to-all; prefer one NUMA node (groups of 4: 4,2,6,0).
    rows->push_back({{"thead-ppu-x16", Vendor::kThead, "PPU-ZW810E", 16, 98304, 0,
                      "PPU ICN all-to-all; prefer the same NUMA node (sample, unsure)"},
                     1, 4, GroupRule::kPrefer, SpanRule::kAny, 0, ModuleRule::kNone, {},
                     {4, 4, 4, 4, 2, 2, 2, 2, 6, 6, 6, 6, 0, 0, 0, 0}, {0, 0, 0, 110, 100}, {},
                     GroupFit::kEvenRemainder});
    // Hygon K100: no rule found (PCIe, all NUMA 0 in the sample).
    rows->push_back({{"hygon-k100-x8", Vendor::kHygon, "K100-AI", 8, 65536, 120,
                      "K100: no documented rule; NUMA default (unsure)"},
                     10, 0, GroupRule::kNone, SpanRule::kAny, 0, ModuleRule::kNone, {}, {0}, {},
                     {1, {}, false, 0, false, true},
                     GroupFit::kEvenRemainder});
    return rows;
  }();
  return *kRows;
}
// clang-format on

const ProfileRow* FindRow(std::string_view name) {
  for (const auto& r : Rows()) {
    if (r.info.name == name) return &r;
  }
  return nullptr;
}

}  // namespace

GroupFit GroupFitOf(std::string_view kind) {
  const ProfileRow* row = FindRow(kind);
  return row == nullptr ? GroupFit::kEvenRemainder : row->group_fit;
}

ModuleSpan ModuleSpanOf(std::string_view kind) {
  const ProfileRow* row = FindRow(kind);
  return row == nullptr ? ModuleSpan::kWholeModules : row->module_span;
}

const std::vector<ProfileInfo>& Profiles() {
  static const std::vector<ProfileInfo>* const kInfos = [] {
    auto* v = new std::vector<ProfileInfo>();
    for (const auto& r : Rows()) v->push_back(r.info);
    return v;
  }();
  return *kInfos;
}

Status ApplyProfile(std::string_view profile, NodeInventory* inv,
                    std::vector<std::vector<int32_t>> modules) {
  const ProfileRow* row = FindRow(profile);
  if (row == nullptr) {
    std::string names;
    for (const auto& r : Rows()) names += (names.empty() ? "" : ", ") + r.info.name;
    return NotFoundError("unknown topology profile \"" + std::string(profile) +
                         "\"; known profiles: " + names);
  }
  const int32_t n = static_cast<int32_t>(inv->devices.size());
  const int32_t msize = row->module_size;
  if (msize == 0) modules.clear();
  if (row->any_module_count) {
    if (n == 0 || (modules.empty() && msize > 0 && n % msize != 0)) {
      return InvalidArgumentError("profile " + row->info.name + " needs whole modules of " +
                                  std::to_string(msize) + " devices, node " + inv->node + " has " +
                                  std::to_string(n));
    }
  } else if (n != row->info.devices) {
    return InvalidArgumentError("profile " + row->info.name + " needs " +
                                std::to_string(row->info.devices) + " devices, node " + inv->node +
                                " has " + std::to_string(n));
  }
  if (msize > 0 && modules.empty()) {
    for (int32_t m = 0; m < n; m += msize) modules.push_back(Range(m, std::min(n, m + msize) - 1));
  }
  // Each device's module, checked before *inv changes. Modules taken whole
  // (910C die pairs, 310P Duo cards) are of exactly the profile's size.
  const bool whole = row->module_rule == ModuleRule::kWholeForEven ||
                     (row->module_rule == ModuleRule::kStayInside &&
                      row->module_span == ModuleSpan::kWholeModules);
  std::vector<int32_t> module_of(static_cast<size_t>(n), -1);
  for (size_t m = 0; m < modules.size(); ++m) {
    const size_t size = modules[m].size();
    if (size == 0 || size > static_cast<size_t>(msize) ||
        (whole && size != static_cast<size_t>(msize))) {
      return InvalidArgumentError("profile " + row->info.name + " takes modules of " +
                                  (whole ? "" : "up to ") + std::to_string(msize) +
                                  " devices, node " + inv->node + " has one of " +
                                  std::to_string(size));
    }
    for (int32_t d : modules[m]) {
      if (d < 0 || d >= n || module_of[static_cast<size_t>(d)] >= 0) {
        return InvalidArgumentError("node " + inv->node + ": device " + std::to_string(d) +
                                    " is out of range or in two modules");
      }
      module_of[static_cast<size_t>(d)] = static_cast<int32_t>(m);
    }
  }
  for (int32_t d = 0; d < n && !modules.empty(); ++d) {
    if (module_of[static_cast<size_t>(d)] < 0) {
      return InvalidArgumentError("node " + inv->node + ": device " + std::to_string(d) +
                                  " is in no module");
    }
  }
  Topology t;
  t.kind = row->info.name;
  t.valid_counts = row->valid_counts;
  t.group_rule = row->group_rule;
  t.span_rule = row->span_rule;
  t.module_rule = row->module_rule;
  t.slices = row->slices;
  t.super_node = inv->topology.super_node;
  t.rack = inv->topology.rack;
  t.block = inv->topology.block;
  if (row->group_size > 0) {
    for (int32_t g = 0; g < n; g += row->group_size) {
      t.groups.push_back(Range(g, std::min(n, g + row->group_size) - 1));
    }
  }
  for (size_t i = 0; i < module_of.size(); ++i) inv->devices[i].module = module_of[i];
  t.modules = std::move(modules);
  for (int32_t i = 0; i < n; ++i) {
    Device& d = inv->devices[static_cast<size_t>(i)];
    if (d.numa < 0 && !row->numa.empty()) d.numa = row->numa[static_cast<size_t>(i) % row->numa.size()];
  }
  const LinkLevels& l = row->links;
  const bool any_link = l.same_module || l.same_group || l.mirrored || l.same_numa || l.other;
  if (any_link) {
    t.links.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
    const int32_t gs = row->group_size;
    for (int32_t a = 0; a < n; ++a) {
      for (int32_t b = 0; b < n; ++b) {
        if (a == b) continue;
        const Device& da = inv->devices[static_cast<size_t>(a)];
        const Device& db = inv->devices[static_cast<size_t>(b)];
        int32_t v = l.other;
        if (l.same_module && da.module >= 0 && da.module == db.module) {
          v = l.same_module;
        } else if (l.same_group && gs > 0 && a / gs == b / gs) {
          v = l.same_group;
        } else if (l.mirrored && gs > 0 && (a - b == gs || b - a == gs)) {
          v = l.mirrored;
        } else if (l.same_numa && da.numa >= 0 && da.numa == db.numa) {
          v = l.same_numa;
        }
        t.links[static_cast<size_t>(a) * static_cast<size_t>(n) + static_cast<size_t>(b)] = v;
      }
    }
  }
  inv->topology = std::move(t);
  if (row->group_size == 0 && row->group_rule == GroupRule::kNone && !any_link) {
    ApplyNumaDefault(inv);
  }
  return Status::Ok();
}

StatusOr<NodeInventory> MakeProfileNode(std::string_view profile, std::string_view node) {
  const ProfileRow* row = FindRow(profile);
  if (row == nullptr) return NotFoundError("unknown topology profile \"" + std::string(profile) + "\"");
  NodeInventory inv;
  inv.node = std::string(node);
  inv.vendor = row->info.vendor;
  for (int32_t i = 0; i < row->info.devices; ++i) {
    Device d;
    d.id = std::string(node) + "-" + std::to_string(i);
    d.index = i;
    d.vendor = row->info.vendor;
    d.model = row->info.model;
    d.memory_mib = row->info.memory_mib;
    d.compute_units = row->info.compute_units;
    d.max_shares = row->default_shares;
    inv.devices.push_back(std::move(d));
  }
  ACCELPOOL_RETURN_IF_ERROR(ApplyProfile(profile, &inv));
  return inv;
}

void ApplyNumaDefault(NodeInventory* inv) {
  std::vector<int32_t> numas;
  for (const auto& d : inv->devices) {
    if (d.numa >= 0 && std::find(numas.begin(), numas.end(), d.numa) == numas.end()) {
      numas.push_back(d.numa);
    }
  }
  inv->topology.groups.clear();
  if (numas.size() < 2) return;
  std::sort(numas.begin(), numas.end());
  for (int32_t numa : numas) {
    std::vector<int32_t> g;
    for (const auto& d : inv->devices) {
      if (d.numa == numa) g.push_back(d.index);
    }
    inv->topology.groups.push_back(std::move(g));
  }
  if (inv->topology.group_rule == GroupRule::kNone) inv->topology.group_rule = GroupRule::kPrefer;
}

}  // namespace accelpool::core
