#include "sim/cli.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace accelpool::sim {
namespace {

StatusOr<CliOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "accelpool-sim");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseCli(static_cast<int>(argv.size()), argv.data());
}

// A trace replay's flags after --nodes and --pods.
StatusOr<CliOptions> ParseTrace(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"--nodes", "n.csv", "--pods", "p.csv"};
  args.insert(args.end(), flags.begin(), flags.end());
  return Parse(args);
}

TEST(CliFlagsTest, DefaultsAreTheTraceProtocols) {
  StatusOr<CliOptions> o = ParseTrace({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->policies.size(), 7u);
  EXPECT_EQ(o->mode_list, (std::vector<TieMode>{TieMode::kPaper}));
  EXPECT_EQ(o->cpu_pods, CpuPods::kPolicy);
}

// A flag that nothing in the chosen modes or policies would use is refused,
// naming the flag and what it needs, rather than ignored.
TEST(CliFlagsTest, FlagsNoModeOrPolicyUsesAreRefused) {
  struct Case {
    std::vector<std::string> flags;
    std::string want;
  };
  const std::vector<Case> refused = {
      {{"--cpu-pods", "default-scheduler"},
       "--cpu-pods default-scheduler applies in kube and stock"},
      {{"--mode", "paper", "--cpu-pods", "default-scheduler"},
       "give --mode kube, stock, both or all"},
      {{"--cpu-pods", "extender"}, "--cpu-pods extender applies in kube mode only"},
      {{"--mode", "stock", "--cpu-pods", "extender"}, "--cpu-pods extender applies in kube mode"},
      {{"--idle-node-penalty", "15"}, "--idle-node-penalty applies in kube mode only"},
      {{"--mode", "stock", "--idle-node-penalty", "0"}, "give --mode kube, both or all"},
      {{"--extender-workload", "trace"}, "--extender-workload applies to accelpool-extender"},
      {{"--policy", "fgd,accelpool", "--extender-host", "off"}, "add one of them to --policy"},
      {{"--extender-refresh", "8", "--extender-shapes", "4"}, "--extender-refresh applies to"},
      {{"--mode", "kube", "--extender-shapes", "4"}, "--extender-shapes applies to"},
  };
  for (const Case& c : refused) {
    StatusOr<CliOptions> o = ParseTrace(c.flags);
    ASSERT_FALSE(o.ok()) << c.flags[0] << " " << c.flags[1];
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(c.want), std::string::npos) << o.status().message();
    // --timed refuses them alike.
    std::vector<std::string> timed = c.flags;
    timed.push_back("--timed");
    EXPECT_FALSE(ParseTrace(timed).ok()) << c.flags[0];
  }
  const std::vector<std::vector<std::string>> accepted = {
      {"--mode", "kube", "--cpu-pods", "default-scheduler"},
      {"--mode", "stock", "--cpu-pods", "default-scheduler"},
      {"--mode", "both", "--cpu-pods", "default-scheduler"},
      {"--mode", "kube", "--cpu-pods", "extender"},
      {"--mode", "all", "--cpu-pods", "extender"},
      {"--mode", "kube", "--idle-node-penalty", "15"},
      {"--mode", "both", "--idle-node-penalty", "15"},
      {"--mode", "both", "--cpu-pods", "policy"},
      {"--policy", "fgd,accelpool-extender", "--extender-workload", "trace"},
      {"--policy", "fgd-extender", "--extender-host", "off", "--extender-refresh", "8"},
  };
  for (const std::vector<std::string>& flags : accepted) {
    StatusOr<CliOptions> o = ParseTrace(flags);
    EXPECT_TRUE(o.ok()) << flags[0] << " " << flags[1] << " " << flags[2] << ": "
                        << o.status().ToString();
  }
}

// The extender's weight scales every node alike in every mode: no figure
// depends on it, so the flag is refused with the reason.
TEST(CliFlagsTest, WeightIsRefusedAsChangingNoFigure) {
  for (const char* mode : {"paper", "kube", "stock"}) {
    StatusOr<CliOptions> o = ParseTrace({"--mode", mode, "--weight", "5"});
    ASSERT_FALSE(o.ok()) << mode;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find("--weight changes no figure"), std::string::npos)
        << o.status().message();
    EXPECT_NE(o.status().message().find("Leave it out"), std::string::npos);
  }
  EXPECT_NE(Usage().find("--weight W        refused"), std::string::npos);
}

// A seed replayed twice would count twice in every mean and sd: refused,
// as a policy named twice is.
TEST(CliFlagsTest, RepeatedSeedsAreRefused) {
  for (const char* seeds : {"42,42", "42-51,50-60", "7,1-9", "3,4,3"}) {
    StatusOr<std::vector<uint64_t>> s = ParseSeeds(seeds);
    ASSERT_FALSE(s.ok()) << seeds;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("twice; name each seed once"), std::string::npos)
        << s.status().message();
    EXPECT_FALSE(ParseTrace({"--seeds", seeds}).ok()) << seeds;
  }
  StatusOr<std::vector<uint64_t>> s = ParseSeeds("42-51,50-60");
  EXPECT_NE(s.status().message().find("names seed 50 twice"), std::string::npos)
      << s.status().message();
  s = ParseSeeds("50,42-49");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->front(), 50u);  // the order given
  EXPECT_EQ(s->size(), 9u);
}

// --topology runs its own workload: the trace replay's flags, and a seed
// range, would be ignored there, so they are refused; its own flags without
// it likewise.
TEST(CliFlagsTest, TopologyRefusesTheFlagsItDoesNotUse) {
  StatusOr<CliOptions> o = Parse({"--topology", "--super-nodes", "3", "--arrivals", "100", "--seed",
                                  "7", "--out", "d", "--progress", "-v"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->topo.seed, 7u);
  EXPECT_EQ(o->topo.super_nodes, 3);
  EXPECT_EQ(o->topo.arrivals, 100);
  const std::vector<std::vector<std::string>> refused = {
      {"--nodes", "n.csv"}, {"--pods", "p.csv"}, {"--policy", "fgd"},
      {"--mode", "kube"},   {"--json"},          {"--inflation", "1"},
      {"--jobs", "2"},      {"--timed"},         {"--cpu-pods", "policy"},
  };
  for (const std::vector<std::string>& flags : refused) {
    std::vector<std::string> args = flags;
    args.push_back("--topology");
    o = Parse(args);
    ASSERT_FALSE(o.ok()) << flags[0];
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(flags[0] + " does not apply with --topology"),
              std::string::npos)
        << o.status().message();
  }
  o = Parse({"--topology", "--seeds", "1-10"});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("--topology runs one seed"), std::string::npos)
      << o.status().message();
  for (const char* flag : {"--super-nodes", "--arrivals"}) {
    o = ParseTrace({flag, "3"});
    ASSERT_FALSE(o.ok()) << flag;
    EXPECT_NE(o.status().message().find(std::string(flag) + " applies with --topology only"),
              std::string::npos)
        << o.status().message();
  }
}

}  // namespace
}  // namespace accelpool::sim
