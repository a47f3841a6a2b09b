// Charging and uncharging the container's shared region on behalf of the
// hooks. See accounting.h.
#include "cuda/accounting.h"

#include <unistd.h>

#include <cstring>
#include <initializer_list>

#include "cuda/log.h"

namespace accelpool::cuda {
namespace {

// A mark (of a destroyed context's records, of a destroyed pool) is never a
// handle: those are user-space addresses.
constexpr uint64_t kMarkBit = 1ULL << 63;

// REQUIRES: s.mem_mu held.
bool EnsureSlotLocked(ShimState& s) {
  if (s.slot >= 0) {
    return true;
  }
  int32_t pid = static_cast<int32_t>(getpid());
  s.slot = s.region->ClaimSlot(pid, ProcessStartTime(pid));
  if (s.slot < 0) {
    Logf(LogLevel::kError,
         "all %d accounting slots of this container are held by live processes; "
         "refusing device allocations (run fewer CUDA processes per container)",
         kMaxSlots);
  }
  return s.slot >= 0;
}

}  // namespace

bool CurrentSlot(int* slot) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  bool ok = EnsureSlotLocked(s);
  *slot = s.slot;
  pthread_mutex_unlock(&s.mem_mu);
  return ok;
}

Charge ChargeBytes(int device, uint64_t bytes) {
  ShimState& s = State();
  if (!DeviceMemoryLimited(device)) {
    return Charge::kNotLimited;
  }
  pthread_mutex_lock(&s.mem_mu);
  bool have_slot = EnsureSlotLocked(s);
  int slot = s.slot;
  pthread_mutex_unlock(&s.mem_mu);
  if (!have_slot) {
    return Charge::kOverLimit;
  }
  switch (s.region->TryCharge(slot, ContainerIndex(device), bytes, DeviceMemoryCap(device),
                              s.config.context_reserve_bytes)) {
    case ChargeResult::kOk:
      return Charge::kCharged;
    case ChargeResult::kOverLimit:
      Logf(LogLevel::kDebug, "device %d: %llu bytes refused at the cap", device,
           static_cast<unsigned long long>(bytes));
      return Charge::kOverLimit;
    case ChargeResult::kUnavailable:
      break;
  }
  if (!s.warned_unaccounted) {
    s.warned_unaccounted = true;
    Logf(LogLevel::kWarn, "accounting region unavailable; allocations are not being counted");
  }
  return Charge::kNotLimited;
}

Charge ChargeBytesAfterSync(int device, uint64_t bytes) {
  Charge c = ChargeBytes(device, bytes);
  if (c != Charge::kOverLimit) {
    return c;
  }
  SyncPools(device);
  SyncGraphMemory(device);
  return ChargeBytes(device, bytes);
}

bool ForceChargeBytes(int device, uint64_t bytes, const char* what, const char* until) {
  ShimState& s = State();
  if (bytes == 0 || !DeviceMemoryLimited(device)) {
    return false;
  }
  pthread_mutex_lock(&s.mem_mu);
  bool have_slot = EnsureSlotLocked(s);
  int slot = s.slot;
  pthread_mutex_unlock(&s.mem_mu);
  const int index = ContainerIndex(device);
  if (!have_slot || s.region->TryCharge(slot, index, bytes, UINT64_MAX,
                                        s.config.context_reserve_bytes) != ChargeResult::kOk) {
    return false;
  }
  if (s.region->Used(index) > DeviceMemoryCap(device)) {
    Logf(LogLevel::kWarn,
         "device %d: the driver mapped %llu bytes of %s past the container's cap; "
         "further allocations fail until %s",
         device, static_cast<unsigned long long>(bytes), what, until);
  }
  return true;
}

void UnchargeBytes(int device, uint64_t bytes) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  int slot = s.slot;
  pthread_mutex_unlock(&s.mem_mu);
  s.region->Uncharge(slot, ContainerIndex(device), bytes);
}

void Remember(AllocTable* table, uint64_t key, uint64_t bytes, int device, uint64_t context) {
  ShimState& s = State();
  AllocRecord r;
  r.bytes = bytes;
  r.device = device;
  r.context = context;
  // Every free the shim sees takes the record before the driver frees the
  // address (ForgetAndCall), so a record still here is stale: its memory
  // went where the shim did not see (a device reset that bypassed the hooks).
  // The new allocation takes its place; the stale charge is returned.
  AllocRecord stale;
  pthread_mutex_lock(&s.mem_mu);
  bool replaced = table->Take(key, &stale);
  bool ok = table->Put(key, r);
  pthread_mutex_unlock(&s.mem_mu);
  if (replaced) {
    Logf(LogLevel::kWarn,
         "handle 0x%llx handed out again while still recorded (freed outside the shim: a "
         "device reset?); its old charge is returned, the new allocation charged",
         static_cast<unsigned long long>(key));
    ReleaseRecord(stale);
  }
  if (!ok) {
    UnchargeBytes(device, bytes);  // Cannot track it: never charge what we cannot free.
  }
}

bool TakeRecord(AllocTable* table, uint64_t key, AllocRecord* out) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  bool found = table->Take(key, out);
  pthread_mutex_unlock(&s.mem_mu);
  return found;
}

bool RetainRecord(AllocTable* table, uint64_t key) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  AllocRecord* r = table->Find(key);
  if (r != nullptr) {
    ++r->refs;
  }
  pthread_mutex_unlock(&s.mem_mu);
  return r != nullptr;
}

Drop DropReference(AllocTable* table, uint64_t key, AllocRecord* out) {
  ShimState& s = State();
  Drop result = Drop::kUntracked;
  pthread_mutex_lock(&s.mem_mu);
  if (AllocRecord* r = table->Find(key)) {
    if (r->refs > 0) {
      --r->refs;
      result = Drop::kOneOfMany;
    } else {
      table->Take(key, out);
      result = Drop::kLast;
    }
  }
  pthread_mutex_unlock(&s.mem_mu);
  return result;
}

bool ReserveRecord(AllocTable* table, uint64_t key, uint64_t context) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  AllocRecord* r = table->Find(key);
  if (r != nullptr) {
    ++r->refs;
  } else {
    AllocRecord pending;  // No bytes, no device: a reset or a free returns nothing of it.
    pending.context = context;
    table->Put(key, pending);  // Out of memory: untracked, as Remember leaves it.
  }
  pthread_mutex_unlock(&s.mem_mu);
  return r == nullptr;
}

bool FillReservedRecord(AllocTable* table, uint64_t key, uint64_t bytes, int device) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  AllocRecord* r = table->Find(key);
  if (r != nullptr) {
    r->bytes = bytes;
    r->device = device;
  }
  pthread_mutex_unlock(&s.mem_mu);
  return r != nullptr;
}

void DropReservedRecord(AllocTable* table, uint64_t key) {
  AllocRecord gone;
  TakeRecord(table, key, &gone);
}

bool TakeReservedUnlessShared(AllocTable* table, uint64_t key) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  AllocRecord* r = table->Find(key);
  const bool shared = r != nullptr && r->refs > 0;
  AllocRecord gone;
  if (!shared) {
    table->Take(key, &gone);
  }
  pthread_mutex_unlock(&s.mem_mu);
  return !shared;
}

void ReleaseRecord(const AllocRecord& record) {
  if (record.link != 0) {
    SyncPool(reinterpret_cast<CUmemoryPool>(record.link));
  } else {
    UnchargeBytes(record.device, record.bytes);
  }
}

void RestoreRecord(AllocTable* table, uint64_t key, const AllocRecord& record) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  bool ok = table->Put(key, record);
  pthread_mutex_unlock(&s.mem_mu);
  if (!ok && record.link == 0) {
    UnchargeBytes(record.device, record.bytes);
  }
}

namespace {

bool ReadReserve(ShimState& s, uint64_t pool, uint64_t* reserve) {
  cuuint64_t v = 0;
  if (s.mem_pool_get_attribute == nullptr ||
      s.mem_pool_get_attribute(reinterpret_cast<CUmemoryPool>(pool),
                               CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS) {
    return false;
  }
  *reserve = v;
  return true;
}

// REQUIRES: s.pool_mu held.
PoolAccount* FindPoolLocked(ShimState& s, uint64_t pool) {
  for (PoolAccount& a : s.pools) {
    if (a.pool == pool) {
      return &a;
    }
  }
  return nullptr;
}

// Brings the account's charge to the pool's current reserve: a shrink is
// uncharged, a growth charged if it fits. REQUIRES: s.pool_mu held (so that
// concurrent re-reads of one pool are applied in the order they were read).
Charge SyncLocked(ShimState& s, PoolAccount& a) {
  uint64_t reserve = 0;
  if (a.device < 0) {
    return Charge::kNotLimited;  // Host memory.
  }
  if (a.live != 0) {
    return Charge::kCharged;  // Destroyed: no handle to read; its blocks' frees settle it.
  }
  if (!ReadReserve(s, a.pool, &reserve)) {
    return Charge::kCharged;  // Keep the last known charge.
  }
  if (reserve <= a.charged) {
    uint64_t shrink = a.charged - reserve;
    a.charged = reserve;
    if (shrink != 0) {
      UnchargeBytes(a.device, shrink);
    }
    return Charge::kCharged;
  }
  Charge c = ChargeBytes(a.device, reserve - a.charged);
  if (c == Charge::kCharged) {
    a.charged = reserve;
  }
  return c == Charge::kOverLimit ? Charge::kOverLimit : Charge::kCharged;
}

// Where `pool` lives: as recorded at its creation through the shim, else as
// the driver says (CU_MEMPOOL_ATTR_LOCATION_TYPE/_ID, newer than CUDA 13.0):
// -1 for host memory, a device for a device pool, `fallback` (the caller's
// device) when neither can say or the driver names a location type the shim
// does not know (CUDA 13.4 adds a device's locality domain; such memory is
// the device's, never to be taken for the host's).
int PoolLocation(ShimState& s, CUmemoryPool pool, int fallback) {
  int type = 0;
  int id = -1;
  pthread_mutex_lock(&s.mem_mu);
  const AllocRecord* home = s.pool_homes->Find(reinterpret_cast<uint64_t>(pool));
  int recorded = home != nullptr ? home->device : -2;
  pthread_mutex_unlock(&s.mem_mu);
  if (home != nullptr) {
    return recorded;
  }
  if (s.mem_pool_get_attribute(pool, CU_MEMPOOL_ATTR_LOCATION_TYPE, &type) != CUDA_SUCCESS) {
    return fallback;
  }
  if (HostLocation(type)) {
    return -1;
  }
  if (type == CU_MEM_LOCATION_TYPE_DEVICE &&
      s.mem_pool_get_attribute(pool, CU_MEMPOOL_ATTR_LOCATION_ID, &id) == CUDA_SUCCESS && id >= 0) {
    return id;
  }
  return fallback;
}

}  // namespace

bool HostLocation(int type) {
  return type == CU_MEM_LOCATION_TYPE_HOST || type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

int LocationDevice(const CUmemLocation& location) {
  if (HostLocation(location.type)) {
    return -1;
  }
  if (location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    return location.id;
  }
  int device = -1;
  return CurrentDevice(&device) ? device : -1;
}

PoolTrack TrackPool(CUmemoryPool pool, int* device) {
  ShimState& s = State();
  auto key = reinterpret_cast<uint64_t>(pool);
  if (key == 0) {
    return PoolTrack::kPerAllocation;
  }
  pthread_mutex_lock(&s.pool_mu);
  PoolAccount* account = FindPoolLocked(s, key);
  uint64_t reserve = 0;
  PoolTrack result = PoolTrack::kPerAllocation;
  if (account == nullptr && ReadReserve(s, key, &reserve)) {
    int where = PoolLocation(s, pool, *device);
    account = FindPoolLocked(s, 0);
    if (account != nullptr) {
      account->pool = key;
      account->device = where;
      account->charged = 0;  // The first SyncPool charges what it already holds.
    } else {
      if (!s.warned_pools) {
        s.warned_pools = true;
        Logf(LogLevel::kWarn,
             "more than %d memory pools in use; further pools are charged per allocation",
             kMaxPools);
      }
      // Untracked, it is still charged where it lives (per allocation).
      *device = where;
      result = where < 0 ? PoolTrack::kHostMemory : PoolTrack::kPerAllocation;
    }
  }
  if (account != nullptr) {
    *device = account->device;
    result = account->device < 0 ? PoolTrack::kHostMemory : PoolTrack::kByReserve;
  }
  pthread_mutex_unlock(&s.pool_mu);
  return result;
}

Charge SyncPool(CUmemoryPool pool) {
  ShimState& s = State();
  auto key = reinterpret_cast<uint64_t>(pool);
  Charge c = Charge::kNotLimited;
  PoolAccount gone;
  pthread_mutex_lock(&s.pool_mu);
  if (PoolAccount* a = key != 0 ? FindPoolLocked(s, key) : nullptr) {
    if (a->live == 0) {
      c = SyncLocked(s, *a);
    } else if (--a->live == 0) {
      // The last block of a destroyed pool: the driver frees the pool's memory now.
      gone = *a;
      *a = PoolAccount();
    }
  }
  pthread_mutex_unlock(&s.pool_mu);
  if (gone.charged != 0) {
    UnchargeBytes(gone.device, gone.charged);
  }
  return c;
}

void SyncPools(int device) {
  ShimState& s = State();
  pthread_mutex_lock(&s.pool_mu);
  for (PoolAccount& a : s.pools) {
    if (a.pool != 0 && a.device == device) {
      SyncLocked(s, a);
    }
  }
  pthread_mutex_unlock(&s.pool_mu);
}

bool TakePool(CUmemoryPool pool, PoolAccount* out) {
  ShimState& s = State();
  auto key = reinterpret_cast<uint64_t>(pool);
  bool found = false;
  pthread_mutex_lock(&s.pool_mu);
  if (PoolAccount* a = key != 0 ? FindPoolLocked(s, key) : nullptr) {
    *out = *a;
    *a = PoolAccount();
    found = true;
  }
  pthread_mutex_unlock(&s.pool_mu);
  return found;
}

void RestorePool(const PoolAccount& account) {
  ShimState& s = State();
  pthread_mutex_lock(&s.pool_mu);
  PoolAccount* entry = FindPoolLocked(s, account.pool);
  if (entry == nullptr) {
    entry = FindPoolLocked(s, 0);
  }
  bool restored = entry != nullptr;
  if (restored) {
    uint64_t had = entry->pool == account.pool ? entry->charged : 0;
    *entry = account;
    entry->charged += had;
  }
  pthread_mutex_unlock(&s.pool_mu);
  if (!restored) {
    UnchargeBytes(account.device, account.charged);
  }
}

namespace {

// Renames every record whose `field` (its pool link or its context) is
// `from` to `to`, counting them: the pools' and the contexts' bookkeeping
// both move records onto a mark this way.
struct Relabel {
  uint64_t AllocRecord::*field;
  uint64_t from;
  uint64_t to;
  size_t count;
};

void RelabelRecord(void* ctx, uint64_t, AllocRecord* record) {
  auto* r = static_cast<Relabel*>(ctx);
  if (record->*r->field == r->from) {
    record->*r->field = r->to;
    ++r->count;
  }
}

}  // namespace

void RetirePool(const PoolAccount& account) {
  ShimState& s = State();
  bool kept = false;
  pthread_mutex_lock(&s.pool_mu);
  PoolAccount* entry = account.device >= 0 && account.charged != 0 ? FindPoolLocked(s, 0) : nullptr;
  if (entry != nullptr) {
    // The pointers' records link to a mark from now on: a pool created later
    // may get the dead handle, and its blocks are not these.
    pthread_mutex_lock(&s.mem_mu);
    Relabel relink{&AllocRecord::link, account.pool, kMarkBit | ++s.context_marks, 0};
    s.pointers->ForEachMutable(RelabelRecord, &relink);
    pthread_mutex_unlock(&s.mem_mu);
    if (relink.count != 0) {
      *entry = account;
      entry->pool = relink.to;
      entry->live = relink.count;
      kept = true;
    }
  }
  pthread_mutex_unlock(&s.pool_mu);
  if (!kept) {
    UnchargeBytes(account.device, account.charged);
  }
}

void RememberPoolPointer(uint64_t key, CUmemoryPool pool, int device) {
  ShimState& s = State();
  AllocRecord r;
  r.bytes = 0;
  r.device = device;
  r.link = reinterpret_cast<uint64_t>(pool);
  AllocRecord stale;
  pthread_mutex_lock(&s.mem_mu);
  bool replaced = s.pointers->Take(key, &stale);  // Stale, as in Remember.
  // If it cannot be recorded, its free does not re-read the pool; the pool's
  // next allocation, trim or a memory query does.
  s.pointers->Put(key, r);
  pthread_mutex_unlock(&s.mem_mu);
  if (replaced) {
    ReleaseRecord(stale);
  }
}

void RememberPoolHome(CUmemoryPool pool, const CUmemLocation& location) {
  AllocRecord r;
  if (location.type == CU_MEM_LOCATION_TYPE_DEVICE && location.id >= 0) {
    r.device = location.id;
  } else if (HostLocation(location.type)) {
    r.device = -1;
  } else {
    return;  // Unknown to the shim: charged to the caller's device, as before.
  }
  ShimState& s = State();
  auto key = reinterpret_cast<uint64_t>(pool);
  pthread_mutex_lock(&s.mem_mu);
  AllocRecord stale;
  s.pool_homes->Take(key, &stale);  // A handle destroyed where the shim did not see it.
  s.pool_homes->Put(key, r);
  pthread_mutex_unlock(&s.mem_mu);
}

bool ForgetPoolHome(CUmemoryPool pool, AllocRecord* out) {
  return TakeRecord(State().pool_homes, reinterpret_cast<uint64_t>(pool), out);
}

void RestorePoolHome(CUmemoryPool pool, const AllocRecord& record) {
  ShimState& s = State();
  pthread_mutex_lock(&s.mem_mu);
  s.pool_homes->Put(reinterpret_cast<uint64_t>(pool), record);
  pthread_mutex_unlock(&s.mem_mu);
}

namespace {

constexpr int kDropBatch = 64;

// Which records of a device a primary context reset freed (DropDeviceRecords).
struct ResetScope {
  int device;
  AllocTable* created;    // Live contexts created through the shim: their memory stays.
  const uint64_t* pools;  // The pools the reset freed (the default pool).
  int pool_count;
};

enum class ResetRule {
  kAll,            // Every record of the device.
  kByContext,      // Those of no created context: the primary context's, or of none known.
  kPoolOrContext,  // Pointers: a pool block by its pool, any other as kByContext.
};

struct DeviceCollector {
  const ResetScope* scope;
  ResetRule rule;
  uint64_t keys[kDropBatch];
  int count;
};

bool FreedByReset(const ResetScope& r, ResetRule rule, const AllocRecord& record) {
  if (record.device != r.device) {
    return false;
  }
  if (rule == ResetRule::kAll) {
    return true;
  }
  if (rule == ResetRule::kPoolOrContext && record.link != 0) {
    for (int i = 0; i < r.pool_count; ++i) {
      if (record.link == r.pools[i]) {
        return true;
      }
    }
    return false;  // A created pool's block (or a destroyed pool's): it survives.
  }
  return record.context == 0 || r.created == nullptr || r.created->Find(record.context) == nullptr;
}

void CollectOfDevice(void* ctx, uint64_t key, const AllocRecord& record) {
  auto* c = static_cast<DeviceCollector*>(ctx);
  if (c->count < kDropBatch && FreedByReset(*c->scope, c->rule, record)) {
    c->keys[c->count++] = key;
  }
}

// Takes the records `rule` picks from `table`, a batch per lock hold;
// returns the bytes they were charged when `charged` (not so for executable
// graphs, charged elsewhere).
uint64_t TakeDeviceRecords(ShimState& s, AllocTable* table, const ResetScope& scope, ResetRule rule,
                           bool charged) {
  uint64_t bytes = 0;
  for (;;) {
    DeviceCollector c{&scope, rule, {}, 0};
    pthread_mutex_lock(&s.mem_mu);
    table->ForEach(CollectOfDevice, &c);
    for (int i = 0; i < c.count; ++i) {
      AllocRecord r;
      if (table->Take(c.keys[i], &r) && charged) {
        bytes += r.bytes;
      }
    }
    pthread_mutex_unlock(&s.mem_mu);
    if (c.count < kDropBatch) {
      return bytes;
    }
  }
}

struct MarkedBytes {
  uint64_t mark;
  uint64_t bytes[kMaxDevices];
};

bool TakeMarked(void* ctx, uint64_t, const AllocRecord& record) {
  auto* m = static_cast<MarkedBytes*>(ctx);
  if (record.context != m->mark) {
    return false;
  }
  if (record.device >= 0 && record.device < kMaxDevices) {
    m->bytes[record.device] += record.bytes;
  }
  return true;
}

}  // namespace

uint64_t MarkContextRecords(uint64_t context) {
  ShimState& s = State();
  if (context == 0 || s.pointers == nullptr) {
    return 0;
  }
  pthread_mutex_lock(&s.mem_mu);
  Relabel relabel{&AllocRecord::context, context, kMarkBit | ++s.context_marks, 0};
  for (AllocTable* table : {s.pointers, s.arrays, s.ipc, s.heaps}) {  // Owner::kContext.
    table->ForEachMutable(RelabelRecord, &relabel);
  }
  pthread_mutex_unlock(&s.mem_mu);
  return relabel.count > 0 ? relabel.to : 0;
}

void SettleContextRecords(uint64_t mark, uint64_t context, bool destroyed) {
  ShimState& s = State();
  if (mark == 0) {
    return;
  }
  MarkedBytes taken{mark, {}};
  Relabel relabel{&AllocRecord::context, mark, context, 0};
  pthread_mutex_lock(&s.mem_mu);
  for (AllocTable* table : {s.pointers, s.arrays, s.ipc, s.heaps}) {
    if (destroyed) {
      table->TakeIf(TakeMarked, &taken);
    } else {
      table->ForEachMutable(RelabelRecord, &relabel);
    }
  }
  pthread_mutex_unlock(&s.mem_mu);
  for (int d = 0; d < kMaxDevices; ++d) {
    if (taken.bytes[d] > 0) {
      UnchargeBytes(d, taken.bytes[d]);
    }
  }
}

size_t DisownContextRecords(uint64_t context) {
  ShimState& s = State();
  if (context == 0 || s.pointers == nullptr) {
    return 0;
  }
  Relabel relabel{&AllocRecord::context, context, 0, 0};
  pthread_mutex_lock(&s.mem_mu);
  for (AllocTable* table : {s.pointers, s.arrays, s.ipc}) {  // Those of Owner::kContext.
    table->ForEachMutable(RelabelRecord, &relabel);
  }
  pthread_mutex_unlock(&s.mem_mu);
  return relabel.count;
}

void RememberCreatedContext(uint64_t context, int device) {
  ShimState& s = State();
  if (context == 0 || s.contexts == nullptr) {
    return;
  }
  AllocRecord r;
  r.device = device;
  r.context = context;
  pthread_mutex_lock(&s.mem_mu);
  AllocRecord stale;
  s.contexts->Take(context, &stale);  // A handle whose context ended unseen.
  // Unrecorded (out of memory), a reset takes its memory for the primary
  // context's: its charges go early, as before this table.
  s.contexts->Put(context, r);
  pthread_mutex_unlock(&s.mem_mu);
}

void ForgetCreatedContext(uint64_t context) {
  ShimState& s = State();
  AllocRecord gone;
  if (context != 0 && s.contexts != nullptr) {
    TakeRecord(s.contexts, context, &gone);
  }
}

void DropDeviceRecords(int device, CUmemoryPool default_pool) {
  ShimState& s = State();
  if (device < 0 || device >= kMaxDevices || s.pointers == nullptr) {
    return;
  }
  uint64_t bytes = 0;
  uint64_t freed_pools[kMaxPools];
  int freed_count = 0;
  pthread_mutex_lock(&s.pool_mu);
  for (PoolAccount& a : s.pools) {
    if (a.pool == 0 || a.device != device || a.live != 0) {
      continue;  // A destroyed pool's blocks are no context's: they stay, and its charge.
    }
    bool freed = false;
    if (default_pool != nullptr) {
      freed = a.pool == reinterpret_cast<uint64_t>(default_pool);
    } else {
      // The driver did not name the default pool: a pool not created
      // through the shim is taken for it (the default or current pool).
      pthread_mutex_lock(&s.mem_mu);
      freed = s.pool_homes->Find(a.pool) == nullptr;
      pthread_mutex_unlock(&s.mem_mu);
    }
    if (freed) {
      bytes += a.charged;
      freed_pools[freed_count++] = a.pool;
      a = PoolAccount();
    }
  }
  bytes += s.graph_charged[device];  // The graph pool went with the context.
  s.graph_charged[device] = 0;
  s.graph_seen[device] = false;
  pthread_mutex_unlock(&s.pool_mu);
  pthread_mutex_lock(&s.mem_mu);
  ++s.graph_epoch[device];  // No graph of the device is mapped any more.
  pthread_mutex_unlock(&s.mem_mu);
  const ResetScope scope{device, s.contexts, freed_pools, freed_count};
  // Pool pointers carry 0 bytes.
  bytes += TakeDeviceRecords(s, s.pointers, scope, ResetRule::kPoolOrContext, true);
  bytes += TakeDeviceRecords(s, s.arrays, scope, ResetRule::kByContext, true);
  bytes += TakeDeviceRecords(s, s.ipc, scope, ResetRule::kByContext, true);
  bytes += TakeDeviceRecords(s, s.heaps, scope, ResetRule::kByContext, true);
  TakeDeviceRecords(s, s.graph_execs, scope, ResetRule::kAll, false);
  if (bytes > 0) {
    UnchargeBytes(device, bytes);
  }
  // The pools that stay hold what they held; re-read, they settle anything
  // the driver changed (a pool on another device is untouched).
  SyncPools(device);
}

uint64_t RoundToGranularity(uint64_t bytes) {
  if (bytes == 0) {
    return kAllocGranularity;  // The driver still hands out a page.
  }
  if (bytes > UINT64_MAX - kAllocGranularity) {
    return UINT64_MAX;
  }
  return (bytes + kAllocGranularity - 1) / kAllocGranularity * kAllocGranularity;
}

bool StreamCapturing(CUstream stream, bool per_thread) {
  auto is_capturing = State().stream_is_capturing[per_thread ? 1 : 0];
  int capture = 0;
  return is_capturing != nullptr && is_capturing(stream, &capture) == CUDA_SUCCESS && capture != 0;
}

bool CurrentDevice(int* device) {
  ShimState& s = State();
  CUdevice d = 0;
  if (s.ctx_get_device == nullptr || s.ctx_get_device(&d) != CUDA_SUCCESS) {
    return false;
  }
  *device = d;
  return true;
}

uint64_t CurrentContext() {
  ShimState& s = State();
  CUcontext ctx = nullptr;
  if (s.ctx_get_current == nullptr || s.ctx_get_current(&ctx) != CUDA_SUCCESS) {
    return 0;
  }
  return reinterpret_cast<uint64_t>(ctx);
}

bool StreamDevice(CUstream stream, int* device) {
  ShimState& s = State();
  if (stream == nullptr || stream == ACCELPOOL_CU_STREAM_LEGACY ||
      stream == ACCELPOOL_CU_STREAM_PER_THREAD) {
    return CurrentDevice(device);  // The current context's own default stream.
  }
  CUdevice d = 0;
  if (s.stream_get_device != nullptr && s.stream_get_device(stream, &d) == CUDA_SUCCESS) {
    *device = d;
    return true;
  }
  CUcontext ctx = nullptr;
  if (s.stream_get_ctx == nullptr || s.stream_get_ctx(stream, &ctx) != CUDA_SUCCESS ||
      ctx == nullptr || reinterpret_cast<uint64_t>(ctx) == CurrentContext() ||
      s.ctx_push_current == nullptr || s.ctx_pop_current == nullptr ||
      s.ctx_push_current(ctx) != CUDA_SUCCESS) {
    return CurrentDevice(device);
  }
  bool known = CurrentDevice(device);
  CUcontext popped = nullptr;
  s.ctx_pop_current(&popped);  // The caller's context is current again.
  return known || CurrentDevice(device);
}

namespace {

// "GPU-" and the 16 bytes as NVIDIA prints a UUID (8-4-4-4-12 hex digits).
void FormatUuid(const CUuuid& uuid, char (&out)[kDeviceIdLen]) {
  static constexpr char kHex[] = "0123456789abcdef";
  char* p = out;
  std::memcpy(p, "GPU-", 4);
  p += 4;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) {
      *p++ = '-';
    }
    const auto b = static_cast<unsigned char>(uuid.bytes[i]);
    *p++ = kHex[b >> 4];
    *p++ = kHex[b & 15];
  }
  *p = '\0';
}

}  // namespace

void WarnUnmappedDevice(const char* uuid, const char* what, int number) {
  ShimState& s = State();
  if (!s.warned_device_map.exchange(true, std::memory_order_relaxed)) {
    Logf(LogLevel::kWarn,
         "%s %d (%s) is not among the container's devices (ACCELPOOL_CUDA_DEVICE_UUIDS); its "
         "limits and usage are taken to be those of the container's device %d",
         what, number, uuid[0] != '\0' ? uuid : "UUID unreadable", number);
  }
}

int ContainerIndex(int ordinal) {
  ShimState& s = State();
  if (ordinal < 0 || ordinal >= kMaxDevices || s.config.device_uuid_count == 0) {
    return ordinal;
  }
  const int known = s.container_index[ordinal].load(std::memory_order_relaxed);
  if (known != 0) {
    return known - 1;
  }
  CUuuid uuid{};
  const CUresult rc =
      s.device_get_uuid != nullptr ? s.device_get_uuid(&uuid, ordinal) : CUDA_ERROR_NOT_FOUND;
  if (rc == CUDA_ERROR_NOT_INITIALIZED) {
    return ordinal;  // Asked again once the process has initialised the driver.
  }
  char text[kDeviceIdLen] = {};
  int index = -1;
  if (rc == CUDA_SUCCESS) {
    FormatUuid(uuid, text);
    index = s.config.DeviceIndexOf(text);
  }
  if (index < 0) {
    WarnUnmappedDevice(text, "CUDA device", ordinal);
    index = ordinal;
  }
  s.container_index[ordinal].store(index + 1, std::memory_order_relaxed);
  return index;
}

bool DeviceMemoryLimited(int ordinal) {
  return State().config.MemoryLimited(ContainerIndex(ordinal));
}

uint64_t DeviceMemoryCap(int ordinal) {
  const int index = ContainerIndex(ordinal);
  return index >= 0 && index < kMaxDevices ? State().config.memory_limit_bytes[index] : 0;
}

uint64_t IndexUsed(int index) {
  ShimState& s = State();
  return s.region == nullptr ? 0 : s.region->Used(index);
}

uint64_t ContainerUsed(int device) { return IndexUsed(ContainerIndex(device)); }

uint64_t PendingContextReserve(int index) {
  ShimState& s = State();
  const uint64_t reserve = s.config.context_reserve_bytes;
  if (reserve == 0 || s.region == nullptr || index < 0 || index >= kMaxDevices) {
    return 0;
  }
  pthread_mutex_lock(&s.mem_mu);
  int slot = s.slot;  // No slot yet: nothing charged yet (a query claims none).
  pthread_mutex_unlock(&s.mem_mu);
  return slot >= 0 && s.region->ContextCharged(slot, index) ? 0 : reserve;
}

void SyncIndex(int index) {
  ShimState& s = State();
  for (int d = 0; d < kMaxDevices; ++d) {
    const int known = s.config.device_uuid_count == 0
                          ? d + 1
                          : s.container_index[d].load(std::memory_order_relaxed);
    if (known == index + 1) {
      SyncPools(d);
      SyncGraphMemory(d);
    }
  }
}

}  // namespace accelpool::cuda
