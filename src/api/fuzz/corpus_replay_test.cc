// Runs every fuzz entry point over the seed corpus, so the normal test suite
// exercises the same paths the fuzzers start from.
#include "common/corpus_replay.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "api/fuzz/fuzz_entry.h"

namespace accelpool::api::fuzz {
namespace {

using EntryFn = int (*)(const uint8_t*, size_t);

// Prefixes every 7 bytes: truncated documents must be rejected cleanly.
accelpool::testing::ReplayedSeeds Replay(const std::string& sub, EntryFn fn) {
  return accelpool::testing::ReplayCorpus(std::filesystem::path(ACCELPOOL_FUZZ_CORPUS_DIR) / sub,
                                          fn, 7);
}

TEST(CorpusReplayTest, EveryCodecOverItsSeeds) {
  struct Case {
    std::string dir;
    EntryFn fn;
    int want_files, want_accepted;
  };
  const Case cases[] = {
      {"inventory", &FuzzInventory, 9, 5},
      {"assignment", &FuzzAssignment, 5, 2},
      {"pod_request", &FuzzPodRequest, 10, 6},
  };
  for (const Case& c : cases) {
    const accelpool::testing::ReplayedSeeds s = Replay(c.dir, c.fn);
    EXPECT_EQ(s.files, c.want_files) << c.dir;
    EXPECT_EQ(s.accepted, c.want_accepted) << c.dir;
    EXPECT_EQ(s.prefixes_accepted, 0) << c.dir << ": a truncated document was accepted";
  }
}

TEST(CorpusReplayTest, GarbageIsRejected) {
  const std::string inputs[] = {
      "", "{", "null", "[]", "\xff\xfe", "{\"version\":1e400}", std::string(2000, '[')};
  for (const std::string& in : inputs) {
    const auto* d = reinterpret_cast<const uint8_t*>(in.data());
    EXPECT_EQ(FuzzInventory(d, in.size()), 0);
    EXPECT_EQ(FuzzAssignment(d, in.size()), 0);
    EXPECT_EQ(FuzzPodRequest(d, in.size()), 0);
  }
}

}  // namespace
}  // namespace accelpool::api::fuzz
