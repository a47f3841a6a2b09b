// Replays the seed inputs through the fuzz entry points, then a short
// deterministic mutation run (byte flips, truncations, splices) of each seed,
// so every handler meets hostile input in the normal test suite.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include "common/corpus_replay.h"
#include "extender/fuzz/fuzz_entry.h"

namespace accelpool::extender::fuzz {
namespace {

using Entry = std::function<int(const uint8_t*, size_t)>;

std::vector<std::string> Seeds(const std::string& verb) {
  std::vector<std::string> out;
  const std::filesystem::path dir = std::filesystem::path(ACCELPOOL_EXTENDER_SEEDS) / verb;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(f.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

int Feed(const Entry& e, const std::string& s) {
  return e(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

const std::map<std::string, Entry>& Entries() {
  static const auto* m = new std::map<std::string, Entry>{
      {"filter", FuzzFilter}, {"prioritize", FuzzPrioritize}, {"bind", FuzzBind},
      {"preempt", FuzzPreempt}, {"mutate", FuzzMutate}};
  return *m;
}

TEST(FuzzSeedsTest, SeedsGiveTheExpectedStatus) {
  struct Case {
    const char* verb;
    const char* file_part;  // "" = every seed of the verb
    int want;
  };
  // Well-formed seeds are 200 (errors travel in the verb's Error field);
  // malformed bodies are 400.
  const Case cases[] = {
      {"filter", "names", 200},
      {"filter", "no_pod", 200},
      {"filter", "truncated", 400},
      {"filter", "bad_quantity", 200},
      {"filter", "mig", 200},
      {"bind", "unknown_pod", 200},
      {"bind", "wrong_type", 400},
      {"mutate", "plain", 200},
      {"mutate", "too_many", 200},
      {"mutate", "node_name_canonical", 200},
      {"mutate", "update_subresource", 200},
      {"mutate", "hami_modes", 200},
      {"preempt", "meta", 200},
      {"prioritize", "names", 200},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.verb) + "/" + c.file_part);
    const std::filesystem::path p = std::filesystem::path(ACCELPOOL_EXTENDER_SEEDS) / c.verb /
                                    (std::string(c.file_part) + ".json");
    std::ifstream in(p, std::ios::binary);
    ASSERT_TRUE(in.good()) << p;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(Feed(Entries().at(c.verb), ss.str()), c.want);
  }
}

TEST(FuzzSeedsTest, ShortMutationRunNeverCrashes) {
  std::mt19937 rng(20261130);
  int runs = 0;
  for (const auto& [verb, entry] : Entries()) {
    const std::vector<std::string> seeds = Seeds(verb);
    ASSERT_FALSE(seeds.empty()) << verb;
    for (int i = 0; i < 400; ++i) {
      std::string s = seeds[rng() % seeds.size()];
      switch (rng() % 4) {
        case 0:
          if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng() % 256);
          break;
        case 1:
          s.resize(rng() % (s.size() + 1));
          break;
        case 2: {
          const std::string& other = seeds[rng() % seeds.size()];
          s = s.substr(0, rng() % (s.size() + 1)) + other.substr(rng() % (other.size() + 1));
          break;
        }
        default:
          s.insert(rng() % (s.size() + 1), std::string(1 + rng() % 8, "{[\"\\:,0"[rng() % 7]));
      }
      const int status = Feed(entry, s);  // aborts on a malformed reply
      EXPECT_TRUE(status == 200 || status == 400) << verb;
      ++runs;
    }
  }
  EXPECT_EQ(runs, 2000);
}

TEST(FuzzSeedsTest, WatchSeedsBookDevicesAndLeaveNothingBooked) {
  // Each seed books devices on the way (so the entry's final check, that
  // nothing stays booked once every pod has left, has something to undo);
  // host.txt books host CPU and memory instead (the same check covers them).
  const std::map<std::string, int> peaks = {
      {"lifecycle.txt", 2},  {"late_node.txt", 1},     {"edits.txt", 1},
      {"overcommit.txt", 2}, {"cordon.txt", 1},           // a cordon keeps the grant a pod holds
      {"host.txt", 0},       {"heartbeat_read.txt", 1}};  // the node re-read after its deletion
                                                          // books it again
  for (const auto& [file, want] : peaks) {
    std::ifstream in(std::filesystem::path(ACCELPOOL_EXTENDER_SEEDS) / "watch" / file,
                     std::ios::binary);
    ASSERT_TRUE(in.good()) << file;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(Feed(FuzzWatch, ss.str()), want) << file;
  }
  // Mutated sequences: FuzzWatch aborts if any device stays booked.
  std::mt19937 rng(20261201);
  const std::vector<std::string> seeds = Seeds("watch");
  ASSERT_EQ(seeds.size(), peaks.size());
  int booked = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string s = accelpool::testing::MutateLines(
        seeds[rng() % seeds.size()], seeds[rng() % seeds.size()], rng, "0123456789{}\":,nNpPr\n");
    booked += Feed(FuzzWatch, s);
  }
  // The mutants still book devices on the way (the peaks FuzzWatch returns):
  // every sequence refused at its first line would check nothing.
  EXPECT_GT(booked, 0);
}

TEST(FuzzSeedsTest, StoredWorkloadSeedsReadOrAreRefusedAndMutantsNeverCrash) {
  const std::map<std::string, int> read = {
      {"window.json", 1}, {"empty.json", 1}, {"bad_index.json", 0}, {"newer.json", 0}};
  for (const auto& [file, want] : read) {
    std::ifstream in(std::filesystem::path(ACCELPOOL_EXTENDER_SEEDS) / "workload_store" / file,
                     std::ios::binary);
    ASSERT_TRUE(in.good()) << file;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(Feed(FuzzWorkloadStore, ss.str()), want) << file;
  }
  // Mutants: FuzzWorkloadStore aborts on a document read that does not
  // encode back to itself, or a refusal without a reason.
  std::mt19937 rng(20261201);
  const std::vector<std::string> seeds = Seeds("workload_store");
  ASSERT_EQ(seeds.size(), read.size());
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      if (rng() % 2 == 0) {
        s[at] = "0123456789-,[]\"Z:{}e."[rng() % 21];
      } else {
        s.erase(at, 1 + rng() % 4);
      }
    }
    accepted += Feed(FuzzWorkloadStore, s);
  }
  EXPECT_GT(accepted, 0);  // some mutants still read, and round-trip
}

}  // namespace
}  // namespace accelpool::extender::fuzz
