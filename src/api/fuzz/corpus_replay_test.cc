// Runs every fuzz entry point over the seed corpus, so the normal test suite
// exercises the same paths the fuzzers start from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "api/fuzz/fuzz_entry.h"

namespace accelpool::api::fuzz {
namespace {

using EntryFn = int (*)(const uint8_t*, size_t);

struct Seeds {
  int files = 0;
  int accepted = 0;
};

Seeds Replay(const std::string& sub, EntryFn fn) {
  Seeds s;
  const std::filesystem::path dir = std::filesystem::path(ACCELPOOL_FUZZ_CORPUS_DIR) / sub;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    ++s.files;
    s.accepted += fn(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    // Every prefix too: truncated documents must be rejected cleanly, never crash.
    for (size_t cut = 0; cut < data.size(); cut += 7) {
      fn(reinterpret_cast<const uint8_t*>(data.data()), cut);
    }
  }
  return s;
}

TEST(CorpusReplayTest, EveryCodecOverItsSeeds) {
  struct Case {
    std::string dir;
    EntryFn fn;
    int want_files, want_accepted;
  };
  const Case cases[] = {
      {"inventory", &FuzzInventory, 5, 2},
      {"assignment", &FuzzAssignment, 5, 2},
      {"pod_request", &FuzzPodRequest, 4, 2},
  };
  for (const Case& c : cases) {
    const Seeds s = Replay(c.dir, c.fn);
    EXPECT_EQ(s.files, c.want_files) << c.dir;
    EXPECT_EQ(s.accepted, c.want_accepted) << c.dir;
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
