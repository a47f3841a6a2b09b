#include "cuda/shared_region.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "cuda/log.h"
#include "cuda/region_format.h"

namespace accelpool::cuda {

namespace {
constexpr uint64_t kMagic = kRegionMagic;
constexpr uint32_t kLayoutVersion = kRegionLayoutVersion;
}  // namespace

namespace {

// A process-shared mutex, robust where the kernel supports robust futexes
// (every Linux since 2.6.17 on x86-64 and Arm; glibc refuses them only where
// the kernel lacks set_robust_list). Without robustness a holder killed
// inside the lock would block the container's other processes, so that is
// said once. Returns 0 or the errno of pthread_mutex_init.
int InitRobustMutex(pthread_mutex_t* mu) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(mu, &attr);
  if (rc != 0) {
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_STALLED);
    rc = pthread_mutex_init(mu, &attr);
    static bool said = false;
    if (rc == 0 && !__atomic_exchange_n(&said, true, __ATOMIC_RELAXED)) {
      Logf(LogLevel::kWarn,
           "robust mutexes are not available here; a process killed while "
           "updating the accounting region would block the others");
    }
  }
  pthread_mutexattr_destroy(&attr);
  return rc;
}

// Locks a robust mutex; on EOWNERDEAD marks it consistent and reports it.
bool LockRobust(pthread_mutex_t* mu, bool* owner_died) {
  int rc = pthread_mutex_lock(mu);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(mu);
    if (owner_died != nullptr) {
      *owner_died = true;
    }
    return true;
  }
  return rc == 0;
}

bool ReadProcStat(int32_t pid, ProcStat* out) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return false;
  }
  buf[n] = '\0';
  return ParseProcStat(buf, out);
}

bool IsAlive(int32_t pid, uint64_t start_time) {
  if (pid <= 0) {
    return false;
  }
  if (kill(pid, 0) != 0 && errno == ESRCH) {
    return false;
  }
  // kill(pid, 0) succeeds for a zombie: a process killed (even by SIGKILL)
  // whose parent has not reaped it yet. Its memory is gone. A group leader
  // that called pthread_exit is also shown as Z, but with live threads.
  ProcStat st;
  if (!ReadProcStat(pid, &st)) {
    return true;  // Cannot tell: keep the slot.
  }
  if (st.state == 'X' || (st.state == 'Z' && st.threads <= 1)) {
    return false;
  }
  if (start_time != 0 && st.start_time != 0 && st.start_time != start_time) {
    return false;  // The PID was reused by another process.
  }
  return true;
}

bool ValidDevice(int device) { return device >= 0 && device < kMaxDevices; }

// The pid of the process that holds the liveness lock of `slot` on the region
// file open as `fd`, as this process's PID namespace numbers it; 0 when none
// does (or the holder is this process: its own locks never conflict with its
// own test) or the kernel cannot say. Takes no lock.
int32_t LivenessLockHolder(int fd, int slot) {
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = LivenessLockOffset(slot);
  fl.l_len = 1;
  if (fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type == F_UNLCK) {
    return 0;
  }
  return static_cast<int32_t>(fl.l_pid);
}

// The region file as a line of /proc/<pid>/maps may name it.
struct MappedFileId {
  const char* path;  // Canonical: symbolic links resolved, no "//" or trailing "/".
  bool have_inode;   // The fields below are known (fstat answered).
  uint64_t dev_major;
  uint64_t dev_minor;
  uint64_t inode;
};

// Parses the digits of base `base` at line[*i] on; false when there are none.
bool ParseDigits(const char* line, size_t len, size_t* i, int base, uint64_t* out) {
  uint64_t v = 0;
  size_t start = *i;
  for (; *i < len; ++*i) {
    const char c = line[*i];
    int d = c >= '0' && c <= '9' ? c - '0' : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) {
      break;
    }
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
  }
  *out = v;
  return *i > start;
}

// Whether one line of a maps file (without its newline) maps the file `id`:
// "start-end perms offset major:minor inode   path". Either the path or the
// device and inode will do: the kernel prints the path as it resolves it,
// which may not be how this process named the file (a bind mount), and the
// device and inode of the file an overlay or a btrfs subvolume maps, which
// may not be the ones fstat reports. Either match keeps the slot: the safe
// side.
bool LineMapsFile(const char* line, size_t len, const MappedFileId& id) {
  const size_t plen = std::strlen(id.path);
  if (plen > 0 && len > plen && line[len - plen - 1] == ' ' &&
      std::memcmp(line + len - plen, id.path, plen) == 0) {
    return true;
  }
  if (!id.have_inode) {
    return false;
  }
  size_t i = 0;
  for (int field = 0; field < 3; ++field) {  // Address range, permissions, offset.
    while (i < len && line[i] != ' ') {
      ++i;
    }
    while (i < len && line[i] == ' ') {
      ++i;
    }
  }
  uint64_t dev_major = 0;
  uint64_t dev_minor = 0;
  uint64_t inode = 0;
  if (!ParseDigits(line, len, &i, 16, &dev_major) || i >= len || line[i++] != ':' ||
      !ParseDigits(line, len, &i, 16, &dev_minor) || i >= len || line[i++] != ' ' ||
      !ParseDigits(line, len, &i, 10, &inode)) {
    return false;
  }
  return inode != 0 && inode == id.inode && dev_major == id.dev_major && dev_minor == id.dev_minor;
}

// Whether process `pid` maps the file `id` (a line of /proc/<pid>/maps, see
// LineMapsFile); true when that cannot be read (another user's process): the
// safe side, its slot is kept.
bool MapsFile(int32_t pid, const MappedFileId& id) {
  char maps[64];
  std::snprintf(maps, sizeof(maps), "/proc/%d/maps", static_cast<int>(pid));
  int fd = open(maps, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return true;
  }
  char buf[8192];
  size_t len = 0;
  bool found = false;
  bool readable = false;
  for (;;) {
    ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    readable = true;
    len += static_cast<size_t>(n);
    size_t start = 0;
    for (size_t i = 0; i < len && !found; ++i) {
      if (buf[i] != '\n') {
        continue;
      }
      found = LineMapsFile(buf + start, i - start, id);
      start = i + 1;
    }
    if (found) {
      break;
    }
    if (start == 0 && len == sizeof(buf) - 1) {
      len = 0;  // A line longer than the buffer (a longer path than ours): skipped.
    } else {
      std::memmove(buf, buf + start, len - start);
      len -= start;
    }
  }
  close(fd);
  return found || !readable;
}

// The first line of `path` (the kernel's boot id), NUL-terminated in `out`;
// empty when it cannot be read.
void ReadBootId(const char* path, char (&out)[kBootIdLen]) {
  std::memset(out, 0, sizeof(out));
  int fd = path != nullptr ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0) {
    return;
  }
  ssize_t n = read(fd, out, sizeof(out) - 1);
  close(fd);
  size_t len = n > 0 ? static_cast<size_t>(n) : 0;
  for (size_t i = 0; i < len; ++i) {
    if (out[i] == '\n') {
      len = i;
      break;
    }
  }
  std::memset(out + len, 0, sizeof(out) - len);
}

// Whether any process holds a record lock on the file (the liveness locks of
// region_format.h are the only ones taken on it). Takes none. A filesystem
// that cannot say answers no.
bool AnyRecordLock(int fd) {
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // The whole file and past its end.
  return fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

// Whether the region in `fd` (its magic known valid) must be created afresh:
// it was made in an earlier boot, or by an older library without a boot id,
// and no live process marks a slot of it. Its mutexes may then be held by
// threads that died with the node: the kernel marks a robust mutex's owner
// dead only when it sees that thread exit, so a lock would wait for ever.
// REQUIRES: the file's flock held.
bool LeftByAnotherBoot(int fd, const char (&boot_id)[kBootIdLen]) {
  uint32_t version = 0;
  char stored[kBootIdLen] = {};
  if (pread(fd, &version, sizeof(version), offsetof(RegionLayout, version)) != sizeof(version)) {
    return false;
  }
  if (version == kLayoutVersion) {
    if (pread(fd, stored, sizeof(stored), offsetof(RegionLayout, boot_id)) != sizeof(stored)) {
      return false;
    }
    stored[kBootIdLen - 1] = '\0';
    // Either one unknown: nothing to tell by, keep the region.
    if (stored[0] == '\0' || boot_id[0] == '\0' || std::strcmp(stored, boot_id) == 0) {
      return false;
    }
  } else if (version > kLayoutVersion || version == 0) {
    return false;  // A newer library's: refused as another layout.
  }
  return !AnyRecordLock(fd);
}

}  // namespace

bool ParseProcStat(const char* line, ProcStat* out) {
  const char* p = std::strrchr(line, ')');
  if (p == nullptr) {
    return false;
  }
  ProcStat st;
  int field = 2;
  for (++p; *p != '\0' && *p != '\n';) {
    if (*p != ' ') {
      return false;
    }
    ++p;
    ++field;
    if (field == 3) {
      st.state = *p;
    }
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; ++p) {
      v = v * 10 + static_cast<uint64_t>(*p - '0');
    }
    if (field == 20) {
      st.threads = v;
    } else if (field == 22) {
      st.start_time = v;
      *out = st;
      return true;
    }
    while (*p != ' ' && *p != '\0' && *p != '\n') {
      ++p;  // The rest of a non-numeric field (the state, a negative sign).
    }
  }
  return false;
}

uint64_t ProcessStartTime(int32_t pid) {
  ProcStat st;
  return ReadProcStat(pid, &st) ? st.start_time : 0;
}

SharedRegion::~SharedRegion() {
  if (layout_ != nullptr) {
    munmap(layout_, mapped_size_);
  }
  if (fd_ >= 0) {
    close(fd_);  // Drops this process's liveness locks on the file.
  }
}

bool SharedRegion::SetLivenessLock(int slot, short type) {
  if (fd_ < 0) {
    return false;
  }
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = LivenessLockOffset(slot);
  fl.l_len = 1;
  // F_SETLK never waits: the byte of a free slot is unlocked (a dead owner's
  // lock went with it), so a conflict means someone else took it on purpose;
  // the slot then stays unmarked and is counted as live from outside.
  return fcntl(fd_, F_SETLK, &fl) == 0;
}

bool SharedRegion::Map(int fd, bool create, const char* boot_id, char* error, size_t error_len) {
  size_t size = sizeof(RegionLayout);
  void* mem = fd >= 0 ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
  if (mem == MAP_FAILED) {
    std::snprintf(error, error_len, "mmap of the accounting region failed: %s",
                  std::strerror(errno));
    return false;
  }
  auto* layout = static_cast<RegionLayout*>(mem);
  if (create) {
    std::memset(static_cast<void*>(layout), 0, size);  // Fresh mapping: all zero.
    int rc = InitRobustMutex(&layout->mu);
    for (DeviceBucket& b : layout->buckets) {
      rc = rc != 0 ? rc : InitRobustMutex(&b.mu);
      b.state = TokenBucketState();
    }
    if (rc != 0) {
      munmap(mem, size);
      std::snprintf(error, error_len, "could not create the accounting region's lock: %s",
                    std::strerror(rc));
      return false;
    }
    layout->version = kLayoutVersion;
    layout->size = static_cast<uint32_t>(size);
    if (boot_id != nullptr) {
      std::memcpy(layout->boot_id, boot_id, kBootIdLen);
    }
    __atomic_store_n(&layout->magic, kMagic, __ATOMIC_RELEASE);
  } else if (__atomic_load_n(&layout->magic, __ATOMIC_ACQUIRE) != kMagic ||
             layout->version != kLayoutVersion || layout->size != size) {
    munmap(mem, size);
    std::snprintf(error, error_len,
                  "the accounting region has another layout version (a different "
                  "libaccelpool-cuda in the same container?); use one library version per pod");
    return false;
  }
  layout_ = layout;
  mapped_size_ = size;
  return true;
}

void SharedRegion::RememberFileId(int fd) {
  // Through the system call: the C library's fstat is a GLIBC_2.33 symbol
  // (glibc_compat.h), and on x86-64 and 64-bit Arm the kernel's struct stat
  // is the C library's. Elsewhere only the path identifies the file.
#if defined(SYS_fstat) && (defined(__x86_64__) || defined(__aarch64__))
  struct stat st;
  if (syscall(SYS_fstat, fd, &st) == 0) {
    have_inode_ = true;
    file_dev_major_ = major(st.st_dev);
    file_dev_minor_ = minor(st.st_dev);
    file_inode_ = st.st_ino;
  }
#else
  (void)fd;
#endif
}

bool SharedRegion::OpenPrivate(char* error, size_t error_len) {
  return Map(-1, true, nullptr, error, error_len);
}

bool SharedRegion::OpenFile(const char* dir, char* error, size_t error_len,
                            const char* boot_id_path) {
  char path[kMaxPathLen + 32];
  std::snprintf(path, sizeof(path), "%s/%s", dir, kRegionFileName);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    std::snprintf(error, error_len,
                  "cannot open %s: %s; mount a writable per-container directory there",
                  path, std::strerror(errno));
    return false;
  }
  fchmod(fd, 0666);  // Processes of the container may run as different users.
  // flock serialises initialisation between processes starting together; it
  // is taken only here, never on an allocation or launch.
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  // The size through lseek: fstat is a GLIBC_2.33 symbol (glibc_compat.h).
  off_t size = lseek(fd, 0, SEEK_END);
  bool ok = size >= 0;
  // The magic is stored last, under this flock: a file without it is one
  // whose creator was killed part way (after ftruncate, say), never one in
  // use. It is created afresh; it was refused as another layout for good.
  uint64_t magic = 1;
  bool create = ok && (size == 0 || (pread(fd, &magic, sizeof(magic),
                                           offsetof(RegionLayout, magic)) == sizeof(magic) &&
                                     magic == 0));
  char boot_id[kBootIdLen];
  ReadBootId(boot_id_path, boot_id);
  if (ok && !create && magic == kMagic && LeftByAnotherBoot(fd, boot_id)) {
    Logf(LogLevel::kInfo,
         "%s was left by an earlier boot or an older library, and no process uses it; "
         "starting it afresh",
         path);
    // Zeroed whole, as a new file: no stale lock word or slot is kept.
    create = true;
    ok = ftruncate(fd, 0) == 0;
  }
  if (ok && create && ftruncate(fd, static_cast<off_t>(sizeof(RegionLayout))) != 0) {
    ok = false;
  }
  if (!ok) {
    std::snprintf(error, error_len, "cannot size %s: %s", path, std::strerror(errno));
  } else {
    ok = Map(fd, create, boot_id, error, error_len);
  }
  flock(fd, LOCK_UN);
  if (ok) {
    // Another process's maps name the file canonically (links resolved, no
    // "//"): so must the path looked for there (LeftByExec), or a state dir
    // given with a trailing slash or through a link would make every live
    // process that lost its liveness lock look execed away.
    char real_dir[PATH_MAX];
    std::snprintf(path_, sizeof(path_), "%s/%s",
                  realpath(dir, real_dir) != nullptr ? real_dir : dir, kRegionFileName);
    RememberFileId(fd);
    fd_ = fd;  // Kept: the liveness locks live on it.
  } else {
    close(fd);
  }
  return ok;
}

bool SharedRegion::Lock() {
  bool owner_died = false;
  if (!LockRobust(&layout_->mu, &owner_died)) {
    return false;
  }
  if (owner_died) {
    ReclaimDeadLocked();
  }
  return true;
}

bool SharedRegion::TryLock() {
  int rc = pthread_mutex_trylock(&layout_->mu);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&layout_->mu);
    ReclaimDeadLocked();
    return true;
  }
  return rc == 0;
}

void SharedRegion::Unlock() { pthread_mutex_unlock(&layout_->mu); }

bool SharedRegion::LeftByExec(int slot, const SlotRecord& s, int32_t self) const {
  // A process's own locks never conflict with its own probe: its slots are
  // not probed (its replaced image's are freed at its init, ForgetReplacedImage).
  if ((s.ctx_charged_mask & kSlotLockHeld) == 0 || fd_ < 0 || s.pid == self ||
      ProbeSlotLock(fd_, slot) != SlotOwner::kGone) {
    return false;
  }
  // The lock goes when the process execs (the descriptor is close-on-exec),
  // and when it closes every descriptor it did not open itself. Only the
  // second still maps the region: its slot stays, and its charges with it.
  const MappedFileId id{path_, have_inode_, file_dev_major_, file_dev_minor_, file_inode_};
  return !MapsFile(s.pid, id);
}

bool SharedRegion::HeldByItsOwner(int slot, const SlotRecord& s, int32_t self) const {
  // Only the process that claimed a slot takes its lock, at the claim, when
  // the slot was free; and the kernel drops it when that process dies or
  // execs. A lock held by a process with the slot's pid is therefore held by
  // the slot's owner, alive, whatever start time it recorded: under
  // qemu-user that is qemu's answer for /proc/self/stat, which may differ
  // from the kernel's figure that other processes read.
  return (s.ctx_charged_mask & kSlotLockHeld) != 0 && fd_ >= 0 && s.pid != self &&
         LivenessLockHolder(fd_, slot) == s.pid;
}

bool SharedRegion::ClaimedHereLocked(int slot, const SlotRecord& s, int32_t self) const {
  if (s.pid != self) {
    return false;
  }
  for (const Claim& c : claims_) {
    if (c.held && c.slot == slot && c.pid == s.pid && c.start_time == s.start_time) {
      return true;
    }
  }
  return false;
}

int SharedRegion::ReclaimDeadLocked() {
  int reclaimed = 0;
  const auto self = static_cast<int32_t>(getpid());
  for (int i = 0; i < kMaxSlots; ++i) {
    SlotRecord& s = layout_->slots[i];
    if (s.pid != 0 && !ClaimedHereLocked(i, s, self) && !HeldByItsOwner(i, s, self) &&
        (!IsAlive(s.pid, s.start_time) || LeftByExec(i, s, self))) {
      std::memset(&s, 0, sizeof(s));
      ++reclaimed;
    }
  }
  return reclaimed;
}

void SharedRegion::DropLockUnlessClaimedLocked(int slot, int except_claim) {
  for (int k = 0; k < kMaxClaims; ++k) {
    if (k != except_claim && claims_[k].held && claims_[k].slot == slot) {
      return;
    }
  }
  // Dropping a lock this process does not hold (another process's) is a no-op.
  SetLivenessLock(slot, F_UNLCK);
}

int SharedRegion::OwnSlotLocked(int claim) {
  if (!ValidClaim(claim) || !claims_[claim].held) {
    return -1;
  }
  Claim& c = claims_[claim];
  if (c.slot >= 0) {
    const SlotRecord& s = layout_->slots[c.slot];
    if (s.pid == c.pid && s.start_time == c.start_time) {
      return c.slot;
    }
  }
  // The slot was freed while this process lived (its liveness misjudged) and
  // may be another process's by now: never touch it again. The claim moves
  // to a free slot with everything it has charged, which this process still
  // holds: the figure may go past the cap, which is the truth, and later
  // charges are refused until it is back under.
  const int old = c.slot;
  ReclaimDeadLocked();
  int found = -1;
  for (int i = 0; i < kMaxSlots && found < 0; ++i) {
    found = layout_->slots[i].pid == 0 ? i : -1;
  }
  uint64_t total = 0;
  for (uint64_t u : c.used) {
    total += u;
  }
  if (old >= 0) {
    Logf(LogLevel::kWarn,
         "this process's accounting slot %d was freed while it ran (its liveness misjudged; "
         "held by pid %d now); its %llu charged bytes move to %s",
         old, static_cast<int>(layout_->slots[old].pid), static_cast<unsigned long long>(total),
         found >= 0 ? "a free slot" : "no slot (all are held): its allocations are refused");
    DropLockUnlessClaimedLocked(old, claim);
  }
  c.slot = found;
  if (found < 0) {
    return -1;
  }
  SlotRecord& s = layout_->slots[found];
  std::memset(&s, 0, sizeof(s));
  s.pid = c.pid;
  s.start_time = c.start_time;
  s.ctx_charged_mask = c.device_mask;
  std::memcpy(s.used, c.used, sizeof(s.used));
  if (SetLivenessLock(found, F_WRLCK)) {
    s.ctx_charged_mask |= kSlotLockHeld;
  }
  // Its exports are known by slot: they follow it.
  for (ExportRecord& e : layout_->exports) {
    if (e.key != 0 && e.pid == c.pid && e.start_time == c.start_time && e.slot == old) {
      e.slot = found;
    }
  }
  return found;
}

void SharedRegion::ForgetReplacedImage(int32_t pid, uint64_t start_time) {
  if (!Lock()) {
    return;
  }
  for (int i = 0; i < kMaxSlots; ++i) {
    SlotRecord& s = layout_->slots[i];
    if (s.pid == pid && s.start_time == start_time) {
      std::memset(&s, 0, sizeof(s));
      SetLivenessLock(i, F_UNLCK);  // One this image took itself (a claim before).
    }
  }
  for (Claim& c : claims_) {
    if (c.held && c.pid == pid && c.start_time == start_time) {
      c = Claim();  // Its slot went above: nothing of it is left to carry.
    }
  }
  Unlock();
}

void SharedRegion::ForgetClaimsAfterFork() {
  for (Claim& c : claims_) {
    c = Claim();
  }
}

int SharedRegion::ReclaimDead() {
  if (!Lock()) {
    return 0;
  }
  int n = ReclaimDeadLocked();
  Unlock();
  return n;
}

int SharedRegion::SlotsInUse() {
  if (!Lock()) {
    return 0;
  }
  ReclaimDeadLocked();
  int n = 0;
  for (const SlotRecord& s : layout_->slots) {
    n += s.pid != 0 ? 1 : 0;
  }
  Unlock();
  return n;
}

int SharedRegion::ClaimSlot(int32_t pid, uint64_t start_time) {
  if (!Lock()) {
    return -1;
  }
  ReclaimDeadLocked();
  // A slot with this very process's pid and start time was claimed by the
  // program it replaced by exec (a process claims once per image).
  for (int i = 0; i < kMaxSlots; ++i) {
    SlotRecord& s = layout_->slots[i];
    if (s.pid == pid && s.start_time == start_time) {
      std::memset(&s, 0, sizeof(s));
      // The replaced image's lock went with its descriptor at exec; one this
      // image took itself (a second claim) must not outlive the slot.
      SetLivenessLock(i, F_UNLCK);
    }
  }
  for (Claim& c : claims_) {
    if (c.held && c.pid == pid && c.start_time == start_time) {
      c = Claim();  // This image's earlier claim: its slot went above.
    }
  }
  int claim = -1;
  for (int k = 0; k < kMaxClaims && claim < 0; ++k) {
    claim = claims_[k].held ? -1 : k;
  }
  int found = -1;
  for (int i = 0; i < kMaxSlots && claim >= 0; ++i) {
    if (layout_->slots[i].pid == 0) {
      SlotRecord& s = layout_->slots[i];
      std::memset(&s, 0, sizeof(s));
      s.pid = pid;
      s.start_time = start_time;
      if (SetLivenessLock(i, F_WRLCK)) {
        s.ctx_charged_mask |= kSlotLockHeld;
      }
      found = i;
      break;
    }
  }
  if (found >= 0) {
    claims_[claim] = Claim();
    claims_[claim].held = true;
    claims_[claim].slot = found;
    claims_[claim].pid = pid;
    claims_[claim].start_time = start_time;
  }
  Unlock();
  return found >= 0 ? claim : -1;
}

void SharedRegion::ReleaseSlot(int claim) {
  if (!ValidClaim(claim) || !Lock()) {
    return;
  }
  ReleaseSlotLocked(claim);
  Unlock();
}

bool SharedRegion::TryReleaseSlot(int claim) {
  if (!ValidClaim(claim)) {
    return true;  // Nothing of it to release.
  }
  if (!TryLock()) {
    return false;
  }
  ReleaseSlotLocked(claim);
  Unlock();
  return true;
}

void SharedRegion::ReleaseSlotLocked(int claim) {
  Claim& c = claims_[claim];
  if (c.held && c.slot >= 0) {
    const SlotRecord& s = layout_->slots[c.slot];
    if (s.pid == c.pid && s.start_time == c.start_time) {
      std::memset(&layout_->slots[c.slot], 0, sizeof(SlotRecord));
    }
    // Under the region mutex, so the next claimer of this slot finds it free.
    // A slot that another process holds by now keeps its record; the lock,
    // where this process still had it, is this process's to drop.
    DropLockUnlessClaimedLocked(c.slot, claim);
  }
  c = Claim();
}

ChargeResult SharedRegion::TryCharge(int claim, int device, uint64_t bytes, uint64_t limit,
                                     uint64_t context_reserve) {
  if (!ValidClaim(claim) || !ValidDevice(device) || !Lock()) {
    return ChargeResult::kUnavailable;
  }
  const int slot = OwnSlotLocked(claim);
  if (slot < 0) {
    Unlock();  // No slot to charge: refused, as a process that could not claim one.
    return ChargeResult::kOverLimit;
  }
  Claim& c = claims_[claim];
  SlotRecord& mine = layout_->slots[slot];
  uint32_t bit = 1U << device;
  const uint64_t reserve = (mine.ctx_charged_mask & bit) ? 0 : context_reserve;
  ChargeResult result = ChargeResult::kOverLimit;
  if (bytes > limit || reserve > limit - bytes) {
    Unlock();  // more than the cap alone (and a sum that would wrap)
    return result;
  }
  const uint64_t add = bytes + reserve;
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint64_t total = 0;
    for (const SlotRecord& s : layout_->slots) {
      if (s.pid != 0) {
        total += s.used[device];
      }
    }
    if (add <= limit && total <= limit - add) {
      mine.used[device] += add;
      mine.ctx_charged_mask |= bit;
      c.used[device] = mine.used[device];
      c.device_mask |= bit;
      result = ChargeResult::kOk;
      break;
    }
    if (attempt == 0 && ReclaimDeadLocked() == 0) {
      break;  // Nothing to reclaim: the container really is at its cap.
    }
  }
  Unlock();
  return result;
}

void SharedRegion::Uncharge(int claim, int device, uint64_t bytes) {
  if (!ValidClaim(claim) || !ValidDevice(device) || !Lock()) {
    return;
  }
  if (!claims_[claim].held) {
    Unlock();
    return;
  }
  const int slot = OwnSlotLocked(claim);
  uint64_t& used = claims_[claim].used[device];
  used = used > bytes ? used - bytes : 0;
  if (slot >= 0) {
    layout_->slots[slot].used[device] = used;
  }
  Unlock();
}

void SharedRegion::RecordExport(int claim, uint64_t key) {
  if (!ValidClaim(claim) || key == 0 || !Lock()) {
    return;
  }
  const int slot = OwnSlotLocked(claim);
  if (slot < 0) {
    Unlock();
    return;
  }
  const SlotRecord& mine = layout_->slots[slot];
  ExportRecord* room = nullptr;
  ExportRecord* oldest = nullptr;
  for (ExportRecord& e : layout_->exports) {
    if (e.key == key && e.pid == mine.pid && e.start_time == mine.start_time) {
      Unlock();
      return;  // Exported again: one record is enough.
    }
    // The file is shared: a slot out of range (a corrupt record) names no
    // owner, and the record is as good as dead.
    bool dead = e.key == 0 || e.slot < 0 || e.slot >= kMaxSlots ||
                layout_->slots[e.slot].pid != e.pid ||
                layout_->slots[e.slot].start_time != e.start_time;
    if (dead && (room == nullptr || e.seq < room->seq)) {
      room = &e;
    }
    if (oldest == nullptr || e.seq < oldest->seq) {
      oldest = &e;
    }
  }
  ExportRecord* e = room != nullptr ? room : oldest;
  e->key = key;
  e->pid = mine.pid;
  e->slot = slot;
  e->start_time = mine.start_time;
  e->seq = ++layout_->export_seq;
  Unlock();
}

bool SharedRegion::ExportedHere(uint64_t key) {
  if (key == 0 || !Lock()) {
    return false;
  }
  ReclaimDeadLocked();
  bool found = false;
  for (const ExportRecord& e : layout_->exports) {
    if (e.key != key || e.slot < 0 || e.slot >= kMaxSlots) {
      continue;
    }
    const SlotRecord& owner = layout_->slots[e.slot];
    if (owner.pid != 0 && owner.pid == e.pid && owner.start_time == e.start_time) {
      found = true;
      break;
    }
  }
  Unlock();
  return found;
}

uint64_t SharedRegion::Used(int device) {
  if (!ValidDevice(device) || !Lock()) {
    return 0;
  }
  ReclaimDeadLocked();
  uint64_t total = 0;
  for (const SlotRecord& s : layout_->slots) {
    if (s.pid != 0) {
      total += s.used[device];
    }
  }
  Unlock();
  return total;
}

uint64_t SharedRegion::SlotUsed(int claim, int device) {
  if (!ValidClaim(claim) || !ValidDevice(device) || !Lock()) {
    return 0;
  }
  const int slot = OwnSlotLocked(claim);
  uint64_t v = slot >= 0 ? layout_->slots[slot].used[device] : 0;
  Unlock();
  return v;
}

bool SharedRegion::ContextCharged(int claim, int device) {
  if (!ValidClaim(claim) || !ValidDevice(device) || !Lock()) {
    return false;
  }
  const int slot = OwnSlotLocked(claim);
  bool charged = slot >= 0 && (layout_->slots[slot].ctx_charged_mask & (1U << device)) != 0;
  Unlock();
  return charged;
}

int SharedRegion::SlotIndex(int claim) {
  if (!ValidClaim(claim) || !Lock()) {
    return -1;
  }
  const int slot = claims_[claim].held ? claims_[claim].slot : -1;
  Unlock();
  return slot;
}

TokenBucketState* SharedRegion::LockBucket(int device) {
  if (!ValidDevice(device)) {
    return nullptr;
  }
  DeviceBucket& b = layout_->buckets[device];
  return LockRobust(&b.mu, nullptr) ? &b.state : nullptr;
}

void SharedRegion::UnlockBucket(int device) {
  pthread_mutex_unlock(&layout_->buckets[device].mu);
}

}  // namespace accelpool::cuda
