// Runs the shim's fuzz entry points over their seed corpus, and every prefix
// of each seed, so the plain test suite walks the paths the fuzzers start
// from (scripts/fuzz.sh runs the fuzzers themselves).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cuda/fuzz/fuzz_entry.h"

namespace accelpool::cuda::fuzz {
namespace {

using EntryFn = int (*)(const uint8_t*, size_t);

struct Seeds {
  int files = 0;
  int accepted = 0;
};

Seeds Replay(const std::string& sub, EntryFn fn) {
  Seeds s;
  const std::filesystem::path dir = std::filesystem::path(ACCELPOOL_CUDA_FUZZ_CORPUS_DIR) / sub;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    ++s.files;
    s.accepted += fn(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    for (size_t cut = 0; cut < data.size(); ++cut) {
      fn(reinterpret_cast<const uint8_t*>(data.data()), cut);
    }
  }
  return s;
}

TEST(ShimCorpusReplayTest, EnvironmentsAreParsedWithOneWarningPerBadVariable) {
  Seeds s = Replay("shim_env", &FuzzShimEnv);
  EXPECT_EQ(s.files, 5);
  EXPECT_EQ(s.accepted, 4) << "every seed but malformed.env parses without a warning";
}

TEST(ShimCorpusReplayTest, ProcStatLinesAreParsedFromTheLastParenthesis) {
  Seeds s = Replay("proc_stat", &FuzzProcStat);
  EXPECT_EQ(s.files, 4);
  EXPECT_EQ(s.accepted, 3) << "every seed but the truncated line";
}

}  // namespace
}  // namespace accelpool::cuda::fuzz
