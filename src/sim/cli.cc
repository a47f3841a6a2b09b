#include "sim/cli.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <sstream>

#include "sim/policies.h"

namespace accelpool::sim {
namespace {

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& v, int64_t min,
                           int64_t max) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < min || x > max) {
    return InvalidArgumentError(flag + " must be a whole number in " + std::to_string(min) +
                                ".." + std::to_string(max) + ", got \"" + v + "\"");
  }
  return x;
}

}  // namespace

std::string Usage() {
  return R"(accelpool-sim: replay a GPU cluster trace through placement policies.

Trace replay (the FGD protocol, docs/benchmarks/quality.md):
  accelpool-sim --nodes NODES.csv --pods PODS.csv[,PODS2.csv...] [flags]
    --policy LIST     comma list of: random, dotprod, clustering, packing, bestfit,
                      fgd, accelpool (default: these seven), and accelpool-extender,
                      fgd-extender: the same two with only what the extender knows
                      (--extender-workload, --extender-host)
    --mode MODE       paper | kube | stock | both (paper+kube) | all (default paper).
                      paper: highest score, ties to the lowest per-seed node rank.
                      kube: accelpool's extender ranking rule (core/rank.h:
                      NodeScore minus the idle-node penalty, 10 to the first
                      node, stable name-hash order among equal scores) x weight.
                      stock: a plain extender, NodeScore/10 rounded x weight,
                      random among equal totals.
    --seeds S         "42-51" or "42,43", each seed once (default 42-51)
    --inflation R     total GPU request as a multiple of the cluster (default 1.3)
    --weight W        refused: no figure depends on the extender's weight (kube
                      mode: the extender ranks one node 10 and kube-scheduler adds
                      no other score; stock mode: it scales every node alike)
    --extender-workload learned|builtin|trace
                      what accelpool-extender and fgd-extender score against (the
                      --extender-* flags need one of them in --policy):
                      learned (default, as shipped): the shapes of the last 2048
                      arrivals, rebuilt every --extender-refresh arrivals; builtin:
                      the built-in mix; trace: the trace's own task shapes (a
                      perfectly learned workload)
    --extender-refresh N  arrivals between rebuilds of the learned workload (default 64)
    --extender-shapes N   most frequent learned shapes scored against (default 64, as shipped)
    --extender-host on|off
                      whether they see each node's free host CPU and memory
                      (default on, as shipped; off: devices only)
    --idle-node-penalty P  kube mode (--mode kube, both or all): the extender's
                      penalty for breaking an idle node with a smaller pod
                      (default: the extender's, 0)
    --cpu-pods policy|default-scheduler|extender
                      kube and stock modes (paper mode: always policy): who
                      places a pod that asks for no GPU
                      (default policy, as the trace protocol assumes;
                      default-scheduler: kube-scheduler's default scores, as the
                      shipped chart leaves such pods unless routed; extender
                      (kube mode): the chart's webhook.hostPods profile, the
                      extender's host score ranked (kube-scheduler's own scores
                      are not modelled);
                      stock mode places such pods as policy does)
    --jobs N          replays in parallel (default 1)
    --out DIR         write summary.csv and curve-<trace>-<mode>.csv
    --json            print the summary as JSON
    --progress        draw a progress bar on stderr (default when stderr is a tty;
                      --timed and --topology too)
    --timed           replay by creation/deletion time instead (pods arrive and
                      depart); writes utilisation over time to --out. One tie
                      mode (--mode paper, kube or stock) and one seed (--seed S,
                      default 42); --inflation and --jobs do not apply
    -v                log progress details

Topology workloads (docs/benchmarks/quality.md section 2):
  accelpool-sim --topology [--super-nodes N] [--arrivals N] [--seed S] [--out DIR] [--progress]
    takes only these flags and one seed (default 42); prints JSON, and writes
    topo.json to --out. stranded_free_devices_pct is sampled every 200
    arrivals: null with fewer arrivals
)";
}

StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  for (const std::string& part : SplitComma(text)) {
    const size_t dash = part.find('-');
    if (dash == std::string::npos) {
      StatusOr<int64_t> v = ParseInt("--seeds", part, 0, INT64_MAX);
      if (!v.ok()) return v.status();
      seeds.push_back(static_cast<uint64_t>(*v));
      continue;
    }
    StatusOr<int64_t> a = ParseInt("--seeds", part.substr(0, dash), 0, INT64_MAX);
    StatusOr<int64_t> b = ParseInt("--seeds", part.substr(dash + 1), 0, INT64_MAX);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    if (*b < *a || *b - *a > 10000) {
      return InvalidArgumentError("--seeds range \"" + part + "\" must be low-high with at most "
                                  "10000 seeds");
    }
    // Counted, not compared: a range ending at INT64_MAX has no s past it.
    for (int64_t k = 0; k <= *b - *a; ++k) seeds.push_back(static_cast<uint64_t>(*a + k));
  }
  if (seeds.empty()) return InvalidArgumentError("--seeds is empty; write e.g. 42-51");
  // A seed replayed twice would count twice in every mean and sd.
  std::vector<uint64_t> sorted = seeds;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) {
    return InvalidArgumentError("--seeds \"" + text + "\" names seed " + std::to_string(*twice) +
                                " twice; name each seed once (e.g. 42-51 or 42,45)");
  }
  return seeds;
}

std::string TraceNameOf(const std::string& pod_path) {
  std::string stem = std::filesystem::path(pod_path).stem().string();
  const std::string prefix = "openb_pod_list_";
  if (stem.rfind(prefix, 0) == 0) stem = stem.substr(prefix.size());
  return stem;
}

StatusOr<CliOptions> ParseCli(int argc, char** argv) {
  CliOptions o;
  o.policies = TraceProtocolPolicies();
  o.seeds = {42, 43, 44, 45, 46, 47, 48, 49, 50, 51};
  bool seeds_given = false, inflation_given = false, jobs_given = false, penalty_given = false;
  std::string extender_flag;  // the first --extender-* flag given
  std::vector<std::string> given;  // every flag, in order
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* out) -> Status {
      if (i + 1 >= argc) return InvalidArgumentError(a + " needs a value; see --help");
      *out = argv[++i];
      return Status::Ok();
    };
    std::string v;
    given.push_back(a);
    if (extender_flag.empty() && (a == "--extender-workload" || a == "--extender-refresh" ||
                                  a == "--extender-shapes" || a == "--extender-host")) {
      extender_flag = a;
    }
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--nodes") {
      ACCELPOOL_RETURN_IF_ERROR(value(&o.nodes));
    } else if (a == "--pods") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      for (const std::string& p : SplitComma(v)) o.pods.push_back(p);
    } else if (a == "--policy") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      o.policies = SplitComma(v);
      if (o.policies.empty()) {
        return InvalidArgumentError(
            "--policy is empty; name one or more policies, e.g. "
            "--policy fgd,accelpool (see --help)");
      }
      for (size_t k = 0; k < o.policies.size(); ++k) {
        const std::string& p = o.policies[k];
        StatusOr<std::unique_ptr<SimPolicy>> check = MakeSimPolicy(p);
        if (!check.ok()) return check.status();
        if (std::find(o.policies.begin(), o.policies.begin() + static_cast<std::ptrdiff_t>(k), p) !=
            o.policies.begin() + static_cast<std::ptrdiff_t>(k)) {
          return InvalidArgumentError("--policy names " + p + " twice; name each policy once");
        }
      }
    } else if (a == "--mode") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      if (v == "paper") {
        o.mode_list = {TieMode::kPaper};
      } else if (v == "kube") {
        o.mode_list = {TieMode::kKube};
      } else if (v == "stock") {
        o.mode_list = {TieMode::kStock};
      } else if (v == "both") {
        o.mode_list = {TieMode::kPaper, TieMode::kKube};
      } else if (v == "all") {
        o.mode_list = {TieMode::kPaper, TieMode::kKube, TieMode::kStock};
      } else {
        return InvalidArgumentError("--mode must be paper, kube, stock, both or all, got \"" + v + "\"");
      }
    } else if (a == "--seeds" || a == "--seed") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      StatusOr<std::vector<uint64_t>> s = ParseSeeds(v);
      if (!s.ok()) return s.status();
      o.seeds = *s;
      o.topo.seed = o.seeds.front();
      seeds_given = true;
    } else if (a == "--inflation") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      char* end = nullptr;
      o.inflation = std::strtod(v.c_str(), &end);
      inflation_given = true;
      // Written so that NaN fails too.
      if (end == v.c_str() || *end != '\0' || !(o.inflation >= 0 && o.inflation <= 10)) {
        return InvalidArgumentError("--inflation must be a number in 0..10 (0 = off), got \"" +
                                    v + "\"");
      }
    } else if (a == "--weight") {
      return InvalidArgumentError(
          "--weight changes no figure: in kube mode the extender gives the node it ranks "
          "first 10 and every other at most 9, and kube-scheduler adds no other score; in "
          "stock mode the weight multiplies every node's score alike, so ties stay ties. "
          "Leave it out");
    } else if (a == "--extender-workload") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      if (v == "learned") {
        o.extender.workload = ExtenderWorkload::kLearned;
      } else if (v == "builtin") {
        o.extender.workload = ExtenderWorkload::kBuiltin;
      } else if (v == "trace") {
        o.extender.workload = ExtenderWorkload::kTrace;
      } else {
        return InvalidArgumentError(
            "--extender-workload must be learned, builtin or trace, got \"" + v + "\"");
      }
    } else if (a == "--extender-refresh") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      StatusOr<int64_t> r = ParseInt(a, v, 1, 1000000);
      if (!r.ok()) return r.status();
      o.extender.refresh = static_cast<int32_t>(*r);
    } else if (a == "--extender-shapes") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      StatusOr<int64_t> n = ParseInt(a, v, 1, 100000);
      if (!n.ok()) return n.status();
      o.extender.learner.max_shapes = static_cast<size_t>(*n);
    } else if (a == "--extender-host") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      if (v != "off" && v != "on") {
        return InvalidArgumentError("--extender-host must be off or on, got \"" + v + "\"");
      }
      o.extender.host = v == "on";
    } else if (a == "--idle-node-penalty") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      StatusOr<int64_t> pen = ParseInt(a, v, 0, 100);
      if (!pen.ok()) return pen.status();
      o.penalties.idle_node = static_cast<int32_t>(*pen);
      penalty_given = true;
    } else if (a == "--cpu-pods") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      if (v == "policy") {
        o.cpu_pods = CpuPods::kPolicy;
      } else if (v == "default-scheduler") {
        o.cpu_pods = CpuPods::kDefaultScheduler;
      } else if (v == "extender") {
        o.cpu_pods = CpuPods::kExtender;
      } else {
        return InvalidArgumentError(
            "--cpu-pods must be policy, default-scheduler or extender, got \"" + v + "\"");
      }
    } else if (a == "--jobs") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      StatusOr<int64_t> j = ParseInt(a, v, 1, 256);
      if (!j.ok()) return j.status();
      o.jobs = static_cast<int32_t>(*j);
      jobs_given = true;
    } else if (a == "--out") {
      ACCELPOOL_RETURN_IF_ERROR(value(&o.out_dir));
      o.topo.out_dir = o.out_dir;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--progress") {
      o.progress = true;
    } else if (a == "--timed") {
      o.timed = true;
    } else if (a == "--topology") {
      o.topology = true;
    } else if (a == "--super-nodes") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      StatusOr<int64_t> n = ParseInt(a, v, 1, 64);
      if (!n.ok()) return n.status();
      o.topo.super_nodes = static_cast<int32_t>(*n);
    } else if (a == "--arrivals") {
      ACCELPOOL_RETURN_IF_ERROR(value(&v));
      StatusOr<int64_t> n = ParseInt(a, v, 1, 10000000);
      if (!n.ok()) return n.status();
      o.topo.arrivals = static_cast<int32_t>(*n);
    } else if (a == "-v" || a == "--verbose") {
      o.verbose = true;
    } else {
      return InvalidArgumentError("unknown flag \"" + a + "\"; see --help");
    }
  }
  if (o.help) return o;
  // Each mode takes its own flags; one the other mode's would be ignored.
  const std::vector<std::string> topology_flags = {
      "--topology", "--super-nodes", "--arrivals", "--seed",   "--seeds",
      "--out",      "--progress",    "-v",         "--verbose"};
  if (o.topology) {
    for (const std::string& flag : given) {
      if (std::find(topology_flags.begin(), topology_flags.end(), flag) == topology_flags.end()) {
        return InvalidArgumentError(flag +
                                    " does not apply with --topology, which takes --super-nodes, "
                                    "--arrivals, --seed, --out and --progress: leave it out");
      }
    }
    if (seeds_given && o.seeds.size() != 1) {
      return InvalidArgumentError(
          "--topology runs one seed; --seeds with several seeds does not apply: give one, e.g. "
          "--seed 42, and run once per seed");
    }
    return o;
  }
  for (const std::string& flag : given) {
    if (flag == "--super-nodes" || flag == "--arrivals") {
      return InvalidArgumentError(
          flag + " applies with --topology only: add --topology, or leave " + flag + " out");
    }
  }
  if (o.nodes.empty() || o.pods.empty()) {
    return InvalidArgumentError("--nodes and --pods are required; see --help");
  }
  // Output is labelled, and its files named, by trace name (the file's stem):
  // two pod lists with one name would share rows and overwrite files.
  std::map<std::string, std::string> names;  // trace name -> pod list
  for (const std::string& path : o.pods) {
    const std::string name = TraceNameOf(path);
    if (name.empty()) {
      return InvalidArgumentError("--pods " + path +
                                  " gives an empty trace name (the file name without "
                                  "openb_pod_list_ and .csv); rename the file");
    }
    auto [it, inserted] = names.emplace(name, path);
    if (!inserted) {
      return InvalidArgumentError("--pods " + it->second + " and " + path +
                                  " both give the trace name \"" + name +
                                  "\" (the file name without openb_pod_list_ and .csv); "
                                  "rename one of the files");
    }
  }
  // Flags that apply only in some modes, or to some policies, are refused
  // where nothing would use them rather than ignored.
  const auto has_mode = [&o](TieMode m) {
    return std::find(o.mode_list.begin(), o.mode_list.end(), m) != o.mode_list.end();
  };
  if (o.cpu_pods == CpuPods::kDefaultScheduler && !has_mode(TieMode::kKube) &&
      !has_mode(TieMode::kStock)) {
    return InvalidArgumentError(
        "--cpu-pods default-scheduler applies in kube and stock modes (paper mode places "
        "every pod by the policy): give --mode kube, stock, both or all, or leave --cpu-pods "
        "out");
  }
  if (o.cpu_pods == CpuPods::kExtender && !has_mode(TieMode::kKube)) {
    return InvalidArgumentError(
        "--cpu-pods extender applies in kube mode only (paper and stock modes place such pods "
        "by the policy): give --mode kube, both or all, or leave --cpu-pods out");
  }
  if (penalty_given && !has_mode(TieMode::kKube)) {
    return InvalidArgumentError(
        "--idle-node-penalty applies in kube mode only (the extender's ranking rule): give "
        "--mode kube, both or all, or leave it out");
  }
  if (!extender_flag.empty()) {
    bool extender_policy = false;
    for (const std::string& p : o.policies) {
      StatusOr<std::unique_ptr<SimPolicy>> policy = MakeSimPolicy(p);
      extender_policy = extender_policy || (policy.ok() && (*policy)->ExtenderView());
    }
    if (!extender_policy) {
      return InvalidArgumentError(extender_flag +
                                  " applies to accelpool-extender and fgd-extender only: add "
                                  "one of them to --policy, or leave " +
                                  extender_flag + " out");
    }
  }
  if (o.timed) {
    if (o.mode_list.size() != 1) {
      return InvalidArgumentError(
          "--timed replays in one tie mode; --mode both and all do not apply: give --mode "
          "paper, kube or stock");
    }
    if (o.seeds.size() != 1) {
      if (seeds_given) {
        return InvalidArgumentError(
            "--timed replays one seed in time order; --seeds with several seeds does not "
            "apply: give one, e.g. --seed 42");
      }
      o.seeds = {o.seeds.front()};  // the default list's first, 42
    }
    if (inflation_given) {
      return InvalidArgumentError(
          "--timed replays the trace's own pods at their own times; --inflation does not "
          "apply: leave it out");
    }
    if (jobs_given) {
      return InvalidArgumentError(
          "--timed runs its replays one after another; --jobs does not apply: leave it out");
    }
  }
  return o;
}

ReplayOptions TimedReplayOptions(const CliOptions& o) {
  ReplayOptions opt;
  opt.seed = o.seeds.front();
  opt.mode = o.mode_list.front();
  opt.penalties = o.penalties;
  opt.cpu_pods = o.cpu_pods;
  opt.extender = o.extender;
  return opt;
}

}  // namespace accelpool::sim
