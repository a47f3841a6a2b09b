#include "plugin/container_usage.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "plugin/test_util.h"

namespace accelpool::plugin {
namespace {

using testing::TempDir;

// A region as libaccelpool-cuda lays it out, with two processes' charges.
std::string RegionBytes(uint64_t dev0_a, uint64_t dev0_b, uint64_t dev1_a) {
  std::string bytes(sizeof(cuda::RegionLayout), '\0');
  auto* r = reinterpret_cast<cuda::RegionLayout*>(bytes.data());
  r->magic = cuda::kRegionMagic;
  r->version = cuda::kRegionLayoutVersion;
  r->size = sizeof(cuda::RegionLayout);
  r->slots[0].pid = 7;
  r->slots[0].used[0] = dev0_a;
  r->slots[0].used[1] = dev1_a;
  r->slots[5].pid = 9;
  r->slots[5].used[0] = dev0_b;
  r->slots[6].used[0] = 1ULL << 40;  // a free slot's leftovers are not counted
  return bytes;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(ReadRegionFileTest, SumsTheProcessesOfARegion) {
  TempDir dir;
  Write(dir.File("accelpool-cuda.region"), RegionBytes(3 << 20, 1 << 20, 5 << 20));
  RegionReadFailure why = RegionReadFailure::kIo;
  StatusOr<cuda::RegionUsage> u = ReadRegionFile(dir.path(), &why);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(why, RegionReadFailure::kNone);
  EXPECT_EQ(u->used_bytes[0], 4u << 20);
  EXPECT_EQ(u->used_bytes[1], 5u << 20);
  EXPECT_EQ(u->processes, 2);
}

TEST(ReadRegionFileTest, WhatTheContainerCanPutThereIsRefusedWithoutFollowingOrBlocking) {
  TempDir dir;
  // No region yet, or no dir at all.
  EXPECT_EQ(ReadRegionFile(dir.path()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadRegionFile(dir.File("gone")).status().code(), StatusCode::kNotFound);
  const std::string region = dir.File("accelpool-cuda.region");
  // A symbolic link to a host file is not followed.
  Write(dir.File("elsewhere"), RegionBytes(1, 1, 1));
  ASSERT_EQ(symlink(dir.File("elsewhere").c_str(), region.c_str()), 0);
  StatusOr<cuda::RegionUsage> u = ReadRegionFile(dir.path());
  EXPECT_EQ(u.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(u.status().message().find("symbolic link"), std::string::npos) << u.status().ToString();
  std::filesystem::remove(region);
  // A FIFO nobody writes: refused at once, not waited on.
  ASSERT_EQ(mkfifo(region.c_str(), 0600), 0);
  u = ReadRegionFile(dir.path());
  EXPECT_EQ(u.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(u.status().message().find("not a regular file"), std::string::npos)
      << u.status().ToString();
  std::filesystem::remove(region);
  // The dir itself a link: refused too.
  ASSERT_EQ(symlink(dir.path().c_str(), dir.File("linked").c_str()), 0);
  EXPECT_NE(ReadRegionFile(dir.File("linked")).status().code(), StatusCode::kOk);
  // Another size, another header.
  Write(region, std::string(100, 'x'));
  RegionReadFailure why = RegionReadFailure::kNone;
  u = ReadRegionFile(dir.path(), &why);
  EXPECT_EQ(why, RegionReadFailure::kLayout);
  EXPECT_EQ(u.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(u.status().message().find("layout"), std::string::npos) << u.status().ToString();
  std::string bytes = RegionBytes(1, 1, 1);
  bytes[offsetof(cuda::RegionLayout, version)] ^= 0x40;
  Write(region, bytes);
  u = ReadRegionFile(dir.path());
  EXPECT_EQ(u.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(u.status().message().find("layout"), std::string::npos) << u.status().ToString();
}

TEST(ReadRegionFileTest, ASlotWhoseOwnerDroppedItsLivenessLockIsLeftOut) {
  TempDir dir;
  const std::string region = dir.File("accelpool-cuda.region");
  std::string bytes = RegionBytes(3 << 20, 1 << 20, 5 << 20);
  auto* r = reinterpret_cast<cuda::RegionLayout*>(bytes.data());
  r->slots[0].ctx_charged_mask |= cuda::kSlotLockHeld;  // its owner, below, holds the lock
  r->slots[5].ctx_charged_mask |= cuda::kSlotLockHeld;  // its owner is gone
  r->slots[9].pid = 11;                                 // no mark: counted as live
  r->slots[9].used[0] = 2 << 20;
  Write(region, bytes);
  // The owner of slot 0: another process, as the container's processes are.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t owner = fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    int fd = open(region.c_str(), O_RDWR | O_CLOEXEC);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = cuda::LivenessLockOffset(0);
    fl.l_len = 1;
    const char c = fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0 ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  ASSERT_EQ(c, 'y') << "the owner could not lock its byte";
  StatusOr<cuda::RegionUsage> u = ReadRegionFile(dir.path());
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->used_bytes[0], (3u << 20) + (2u << 20));
  EXPECT_EQ(u->used_bytes[1], 5u << 20);
  EXPECT_EQ(u->processes, 2);
  EXPECT_EQ(u->gone, 1);
  kill(owner, SIGKILL);
  waitpid(owner, nullptr, 0);
  u = ReadRegionFile(dir.path());
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->used_bytes[0], 2u << 20) << "only the unmarked slot is left";
  EXPECT_EQ(u->used_bytes[1], 0u);
  EXPECT_EQ(u->processes, 1);
  EXPECT_EQ(u->gone, 2);
}

}  // namespace
}  // namespace accelpool::plugin
