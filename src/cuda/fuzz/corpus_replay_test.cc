// Runs the shim's fuzz entry points over their seed corpus, and every prefix
// of each seed, so the plain test suite walks the paths the fuzzers start
// from (scripts/fuzz.sh runs the fuzzers themselves).
#include "common/corpus_replay.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cuda/fuzz/fuzz_entry.h"

namespace accelpool::cuda::fuzz {
namespace {

using EntryFn = int (*)(const uint8_t*, size_t);

accelpool::testing::ReplayedSeeds Replay(const std::string& sub, EntryFn fn) {
  return accelpool::testing::ReplayCorpus(
      std::filesystem::path(ACCELPOOL_CUDA_FUZZ_CORPUS_DIR) / sub, fn);
}

TEST(ShimCorpusReplayTest, EnvironmentsAreParsedWithOneWarningPerBadVariable) {
  accelpool::testing::ReplayedSeeds s = Replay("shim_env", &FuzzShimEnv);
  EXPECT_EQ(s.files, 6);
  EXPECT_EQ(s.accepted, 5) << "every seed but malformed.env parses without a warning";
}

TEST(ShimCorpusReplayTest, ProcStatLinesAreParsedFromTheLastParenthesis) {
  accelpool::testing::ReplayedSeeds s = Replay("proc_stat", &FuzzProcStat);
  EXPECT_EQ(s.files, 4);
  EXPECT_EQ(s.accepted, 3) << "every seed but the truncated line";
}

}  // namespace
}  // namespace accelpool::cuda::fuzz
