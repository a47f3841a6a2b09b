// ReplayCorpus: runs a fuzz entry point over every seed file of a corpus
// folder, and over prefixes of each seed (truncated inputs must be rejected
// cleanly, never crash), so that the plain test suite walks the paths the
// fuzzers start from; MutateLines, a mutation of event-per-line inputs for
// short deterministic runs in the tests; SeedsCutAndMutated, the seeds with
// their prefixes and one-byte changes. Header-only: test binaries that link
// nothing of common/ use it too.
#ifndef ACCELPOOL_COMMON_CORPUS_REPLAY_H_
#define ACCELPOOL_COMMON_CORPUS_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace accelpool::testing {

struct ReplayedSeeds {
  int files = 0;
  int accepted = 0;  // the sum of the entry point's answers on whole seeds
  // Prefixes accepted although cut inside the seed's content (before its
  // trailing white space): a reader of whole documents accepts none.
  int prefixes_accepted = 0;
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
    const size_t content = data.find_last_not_of(" \t\r\n") + 1;  // 0 for a blank seed
    for (size_t cut = 0; cut < data.size(); cut += prefix_step) {
      const int answer = entry(bytes, cut);
      if (cut < content) {
        s.prefixes_accepted += answer;
      }
    }
  }
  return s;
}

// One mutation of a line-per-event input: `seed` interleaved with `other` at
// a line boundary, one byte replaced by a character of `alphabet`, or one line
// dropped or repeated. For entry points whose input is a sequence of events.
inline std::string MutateLines(std::string seed, const std::string& other, std::mt19937& rng,
                               std::string_view alphabet) {
  if (seed.empty()) {
    return other;
  }
  const size_t at = seed.find('\n', rng() % seed.size());
  const size_t next = at == std::string::npos ? at : seed.find('\n', at + 1);
  const std::string line = at == std::string::npos ? "" : seed.substr(at, next - at);
  switch (rng() % 4) {
    case 0:
      return seed.substr(0, at == std::string::npos ? seed.size() : at + 1) + other;
    case 1:
      seed[rng() % seed.size()] = alphabet[rng() % alphabet.size()];
      return seed;
    case 2:
      return at == std::string::npos ? seed : seed.erase(at, line.size());
    default:
      return at == std::string::npos ? seed : seed.insert(at, line);
  }
}

// Every seed file of `dir`, each of its prefixes (the empty one and the
// whole seed included), and `mutations` copies of it with one byte replaced
// by a character of `alphabet`: the inputs a text reader's unit test walks
// beside its fuzzer.
inline std::vector<std::string> SeedsCutAndMutated(const std::filesystem::path& dir,
                                                   std::mt19937& rng, std::string_view alphabet,
                                                   int mutations) {
  std::vector<std::string> inputs;
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(file.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string seed = ss.str();
    for (size_t n = 0; n <= seed.size(); ++n) inputs.push_back(seed.substr(0, n));
    for (int i = 0; i < mutations && !seed.empty(); ++i) {
      std::string m = seed;
      m[rng() % m.size()] = alphabet[rng() % alphabet.size()];
      inputs.push_back(std::move(m));
    }
  }
  return inputs;
}

}  // namespace accelpool::testing

#endif  // ACCELPOOL_COMMON_CORPUS_REPLAY_H_
