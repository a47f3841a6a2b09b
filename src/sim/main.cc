// accelpool-sim: replays GPU cluster traces through accelpool's placement
// policies and the FGD paper's baselines. Flags, wiring and output only; the
// protocol lives in the library (see replay.h, timed.h, topo.h).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sstream>
#include <string>
#include <vector>

#include "sim/cli.h"
#include "sim/experiment.h"
#include "sim/output.h"
#include "sim/timed.h"
#include "sim/topo.h"

namespace {

using accelpool::Status;
using accelpool::StatusOr;
namespace sim = accelpool::sim;

// A progress bar on stderr counting `what` ("replays"), or none when
// neither --progress nor a terminal on stderr asks for one.
sim::Progress ProgressBar(bool wanted, const std::string& what) {
  if (!wanted && !isatty(STDERR_FILENO)) return sim::Progress();
  return [what](size_t done, size_t total) {
    const int width = 40;
    const int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total, what.c_str());
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

int Fail(const Status& s) {
  std::cerr << "accelpool-sim: " << s.message() << "\n";
  return s.code() == accelpool::StatusCode::kInvalidArgument ? 2 : 1;
}

int RunTrace(const sim::CliOptions& o) {
  std::vector<std::string> warnings;
  StatusOr<std::vector<sim::TraceNode>> nodes = sim::LoadNodeCsv(o.nodes, &warnings);
  if (!nodes.ok()) return Fail(nodes.status());
  std::vector<sim::TraceInput> traces;
  for (const std::string& path : o.pods) {
    StatusOr<std::vector<sim::TracePod>> pods = sim::LoadPodCsv(path, &warnings);
    if (!pods.ok()) return Fail(pods.status());
    StatusOr<sim::Cluster> cluster = sim::BuildCluster(*nodes, *pods);
    if (!cluster.ok()) return Fail(cluster.status().WithPrefix(path));
    sim::TraceInput in;
    in.name = sim::TraceNameOf(path);
    in.pods = std::move(*pods);
    in.cluster = std::move(*cluster);
    Status gpu_pods = sim::CheckTraceHasGpuPods(in);
    if (!gpu_pods.ok()) return Fail(gpu_pods.WithPrefix(path));
    spdlog::info("trace={} pods={} gpu_nodes={} gpus={} shapes={} typical_shapes={}", in.name,
                 in.pods.size(), in.cluster.nodes.size(), in.cluster.gpu_milli / 1000,
                 in.cluster.shapes.size(), in.cluster.tasks.size());
    traces.push_back(std::move(in));
  }
  for (const std::string& w : warnings) spdlog::warn("{}", w);
  if (o.timed) {
    const sim::ReplayOptions opt = sim::TimedReplayOptions(o);
    for (const sim::TraceInput& in : traces) {
      for (const std::string& policy : o.policies) {
        StatusOr<sim::TimedResult> r = sim::RunTimed(
            in, policy, opt,
            ProgressBar(o.progress, "events (" + in.name + ", " + policy + ", timed)"));
        if (!r.ok()) return Fail(r.status());
        Status st = sim::WriteTimed(in.name, policy, *r, o.out_dir, o.json);
        if (!st.ok()) return Fail(st);
      }
    }
    return 0;
  }
  sim::ExperimentSpec spec;
  spec.policies = o.policies;
  spec.modes = o.mode_list;
  spec.seeds = o.seeds;
  spec.inflation = o.inflation;
  spec.penalties = o.penalties;
  spec.cpu_pods = o.cpu_pods;
  spec.extender = o.extender;
  spec.jobs = o.jobs;
  StatusOr<std::vector<sim::Summary>> out =
      sim::RunExperiments(traces, spec, ProgressBar(o.progress, "replays"));
  if (!out.ok()) return Fail(out.status());
  if (!o.out_dir.empty()) {
    Status st = sim::WriteOutputs(*out, o.out_dir);
    if (!st.ok()) return Fail(st);
  }
  if (o.json) {
    std::cout << sim::SummariesJson(*out).dump(2) << "\n";
  } else {
    std::cout << sim::SummaryTable(*out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  StatusOr<sim::CliOptions> o = sim::ParseCli(argc, argv);
  if (!o.ok()) return Fail(o.status());
  if (o->help) {
    std::cout << sim::Usage();
    return 0;
  }
  spdlog::set_level(o->verbose ? spdlog::level::info : spdlog::level::warn);
  if (o->topology) {
    StatusOr<nlohmann::json> r = sim::RunTopologyCli(
        o->topo, ProgressBar(o->progress, "arrivals (topology, both policies)"));
    if (!r.ok()) return Fail(r.status());
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  return RunTrace(*o);
}
