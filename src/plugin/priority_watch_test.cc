#include "plugin/priority_watch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/metrics.h"
#include "cuda/priority_format.h"
#include "plugin/file_replace.h"
#include "plugin/plugin_metrics.h"
#include "plugin/priority_file.h"
#include "plugin/test_util.h"

namespace accelpool::plugin {
namespace {

using std::chrono::milliseconds;
using testing::Ctr;
using testing::Dev;
using testing::Pod;
using testing::TempDir;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr uint64_t kSecond = 1'000'000'000ULL;

// What the shim of a high-priority container does on a launch on `ordinal`.
void Launch(const std::string& state_dir, int ordinal) {
  const int fd = open(PriorityFilePath(state_dir).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  uint64_t n = 0;
  ASSERT_EQ(pread(fd, &n, sizeof(n), static_cast<off_t>(cuda::LaunchesOffset(ordinal))),
            static_cast<ssize_t>(sizeof(n)));
  ++n;
  ASSERT_EQ(pwrite(fd, &n, sizeof(n), static_cast<off_t>(cuda::LaunchesOffset(ordinal))),
            static_cast<ssize_t>(sizeof(n)));
  close(fd);
}

class PriorityWatchTest : public ::testing::Test {
 protected:
  PriorityWatchTest() : dirs_(dir_.path()) {
    auto m = PluginMetrics::New(registry_);
    EXPECT_TRUE(m.ok());
    metrics_ = std::move(m).value();
  }

  // An allocated fractional container on `devices` (its ordinals in order),
  // with its state dir and priority file made as Enforce makes them.
  std::string Add(const std::string& pod, bool high, std::vector<api::AssignedDevice> devices) {
    PodRef ref = Pod(pod);
    if (high) ref.high_priority.insert("main");
    api::Assignment a;
    a.node = "node-a";
    a.containers.push_back(Ctr("main", kGpu, core::Vendor::kNvidia, std::move(devices)));
    store_.Upsert(ref, a, {{"main", kGpu}});
    StatusOr<std::string> dir = dirs_.Create(ref.uid, "main");
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    const std::string state = StateDirs::StateSubdir(*dir);
    EXPECT_TRUE(EnsurePriorityFile(state).ok());
    return state;
  }

  uint64_t Hold(const std::string& state, int ordinal) {
    StatusOr<uint64_t> h = ReadHold(state, ordinal);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? *h : 0;
  }

  TempDir dir_;
  StateDirs dirs_;
  AssignmentStore store_;
  MetricsRegistry registry_;
  std::unique_ptr<PluginMetrics> metrics_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

TEST_F(PriorityWatchTest, ABusyHighPriorityContainerHoldsTheLowOnesOnItsGpuOnly) {
  const std::string high = Add("infer", true, {Dev("GPU-a", 0, 1, 4096, 300, false)});
  // The low container's second device is GPU-a: the hold goes to its ordinal 1.
  const std::string low = Add(
      "train", false, {Dev("GPU-b", 1, 1, 4096, 300, false), Dev("GPU-a", 0, 2, 4096, 300, false)});
  const std::string other = Add("batch", false, {Dev("GPU-b", 1, 2, 4096, 300, false)});
  PriorityWatch w({}, &store_, &dirs_, metrics_.get(), Logger());

  w.Poll(t0_, 100 * kSecond);  // first sight of the counter: no evidence yet
  EXPECT_TRUE(w.Held().empty());
  EXPECT_EQ(Hold(low, 1), 0u);

  Launch(high, 0);
  w.Poll(t0_ + milliseconds(1000), 101 * kSecond);
  EXPECT_EQ(w.Held(), std::set<std::string>({"default/train/main"}));
  EXPECT_EQ(Hold(low, 1), 101 * kSecond + 3 * kSecond);  // now + hold_ahead
  EXPECT_EQ(Hold(low, 0), 0u);                           // GPU-b: no high container there
  EXPECT_EQ(Hold(other, 0), 0u);
  std::string page = registry_.Serialize();
  EXPECT_NE(page.find("accelpool_plugin_priority_held_containers 1"), std::string::npos) << page;
  EXPECT_NE(page.find("accelpool_plugin_priority_holds_total 1"), std::string::npos) << page;

  // No launch since: still busy for busy_for (5 s), the deadline renewed.
  w.Poll(t0_ + milliseconds(4000), 104 * kSecond);
  EXPECT_EQ(Hold(low, 1), 107 * kSecond);
  // Idle for 5 s: released, and the deadline set back to 0.
  w.Poll(t0_ + milliseconds(6500), 106 * kSecond);
  EXPECT_TRUE(w.Held().empty());
  EXPECT_EQ(Hold(low, 1), 0u);
  page = registry_.Serialize();
  EXPECT_NE(page.find("accelpool_plugin_priority_held_containers 0"), std::string::npos) << page;
  // Busy again: a new hold.
  Launch(high, 0);
  w.Poll(t0_ + milliseconds(7500), 107 * kSecond);
  EXPECT_EQ(Hold(low, 1), 110 * kSecond);
  EXPECT_NE(registry_.Serialize().find("accelpool_plugin_priority_holds_total 2"),
            std::string::npos);
}

TEST_F(PriorityWatchTest, WithoutAHighPriorityContainerNobodyIsHeld) {
  const std::string a = Add("a", false, {Dev("GPU-a", 0, 1, 4096, 300, false)});
  const std::string b = Add("b", false, {Dev("GPU-a", 0, 2, 4096, 300, false)});
  Launch(a, 0);
  PriorityWatch w({}, &store_, &dirs_, nullptr, Logger());
  w.Poll(t0_, 100 * kSecond);
  Launch(a, 0);
  Launch(b, 0);
  w.Poll(t0_ + milliseconds(1000), 101 * kSecond);
  EXPECT_TRUE(w.Held().empty());
  EXPECT_EQ(Hold(a, 0), 0u);
  EXPECT_EQ(Hold(b, 0), 0u);
}

TEST_F(PriorityWatchTest, AHighPriorityContainerThatLeavesReleasesAtOnce) {
  const std::string high = Add("infer", true, {Dev("GPU-a", 0, 1, 4096, 300, false)});
  const std::string low = Add("train", false, {Dev("GPU-a", 0, 2, 4096, 300, false)});
  PriorityWatch w({}, &store_, &dirs_, nullptr, Logger());
  w.Poll(t0_, 100 * kSecond);
  Launch(high, 0);
  w.Poll(t0_ + milliseconds(1000), 101 * kSecond);
  ASSERT_NE(Hold(low, 0), 0u);
  store_.Remove("uid-infer");
  w.Poll(t0_ + milliseconds(2000), 102 * kSecond);
  EXPECT_TRUE(w.Held().empty());
  EXPECT_EQ(Hold(low, 0), 0u);
}

TEST_F(PriorityWatchTest, WholeCardsAndContainersNotYetAllocatedTakeNoPart) {
  const std::string high = Add("infer", true, {Dev("GPU-a", 0, 1, 4096, 300, false)});
  // Not allocated yet (kubelet has not started it): not held.
  PodRef pending = Pod("pending");
  api::Assignment a;
  a.containers.push_back(
      Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2, 4096, 300, false)}));
  store_.Upsert(pending, a, {});
  StatusOr<std::string> dir = dirs_.Create(pending.uid, "main");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(EnsurePriorityFile(StateDirs::StateSubdir(*dir)).ok());
  PriorityWatch w({}, &store_, &dirs_, nullptr, Logger());
  w.Poll(t0_, 100 * kSecond);
  Launch(high, 0);
  w.Poll(t0_ + milliseconds(1000), 101 * kSecond);
  EXPECT_TRUE(w.Held().empty());
  EXPECT_EQ(Hold(StateDirs::StateSubdir(*dir), 0), 0u);
}

TEST_F(PriorityWatchTest, AFileTheContainerBrokeIsSkippedNotFollowed) {
  const std::string high = Add("infer", true, {Dev("GPU-a", 0, 1, 4096, 300, false)});
  const std::string low = Add("train", false, {Dev("GPU-a", 0, 2, 4096, 300, false)});
  const std::string victim = dir_.File("victim");
  testing::WriteFile(victim, std::string(cuda::kPriorityFileSize, 'x'));
  // The low container replaced its file with a link to a host file.
  std::filesystem::remove(PriorityFilePath(low));
  std::filesystem::create_symlink(victim, PriorityFilePath(low));
  PriorityWatch w({}, &store_, &dirs_, nullptr, Logger());
  w.Poll(t0_, 100 * kSecond);
  Launch(high, 0);
  w.Poll(t0_ + milliseconds(1000), 101 * kSecond);
  EXPECT_TRUE(w.Held().empty());
  std::string content;
  {
    StatusOr<std::string> got = ReadRegularFile(victim, 1 << 20);
    ASSERT_TRUE(got.ok());
    content = *got;
  }
  EXPECT_EQ(content, std::string(cuda::kPriorityFileSize, 'x'));  // untouched
  // A file of the wrong size or header is refused as well.
  std::filesystem::remove(PriorityFilePath(high));
  testing::WriteFile(PriorityFilePath(high), "short");
  EXPECT_EQ(ReadLaunches(high, 0).status().code(), StatusCode::kFailedPrecondition);
  // Allocate again puts a good file back (by rename: the link is replaced,
  // the host file it named is not written).
  ASSERT_TRUE(EnsurePriorityFile(low).ok());
  EXPECT_FALSE(std::filesystem::is_symlink(PriorityFilePath(low)));
  EXPECT_EQ(Hold(low, 0), 0u);
  StatusOr<std::string> after = ReadRegularFile(victim, 1 << 20);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, content);
}

// A file reported unreadable is remembered (to say it once) only while its
// container is there: pods come and go, and the set must not grow with them.
TEST_F(PriorityWatchTest, UnreadableFilesOfContainersThatWentAreForgotten) {
  PriorityWatch w({}, &store_, &dirs_, nullptr, Logger());
  for (int i = 0; i < 3; ++i) {
    const std::string pod = "infer-" + std::to_string(i);
    const std::string high = Add(pod, true, {Dev("GPU-a", 0, 1, 4096, 300, false)});
    const std::string low =
        Add("train-" + std::to_string(i), false, {Dev("GPU-a", 0, 2, 4096, 300, false)});
    std::filesystem::remove(PriorityFilePath(high));
    testing::WriteFile(PriorityFilePath(high), "short");
    std::filesystem::remove(PriorityFilePath(low));
    testing::WriteFile(PriorityFilePath(low), "short");
    w.Poll(t0_ + milliseconds(1000 * i), (100 + i) * kSecond);
    EXPECT_EQ(w.WarnedFiles(), 1u);  // the high one's; nobody is held, so the low one is not read
    store_.Remove("uid-" + pod);
    store_.Remove("uid-train-" + std::to_string(i));
  }
  w.Poll(t0_ + milliseconds(5000), 105 * kSecond);
  EXPECT_EQ(w.WarnedFiles(), 0u);
}

TEST_F(PriorityWatchTest, EnsureKeepsAGoodFileAndMakesItWritableByAnyone) {
  TempDir d;
  ASSERT_TRUE(EnsurePriorityFile(d.path()).ok());
  struct stat st = {};
  ASSERT_EQ(stat(PriorityFilePath(d.path()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  EXPECT_EQ(static_cast<size_t>(st.st_size), cuda::kPriorityFileSize);
  Launch(d.path(), 3);
  const ino_t inode = st.st_ino;
  ASSERT_TRUE(EnsurePriorityFile(d.path()).ok());  // a running container's file: kept
  ASSERT_EQ(stat(PriorityFilePath(d.path()).c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, inode);
  EXPECT_EQ(*ReadLaunches(d.path(), 3), 1u);
  EXPECT_EQ(ReadLaunches(d.path(), cuda::kMaxDevices).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadLaunches(d.File("none"), 0).status().code(), StatusCode::kNotFound);
}

TEST_F(PriorityWatchTest, RunReleasesItsHoldsWhenItStops) {
  const std::string high = Add("infer", true, {Dev("GPU-a", 0, 1, 4096, 300, false)});
  const std::string low = Add("train", false, {Dev("GPU-a", 0, 2, 4096, 300, false)});
  PriorityWatchOptions o;
  o.every = milliseconds(20);
  PriorityWatch w(o, &store_, &dirs_, nullptr, Logger());
  std::jthread t([&w](std::stop_token st) { w.Run(st); });
  std::this_thread::sleep_for(milliseconds(100));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Hold(low, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
    Launch(high, 0);
    std::this_thread::sleep_for(milliseconds(30));
  }
  ASSERT_NE(Hold(low, 0), 0u);
  t.request_stop();
  t.join();
  EXPECT_EQ(Hold(low, 0), 0u);
}

}  // namespace
}  // namespace accelpool::plugin
