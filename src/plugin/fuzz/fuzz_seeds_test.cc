// Replays the pod-side seeds through the fuzz entry (which aborts on a broken
// protocol answer or a leftover booking), checks how many containers each
// whole seed gets allocated, and runs a short deterministic mutation of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/corpus_replay.h"
#include "plugin/fuzz/fuzz_entry.h"

namespace accelpool::plugin::fuzz {
namespace {

const std::filesystem::path kSeeds = std::filesystem::path(ACCELPOOL_PLUGIN_SEEDS) / "node_pods";

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Feed(const std::string& s) {
  return FuzzNodePods(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(NodePodsSeedsTest, EachSeedAllocatesWhatItsAssignmentsName) {
  const std::map<std::string, int> want = {
      // fractional on GPU-a, kubelet's retry of it, whole GPU-b; an id of
      // nobody with no pending container left is refused.
      {"fractional_and_whole.txt", 3},
      // the init container, the container reusing its slot, the sidecar.
      {"multi_container.txt", 3},
      // two dies in any order; one die of the two is another count.
      {"ascend_module.txt", 1},
      // malformed, foreign, misnamed, escaping and missing assignments, and
      // bad ids: nothing is allocated.
      {"bad_input.txt", 0},
      // found by the fuzzer: GetPreferredAllocation asked for fewer devices
      // than it must include (no preference is the answer).
      {"preferred_must_over_size.txt", 0},
      // signatures on: the harness-signed pod is allocated; unsigned, forged,
      // edited-after-signing and unknown-key assignments are not.
      {"signed.txt", 1},
      // two pods wait with one request: without kubelet's view an id of nobody
      // is refused; with it, job-b's init container, then its main container
      // on the init container's reused slot, then job-a (the only one left).
      {"same_shape_kubelet_view.txt", 3},
      // foreign memory on GPU-a: the holders of a pod without a grant, a pod
      // sharing it (allocated here), a static pod (through its mirror), a
      // pod that is gone with a command that is not ASCII, a host process
      // and one without /proc files are named and described.
      {"holders.txt", 1},
  };
  for (const auto& [file, n] : want) {
    EXPECT_EQ(Feed(Read(kSeeds / file)), n) << file;
  }
  const accelpool::testing::ReplayedSeeds replayed =
      accelpool::testing::ReplayCorpus(kSeeds, FuzzNodePods, 61);
  EXPECT_EQ(replayed.files, static_cast<int>(want.size()));
  EXPECT_EQ(replayed.accepted, 12);
}

TEST(NodePodsSeedsTest, ShortMutationRunKeepsTheProtocol) {
  std::vector<std::string> seeds;
  for (const auto& f : std::filesystem::directory_iterator(kSeeds)) seeds.push_back(Read(f.path()));
  ASSERT_FALSE(seeds.empty());
  std::mt19937 rng(20261202);
  int answered = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string s =
        accelpool::testing::MutateLines(seeds[rng() % seeds.size()], seeds[rng() % seeds.size()],
                                        rng, "0123456789:,\"[]{}aAgpPksh-_/");
    answered += Feed(s);  // aborts on a broken answer or a leftover booking
  }
  // The mutants still reach Allocate: a harness that refused them all at
  // the door would check nothing.
  EXPECT_GT(answered, 0);
}

}  // namespace
}  // namespace accelpool::plugin::fuzz
