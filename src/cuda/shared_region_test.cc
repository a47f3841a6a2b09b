#include "cuda/shared_region.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

namespace accelpool::cuda {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kGiB = 1ULL << 30;

class SharedRegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/accelpool-region-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::remove((dir_ + "/" + kRegionFileName).c_str());
    std::remove((dir_ + "/boot_id").c_str());
    rmdir(dir_.c_str());
  }
  void Open(SharedRegion& r) {
    char error[256] = {};
    ASSERT_TRUE(r.OpenFile(dir_.c_str(), error, sizeof(error))) << error;
  }
  int32_t Pid() { return static_cast<int32_t>(getpid()); }

  std::string dir_;
};

TEST_F(SharedRegionTest, ChargesUpToTheCapExactly) {
  SharedRegion r;
  Open(r);
  int slot = r.ClaimSlot(Pid(), ProcessStartTime(Pid()));
  ASSERT_GE(slot, 0);
  EXPECT_EQ(r.TryCharge(slot, 0, 600 * kMiB, kGiB, 0), ChargeResult::kOk);
  EXPECT_EQ(r.TryCharge(slot, 0, 424 * kMiB, kGiB, 0), ChargeResult::kOk);
  EXPECT_EQ(r.Used(0), kGiB);
  EXPECT_EQ(r.TryCharge(slot, 0, 2 * kMiB, kGiB, 0), ChargeResult::kOverLimit);
  EXPECT_EQ(r.TryCharge(slot, 1, 2 * kMiB, kGiB, 0), ChargeResult::kOk) << "devices are separate";
  r.Uncharge(slot, 0, 600 * kMiB);
  EXPECT_EQ(r.Used(0), 424 * kMiB);
  r.Uncharge(slot, 0, 10 * kGiB);  // Never below zero.
  EXPECT_EQ(r.Used(0), 0u);
  EXPECT_EQ(r.TryCharge(slot, kMaxDevices, 1, kGiB, 0), ChargeResult::kUnavailable);
  EXPECT_EQ(r.TryCharge(slot, 0, 2 * kGiB, kGiB, 0), ChargeResult::kOverLimit);
  r.ReleaseSlot(slot);
}

// A request near 2^64 bytes plus the context reserve must not wrap into a
// small charge that fits (and then lose the reserve when the driver fails
// the allocation and the bytes are given back).
TEST_F(SharedRegionTest, AHugeRequestWithTheContextReserveIsOverTheCap) {
  SharedRegion r;
  Open(r);
  int slot = r.ClaimSlot(Pid(), 0);
  EXPECT_EQ(r.TryCharge(slot, 0, UINT64_MAX, kGiB, 512 * kMiB), ChargeResult::kOverLimit);
  EXPECT_EQ(r.TryCharge(slot, 0, UINT64_MAX - 100 * kMiB, kGiB, 512 * kMiB),
            ChargeResult::kOverLimit);
  EXPECT_EQ(r.SlotUsed(slot, 0), 0u);
  EXPECT_EQ(r.TryCharge(slot, 0, 600 * kMiB, kGiB, 512 * kMiB), ChargeResult::kOverLimit);
  ASSERT_EQ(r.TryCharge(slot, 0, 2 * kMiB, kGiB, 512 * kMiB), ChargeResult::kOk);
  EXPECT_EQ(r.SlotUsed(slot, 0), 514 * kMiB);
  r.ReleaseSlot(slot);
}

TEST_F(SharedRegionTest, ContextReserveIsChargedOncePerDevice) {
  SharedRegion r;
  Open(r);
  int slot = r.ClaimSlot(Pid(), 0);
  ASSERT_EQ(r.TryCharge(slot, 0, 2 * kMiB, kGiB, 500 * kMiB), ChargeResult::kOk);
  ASSERT_EQ(r.TryCharge(slot, 0, 2 * kMiB, kGiB, 500 * kMiB), ChargeResult::kOk);
  EXPECT_EQ(r.SlotUsed(slot, 0), 504 * kMiB);
  r.ReleaseSlot(slot);
  EXPECT_EQ(r.Used(0), 0u);
}

TEST_F(SharedRegionTest, TwoMappingsShareState) {
  SharedRegion a;
  SharedRegion b;
  Open(a);
  Open(b);
  int slot = a.ClaimSlot(Pid(), 0);
  ASSERT_EQ(a.TryCharge(slot, 2, 64 * kMiB, kGiB, 0), ChargeResult::kOk);
  EXPECT_EQ(b.Used(2), 64 * kMiB);
  a.ReleaseSlot(slot);
}

TEST_F(SharedRegionTest, OpenFailuresExplainTheFix) {
  SharedRegion r;
  char error[512] = {};
  EXPECT_FALSE(r.OpenFile("/nonexistent/accelpool", error, sizeof(error)));
  EXPECT_NE(std::string(error).find("mount a writable"), std::string::npos) << error;
  {
    std::ofstream f(dir_ + "/" + kRegionFileName);
    f << std::string(4096, 'x');
  }
  EXPECT_FALSE(r.OpenFile(dir_.c_str(), error, sizeof(error)));
  EXPECT_NE(std::string(error).find("layout"), std::string::npos) << error;
}

// A process killed between sizing the new file and storing its magic leaves
// it all zero (or initialised but for the magic): the next process creates
// the region afresh instead of refusing it as another layout for good.
TEST_F(SharedRegionTest, AFileWhoseCreatorDiedBeforeItsMagicIsCreatedAfresh) {
  const std::string path = dir_ + "/" + kRegionFileName;
  for (uint32_t version : {0u, kRegionLayoutVersion}) {
    SCOPED_TRACE(version);
    {
      std::string bytes(sizeof(RegionLayout), '\0');
      std::memcpy(bytes.data() + offsetof(RegionLayout, version), &version, sizeof(version));
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << bytes;
    }
    SharedRegion a;
    SharedRegion b;
    Open(a);
    Open(b);
    int slot = a.ClaimSlot(Pid(), 0);
    ASSERT_GE(slot, 0);
    ASSERT_EQ(a.TryCharge(slot, 1, 64 * kMiB, kGiB, 0), ChargeResult::kOk);
    EXPECT_EQ(b.Used(1), 64 * kMiB);
    a.ReleaseSlot(slot);
  }
}

TEST_F(SharedRegionTest, ExportsAreKnownWhileTheirExporterLives) {
  SharedRegion exporter;
  Open(exporter);
  SharedRegion importer;  // Another process's mapping of the same file.
  Open(importer);
  int live = exporter.ClaimSlot(Pid(), ProcessStartTime(Pid()));
  ASSERT_GE(live, 0);
  exporter.RecordExport(live, 0x1234);
  exporter.RecordExport(live, 0x1234);  // Exported twice: one record.
  EXPECT_TRUE(importer.ExportedHere(0x1234));
  EXPECT_FALSE(importer.ExportedHere(0x9999)) << "not exported in this container";
  // A dead exporter's memory is gone: its export no longer counts.
  int stale = exporter.ClaimSlot(Pid(), ProcessStartTime(Pid()) + 12345);
  ASSERT_GE(stale, 0);
  exporter.RecordExport(stale, 0x5678);
  EXPECT_FALSE(importer.ExportedHere(0x5678));
  // A full table makes room: the oldest records give way, never a crash.
  for (uint64_t k = 1; k <= 2 * kMaxExports; ++k) {
    exporter.RecordExport(live, 0x10000 + k);
  }
  EXPECT_TRUE(importer.ExportedHere(0x10000 + 2 * kMaxExports));
  EXPECT_FALSE(importer.ExportedHere(0x10001));
}

// Export records whose slot is out of range (a corrupt or hostile shared
// file) are never followed: they count as dead and give way to a new one.
// (Recording an export read the owner at that slot, out of bounds.)
TEST_F(SharedRegionTest, AnExportRecordWithASlotOutOfRangeGivesWay) {
  SharedRegion exporter;
  Open(exporter);
  int live = exporter.ClaimSlot(Pid(), ProcessStartTime(Pid()));
  ASSERT_GE(live, 0);
  for (uint64_t k = 1; k <= kMaxExports; ++k) {
    exporter.RecordExport(live, 0x20000 + k);
  }
  int fd = open((dir_ + "/" + kRegionFileName).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* mem = mmap(nullptr, sizeof(RegionLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(mem, MAP_FAILED);
  auto* layout = static_cast<RegionLayout*>(mem);
  for (int i = 0; i < kMaxExports; ++i) {
    // Far past the mapping, either way: followed, it faults.
    layout->exports[i].slot = i % 2 == 0 ? INT32_MAX : INT32_MIN;
  }
  exporter.RecordExport(live, 0x1234);
  EXPECT_TRUE(exporter.ExportedHere(0x1234));
  int recorded = 0;
  for (int i = 0; i < kMaxExports; ++i) {
    if (layout->exports[i].key == 0x1234) {
      ++recorded;
      EXPECT_EQ(layout->exports[i].slot, live);
    }
  }
  EXPECT_EQ(recorded, 1);
  munmap(mem, sizeof(RegionLayout));
  exporter.ReleaseSlot(live);
}

TEST_F(SharedRegionTest, ReusedPidWithAnotherStartTimeIsDead) {
  // The slot of an earlier process that had this pid: claimed through a
  // mapping of its own (a process never takes its own claims for dead ones).
  SharedRegion earlier;
  Open(earlier);
  int stale = earlier.ClaimSlot(Pid(), ProcessStartTime(Pid()) + 12345);
  ASSERT_GE(stale, 0);
  ASSERT_EQ(earlier.TryCharge(stale, 0, 100 * kMiB, kGiB, 0), ChargeResult::kOk);
  SharedRegion r;
  Open(r);
  EXPECT_EQ(r.ReclaimDead(), 1);
  EXPECT_EQ(r.Used(0), 0u);
}

// Under qemu-user each thread of a process reads its own start time in
// /proc/self/stat: a thread that charged after another had claimed took
// the process's own slot for a reused pid's and freed it, charges and all.
// A process never takes a slot it claims for a dead one.
TEST_F(SharedRegionTest, AProcessNeverTakesItsOwnClaimForADeadOne) {
  SharedRegion r;
  Open(r);
  const int mine = r.ClaimSlot(Pid(), ProcessStartTime(Pid()) + 1);  // As another thread read it.
  ASSERT_GE(mine, 0);
  ASSERT_EQ(r.TryCharge(mine, 0, 900 * kMiB, kGiB, 0), ChargeResult::kOk);
  EXPECT_EQ(r.ReclaimDead(), 0);
  EXPECT_EQ(r.Used(0), 900 * kMiB);
  EXPECT_EQ(r.TryCharge(mine, 0, 200 * kMiB, kGiB, 0), ChargeResult::kOverLimit)
      << "the reclaim before a refusal keeps it too";
  r.ReleaseSlot(mine);
  EXPECT_EQ(r.Used(0), 0u);
}

TEST_F(SharedRegionTest, ConcurrentProcessesNeverExceedTheCap) {
  constexpr int kChildren = 4;
  constexpr int kRounds = 3000;
  pid_t pids[kChildren];
  for (int c = 0; c < kChildren; ++c) {
    pids[c] = fork();
    ASSERT_GE(pids[c], 0);
    if (pids[c] == 0) {
      SharedRegion r;
      char error[256];
      if (!r.OpenFile(dir_.c_str(), error, sizeof(error))) {
        _exit(100);
      }
      int32_t pid = static_cast<int32_t>(getpid());
      int slot = r.ClaimSlot(pid, ProcessStartTime(pid));
      int violations = 0;
      for (int i = 0; i < kRounds; ++i) {
        if (r.TryCharge(slot, 0, 96 * kMiB, kGiB, 0) == ChargeResult::kOk) {
          if (r.Used(0) > kGiB) {
            ++violations;
          }
          r.Uncharge(slot, 0, 96 * kMiB);
        }
      }
      // Leave 32 MiB charged and exit without releasing: must be reclaimed.
      r.TryCharge(slot, 0, 32 * kMiB, kGiB, 0);
      _exit(violations > 99 ? 99 : violations);
    }
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "usage exceeded the cap (or open failed: 100)";
  }
  SharedRegion r;
  Open(r);
  EXPECT_EQ(r.Used(0), 0u) << "exited processes' charges must be reclaimed";
}

// In a forked child: maps the region in `dir` into `r` (which the caller keeps
// alive: it holds the slot's liveness lock), claims a slot, charges `bytes` on
// device 0 and writes one byte to `ready_fd`. Exits 1 when the open fails.
void ClaimAndChargeInChild(SharedRegion& r, const std::string& dir, uint64_t bytes, int ready_fd) {
  char error[256];
  if (!r.OpenFile(dir.c_str(), error, sizeof(error))) {
    _exit(1);
  }
  int32_t pid = static_cast<int32_t>(getpid());
  int slot = r.ClaimSlot(pid, ProcessStartTime(pid));
  r.TryCharge(slot, 0, bytes, kGiB, 0);
  char c = 'x';
  (void)!write(ready_fd, &c, 1);
}

TEST_F(SharedRegionTest, SigkilledHolderIsReclaimedOnTheNextCharge) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SharedRegion r;
    ClaimAndChargeInChild(r, dir_, 800 * kMiB, ready[1]);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  SharedRegion r;
  Open(r);
  int slot = r.ClaimSlot(Pid(), ProcessStartTime(Pid()));
  EXPECT_EQ(r.TryCharge(slot, 0, 800 * kMiB, kGiB, 0), ChargeResult::kOverLimit)
      << "the live child holds 800 MiB";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(r.TryCharge(slot, 0, 800 * kMiB, kGiB, 0), ChargeResult::kOk);
  EXPECT_EQ(r.Used(0), 800 * kMiB) << "no stale usage left behind";
  r.ReleaseSlot(slot);
  close(ready[0]);
  close(ready[1]);
}

// Forks a child that claims a slot, charges `bytes` on device 0 and stops.
// With `leader_exits` its main thread exits alone and another thread
// does the work (the process stays alive, shown as Z in /proc). With `name`
// it renames itself first (PR_SET_NAME).
pid_t ForkHolder(const std::string& dir, uint64_t bytes, bool leader_exits, const char* name) {
  int ready[2];
  if (pipe(ready) != 0) {
    return -1;
  }
  pid_t child = fork();
  if (child != 0) {
    close(ready[1]);
    char c = 0;
    bool ok = read(ready[0], &c, 1) == 1;
    close(ready[0]);
    return ok ? child : -1;
  }
  if (name != nullptr) {
    prctl(PR_SET_NAME, name);
  }
  struct Work {
    std::string dir;
    uint64_t bytes;
    int fd;
  };
  static Work work;
  work = Work{dir, bytes, ready[1]};
  auto run = [](void*) -> void* {
    SharedRegion r;
    ClaimAndChargeInChild(r, work.dir, work.bytes, work.fd);
    for (;;) {
      pause();
    }
    return nullptr;
  };
  if (leader_exits) {
    pthread_t t;
    pthread_create(&t, nullptr, run, nullptr);
    syscall(SYS_exit, 0);  // Ends this thread only, without unwinding through gtest.
  }
  run(nullptr);
  _exit(0);
}

char ProcState(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? 0 : line[close + 2];
}

TEST_F(SharedRegionTest, KilledButUnreapedProcessIsReclaimed) {
  pid_t child = ForkHolder(dir_, 800 * kMiB, false, nullptr);
  ASSERT_GT(child, 0);
  SharedRegion r;
  Open(r);
  EXPECT_EQ(r.Used(0), 800 * kMiB);
  kill(child, SIGKILL);
  siginfo_t info;
  // Wait for the death without reaping: the child stays a zombie.
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  ASSERT_EQ(ProcState(child), 'Z');
  EXPECT_EQ(r.Used(0), 0u) << "a zombie holds no device memory";
  EXPECT_EQ(r.SlotsInUse(), 0);
  waitpid(child, nullptr, 0);
}

TEST_F(SharedRegionTest, LiveProcessWhoseMainThreadExitedKeepsItsSlot) {
  pid_t child = ForkHolder(dir_, 800 * kMiB, true, nullptr);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 200 && ProcState(child) != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ProcState(child), 'Z') << "the exited leader shows as a zombie";
  SharedRegion r;
  Open(r);
  EXPECT_EQ(r.Used(0), 800 * kMiB) << "its other thread is alive";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(r.Used(0), 0u);
}

TEST_F(SharedRegionTest, CommandNameWithParenthesesAndStatesIsParsedFromTheLastParen) {
  pid_t child = ForkHolder(dir_, 100 * kMiB, false, "a) Z 1 (b");
  ASSERT_GT(child, 0);
  SharedRegion r;
  Open(r);
  EXPECT_EQ(r.Used(0), 100 * kMiB) << "not mistaken for a zombie";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(r.Used(0), 0u);
}

TEST_F(SharedRegionTest, ClaimingAgainWithTheSamePidAndStartTimeFreesTheOldSlot) {
  // What a process that execs looks like: the new image claims a slot with
  // the pid and start time of the old one, which ran no cleanup.
  SharedRegion r;
  Open(r);
  uint64_t start = ProcessStartTime(Pid());
  int before_exec = r.ClaimSlot(Pid(), start);
  ASSERT_GE(before_exec, 0);
  ASSERT_EQ(r.TryCharge(before_exec, 0, 300 * kMiB, kGiB, 0), ChargeResult::kOk);
  int after_exec = r.ClaimSlot(Pid(), start);
  ASSERT_GE(after_exec, 0);
  EXPECT_EQ(r.SlotsInUse(), 1);
  EXPECT_EQ(r.Used(0), 0u) << "the replaced image's charge is gone";
  r.ReleaseSlot(after_exec);
}

TEST_F(SharedRegionTest, LockHolderKilledLeavesAUsableRegion) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SharedRegion r;
    char error[256];
    if (!r.OpenFile(dir_.c_str(), error, sizeof(error)) || !r.Lock()) {
      _exit(1);
    }
    raise(SIGKILL);  // Dies holding the region mutex.
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  SharedRegion r;
  Open(r);
  int slot = r.ClaimSlot(Pid(), 0);  // Takes the lock: EOWNERDEAD is recovered.
  ASSERT_GE(slot, 0);
  EXPECT_EQ(r.TryCharge(slot, 0, kMiB, kGiB, 0), ChargeResult::kOk);
  TokenBucketState* bucket = r.LockBucket(0);
  ASSERT_NE(bucket, nullptr);
  r.UnlockBucket(0);
  r.ReleaseSlot(slot);
}

// Writes `boot_id` as the kernel's boot id file would hold it.
void WriteBootId(const std::string& path, const char* boot_id) {
  std::ofstream f(path, std::ios::trunc);
  f << boot_id << "\n";
}

// A pid no process has any more: a child that exited and was reaped.
pid_t DeadTid() {
  pid_t child = fork();
  if (child == 0) {
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

// Makes every mutex of the region file at `path` look held by `tid` without
// the owner-died bit, as a node that went down with them held leaves them:
// only the kernel sets that bit, when it sees the owner exit.
void StaleLocks(const std::string& path, pid_t tid) {
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* mem = mmap(nullptr, sizeof(RegionLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(mem, MAP_FAILED);
  auto* layout = static_cast<RegionLayout*>(mem);
  layout->mu.__data.__lock = tid;
  layout->mu.__data.__owner = tid;
  for (DeviceBucket& b : layout->buckets) {
    b.mu.__data.__lock = tid;
    b.mu.__data.__owner = tid;
  }
  munmap(mem, sizeof(RegionLayout));
}

// In a child with a deadline: opens the region in `dir` with the boot id at
// `boot_path`, takes and drops its mutex and device 0's bucket, and exits 0
// when the region holds no charge on device 0 (fresh), 3 when it does, 1
// when it cannot be opened; killed by SIGALRM when a lock waits.
int OpenAndLockInChild(const std::string& dir, const std::string& boot_path) {
  pid_t child = fork();
  if (child == 0) {
    alarm(10);
    SharedRegion r;
    char error[256];
    if (!r.OpenFile(dir.c_str(), error, sizeof(error), boot_path.c_str()) || !r.Lock()) {
      _exit(1);
    }
    r.Unlock();
    if (r.LockBucket(0) == nullptr) {
      _exit(1);
    }
    r.UnlockBucket(0);
    _exit(r.Used(0) == 0 ? 0 : 3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The state dir outlives a reboot. A region whose locks were held when the
// node went down names owners that no kernel will report dead, and every
// process of the container waited for ever on its first lock. A region of
// another boot is created afresh; one of this boot is kept.
TEST_F(SharedRegionTest, ARegionLeftByAnEarlierBootIsCreatedAfresh) {
  const std::string boot = dir_ + "/boot_id";
  const std::string path = dir_ + "/" + kRegionFileName;
  WriteBootId(boot, "11111111-2222-3333-4444-555555555555");
  {
    SharedRegion r;
    char error[256] = {};
    ASSERT_TRUE(r.OpenFile(dir_.c_str(), error, sizeof(error), boot.c_str())) << error;
    int slot = r.ClaimSlot(Pid(), 0);  // This (live) process: its slot is kept in this boot.
    ASSERT_EQ(r.TryCharge(slot, 0, 64 * kMiB, kGiB, 0), ChargeResult::kOk);
    EXPECT_EQ(OpenAndLockInChild(dir_, boot), 3) << "the same boot keeps the region";
  }  // No release: the node goes down.

  StaleLocks(path, DeadTid());
  WriteBootId(boot, "66666666-7777-8888-9999-000000000000");
  EXPECT_EQ(OpenAndLockInChild(dir_, boot), 0) << "fresh, and no lock waits (SIGALRM is 142)";
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  RegionUsage u;
  ASSERT_TRUE(ReadRegionUsage(bytes.data(), bytes.size(), &u));  // Read without its locks.
  EXPECT_EQ(u.processes, 0) << "the old boot's slot is gone";
  EXPECT_EQ(u.used_bytes[0], 0u);
}

// A region of the layout before the boot id (version 2) cannot say which
// boot made it: it is created afresh unless a live process holds a liveness
// lock on it (a process of an older library still using it, which is refused
// as before rather than pulled from under it).
TEST_F(SharedRegionTest, AnOlderRegionIsCreatedAfreshUnlessAProcessStillUsesIt) {
  const std::string boot = dir_ + "/boot_id";
  const std::string path = dir_ + "/" + kRegionFileName;
  WriteBootId(boot, "11111111-2222-3333-4444-555555555555");
  auto write_old = [&] {
    std::string bytes(sizeof(RegionLayout) - kBootIdLen, '\0');
    const uint64_t magic = kRegionMagic;
    const uint32_t version = 2;
    std::memcpy(bytes.data() + offsetof(RegionLayout, magic), &magic, sizeof(magic));
    std::memcpy(bytes.data() + offsetof(RegionLayout, version), &version, sizeof(version));
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
  };
  write_old();
  EXPECT_EQ(OpenAndLockInChild(dir_, boot), 0);

  write_old();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    int fd = open(path.c_str(), O_RDWR);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(sizeof(RegionLayout) - kBootIdLen);  // Its slot 0.
    fl.l_len = 1;
    char c = fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0 ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  EXPECT_EQ(OpenAndLockInChild(dir_, boot), 1) << "refused as another layout";
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  EXPECT_EQ(OpenAndLockInChild(dir_, boot), 0) << "its user gone, it is made afresh";
}

TEST(ProcessStartTimeTest, ParsesFieldsAfterTheLastParenthesis) {
  std::string tail;
  for (int field = 4; field <= 52; ++field) {
    tail += " " + std::to_string(field == 20 ? 3 : field == 22 ? 987654 : field == 8 ? -1 : field);
  }
  ProcStat st;
  ASSERT_TRUE(ParseProcStat(("42 (x) Z 1 (y) S" + tail + "\n").c_str(), &st));
  EXPECT_EQ(st.state, 'S');
  EXPECT_EQ(st.threads, 3u);
  EXPECT_EQ(st.start_time, 987654u);
  ASSERT_TRUE(ParseProcStat(("7 (plain) Z" + tail).c_str(), &st));
  EXPECT_EQ(st.state, 'Z');
  EXPECT_FALSE(ParseProcStat("42 (cut) S 1 2 3", &st));
  EXPECT_FALSE(ParseProcStat("no parenthesis", &st));
}

TEST(ProcessStartTimeTest, KnownForSelfUnknownForNobody) {
  EXPECT_GT(ProcessStartTime(static_cast<int32_t>(getpid())), 0u);
  EXPECT_EQ(ProcessStartTime(-1), 0u);
}

}  // namespace
}  // namespace accelpool::cuda

namespace accelpool::cuda {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(SharedRegionTest, TheFilesBytesShowTheUsageOfEveryProcess) {
  // What the device plugin reads from outside the container, without locks.
  SharedRegion r;
  Open(r);
  const int a = r.ClaimSlot(Pid(), ProcessStartTime(Pid()));
  const int b = r.ClaimSlot(Pid() + 1000000, 1);  // another process's slot
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(r.TryCharge(a, 0, 600 * kMiB, kGiB, 0), ChargeResult::kOk);
  ASSERT_EQ(r.TryCharge(b, 0, 100 * kMiB, kGiB, 0), ChargeResult::kOk);
  ASSERT_EQ(r.TryCharge(a, 3, 2 * kMiB, kGiB, 0), ChargeResult::kOk);
  const std::string bytes = ReadAll(dir_ + "/" + kRegionFileName);
  RegionUsage u;
  ASSERT_TRUE(ReadRegionUsage(bytes.data(), bytes.size(), &u));
  EXPECT_EQ(u.used_bytes[0], 700 * kMiB);
  EXPECT_EQ(u.used_bytes[3], 2 * kMiB);
  EXPECT_EQ(u.used_bytes[1], 0u);
  EXPECT_EQ(u.processes, 2);
  r.ReleaseSlot(a);
  const std::string after = ReadAll(dir_ + "/" + kRegionFileName);
  ASSERT_TRUE(ReadRegionUsage(after.data(), after.size(), &u));
  EXPECT_EQ(u.used_bytes[0], 100 * kMiB);
  EXPECT_EQ(u.processes, 1);
}

TEST(RegionFormatTest, AnyBytesAreReadOrRefusedNeverOutOfRange) {
  std::string bytes(sizeof(RegionLayout), '\0');
  RegionUsage u;
  EXPECT_FALSE(ReadRegionUsage(bytes.data(), bytes.size(), &u));  // no magic
  RegionLayout header{};
  header.magic = kRegionMagic;
  header.version = kRegionLayoutVersion;
  header.size = sizeof(RegionLayout);
  std::memcpy(bytes.data(), &header, offsetof(RegionLayout, mu));
  ASSERT_TRUE(ReadRegionUsage(bytes.data(), bytes.size(), &u));
  EXPECT_EQ(u.processes, 0);
  EXPECT_FALSE(ReadRegionUsage(bytes.data(), bytes.size() - 1, &u));  // cut short
  EXPECT_FALSE(ReadRegionUsage(nullptr, bytes.size(), &u));
  std::string other = bytes;
  other[offsetof(RegionLayout, version)] = 9;  // another layout version
  EXPECT_FALSE(ReadRegionUsage(other.data(), other.size(), &u));
  // Slots a container scribbled over: sums saturate instead of wrapping.
  std::mt19937_64 rng(20261201);
  for (int round = 0; round < 50; ++round) {
    std::string noisy = bytes;
    for (size_t i = offsetof(RegionLayout, slots); i < offsetof(RegionLayout, buckets); ++i) {
      noisy[i] = static_cast<char>(rng());
    }
    ASSERT_TRUE(ReadRegionUsage(noisy.data(), noisy.size(), &u));
    for (int s = 0; s < kMaxSlots; ++s) {
      SlotRecord rec;
      std::memcpy(&rec, noisy.data() + offsetof(RegionLayout, slots) + sizeof(SlotRecord) * s,
                  sizeof(rec));
      if (rec.pid == 0) continue;
      for (int d = 0; d < kMaxDevices; ++d) ASSERT_GE(u.used_bytes[d], rec.used[d]);
    }
  }
}

// What the device plugin reads, from a process that holds no lock of its own.
struct OutsideView {
  RegionUsage raw;     // the bytes alone
  RegionUsage probed;  // with the liveness locks tested
};

OutsideView ReadFromOutside(const std::string& dir) {
  OutsideView v;
  const std::string path = dir + "/" + kRegionFileName;
  const std::string bytes = ReadAll(path);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(ReadRegionUsage(bytes.data(), bytes.size(), &v.raw));
  EXPECT_TRUE(ReadRegionUsage(
      bytes.data(), bytes.size(), &v.probed,
      [](int slot, void* ctx) { return ProbeSlotLock(*static_cast<int*>(ctx), slot); }, &fd));
  close(fd);
  return v;
}

TEST_F(SharedRegionTest, AKilledProcessLeavesTheOutsideViewAtOnceThoughItsBytesRemain) {
  // One holder at a time: under qemu-user (the Arm64 run) a process's own
  // /proc/self/stat is emulated, so a second holder would take the first
  // one's start time for PID reuse and reclaim its slot.
  pid_t holder = ForkHolder(dir_, 800 * kMiB, false, nullptr);
  ASSERT_GT(holder, 0);
  OutsideView live = ReadFromOutside(dir_);
  EXPECT_EQ(live.probed.used_bytes[0], 800 * kMiB);
  EXPECT_EQ(live.probed.processes, 1);
  EXPECT_EQ(live.probed.gone, 0);

  kill(holder, SIGKILL);
  siginfo_t info;
  // Dead but not reaped: its lock is already gone, and no process of the
  // container has reclaimed its slot.
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(holder), &info, WEXITED | WNOWAIT), 0);
  OutsideView after = ReadFromOutside(dir_);
  EXPECT_EQ(after.raw.used_bytes[0], 800 * kMiB) << "the bytes still name the killed process";
  EXPECT_EQ(after.raw.processes, 1);
  EXPECT_EQ(after.probed.used_bytes[0], 0u);
  EXPECT_EQ(after.probed.processes, 0);
  EXPECT_EQ(after.probed.gone, 1);
  waitpid(holder, nullptr, 0);
}

// Forks a child that claims a slot, charges `bytes` on device 0 and execs
// /bin/sleep, an image that does not use the region; *child is its PID.
// Returns once the exec happened.
void ForkChargerThatExecs(const std::string& dir, uint64_t bytes, pid_t* child) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  *child = fork();
  ASSERT_GE(*child, 0);
  if (*child == 0) {
    close(ready[0]);
    SharedRegion r;
    ClaimAndChargeInChild(r, dir, bytes, ready[1]);
    // The write end closes at exec, which tells the parent the exec happened.
    fcntl(ready[1], F_SETFD, FD_CLOEXEC);
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(2);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(read(ready[0], &c, 1), 0) << "exec closes the write end";
  close(ready[0]);
}

TEST_F(SharedRegionTest, AProcessThatExecsLeavesTheOutsideViewAndItsSlotIsReused) {
  pid_t child = -1;
  ASSERT_NO_FATAL_FAILURE(ForkChargerThatExecs(dir_, 300 * kMiB, &child));
  OutsideView v = ReadFromOutside(dir_);
  EXPECT_EQ(v.raw.processes, 1) << "the same PID still runs";
  EXPECT_EQ(v.probed.processes, 0) << "but the image that charged is gone";
  EXPECT_EQ(v.probed.gone, 1);
  EXPECT_EQ(v.probed.used_bytes[0], 0u);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // The slot is free to the next claimer, which takes the lock again.
  pid_t next = ForkHolder(dir_, 50 * kMiB, false, nullptr);
  ASSERT_GT(next, 0);
  OutsideView again = ReadFromOutside(dir_);
  EXPECT_EQ(again.probed.processes, 1);
  EXPECT_EQ(again.probed.used_bytes[0], 50 * kMiB);
  kill(next, SIGKILL);
  waitpid(next, nullptr, 0);
}

// The container's own reclaim frees the slot of a process that execed into
// an image that does not use the region: its lock went at the exec, and it
// no longer maps the region. (Its charges stayed until the process exited.)
// A process that merely closed its descriptors still maps the region and
// keeps its slot.
TEST_F(SharedRegionTest, AnExecedImageThatDoesNotUseTheRegionLeavesItsSlotFree) {
  pid_t child = -1;
  ASSERT_NO_FATAL_FAILURE(ForkChargerThatExecs(dir_, 300 * kMiB, &child));
  SharedRegion r;
  Open(r);
  EXPECT_EQ(r.Used(0), 0u) << "the execed image's charge is reclaimed while the PID runs";
  EXPECT_EQ(r.SlotsInUse(), 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);

  int closed[2];
  ASSERT_EQ(pipe(closed), 0);
  pid_t closer = fork();
  ASSERT_GE(closer, 0);
  if (closer == 0) {
    close(closed[0]);
    SharedRegion mine;
    ClaimAndChargeInChild(mine, dir_, 300 * kMiB, closed[1]);
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != closed[1]) {
        close(fd);  // The region's descriptor too: its lock goes, its mapping stays.
      }
    }
    char done = 'y';
    (void)!write(closed[1], &done, 1);
    pause();
    _exit(0);
  }
  close(closed[1]);
  char c = 0;
  ASSERT_EQ(read(closed[0], &c, 1), 1);
  ASSERT_EQ(read(closed[0], &c, 1), 1);
  EXPECT_EQ(r.Used(0), 300 * kMiB) << "alive and still mapping the region: kept";
  kill(closer, SIGKILL);
  waitpid(closer, nullptr, 0);
  close(closed[0]);
}

// A process that starts again by exec frees its replaced image's slot when
// it opens the region, whether or not it ever claims one.
TEST_F(SharedRegionTest, AReplacedImagesSlotIsFreedAtTheNextImagesStart) {
  SharedRegion r;
  Open(r);
  const uint64_t start = ProcessStartTime(Pid());
  int slot = r.ClaimSlot(Pid(), start);
  ASSERT_EQ(r.TryCharge(slot, 0, 64 * kMiB, kGiB, 0), ChargeResult::kOk);
  r.ForgetReplacedImage(Pid(), start + 1);
  EXPECT_EQ(r.Used(0), 64 * kMiB) << "another start time: another process";
  r.ForgetReplacedImage(Pid(), start);
  EXPECT_EQ(r.Used(0), 0u);
  EXPECT_EQ(r.SlotsInUse(), 0);
}

TEST_F(SharedRegionTest, AReleasedSlotDropsItsLockForTheNextOwner) {
  // This process claims and releases slot 0; a forked holder then claims the
  // same slot and must get (and mark) its lock.
  SharedRegion r;
  Open(r);
  const int slot = r.ClaimSlot(Pid(), ProcessStartTime(Pid()));
  ASSERT_EQ(r.SlotIndex(slot), 0);
  r.ReleaseSlot(slot);
  pid_t holder = ForkHolder(dir_, 10 * kMiB, false, nullptr);
  ASSERT_GT(holder, 0);
  RegionLayout layout;
  const std::string bytes = ReadAll(dir_ + "/" + kRegionFileName);
  ASSERT_EQ(bytes.size(), sizeof(layout));
  std::memcpy(&layout, bytes.data(), sizeof(layout));
  EXPECT_EQ(layout.slots[0].pid, holder);
  EXPECT_NE(layout.slots[0].ctx_charged_mask & kSlotLockHeld, 0u);
  EXPECT_EQ(ReadFromOutside(dir_).probed.processes, 1);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_EQ(ReadFromOutside(dir_).probed.processes, 0);
}

// What a fooled liveness check does to a live process: this process loses
// its liveness locks (it closes a descriptor of the region file, as a
// program that closes descriptors it did not open does), and a check that
// misjudges it (a start time qemu-user answers differently, a maps line not
// matched) frees its slot `slot`.
void FreeSlotWhileItsOwnerLives(const std::string& path, int slot) {
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* mem = mmap(nullptr, sizeof(RegionLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // Drops every liveness lock this process holds on the file.
  ASSERT_NE(mem, MAP_FAILED);
  std::memset(&static_cast<RegionLayout*>(mem)->slots[slot], 0, sizeof(SlotRecord));
  munmap(mem, sizeof(RegionLayout));
}

RegionLayout ReadLayout(const std::string& dir) {
  RegionLayout layout{};
  const std::string bytes = ReadAll(dir + "/" + kRegionFileName);
  EXPECT_EQ(bytes.size(), sizeof(layout));
  std::memcpy(static_cast<void*>(&layout), bytes.data(), std::min(bytes.size(), sizeof(layout)));
  return layout;
}

// A process whose slot was freed while it lived, and then claimed by another
// process, used to go on charging and freeing in the other's slot, and its
// exit zeroed it: the container went past its cap. Its calls now find the
// slot is not theirs, leave it alone, and carry its charge to a free slot.
TEST_F(SharedRegionTest, ASlotReclaimedWhileItsProcessLivesLosesNoCharge) {
  SharedRegion r;
  Open(r);
  const int mine = r.ClaimSlot(Pid(), ProcessStartTime(Pid()));
  ASSERT_GE(mine, 0);
  ASSERT_EQ(r.TryCharge(mine, 0, 600 * kMiB, kGiB, 0), ChargeResult::kOk);
  ASSERT_EQ(ReadLayout(dir_).slots[0].pid, Pid());
  FreeSlotWhileItsOwnerLives(dir_ + "/" + kRegionFileName, 0);
  pid_t other = ForkHolder(dir_, 300 * kMiB, false, nullptr);
  ASSERT_GT(other, 0);
  ASSERT_EQ(ReadLayout(dir_).slots[0].pid, other) << "the other process took the freed slot";

  r.Uncharge(mine, 0, 100 * kMiB);
  EXPECT_EQ(ReadLayout(dir_).slots[0].used[0], 300 * kMiB) << "the other's slot is untouched";
  EXPECT_EQ(r.Used(0), 800 * kMiB) << "the other's 300 MiB and this process's 500 MiB";
  EXPECT_EQ(r.TryCharge(mine, 0, 300 * kMiB, kGiB, 0), ChargeResult::kOverLimit);
  EXPECT_EQ(r.TryCharge(mine, 0, 200 * kMiB, kGiB, 0), ChargeResult::kOk);
  EXPECT_EQ(r.Used(0), 1000 * kMiB);
  r.ReleaseSlot(mine);
  EXPECT_EQ(r.Used(0), 300 * kMiB) << "this process's exit leaves the other's charge";
  EXPECT_EQ(ReadLayout(dir_).slots[0].pid, other);
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  EXPECT_EQ(r.Used(0), 0u);
}

// Under qemu-user a process's own /proc/self/stat is answered by qemu, and
// the start time it records may differ from the kernel's figure that other
// processes read: its live slot looked like a reused pid's and was freed.
// The liveness lock it holds says it lives.
TEST_F(SharedRegionTest, AProcessHoldingItsLivenessLockKeepsItsSlotWhateverItsStartTimeReads) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SharedRegion mine;
    char error[256];
    if (!mine.OpenFile(dir_.c_str(), error, sizeof(error))) {
      _exit(1);
    }
    const auto pid = static_cast<int32_t>(getpid());
    const int claim = mine.ClaimSlot(pid, ProcessStartTime(pid) + 1);  // One tick off.
    mine.TryCharge(claim, 0, 300 * kMiB, kGiB, 0);
    char c = 'x';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  SharedRegion r;
  Open(r);
  EXPECT_EQ(r.Used(0), 300 * kMiB) << "alive, holding its lock";
  EXPECT_EQ(r.SlotsInUse(), 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(r.Used(0), 0u) << "its lock went with it: the start time decides again";
  close(ready[0]);
  close(ready[1]);
}

// A live process that loses its liveness lock (it closes every descriptor it
// did not open itself) keeps its slot while it maps the region, however the
// process that looks at its maps named the state dir: with a trailing slash
// or through a symbolic link, the path it looked for was never in the maps,
// and the live process's slot and charges were dropped.
TEST_F(SharedRegionTest, AProcessThatLostItsLockKeepsItsSlotHoweverTheStateDirIsNamed) {
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(dir_.c_str(), link.c_str()), 0);
  for (const std::string& named : {dir_ + "/", dir_ + "//", link, link + "/"}) {
    SCOPED_TRACE(named);
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t closer = fork();
    ASSERT_GE(closer, 0);
    if (closer == 0) {
      close(ready[0]);
      SharedRegion mine;
      char error[256];
      if (!mine.OpenFile(dir_.c_str(), error, sizeof(error))) {
        _exit(1);
      }
      // Start time 0 (unknown): the maps alone decide, also under qemu-user,
      // where other processes read another start time than this one's own.
      mine.TryCharge(mine.ClaimSlot(static_cast<int32_t>(getpid()), 0), 0, 300 * kMiB, kGiB, 0);
      char claimed = 'x';
      (void)!write(ready[1], &claimed, 1);
      for (int fd = 3; fd < 1024; ++fd) {
        if (fd != ready[1]) {
          close(fd);  // The region's descriptor too: its lock goes, its mapping stays.
        }
      }
      char done = 'y';
      (void)!write(ready[1], &done, 1);
      pause();
      _exit(0);
    }
    close(ready[1]);
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    close(ready[0]);
    {
      SharedRegion r;
      char error[256] = {};
      ASSERT_TRUE(r.OpenFile(named.c_str(), error, sizeof(error))) << error;
      EXPECT_EQ(r.Used(0), 300 * kMiB) << "alive and still mapping the region: kept";
      EXPECT_EQ(r.SlotsInUse(), 1);
    }
    kill(closer, SIGKILL);
    waitpid(closer, nullptr, 0);
  }
  unlink(link.c_str());
}

}  // namespace
}  // namespace accelpool::cuda
