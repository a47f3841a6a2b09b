#include "cuda/alloc_table.h"

#include <cstdlib>
#include <cstring>

namespace accelpool::cuda {

AllocTable::~AllocTable() { std::free(entries_); }

size_t AllocTable::Slot(uint64_t key) const {
  // Fibonacci hashing spreads pointer keys that share low zero bits.
  uint64_t h = key * 0x9E3779B97F4A7C15ULL;
  return static_cast<size_t>(h >> 17) & (capacity_ - 1);
}

bool AllocTable::Grow() {
  size_t new_capacity = capacity_ == 0 ? 64 : capacity_ * 2;
  if (size_ * 4 < capacity_) {
    new_capacity = capacity_;  // Mostly tombstones: rehash in place size.
  }
  auto* fresh = static_cast<Entry*>(std::calloc(new_capacity, sizeof(Entry)));
  if (fresh == nullptr) {
    return false;
  }
  Entry* old = entries_;
  size_t old_capacity = capacity_;
  entries_ = fresh;
  capacity_ = new_capacity;
  size_ = 0;
  used_ = 0;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old[i].key != 0 && old[i].key != kTombstone) {
      size_t s = Slot(old[i].key);
      while (entries_[s].key != 0) {
        s = (s + 1) & (capacity_ - 1);
      }
      entries_[s] = old[i];
      ++size_;
      ++used_;
    }
  }
  std::free(old);
  return true;
}

bool AllocTable::Put(uint64_t key, const AllocRecord& record) {
  if (key == 0 || key == kTombstone) {
    return false;
  }
  if (Find(key) != nullptr) {
    return false;
  }
  if ((used_ + 1) * 2 > capacity_ && !Grow()) {
    return false;
  }
  size_t s = Slot(key);
  while (entries_[s].key != 0 && entries_[s].key != kTombstone) {
    s = (s + 1) & (capacity_ - 1);
  }
  if (entries_[s].key == 0) {
    ++used_;
  }
  entries_[s].key = key;
  entries_[s].record = record;
  ++size_;
  return true;
}

AllocRecord* AllocTable::Find(uint64_t key) {
  if (capacity_ == 0 || key == 0 || key == kTombstone) {
    return nullptr;
  }
  size_t s = Slot(key);
  for (size_t probes = 0; probes < capacity_; ++probes) {
    if (entries_[s].key == 0) {
      return nullptr;
    }
    if (entries_[s].key == key) {
      return &entries_[s].record;
    }
    s = (s + 1) & (capacity_ - 1);
  }
  return nullptr;
}

bool AllocTable::Take(uint64_t key, AllocRecord* out) {
  AllocRecord* r = Find(key);
  if (r == nullptr) {
    return false;
  }
  if (out != nullptr) {
    *out = *r;
  }
  Entry* e = reinterpret_cast<Entry*>(reinterpret_cast<char*>(r) - offsetof(Entry, record));
  e->key = kTombstone;
  --size_;
  return true;
}

void AllocTable::ForEach(void (*fn)(void*, uint64_t, const AllocRecord&), void* ctx) const {
  for (size_t i = 0; i < capacity_; ++i) {
    if (entries_[i].key != 0 && entries_[i].key != kTombstone) {
      fn(ctx, entries_[i].key, entries_[i].record);
    }
  }
}

void AllocTable::ForEachMutable(void (*fn)(void*, uint64_t, AllocRecord*), void* ctx) {
  for (size_t i = 0; i < capacity_; ++i) {
    if (entries_[i].key != 0 && entries_[i].key != kTombstone) {
      fn(ctx, entries_[i].key, &entries_[i].record);
    }
  }
}

size_t AllocTable::TakeIf(bool (*fn)(void*, uint64_t, const AllocRecord&), void* ctx) {
  size_t taken = 0;
  for (size_t i = 0; i < capacity_; ++i) {
    // A tombstone keeps every probe chain intact: no entry moves.
    if (entries_[i].key != 0 && entries_[i].key != kTombstone &&
        fn(ctx, entries_[i].key, entries_[i].record)) {
      entries_[i].key = kTombstone;
      --size_;
      ++taken;
    }
  }
  return taken;
}

void AllocTable::Clear() {
  if (entries_ != nullptr) {
    for (size_t i = 0; i < capacity_; ++i) {
      entries_[i] = Entry{0, AllocRecord()};
    }
  }
  size_ = 0;
  used_ = 0;
}

}  // namespace accelpool::cuda
