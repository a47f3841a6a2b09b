// Accounting helpers shared by the memory hooks (hooks_memory.cc,
// hooks_info.cc, hooks_vmm.cc): charge the calling process's slot in the
// container's shared region, remember what was charged per handle, and give
// it back on free.
//
// Thread-safety: every function is safe from any thread; per-process tables
// are guarded by ShimState::mem_mu, the region by its own robust mutex.
#ifndef ACCELPOOL_CUDA_ACCOUNTING_H_
#define ACCELPOOL_CUDA_ACCOUNTING_H_

#include <cstdint>

#include "cuda/alloc_table.h"
#include "cuda/cuda_types.h"
#include "cuda/shim.h"

namespace accelpool::cuda {

enum class Charge {
  kCharged,     // Counted; the caller must Remember or Uncharge it.
  kNotLimited,  // This device has no cap (or accounting is unavailable).
  kOverLimit,   // Refuse: return CUDA_ERROR_OUT_OF_MEMORY.
};

// This process's claim on a slot of the region (SharedRegion::ClaimSlot),
// made on first use; false when no slot is free (logged).
bool CurrentSlot(int* slot);

// Charges `bytes` (already rounded) on `device` for this process, claiming
// the process's slot on first use. A process that cannot get a slot (all
// kMaxSlots held by live processes) is refused with an error log.
Charge ChargeBytes(int device, uint64_t bytes);
// ChargeBytes, and when refused at the cap, once more after bringing the
// device's pool and graph-pool charges to what the driver holds now: a pool
// releases what it kept at a synchronisation the shim does not see, and an
// allocation of another kind must not be refused for it. The hooks' path;
// never with pool_mu held (SyncPools takes it).
Charge ChargeBytesAfterSync(int device, uint64_t bytes);
void UnchargeBytes(int device, uint64_t bytes);
// Who frees an allocation besides its own free. The driver frees the
// memory a context owns when the context is destroyed (cuCtxDestroy):
// cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, arrays and IPC imports.
// Stream-ordered (pool) memory and cuMemCreate handles belong to no context
// and stay until freed (cuda.h, cuCtxDestroy).
enum class Owner {
  kContext,  // Recorded with the calling thread's current context.
  kNone,     // Recorded without one: only its own free (or a device reset) ends it.
};

// Records key -> (bytes, device, context); uncharges at once if it cannot be
// recorded. A key still recorded is stale (every free takes its record
// before the driver frees): it is reported, uncharged and replaced.
// `context`: the CUcontext that frees the memory when destroyed, 0 for none.
void Remember(AllocTable* table, uint64_t key, uint64_t bytes, int device, uint64_t context);
// Removes `key` from `table` into `out`; false for untracked keys.
bool TakeRecord(AllocTable* table, uint64_t key, AllocRecord* out);
// Returns a taken record's charge: uncharges it, or, when its link names a
// pool charged by reserve, re-reads that pool (SyncPool).
void ReleaseRecord(const AllocRecord& record);
// Puts a taken record back (its free failed); uncharges it if it cannot be.
void RestoreRecord(AllocTable* table, uint64_t key, const AllocRecord& record);

// Reference-counted records (IPC imports: the driver returns the pointer
// already open for a handle, with one more reference, and unmaps it at the
// last close). RetainRecord adds a reference to a recorded key; false for
// an untracked key.
bool RetainRecord(AllocTable* table, uint64_t key);
enum class Drop {
  kUntracked,  // No record.
  kOneOfMany,  // One reference dropped; the record and its charge stay.
  kLast,       // The last reference: the record was taken into *out.
};
// Drops one reference of `key`'s record, taking the record at the last.
Drop DropReference(AllocTable* table, uint64_t key, AllocRecord* out);
// An import's record is looked up, and made when missing, in one step, before
// the import is charged: two threads that open one handle at once get the
// same pointer, and each used to miss the other's record, charge, and
// record it (the second record replacing the first as stale), leaving one
// record for two references. ReserveRecord adds a reference and returns
// false when `key` is recorded; otherwise it records `key` with no bytes yet
// (of `context`) and returns true, and the caller then settles it with one
// of the three calls below. Opens of the key meanwhile take references on it.
bool ReserveRecord(AllocTable* table, uint64_t key, uint64_t context);
// The reserved record is charged `bytes` on `device`; false when it is gone
// (its context was destroyed meanwhile): the caller returns the charge.
bool FillReservedRecord(AllocTable* table, uint64_t key, uint64_t bytes, int device);
// Nothing is charged for it: the reserved record goes.
void DropReservedRecord(AllocTable* table, uint64_t key);
// The charge was refused: the reserved record goes, and true is returned,
// unless other opens took references on it meanwhile (false: it stays, for
// the caller to charge anyway; the memory is mapped for them either way).
bool TakeReservedUnlessShared(AllocTable* table, uint64_t key);

// Frees `key` through `call` (the real free). The record is taken *before*
// the call: the moment the driver frees the address another thread may get
// it from an allocation, whose record must not meet this one. The charge is
// returned when the free succeeds; the record is put back when it fails.
template <typename Call>
CUresult ForgetAndCall(AllocTable* table, uint64_t key, Call call) {
  AllocRecord record;
  bool tracked = TakeRecord(table, key, &record);
  CUresult rc = call();
  if (tracked) {
    if (rc == CUDA_SUCCESS) {
      ReleaseRecord(record);
    } else {
      RestoreRecord(table, key, record);
    }
  }
  return rc;
}

// Stream-ordered pools. Memory a pool reserves stays on the device after
// cuMemFreeAsync (up to its release threshold), and many small allocations
// share one reservation, so a pool is charged its reserve
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) rather than per allocation.
//
// What TrackPool found.
enum class PoolTrack {
  kByReserve,       // Tracked by reserve; *device is the device it is charged to.
  kPerAllocation,   // Reserve unreadable or kMaxPools tracked: charge per allocation.
  kHostMemory,      // The pool holds host memory (a host or NUMA location): never charged.
};
// Starts tracking `pool` by reserve if it is not yet. Where the driver says
// where the pool lives (CU_MEMPOOL_ATTR_LOCATION_TYPE/_ID), that decides:
// a pool on another device is charged to that device, a host pool not at
// all; otherwise (or for a location type the shim does not know) it is
// charged to *device, the caller's current device. *device is set to the
// device to charge, also for a pool past kMaxPools charged per allocation.
PoolTrack TrackPool(CUmemoryPool pool, int* device);
// Re-reads a tracked pool's reserve: uncharges a shrink, charges a growth.
// Returns kOverLimit when a growth did not fit under the cap (it stays
// uncharged), kCharged otherwise, kNotLimited for an untracked pool. Given
// a destroyed pool's mark (RetirePool), counts one of its blocks freed.
Charge SyncPool(CUmemoryPool pool);
// SyncPool for every tracked pool charged to `device` (memory queries).
void SyncPools(int device);
// SyncPools and SyncGraphMemory for each CUDA ordinal of this process known
// to be the container's device `index` (NVML's memory queries).
void SyncIndex(int index);
// Logs once that a device (`what` `number`, of UUID `uuid`, "" when
// unreadable) is not among the container's listed devices.
void WarnUnmappedDevice(const char* uuid, const char* what, int number);
// Stops tracking `pool` without uncharging; false if it was not tracked.
bool TakePool(CUmemoryPool pool, PoolAccount* out);
// Undoes TakePool (the driver refused to destroy the pool); uncharges the
// account if it can no longer be tracked.
void RestorePool(const PoolAccount& account);
// After the driver destroyed a pool taken by TakePool: a pool with blocks
// still allocated keeps its memory until they are freed (cuMemPoolDestroy
// returns at once and frees it then), so the account keeps its charge,
// without a handle, until the last recorded block's free; a pool with none
// is uncharged at once.
void RetirePool(const PoolAccount& account);
// Records a pointer of a pool charged by reserve, so its free re-reads the pool.
void RememberPoolPointer(uint64_t key, CUmemoryPool pool, int device);
// Records where a pool created through the shim lives (cuMemPoolCreate's
// properties): CUDA 13.0 drivers cannot be asked later (its cuda.h has no
// CU_MEMPOOL_ATTR_LOCATION_*). A location type the shim does not know is not
// recorded. ForgetPoolHome undoes it at cuMemPoolDestroy.
void RememberPoolHome(CUmemoryPool pool, const CUmemLocation& location);
bool ForgetPoolHome(CUmemoryPool pool, AllocRecord* out);
void RestorePoolHome(CUmemoryPool pool, const AllocRecord& record);

// True for a host location (host, host NUMA node, the thread's NUMA node):
// memory there never counts against a device cap.
bool HostLocation(int type);
// The device that memory at `location` (cuMemCreate, graph memory nodes) is
// charged to, or -1 for host memory. A device location names its device; a
// location type newer than the shim (CUDA 13 adds device-side ones such as
// a device's locality domain) is the caller's current device's, as for pools
// (PoolLocation); -1 also when there is none.
int LocationDevice(const CUmemLocation& location);

// A context's end (cuCtxDestroy), in two steps around the driver's call, so
// that only memory the destroyed context owned goes: a context created after
// the destroy may get the same handle, and its allocations must keep their
// charges. MarkContextRecords, before the call, tags the records of `context`
// (pointers, arrays, IPC imports) with a mark of their own and returns it, or
// 0 when the context has none. SettleContextRecords, after it, takes the
// marked records and returns their charges when the destroy succeeded, and
// gives them their context back when it failed. A marked record that a free
// takes meanwhile is settled by that free, as any other.
uint64_t MarkContextRecords(uint64_t context);
void SettleContextRecords(uint64_t mark, uint64_t context, bool destroyed);
// A context's birth (cuCtxCreate*): no
// memory recorded before it can be its own, yet records may carry its handle
// value (a green context's CUcontext, whose memory is the primary context's;
// one whose end the shim could not settle). Such records lose their context
// (as Owner::kNone): the new context's end leaves them charged until their
// own free, the safe side. Returns how many there were.
size_t DisownContextRecords(uint64_t context);
// Contexts made with cuCtxCreate* and not yet destroyed: a primary context
// reset frees none of their memory (DropDeviceRecords).
void RememberCreatedContext(uint64_t context, int device);
void ForgetCreatedContext(uint64_t context);

// The device's primary context was reset (cuDevicePrimaryCtxReset), which
// frees what that context owned and the device's default pool and graph
// pool, and nothing that belongs to no context or to a context made with
// cuCtxCreate (cuMemCreate handles and their mappings, pools made with
// cuMemPoolCreate and their blocks, created contexts' memory). Drops the
// records of `device` that the reset freed and returns their charges:
// pointers, arrays, IPC imports and malloc heaps of no live created context
// (the primary context's, a green context's, or of none known), the
// default pool `default_pool` (read before the reset; nullptr when unknown:
// every pool not created through the shim) with its blocks, the graph
// pool's charge and executable graphs. Pools that stay are re-read.
void DropDeviceRecords(int device, CUmemoryPool default_pool);

// Charges memory that already exists on the device (the driver mapped it
// before the shim could refuse), even past the cap; logs when it goes past,
// naming `what` it is and `until` when further allocations fail. False when
// nothing was charged (no cap there, or the region unavailable).
bool ForceChargeBytes(int device, uint64_t bytes, const char* what, const char* until);

// Graph memory (hooks_graph.cc). An executable graph's memory nodes are
// backed by the device's graph pool, which maps physical memory when the
// graph is uploaded or first launched and keeps it (reserved) until
// cuDeviceGraphMemTrim. The shim charges each device's graph-pool reserve
// (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), like a stream-ordered pool. So
// that the cap is enforced before the driver maps anything, an upload or
// first launch first holds room for the growth it may cause: the sum of the
// graph's allocations, less what the pool holds unused. No room: the call
// returns CUDA_ERROR_OUT_OF_MEMORY without reaching the driver.
inline constexpr int kGraphMultiDevice = -2;  // Memory nodes on several devices.
struct GraphHold {
  bool settle = false;   // The call may change a graph pool: settle afterwards.
  int device = -1;       // Device of the pool, or kGraphMultiDevice.
  uint64_t bytes = 0;    // Room held (charged) for the growth.
  uint64_t idle = 0;     // Idle graph-pool memory the hold counts on.
  uint64_t epoch = 0;    // The device's trim epoch when the hold was taken.
};
// Before uploading or launching `exec` on `stream` (per_thread: stream 0 is
// the per-thread stream): false when the growth does not fit under the cap.
bool HoldForGraphExec(CUgraphExec exec, CUstream stream, bool per_thread, GraphHold* hold);
// After the call: charges the reserve's real growth in place of the hold,
// and marks the graph mapped when rc is CUDA_SUCCESS.
void SettleGraphExec(CUgraphExec exec, const GraphHold& hold, CUresult rc);
// Brings a device's graph-pool charge to its reserve (memory queries).
void SyncGraphMemory(int device);

// Charges `bytes` on `device`, runs the real call, records key() on success
// (with the current context when the context owns the memory: read only
// then, one driver call per counted allocation).
template <typename Call, typename Key>
CUresult ChargeAndCall(AllocTable* table, int device, uint64_t bytes, Owner owner, Call call,
                       Key key) {
  Charge c = ChargeBytesAfterSync(device, bytes);
  if (c == Charge::kOverLimit) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = call();
  if (c == Charge::kCharged) {
    if (rc == CUDA_SUCCESS) {
      Remember(table, key(), bytes, device, owner == Owner::kContext ? CurrentContext() : 0);
    } else {
      UnchargeBytes(device, bytes);
    }
  }
  return rc;
}

// A stream-ordered allocation from a pool tracked by reserve: runs the real
// call, then charges the pool's growth. A growth past the cap is tried again
// once the device's other pools and graph memory are re-read (what they gave
// back meanwhile is no longer charged), as every other charge is
// (ChargeBytesAfterSync); still past it, it is undone (the block is freed on
// its stream and the pool trimmed) and OUT_OF_MEMORY returned. Called with
// no pool_mu held. `free_async(ptr)` frees on the allocation's stream and waits
// for the free to complete (the trim releases only memory whose free the
// host has seen complete).
template <typename Call, typename FreeAsync>
CUresult PoolAllocAndCharge(CUmemoryPool pool, int device, CUdeviceptr* dptr, Call call,
                            FreeAsync free_async) {
  CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  Charge c = SyncPool(pool);
  if (c == Charge::kOverLimit) {
    SyncPools(device);  // Re-reads this pool too, charging its growth if it fits now.
    SyncGraphMemory(device);
    c = SyncPool(pool);
  }
  if (c == Charge::kOverLimit) {
    free_async(*dptr);
    ShimState& s = State();
    if (s.mem_pool_trim_to != nullptr) {
      s.mem_pool_trim_to(pool, 0);
    }
    SyncPool(pool);  // Uncharges what the trim gave back; never charges past the cap.
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  RememberPoolPointer(*dptr, pool, device);
  return rc;
}

// Prologue of a hook instance for slot S: the real function or NOT_FOUND.
#define ACCELPOOL_REAL_OR_FAIL(type, id)      \
  EnsureCuda();                               \
  auto real = Real<type>(id, S);              \
  if (real == nullptr) {                      \
    return CUDA_ERROR_NOT_FOUND;              \
  }                                           \
  ShimState& s = State();                     \
  (void)s

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_ACCOUNTING_H_
