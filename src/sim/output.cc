#include "sim/output.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

namespace accelpool::sim {
namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// `unset` where a figure was not measured.
std::string Fixed(const std::optional<double>& v, int digits, const std::string& unset) {
  return v ? Fixed(*v, digits) : unset;
}

nlohmann::json JsonOf(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The table's first-failure cell: the mean when every seed failed, "-" when
// none did, else how many did ("3/10 seeds").
std::string FirstFailure(const Summary& s) {
  if (s.first_failure_mean) return Fixed(*s.first_failure_mean, 1);
  if (s.seeds_failed == 0) return "-";
  return std::to_string(s.seeds_failed) + "/" + std::to_string(s.unallocated.size()) + " seeds";
}

}  // namespace

nlohmann::json SummariesJson(const std::vector<Summary>& list) {
  nlohmann::json out = nlohmann::json::array();
  for (const Summary& s : list) {
    nlohmann::json j;
    j["trace"] = s.trace;
    j["policy"] = s.policy;
    j["mode"] = std::string(ModeName(s.mode));
    j["seeds"] = s.unallocated.size();
    j["cpu_pods"] = std::string(CpuPodsName(s.cpu_pods));
    // null outside kube mode, where no penalty applies.
    j["idle_node_penalty"] =
        s.idle_node_penalty ? nlohmann::json(*s.idle_node_penalty) : nlohmann::json(nullptr);
    nlohmann::json per_seed = nlohmann::json::array();
    for (const std::optional<double>& u : s.unallocated) per_seed.push_back(JsonOf(u));
    // null where the arrivals stopped short of 100 % (arrived_pct_end).
    j["unallocated_pct_at_100"] = {{"mean", JsonOf(s.unallocated_mean)},
                                   {"sd", JsonOf(s.unallocated_sd)},
                                   {"per_seed", std::move(per_seed)}};
    j["arrived_pct_end"] = s.arrived_pct_end;
    // null unless every seed failed: a mean over the seeds that did would
    // leave out the ones that never did.
    j["first_failure_arrived_pct"] = JsonOf(s.first_failure_mean);
    j["seeds_failed"] = s.seeds_failed;
    j["frag_pct_at_100"] = JsonOf(s.frag_mean);
    j["failed_pods"] = s.failed_pods_mean;
    j["seconds_per_replay"] = s.seconds_per_replay;
    out.push_back(std::move(j));
  }
  return out;
}

std::string SummaryTable(const std::vector<Summary>& list) {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof(line), "%-12s %-11s %-6s %16s %12s %9s %8s\n", "trace", "policy",
                "mode", "unalloc@100 (sd)", "first_fail%", "frag@100", "s/replay");
  o << line;
  double short_of_100 = -1;  // the lowest end of arrivals short of 100 %
  for (const Summary& s : list) {
    const std::string un = s.unallocated_mean ? Fixed(*s.unallocated_mean, 2) + " (" +
                                                    Fixed(s.unallocated_sd, 2, "-") + ")"
                                              : "-";
    if (!s.unallocated_mean && (short_of_100 < 0 || s.arrived_pct_end < short_of_100)) {
      short_of_100 = s.arrived_pct_end;
    }
    std::snprintf(line, sizeof(line), "%-12s %-11s %-6s %16s %12s %9s %8s\n", s.trace.c_str(),
                  s.policy.c_str(), std::string(ModeName(s.mode)).c_str(), un.c_str(),
                  FirstFailure(s).c_str(), Fixed(s.frag_mean, 2, "-").c_str(),
                  Fixed(s.seconds_per_replay, 2).c_str());
    o << line;
  }
  if (short_of_100 >= 0) {
    o << "unalloc@100 and frag@100 \"-\": the arrivals stopped short of 100 % of the cluster's "
         "GPUs (at "
      << Fixed(short_of_100, 1)
      << " %), so there is nothing to measure there; use an --inflation above 1 "
         "(the protocol's 1.3)\n";
  }
  return o.str();
}

Status WriteOutputs(const std::vector<Summary>& list, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
  {
    std::ofstream f(dir + "/summary.csv");
    if (!f) return InternalError("cannot write " + dir + "/summary.csv; check permissions");
    f << "trace,policy,mode,seeds,unallocated_pct_mean,unallocated_pct_sd,"
         "first_failure_arrived_pct,frag_pct_at_100,failed_pods,seconds_per_replay,cpu_pods,"
         "idle_node_penalty,seeds_failed\n";
    for (const Summary& s : list) {
      f << s.trace << "," << s.policy << "," << ModeName(s.mode) << "," << s.unallocated.size()
        << "," << Fixed(s.unallocated_mean, 3, "") << "," << Fixed(s.unallocated_sd, 3, "") << ","
        << Fixed(s.first_failure_mean, 2, "") << "," << Fixed(s.frag_mean, 3, "") << ","
        << Fixed(s.failed_pods_mean, 1) << "," << Fixed(s.seconds_per_replay, 3) << ","
        << CpuPodsName(s.cpu_pods) << ","
        << (s.idle_node_penalty ? std::to_string(*s.idle_node_penalty) : "") << ","
        << s.seeds_failed << "\n";
    }
  }
  // One curve file per (trace, mode): arrived % then, per policy,
  // unallocated mean, sd and fragmentation; then, per policy, the number of
  // seeds each point is the mean of (fewer past the lowest end of arrivals).
  std::map<std::pair<std::string, std::string>, std::vector<const Summary*>> groups;
  for (const Summary& s : list) groups[{s.trace, std::string(ModeName(s.mode))}].push_back(&s);
  for (const auto& [key, members] : groups) {
    const std::string path = dir + "/curve-" + key.first + "-" + key.second + ".csv";
    std::ofstream f(path);
    if (!f) return InternalError("cannot write " + path + "; check permissions");
    f << "arrived_pct";
    for (const Summary* s : members) {
      f << "," << s->policy << "_unalloc," << s->policy << "_unalloc_sd," << s->policy << "_frag";
    }
    for (const Summary* s : members) f << "," << s->policy << "_seeds";
    f << "\n";
    size_t rows = 0;
    for (const Summary* s : members) rows = std::max(rows, s->curve.size());
    for (size_t r = 0; r < rows; ++r) {
      f << Fixed(r * 0.5, 1);
      for (const Summary* s : members) {
        if (r < s->curve.size()) {
          const CurvePoint& c = s->curve[r];
          f << "," << Fixed(c.unallocated_mean, 3) << "," << Fixed(c.unallocated_sd, 3) << ","
            << Fixed(c.frag_mean, 3);
        } else {
          f << ",,,";
        }
      }
      for (const Summary* s : members) {
        f << "," << (r < s->curve.size() ? s->curve[r].seeds : 0);
      }
      f << "\n";
    }
  }
  return Status::Ok();
}

}  // namespace accelpool::sim
