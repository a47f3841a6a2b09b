// Topology workloads (docs/benchmarks/quality.md section 2): a generated
// mixed-vendor cluster with topology (core profiles) and super-nodes, a
// seeded mix of arrivals and departures (single-card and fractional
// inference, multi-card fine-tuning, multi-node training gangs), placed by
// accelpool (core::Fit with the accelpool policy, gangs kept inside one
// super-node) and by a topology-blind policy (devices chosen on an inventory
// stripped of its topology, nodes chosen at random), with the metrics there.
//
// Thread-safety: RunTopology is reentrant.
#ifndef ACCELPOOL_SIM_TOPO_H_
#define ACCELPOOL_SIM_TOPO_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/cli.h"

namespace accelpool::sim {

struct TopoConfig {
  std::vector<std::string> profiles = {"nvidia-hgx-8", "ascend-910c-x16", "ascend-910a-x8",
                                       "kunlunxin-p800-x8", "metax-c500-x8"};
  int32_t super_nodes = 2;
  int32_t nodes_per_super = 48;
  int32_t arrivals = 4000;
  uint64_t seed = 42;
};

struct TopoMetrics {
  std::string policy;                // "accelpool" or "topology-blind"
  int64_t pods = 0;                  // single-node pods placed
  int64_t failed = 0;                // pods and gangs that found no room
  int64_t violations = 0;            // placements that break a vendor rule
  int64_t multi_card = 0;            // multi-card single-node pods placed
  int64_t cross_group_with_room = 0;  // of those, spanning groups when one group had room
  int64_t gangs = 0;                 // gangs placed
  int64_t gangs_spread = 0;          // over more super-nodes than needed
  double stranded_pct = 0;  // mean share of free devices no shape of the mix can use
  double utilisation_pct = 0;  // time-weighted mean of devices in use
};

StatusOr<std::vector<TopoMetrics>> RunTopology(const TopoConfig& cfg);

// Runs both policies, writes <out>/topo.csv when out is set, returns JSON.
StatusOr<nlohmann::json> RunTopologyCli(const TopoOptions& o);

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_TOPO_H_
