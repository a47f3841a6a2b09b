#include "cuda/alloc_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace accelpool::cuda {
namespace {

TEST(AllocTableTest, PutFindTake) {
  AllocTable t;
  AllocRecord r;
  r.bytes = 4096;
  r.device = 1;
  EXPECT_FALSE(t.Put(0, r)) << "0 is not a valid key";
  ASSERT_TRUE(t.Put(0x7f0000200000, r));
  ASSERT_NE(t.Find(0x7f0000200000), nullptr);
  EXPECT_EQ(t.Find(0x7f0000200000)->device, 1);
  EXPECT_EQ(t.Find(0x7f0000400000), nullptr);
  AllocRecord out;
  EXPECT_TRUE(t.Take(0x7f0000200000, &out));
  EXPECT_EQ(out.bytes, 4096u);
  EXPECT_FALSE(t.Take(0x7f0000200000, &out));
  EXPECT_EQ(t.size(), 0u);
}

TEST(AllocTableTest, PutNeverOverwritesAnExistingKey) {
  AllocTable t;
  AllocRecord first;
  first.bytes = 2 << 20;
  AllocRecord second;
  second.bytes = 64 << 20;
  ASSERT_TRUE(t.Put(0x7f0000200000, first));
  EXPECT_FALSE(t.Put(0x7f0000200000, second));
  ASSERT_NE(t.Find(0x7f0000200000), nullptr);
  EXPECT_EQ(t.Find(0x7f0000200000)->bytes, first.bytes) << "the first record stands";
  EXPECT_EQ(t.size(), 1u);
}

TEST(AllocTableTest, MatchesAMapUnderRandomChurn) {
  AllocTable t;
  std::map<uint64_t, uint64_t> model;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    uint64_t key = (rng() % 3000 + 1) << 21;  // 2 MiB aligned, like device pointers.
    if (rng() % 3 == 0) {
      AllocRecord out;
      bool had = model.erase(key) == 1;
      EXPECT_EQ(t.Take(key, &out), had);
    } else {
      AllocRecord r;
      r.bytes = rng();
      bool fresh = model.emplace(key, r.bytes).second;
      ASSERT_EQ(t.Put(key, r), fresh) << "an existing key is never overwritten";
    }
  }
  EXPECT_EQ(t.size(), model.size());
  for (const auto& [key, bytes] : model) {
    ASSERT_NE(t.Find(key), nullptr);
    EXPECT_EQ(t.Find(key)->bytes, bytes);
  }
  size_t visited = 0;
  t.ForEach([](void* ctx, uint64_t, const AllocRecord&) { ++*static_cast<size_t*>(ctx); },
            &visited);
  EXPECT_EQ(visited, model.size());
  t.Clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.Find(model.begin()->first), nullptr);
}

}  // namespace
}  // namespace accelpool::cuda
