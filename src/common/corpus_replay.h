// ReplayCorpus: runs a fuzz entry point over every seed file of a corpus
// folder, and over prefixes of each seed (truncated inputs must be rejected
// cleanly, never crash), so that the plain test suite walks the paths the
// fuzzers start from. Header-only: test binaries that link nothing of
// common/ use it too.
#ifndef ACCELPOOL_COMMON_CORPUS_REPLAY_H_
#define ACCELPOOL_COMMON_CORPUS_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace accelpool::testing {

struct ReplayedSeeds {
  int files = 0;
  int accepted = 0;  // the sum of the entry point's answers on whole seeds
};

// `entry` returns 1 for an accepted input, 0 otherwise. Prefixes are cut
// every `prefix_step` bytes.
inline ReplayedSeeds ReplayCorpus(const std::filesystem::path& dir,
                                  int (*entry)(const uint8_t*, size_t), size_t prefix_step = 1) {
  ReplayedSeeds s;
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(file.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
    ++s.files;
    s.accepted += entry(bytes, data.size());
    for (size_t cut = 0; cut < data.size(); cut += prefix_step) {
      entry(bytes, cut);
    }
  }
  return s;
}

}  // namespace accelpool::testing

#endif  // ACCELPOOL_COMMON_CORPUS_REPLAY_H_
