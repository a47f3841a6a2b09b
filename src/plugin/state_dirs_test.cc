#include "plugin/state_dirs.h"

#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "plugin/test_util.h"

namespace {

// readdir as the C library has it, except on a thread that arms it: then it
// succeeds that many more times and fails with EIO (a disk error under the
// state root). Interposed here, in the test binary, for the iteration inside
// libstdc++'s directory_iterator.
thread_local int readdir_calls_left = -1;  // -1: never fails

}  // namespace

extern "C" struct dirent* readdir(DIR* dir) {
  using Real = struct dirent* (*)(DIR*);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "readdir"));
  if (readdir_calls_left == 0) {
    errno = EIO;
    return nullptr;
  }
  if (readdir_calls_left > 0) {
    --readdir_calls_left;
  }
  return real(dir);
}

namespace accelpool::plugin {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A directory listing that fails part way is an error to report, not an
// exception: RemovePod runs on the informer's thread and Sweep in the main
// loop, where an uncaught filesystem_error ends the plugin.
TEST(StateDirsTest, AListingThatFailsPartWayIsAnErrorNotACrash) {
  TempDir dir;
  const StateDirs dirs(dir.File("root"));
  for (const char* uid : {"uid-1", "uid-2", "uid-3"}) {
    ASSERT_TRUE(dirs.Create(uid, "main").ok());
  }
  // The constructor reads up to the first entry (after "." and ".." at
  // worst): three calls; the fourth, in an increment, fails.
  readdir_calls_left = 3;
  size_t removed = 0;
  const Status st = dirs.RemovePod("uid-9", &removed);
  readdir_calls_left = -1;
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("cannot list the state root"), std::string::npos) << st.message();
  EXPECT_EQ(removed, 0u);
  readdir_calls_left = 3;
  const Status swept = dirs.Sweep({}, fs::file_time_type::clock::now() - std::chrono::hours(1));
  readdir_calls_left = -1;
  EXPECT_EQ(swept.code(), StatusCode::kUnavailable) << swept.ToString();
  // Once the disk answers again, so does the sweep.
  EXPECT_TRUE(dirs.RemovePod("uid-1", &removed).ok());
  EXPECT_EQ(removed, 1u);
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// An earlier Create that failed between the mkdir of state/ and its chmod
// (or a dir made by hand) leaves state/ 0755: processes of another user in
// the container could not create the accounting region. The next Create
// gives it its mode.
TEST(StateDirsTest, CreateGivesAnExistingStateDirItsMode) {
  TempDir dir;
  const StateDirs dirs(dir.File("root"));
  fs::create_directories(dir.File("root/uid-1_main/state"));
  ASSERT_EQ(chmod(dir.File("root/uid-1_main/state").c_str(), 0755), 0);
  bool created = true;
  StatusOr<std::string> p = dirs.Create("uid-1", "main", &created);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(created);
  EXPECT_EQ(ModeOf(StateDirs::StateSubdir(*p)), 01777u);
  // state/ that is not a directory is refused, not chmod-ed through.
  fs::create_directories(dir.File("root/uid-2_main"));
  testing::WriteFile(dir.File("root/uid-2_main/state"), "x");
  EXPECT_EQ(dirs.Create("uid-2", "main").status().code(), StatusCode::kUnavailable);
}

// When making state/ fails after the container dir was made, the call still
// says it made the dir, so that the failed Allocate removes it again.
TEST(StateDirsTest, ADirMadeBeforeALaterStepFailedIsReportedMade) {
  TempDir dir;
  // A root so long that <root>/uid-1_main fits in PATH_MAX and
  // <root>/uid-1_main/state does not: its mkdir fails (ENAMETOOLONG).
  const std::string leaf = "/uid-1_main";
  std::string root = dir.path();
  while (root.size() + leaf.size() + 250 < 4092) {
    root += "/" + std::string(200, 'r');
  }
  root += "/" + std::string(4092 - leaf.size() - root.size() - 1, 's');
  ASSERT_EQ(root.size() + leaf.size(), 4092u);
  const StateDirs dirs(root);
  bool created = false;
  StatusOr<std::string> p = dirs.Create("uid-1", "main", &created);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(created);
  EXPECT_TRUE(fs::is_directory(root + leaf));
  EXPECT_TRUE(dirs.Remove("uid-1", "main").ok());
  EXPECT_FALSE(fs::exists(root + leaf));
}

// The cap: Create mounts a tmpfs of the configured size and inode count on
// state/ (nosuid, nodev, noexec, mode 1777) before it is handed out, and
// never a second one over a state/ that is a mount point already (a second
// Allocate, or a plugin restarted while the container runs: its region lives
// in that tmpfs).
TEST(StateDirsTest, CreateCapsStateWithATmpfsOnce) {
  TempDir dir;
  testing::FakeMountCalls calls;
  const StateDirs dirs(dir.File("root"),
                       StateDirOptions{.size_mib = 4, .inodes = 64, .calls = &calls});
  StatusOr<std::string> p = dirs.Create("uid-1", "main");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string state = StateDirs::StateSubdir(*p);
  ASSERT_EQ(calls.calls.size(), 1u);
  EXPECT_EQ(calls.calls[0], "mount tmpfs " + state + " tmpfs " +
                                std::to_string(MS_NOSUID | MS_NODEV | MS_NOEXEC) +
                                " size=4m,nr_inodes=64,mode=1777");
  EXPECT_EQ(kStateMountFlags, static_cast<unsigned long>(MS_NOSUID | MS_NODEV |  // NOLINT
                                                         MS_NOEXEC));
  ASSERT_TRUE(dirs.Create("uid-1", "main").ok());
  EXPECT_EQ(calls.calls.size(), 1u) << "a mount point is kept, not mounted over";
  // Another object over the same root (a restarted plugin) keeps it too.
  const StateDirs restarted(dir.File("root"), StateDirOptions{.size_mib = 4, .calls = &calls});
  ASSERT_TRUE(restarted.Create("uid-1", "main").ok());
  EXPECT_EQ(calls.calls.size(), 1u);
  // Off (0): a plain directory, no mount.
  const StateDirs plain(dir.File("root"), StateDirOptions{.size_mib = 0, .calls = &calls});
  ASSERT_TRUE(plain.Create("uid-2", "main").ok());
  EXPECT_EQ(calls.calls.size(), 1u);
}

// A plain state/ that holds files (made by a plugin that did not cap, while
// its container runs) is not mounted over: that would hide the live region.
TEST(StateDirsTest, AStateDirThatHoldsFilesIsNotMountedOver) {
  TempDir dir;
  testing::FakeMountCalls calls;
  const StateDirs dirs(dir.File("root"), StateDirOptions{.size_mib = 4, .calls = &calls});
  fs::create_directories(dir.File("root/uid-1_main/state"));
  testing::WriteFile(dir.File("root/uid-1_main/state/accelpool-cuda.region"), "live");
  ASSERT_TRUE(dirs.Create("uid-1", "main").ok());
  EXPECT_TRUE(calls.calls.empty());
}

// An unprivileged plugin (EPERM) keeps serving: state/ stays a plain 1777
// directory, and the caller hears of it once, with the reason.
TEST(StateDirsTest, ARefusedMountFallsBackToAPlainDirAndSaysSoOnce) {
  TempDir dir;
  testing::FakeMountCalls calls;
  calls.mount_error = EPERM;
  std::vector<std::string> said;
  const StateDirs dirs(
      dir.File("root"),
      StateDirOptions{.size_mib = 4, .calls = &calls, .on_uncapped = [&](const Status& why) {
                        said.push_back(why.ToString());
                      }});
  const StateDirs copy = dirs;  // copies share the once
  for (const char* uid : {"uid-1", "uid-2"}) {
    StatusOr<std::string> p = dirs.Create(uid, "main");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(ModeOf(StateDirs::StateSubdir(*p)), 01777u);
  }
  ASSERT_TRUE(copy.Create("uid-3", "main").ok());
  EXPECT_EQ(calls.calls.size(), 3u) << "each dir is still tried";
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("uid-1_main/state"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find(std::strerror(EPERM)), std::string::npos) << said[0];
}

// Every removal detaches a state/ that is a mount point before it deletes
// anything (remove_all would otherwise empty a live tmpfs and then fail on
// its mount point), also with the cap off now (an earlier run capped it).
TEST(StateDirsTest, RemovalDetachesTheTmpfsFirst) {
  TempDir dir;
  testing::FakeMountCalls calls;
  const StateDirs capped(dir.File("root"), StateDirOptions{.size_mib = 4, .calls = &calls});
  for (const char* uid : {"uid-1", "uid-2", "uid-3"}) {
    ASSERT_TRUE(capped.Create(uid, "main").ok());
  }
  const StateDirs dirs(dir.File("root"), StateDirOptions{.size_mib = 0, .calls = &calls});
  calls.calls.clear();
  ASSERT_TRUE(dirs.Remove("uid-1", "main").ok());
  size_t removed = 0;
  ASSERT_TRUE(dirs.RemovePod("uid-2", &removed).ok());
  EXPECT_EQ(removed, 1u);
  ASSERT_TRUE(
      dirs.Sweep({}, fs::file_time_type::clock::now() + std::chrono::hours(1), &removed).ok());
  EXPECT_EQ(removed, 1u);
  EXPECT_EQ(calls.calls, (std::vector<std::string>{
                             "detach " + dir.File("root/uid-1_main/state"),
                             "detach " + dir.File("root/uid-2_main/state"),
                             "detach " + dir.File("root/uid-3_main/state"),
                         }));
  EXPECT_TRUE(calls.mounted.empty());
  EXPECT_FALSE(fs::exists(dir.File("root/uid-1_main")));
  EXPECT_FALSE(fs::exists(dir.File("root/uid-3_main")));
  // A plain state/ is not detached.
  ASSERT_TRUE(dirs.Create("uid-4", "main").ok());
  ASSERT_TRUE(dirs.Remove("uid-4", "main").ok());
  EXPECT_EQ(calls.calls.size(), 3u);
}

// A tmpfs that cannot be detached (the plugin lost CAP_SYS_ADMIN) is left
// whole and reported: its files are not deleted under a mount that stays.
TEST(StateDirsTest, ATmpfsThatCannotBeDetachedIsLeftAndReported) {
  TempDir dir;
  testing::FakeMountCalls calls;
  const StateDirs dirs(dir.File("root"), StateDirOptions{.size_mib = 4, .calls = &calls});
  StatusOr<std::string> p = dirs.Create("uid-1", "main");
  ASSERT_TRUE(p.ok());
  testing::WriteFile(StateDirs::StateSubdir(*p) + "/accelpool-cuda.region", "x");
  calls.detach_error = EPERM;
  const Status st = dirs.Remove("uid-1", "main");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("cannot unmount"), std::string::npos) << st.message();
  EXPECT_TRUE(fs::exists(StateDirs::StateSubdir(*p) + "/accelpool-cuda.region"));
  size_t removed = 0;
  EXPECT_EQ(dirs.RemovePod("uid-1", &removed).code(), StatusCode::kUnavailable);
  EXPECT_EQ(removed, 0u);
}

// The real calls, where this process may mount (root with CAP_SYS_ADMIN,
// outside a sandbox that refuses mount(2)).
TEST(StateDirsTest, ARealTmpfsCapsTheStateDirAndIsDetachedOnRemoval) {
  TempDir dir;
  const std::string probe = dir.File("probe");
  fs::create_directories(probe);
  if (mount("tmpfs", probe.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m") != 0) {
    GTEST_SKIP() << "this process cannot mount a tmpfs (" << std::strerror(errno)
                 << "): run the test as root with CAP_SYS_ADMIN to check the real mount";
  }
  ASSERT_EQ(umount2(probe.c_str(), MNT_DETACH), 0);
  const StateDirs dirs(dir.File("root"), StateDirOptions{.size_mib = 1, .inodes = 8});
  StatusOr<std::string> p = dirs.Create("uid-1", "main");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string state = StateDirs::StateSubdir(*p);
  struct Unmount {  // a failed assertion must not leave the tmpfs mounted
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{state};
  bool mounted = false;
  ASSERT_EQ(SystemMountCalls()->IsMountPoint(state, &mounted), 0);
  EXPECT_TRUE(mounted);
  EXPECT_EQ(ModeOf(state), 01777u);
  ASSERT_TRUE(dirs.Create("uid-1", "main").ok());  // not mounted twice
  // More than the cap: a write fails (ENOSPC) instead of filling the disk.
  {
    FILE* f = std::fopen((state + "/fill").c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string block(64 * 1024, 'x');
    size_t written = 0;
    for (int i = 0; i < 64; ++i) {
      written += std::fwrite(block.data(), 1, block.size(), f);
    }
    const bool flushed = std::fflush(f) == 0;
    std::fclose(f);
    EXPECT_FALSE(flushed && written == 64 * block.size()) << "wrote 4 MiB into a 1 MiB cap";
  }
  // And more files than its inodes: creation fails.
  int made = 0;
  for (int i = 0; i < 16; ++i) {
    FILE* f = std::fopen((state + "/f" + std::to_string(i)).c_str(), "w");
    if (f == nullptr) break;
    std::fclose(f);
    ++made;
  }
  EXPECT_LT(made, 16);
  ASSERT_TRUE(dirs.Remove("uid-1", "main").ok());
  EXPECT_FALSE(fs::exists(*p));
}

}  // namespace
}  // namespace accelpool::plugin
