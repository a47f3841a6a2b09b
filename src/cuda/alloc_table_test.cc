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

TEST(AllocTableTest, TakeIfRemovesInOnePassAndKeepsTheRestFindable) {
  AllocTable t;
  for (uint64_t i = 1; i <= 500; ++i) {
    AllocRecord r;
    r.bytes = i;
    r.context = i % 3 == 0 ? 0x1000 : 0x2000;
    ASSERT_TRUE(t.Put(i << 21, r));
  }
  t.ForEachMutable(
      [](void*, uint64_t, AllocRecord* r) {
        if (r->context == 0x1000) {
          r->context = 0x3000;
        }
      },
      nullptr);
  uint64_t bytes = 0;
  size_t taken = t.TakeIf(
      [](void* ctx, uint64_t, const AllocRecord& r) {
        if (r.context != 0x3000) {
          return false;
        }
        *static_cast<uint64_t*>(ctx) += r.bytes;
        return true;
      },
      &bytes);
  EXPECT_EQ(taken, 166u);
  EXPECT_EQ(bytes, 3u * (166u * 167u / 2u)) << "the sum of the multiples of 3";
  EXPECT_EQ(t.size(), 500u - 166u);
  for (uint64_t i = 1; i <= 500; ++i) {
    AllocRecord* r = t.Find(i << 21);
    if (i % 3 == 0) {
      EXPECT_EQ(r, nullptr) << i;
    } else {
      ASSERT_NE(r, nullptr) << "a probe chain survives the tombstones: " << i;
      EXPECT_EQ(r->context, 0x2000u);
    }
  }
}

}  // namespace
}  // namespace accelpool::cuda
