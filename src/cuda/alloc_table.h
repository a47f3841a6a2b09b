// AllocTable: the process-local record of what the shim charged, by handle.
//
// Maps a non-zero 64-bit key (device pointer, CUarray, VMM handle, mapped
// address) to what was charged for it, so that the matching free uncharges
// exactly that. Open addressing with linear probing and tombstones, storage
// from malloc (the shim avoids libstdc++ allocation in host processes). A
// key that was never inserted is simply not found: frees of untracked
// pointers go to the driver untouched.
//
// Thread-safety: none; the shim guards each table with its own mutex.
#ifndef ACCELPOOL_CUDA_ALLOC_TABLE_H_
#define ACCELPOOL_CUDA_ALLOC_TABLE_H_

#include <cstddef>
#include <cstdint>

namespace accelpool::cuda {

struct AllocRecord {
  uint64_t bytes = 0;   // Charged bytes (already rounded).
  int32_t device = -1;  // Device the bytes were charged to.
  int32_t refs = 0;     // VMM: live mappings of a handle. IPC: opens beyond the first.
  int32_t retains = 0;  // VMM: cuMemRetainAllocationHandle references not yet released.
  bool array_mapped = false;  // VMM: mapped into an array once; holds one ref for good.
  // VMM: unmaps in flight that dropped a reference of this handle, not
  // released then, before their call (HookMemUnmap): a cuMemRelease
  // meanwhile must count the mapping as live.
  int32_t unmapping = 0;
  uint64_t link = 0;    // VMM: handle of a mapping; released flag of a handle.
  uint64_t context = 0;  // Memory its context frees (cuCtxDestroy): the CUcontext current at
                         // allocation; 0 for memory no context owns, or one not known.
};

class AllocTable {
 public:
  AllocTable() = default;
  ~AllocTable();
  AllocTable(const AllocTable&) = delete;
  AllocTable& operator=(const AllocTable&) = delete;

  // Inserts a new key. Returns false, leaving the table unchanged, if the key
  // is already present (a record is never overwritten), is 0, or memory ran out.
  bool Put(uint64_t key, const AllocRecord& record);
  // Returns the record or nullptr. The pointer is valid until the next Put.
  AllocRecord* Find(uint64_t key);
  // Removes and returns the record; false if absent.
  bool Take(uint64_t key, AllocRecord* out);
  size_t size() const { return size_; }
  // Calls fn(ctx, key, record) for every entry; fn must not modify the table.
  void ForEach(void (*fn)(void* ctx, uint64_t key, const AllocRecord& record), void* ctx) const;
  // Calls fn(ctx, key, &record) for every entry; fn may change the record,
  // not the table.
  void ForEachMutable(void (*fn)(void* ctx, uint64_t key, AllocRecord* record), void* ctx);
  // Removes, in one pass, every entry for which fn(ctx, key, record) returns
  // true (fn sees the record before it goes and must not modify the table).
  // Returns how many were removed.
  size_t TakeIf(bool (*fn)(void* ctx, uint64_t key, const AllocRecord& record), void* ctx);
  // Forgets everything without uncharging (a forked child owns nothing).
  void Clear();

 private:
  struct Entry {
    uint64_t key;  // 0 = empty, kTombstone = deleted.
    AllocRecord record;
  };
  static constexpr uint64_t kTombstone = ~0ULL;

  bool Grow();
  size_t Slot(uint64_t key) const;

  Entry* entries_ = nullptr;
  size_t capacity_ = 0;  // Power of two.
  size_t size_ = 0;
  size_t used_ = 0;  // Live entries plus tombstones.
};

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_ALLOC_TABLE_H_
