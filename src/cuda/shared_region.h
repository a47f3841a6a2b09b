// SharedRegion: the per-container accounting state shared by every process.
//
// One file, `<state dir>/accelpool-cuda.region`, is mmap'd MAP_SHARED by each
// process of a container. It holds a process-shared robust mutex, one slot per
// live process (owner PID + process start time + bytes charged per device) and
// one token bucket per device, each with its own robust mutex. A container's
// usage on a device is the sum over live slots, so memory held by a process
// that died (even by SIGKILL, which runs no cleanup) is reclaimed the next
// time anyone needs the figure: on slot claim, on a charge that would exceed
// the cap, on every usage query, and whenever a lock comes back EOWNERDEAD.
// A slot is "dead" when kill(pid, 0) fails with ESRCH, when the process has
// exited but not been reaped (a zombie: /proc/<pid>/stat state Z with no live
// thread left, or X), or when the PID now belongs to a process with a
// different start time (PID reuse) and does not hold the slot's liveness
// lock (below). A process that claims a slot frees any
// slot with its own PID and start time: that one belongs to the program it
// replaced by exec, which ran no cleanup.
//
// A process that claims a slot of a file region also holds the slot's
// liveness lock (region_format.h) until it releases the slot, dies or execs,
// so the device plugin, outside the container's PID namespace, can leave a
// dead process's bytes out of its usage metrics before anyone reclaims the
// slot. The lock is a POSIX record lock, which a process loses when it closes
// *any* descriptor of the file: the region keeps its one descriptor open for
// its life, and a process should map one region per file (the shim does).
// The container's own reclaim goes by the lock only with the mapping: a
// process that closed every descriptor it did not open itself loses its lock
// while alive, and freeing its slot would drop its charge from the cap. A
// marked slot whose lock is gone is freed only when its live owner no
// longer maps the region file (/proc/<pid>/maps): it execed into an image
// that does not use the region (one that does frees it at its start).
// Where the maps cannot be read, the slot stays. A maps line names the
// region file by its canonical path or by its device and inode; either
// match keeps the slot (a state dir named with a trailing slash or through
// a link used to match neither, and a live process's slot was freed).
//
// A live process that holds its slot's liveness lock is alive whatever its
// start time reads: under qemu-user a process's own /proc/self/stat is
// answered by qemu, with a start time that may differ from the kernel's
// figure that everyone else reads, and its live slot was freed. The kernel
// drops the lock when its holder dies or execs, so a held lock whose holder
// has the slot's pid proves that very process lives.
//
// Slots are never compacted, and callers keep the claim number ClaimSlot
// returns, never a slot index or a pointer into the mapping. Each call with
// a claim checks under the region mutex that the claim's slot still holds
// the pid and start time it was claimed with. A slot freed while its owner
// lived (a liveness check fooled, see above) may be claimed by another
// process; the first owner then never touches it again, and its claim moves
// to a free slot, carrying everything it has charged (the region object
// keeps its own copy of that figure).
// When no state dir is configured the region lives in private anonymous
// memory: the same code, per-process scope.
//
// Error reporting: the shim runs inside arbitrary processes without libstdc++,
// so Open() fills a caller's char buffer instead of returning a Status.
//
// Thread-safety: all methods are safe from any thread of any process sharing
// the file; the object itself must outlive its users.
#ifndef ACCELPOOL_CUDA_SHARED_REGION_H_
#define ACCELPOOL_CUDA_SHARED_REGION_H_

#include <limits.h>
#include <pthread.h>

#include <cstddef>
#include <cstdint>

#include "cuda/config.h"
#include "cuda/region_format.h"
#include "cuda/throttle.h"

namespace accelpool::cuda {

inline constexpr char kRegionFileName[] = "accelpool-cuda.region";
inline constexpr char kBootIdPath[] = "/proc/sys/kernel/random/boot_id";

enum class ChargeResult { kOk, kOverLimit, kUnavailable };

class SharedRegion {
 public:
  SharedRegion() = default;
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // Maps (creating and initialising if needed) the region file in `dir`.
  // Returns false and writes a one-line reason to `error` on failure (missing
  // or unwritable dir, a file of a newer layout version). A file left by an
  // earlier boot (its boot id is not the one `boot_id_path` holds now), or
  // one of an older layout, that no live process holds a liveness lock on is
  // created afresh: its locks may name owners that died with the node.
  bool OpenFile(const char* dir, char* error, size_t error_len,
                const char* boot_id_path = kBootIdPath);
  // Maps private anonymous memory with the same layout.
  bool OpenPrivate(char* error, size_t error_len);
  bool is_open() const { return layout_ != nullptr; }

  // Claims a slot for (pid, start_time), reclaiming dead slots and the slot
  // of the image this process replaced by exec (same pid and start time)
  // first, and takes the slot's liveness lock (marking the slot when it has
  // it). Returns a claim number (>= 0) for the calls below, or -1 when all
  // kMaxSlots are held by live processes or this object holds kMaxClaims.
  int ClaimSlot(int32_t pid, uint64_t start_time);
  // Zeroes the claim's slot, frees it and drops its liveness lock (normal
  // process exit); a slot that another process holds by now is left alone.
  void ReleaseSlot(int claim);
  // ReleaseSlot without waiting: when the region mutex is held (by another
  // thread or process, or by this very thread, interrupted inside a hook by
  // a signal whose handler exits) nothing is done and false is returned.
  bool TryReleaseSlot(int claim);
  // Frees the slots of (pid, start_time): called once per image at its
  // start, they are the slots of the image this process replaced by exec,
  // which ran no cleanup (ClaimSlot does the same, for an image that never
  // claims).
  void ForgetReplacedImage(int32_t pid, uint64_t start_time);
  // In a forked child: it holds none of its parent's slots (nor their
  // liveness locks), so the parent's claims are forgotten. Takes no lock.
  void ForgetClaimsAfterFork();

  // The calls below that take a claim first make sure it still owns its slot
  // (see the file comment); a claim that cannot get a slot back (all held)
  // charges nothing and is refused with kOverLimit.
  //
  // Adds `bytes` (plus `context_reserve` the first time this claim charges
  // `device`) to the slot if the container total stays <= `limit`. On a would-
  // be overflow, dead slots are reclaimed and the check repeated once.
  ChargeResult TryCharge(int claim, int device, uint64_t bytes, uint64_t limit,
                         uint64_t context_reserve);
  // Subtracts up to `bytes` from the claim (never below zero).
  void Uncharge(int claim, int device, uint64_t bytes);
  // Container usage on `device` after reclaiming dead slots.
  uint64_t Used(int device);
  // Bytes charged by one claim on one device.
  uint64_t SlotUsed(int claim, int device);
  // Whether the claim's slot was charged its context reserve on `device`
  // (its first charge there: TryCharge).
  bool ContextCharged(int claim, int device);
  // The slot index a claim has now, or -1 (tests, diagnostics).
  int SlotIndex(int claim);
  // Frees the slots of dead processes; returns how many were reclaimed.
  int ReclaimDead();
  // Slots held, after reclaiming dead processes (tests, diagnostics).
  int SlotsInUse();

  // IPC exports. A process that exports memory (cuIpcGetMemHandle) records
  // the handle's key; when another process of the same container imports it,
  // the memory is already charged to the exporter and is not charged again.
  // A record lasts while its exporter lives; the oldest record of a dead
  // exporter, or else the oldest record, makes room for a new one.
  void RecordExport(int claim, uint64_t key);
  // True when a live process of this container exported `key`.
  bool ExportedHere(uint64_t key);

  // The device's token bucket under its own robust mutex. Returns nullptr if
  // the lock cannot be taken; otherwise the caller must call UnlockBucket.
  TokenBucketState* LockBucket(int device);
  void UnlockBucket(int device);

  // Exposes the region mutex so that tests can kill a process that holds it.
  // REQUIRES: Unlock() after a true Lock().
  bool Lock();
  void Unlock();

  // The claims one object can hold at once (the shim holds one).
  static constexpr int kMaxClaims = 32;

 private:
  // What this process claimed, kept in its own memory: the identity to check
  // its slot against, and what it has charged there, to carry to another
  // slot when the first was taken. Guarded by the region mutex.
  struct Claim {
    bool held;
    int slot;  // -1: none at the moment (all were held when it had to move).
    int32_t pid;
    uint64_t start_time;
    uint32_t device_mask;  // Devices whose context reserve is charged.
    uint64_t used[kMaxDevices];
  };

  // `boot_id`: stored in a region it creates (nullptr: none).
  bool Map(int fd, bool create, const char* boot_id, char* error, size_t error_len);
  int ReclaimDeadLocked();
  // Lock() without waiting: false when the mutex is held.
  bool TryLock();
  // REQUIRES: the region mutex held.
  void ReleaseSlotLocked(int claim);
  // Whether `slot` is one this very process claims through this object: it
  // lives, whatever start time it reads for itself now (under qemu-user
  // each thread reads its own). REQUIRES: the region mutex held.
  bool ClaimedHereLocked(int slot, const SlotRecord& s, int32_t self) const;
  // Whether the owner of `slot` holds the slot's liveness lock (and so lives).
  bool HeldByItsOwner(int slot, const SlotRecord& s, int32_t self) const;
  // A slot whose owner lives but execed into an image that does not use the
  // region: its liveness lock is gone and the process no longer maps the
  // region file.
  bool LeftByExec(int slot, const SlotRecord& s, int32_t self) const;
  // Takes (F_WRLCK) or drops (F_UNLCK) the liveness lock of `slot`.
  bool SetLivenessLock(int slot, short type);
  // Drops this process's liveness lock on `slot` unless another of its
  // claims sits there (the lock is per process, not per claim).
  void DropLockUnlessClaimedLocked(int slot, int except_claim);
  // The claim's slot index after making sure the slot is still the claim's,
  // moving it to a free slot when not; -1 when the claim is not held or no
  // slot is free. REQUIRES: the region mutex held.
  int OwnSlotLocked(int claim);
  bool ValidClaim(int claim) const { return claim >= 0 && claim < kMaxClaims; }
  // Remembers the device and inode of the region file open as `fd`.
  void RememberFileId(int fd);

  RegionLayout* layout_ = nullptr;
  size_t mapped_size_ = 0;
  int fd_ = -1;  // The region file, open while mapped: its record locks live on it.
  // The region file's canonical path ("" for private memory), and its device
  // and inode when fstat answered: how other processes' maps name it.
  char path_[PATH_MAX + 32] = {};
  bool have_inode_ = false;
  uint64_t file_dev_major_ = 0;
  uint64_t file_dev_minor_ = 0;
  uint64_t file_inode_ = 0;
  Claim claims_[kMaxClaims] = {};
};

// Start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat);
// 0 if unknown. Used to detect PID reuse.
uint64_t ProcessStartTime(int32_t pid);

// The fields of a /proc/<pid>/stat line the region uses.
struct ProcStat {
  char state = 0;           // Field 3: R, S, D, Z (zombie), X (dead), ...
  uint64_t threads = 0;     // Field 20.
  uint64_t start_time = 0;  // Field 22, clock ticks since boot.
};
// Parses a /proc/<pid>/stat line. The command name (field 2) may hold spaces
// and parentheses, so fields are counted from the *last* ')'. False when the
// line is cut short before field 22.
bool ParseProcStat(const char* line, ProcStat* out);

}  // namespace accelpool::cuda

#endif  // ACCELPOOL_CUDA_SHARED_REGION_H_
