// Topology workloads (docs/benchmarks/quality.md section 2): a generated
// mixed-vendor cluster with topology (core profiles) and super-nodes, a
// seeded mix of arrivals and departures (single-card and fractional
// inference, multi-card fine-tuning, multi-node training gangs), placed by
// accelpool (core::Fit with the accelpool policy, gangs kept inside one
// super-node) and by a topology-blind policy: the same policy, node scoring
// and tie rule on an inventory stripped of its topology (groups, rings,
// modules, links, legal counts, super-node; device NUMA nodes and the
// vendor's slice templates stay), so gang members go to the best nodes of the
// whole cluster. The metrics are those of that section.
//
// Thread-safety: RunTopology is reentrant.
#ifndef ACCELPOOL_SIM_TOPO_H_
#define ACCELPOOL_SIM_TOPO_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/cli.h"
#include "sim/experiment.h"

namespace accelpool::sim {

// One arrival: a single-node pod, or a gang of `gang` pods of `count` devices
// each on distinct nodes (all or nothing), for nodes of profile `profile` (an
// index into TopoConfig::profiles).
struct TopoJob {
  double arrive = 0, leave = 0;
  size_t profile = 0;
  int32_t count = 1;
  int32_t compute = 0;  // thousandths; 0 = whole devices
  int32_t gang = 0;     // 0 = single pod
};

struct TopoConfig {
  std::vector<std::string> profiles = {"nvidia-hgx-8", "ascend-910c-x16", "ascend-910a-x8",
                                       "kunlunxin-p800-x8", "metax-c500-x8"};
  int32_t super_nodes = 2;
  int32_t nodes_per_super = 48;
  int32_t arrivals = 4000;
  uint64_t seed = 42;
  int32_t sample_every = 200;  // arrivals between samples of the stranded share
};

struct TopoMetrics {
  std::string policy;                // "accelpool" or "topology-blind"
  int64_t pods = 0;                  // single-node pods placed
  // Pods and gangs that found no room, or whose chosen node refused the
  // placement (the blind policy's overcommits: counted as violations too).
  int64_t failed = 0;
  int64_t violations = 0;            // placements that break a vendor rule
  int64_t multi_card = 0;            // multi-card single-node pods placed
  int64_t cross_group_with_room = 0;  // of those, spanning groups when one group had room
  int64_t gangs = 0;                 // gangs placed
  int64_t gangs_spread = 0;          // over more super-nodes than needed
  // Mean share of free devices that no multi-device shape of the mix can use:
  // a free device is stranded when no legal set (core's topology rules) of
  // free devices on its node, of any whole-device count above one the mix
  // asks of its profile, includes it (one die of a 910C module whose sibling
  // is held; the last free card of a 910A ring). Single-device and fractional
  // shapes are left out: every profile takes them on any free device.
  // Sampled every TopoConfig::sample_every arrivals; unset when no sample was
  // taken (fewer arrivals than that).
  std::optional<double> stranded_pct;
  double utilisation_pct = 0;  // time-weighted mean of devices in use
};

// The generated workload (cfg.arrivals arrivals) and the mix's shapes.
// `progress`, when set, is called with arrivals placed so far out of both
// policies' (2 x cfg.arrivals), at most about 1000 times and once at the end.
StatusOr<std::vector<TopoMetrics>> RunTopology(const TopoConfig& cfg,
                                               const Progress& progress = Progress());

// Both policies over the given arrivals (in arrival order); `shapes` are the
// mix's request shapes, which the stranded share tests.
StatusOr<std::vector<TopoMetrics>> RunTopologyJobs(const TopoConfig& cfg,
                                                   const std::vector<TopoJob>& jobs,
                                                   const std::vector<TopoJob>& shapes,
                                                   const Progress& progress = Progress());

// Runs both policies, writes <out>/topo.json when out is set, returns JSON
// (stranded_free_devices_pct null where unmeasured).
StatusOr<nlohmann::json> RunTopologyCli(const TopoOptions& o,
                                        const Progress& progress = Progress());

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_TOPO_H_
