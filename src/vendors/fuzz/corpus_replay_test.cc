// Replays the inventory-file seeds (and every truncation of them) through the
// fuzz entry, which aborts on an error without a reason or a parsed inventory
// the core would refuse.
#include "common/corpus_replay.h"

#include <gtest/gtest.h>

#include "vendors/fuzz/fuzz_entry.h"

namespace accelpool::vendors::fuzz {
namespace {

TEST(InventoryFileCorpusTest, SeedsParseAsExpectedAndTruncationsAreRefusedCleanly) {
  const testing::ReplayedSeeds r = testing::ReplayCorpus(
      std::filesystem::path(ACCELPOOL_VENDORS_CORPUS) / "inventory_file", FuzzInventoryFile);
  EXPECT_EQ(r.files, 12);
  // bad_override.json, duplicate_id.json and huge_memory.json (a device of
  // more than 2^40 MiB, which the core refuses) are refused
  EXPECT_EQ(r.accepted, 9);
  EXPECT_EQ(r.prefixes_accepted, 0);
}

}  // namespace
}  // namespace accelpool::vendors::fuzz
