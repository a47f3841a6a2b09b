#include "plugin/state_dirs.h"

#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <string>

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

}  // namespace
}  // namespace accelpool::plugin
