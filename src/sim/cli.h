// Command-line flags of accelpool-sim, parsed into options with errors that
// say which flag was wrong and what to write instead.
//
// Thread-safety: pure functions.
#ifndef ACCELPOOL_SIM_CLI_H_
#define ACCELPOOL_SIM_CLI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/replay.h"

namespace accelpool::sim {

struct TopoOptions {
  int32_t super_nodes = 2;
  uint64_t seed = 42;
  int32_t arrivals = 4000;
  std::string out_dir;
};

struct CliOptions {
  bool help = false;
  std::string nodes;
  std::vector<std::string> pods;
  std::vector<std::string> policies;
  std::vector<TieMode> mode_list = {TieMode::kPaper};
  std::vector<uint64_t> seeds;
  double inflation = 1.3;
  core::RankPenalties penalties;  // kube mode
  CpuPods cpu_pods = CpuPods::kPolicy;  // kube and stock modes: --cpu-pods
  ExtenderInputs extender;        // --extender-workload, --extender-host
  int32_t jobs = 1;
  bool json = false;
  bool progress = false;
  bool verbose = false;
  bool timed = false;
  bool topology = false;
  TopoOptions topo;
  std::string out_dir;
};

std::string Usage();
// Also refuses what would mislabel or overwrite output (two pod lists with
// one trace name, a policy named twice, an empty --policy), flags nothing
// would use (--weight, which changes no figure; --cpu-pods default-scheduler
// without kube or stock mode; --cpu-pods extender and --idle-node-penalty
// without kube mode; --extender-* without accelpool-extender or
// fgd-extender) and, with --timed, the flags it does not honour (--mode
// both/all, several --seeds, --inflation, --jobs); --timed without --seeds
// replays seed 42. With --topology, every flag but --super-nodes,
// --arrivals, one seed, --out, --progress and -v is refused; those two
// without --topology are refused too.
StatusOr<CliOptions> ParseCli(int argc, char** argv);
// The options of a --timed replay: its one mode and seed,
// --idle-node-penalty, --cpu-pods and the --extender-* inputs.
ReplayOptions TimedReplayOptions(const CliOptions& o);
// "42-51" or "1,5,9", in the order given; kInvalidArgument for a seed named
// twice ("42,42", "42-51,50-60"), which would count twice in every mean.
StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& text);
std::string TraceNameOf(const std::string& pod_path);  // openb_pod_list_default.csv -> default

}  // namespace accelpool::sim

#endif  // ACCELPOOL_SIM_CLI_H_
