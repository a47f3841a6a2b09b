#include "cuda/priority_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cuda/testing/priority_testing.h"

namespace accelpool::cuda {
namespace {

using testing::PreadU64;
using testing::PriorityPath;
using testing::PwriteU64;
using testing::WritePriorityFile;

constexpr uint64_t kMs = 1'000'000;

class PriorityDir {
 public:
  PriorityDir() {
    char tmpl[] = "/tmp/accelpool-priority-XXXXXX";
    path_ = mkdtemp(tmpl) != nullptr ? tmpl : "";
  }
  ~PriorityDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string file() const { return PriorityPath(path_); }

 private:
  std::string path_;
};

TEST(PriorityFormatTest, TheLayoutIsTheContract) {
  EXPECT_EQ(kPriorityFileSize, 16u + 2 * 8 * kMaxDevices);
  EXPECT_EQ(LaunchesOffset(0), 16u);
  EXPECT_EQ(LaunchesOffset(3), 16u + 3 * 8);
  EXPECT_EQ(HoldOffset(0), 16u + 8 * kMaxDevices);
  EXPECT_EQ(HoldOffset(kMaxDevices - 1), kPriorityFileSize - 8);
}

TEST(PriorityFileTest, ASoundFileIsMappedSharedWithTheWriterOutside) {
  PriorityDir dir;
  ASSERT_FALSE(dir.path().empty());
  ASSERT_TRUE(WritePriorityFile(dir.file()));
  char error[512] = {};
  PriorityLayout* p = MapPriorityFile(dir.path().c_str(), error, sizeof(error));
  ASSERT_NE(p, nullptr) << error;
  __atomic_fetch_add(&p->launches[2], 5, __ATOMIC_RELAXED);
  EXPECT_EQ(PreadU64(dir.file(), LaunchesOffset(2)), 5u) << "the plugin reads what the shim adds";
  ASSERT_TRUE(PwriteU64(dir.file(), HoldOffset(1), 12345));
  EXPECT_EQ(__atomic_load_n(&p->hold_until_ns[1], __ATOMIC_RELAXED), 12345u)
      << "the shim reads what the plugin writes";
  UnmapPriorityFile(p);
}

TEST(PriorityFileTest, AnyOtherFileIsRefusedWithItsReason) {
  struct Case {
    const char* name;
    // Puts something at the priority file's path; false to skip the case.
    bool (*make)(const std::string& dir);
    const char* reason;
  };
  const Case cases[] = {
      {"missing", [](const std::string&) { return true; }, "is missing"},
      {"short",
       [](const std::string& d) {
         return WritePriorityFile(PriorityPath(d), kPriorityMagic, kPriorityLayoutVersion,
                                  kPriorityFileSize, 100);
       },
       "has 100 bytes, not 272"},
      {"long",
       [](const std::string& d) {
         return WritePriorityFile(PriorityPath(d), kPriorityMagic, kPriorityLayoutVersion,
                                  kPriorityFileSize, kPriorityFileSize + 8);
       },
       "has 280 bytes, not 272"},
      {"empty", [](const std::string& d) { return WritePriorityFile(PriorityPath(d), 0, 0, 0, 0); },
       "has 0 bytes"},
      {"magic", [](const std::string& d) { return WritePriorityFile(PriorityPath(d), 0x1234); },
       "has another header (magic 0x1234"},
      {"version",
       [](const std::string& d) {
         return WritePriorityFile(PriorityPath(d), kPriorityMagic, kPriorityLayoutVersion + 1);
       },
       "version 2"},
      {"header size",
       [](const std::string& d) {
         return WritePriorityFile(PriorityPath(d), kPriorityMagic, kPriorityLayoutVersion, 64);
       },
       "size 64"},
      {"symlink",
       [](const std::string& d) {
         return WritePriorityFile(d + "/target") &&
                symlink((d + "/target").c_str(), PriorityPath(d).c_str()) == 0;
       },
       "is a symbolic link"},
      {"directory", [](const std::string& d) { return mkdir(PriorityPath(d).c_str(), 0755) == 0; },
       "cannot open the priority file"},
      {"fifo", [](const std::string& d) { return mkfifo(PriorityPath(d).c_str(), 0666) == 0; },
       "is not a regular file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PriorityDir dir;
    ASSERT_FALSE(dir.path().empty());
    ASSERT_TRUE(c.make(dir.path()));
    char error[512] = {};
    PriorityLayout* p = MapPriorityFile(dir.path().c_str(), error, sizeof(error));
    EXPECT_EQ(p, nullptr);
    UnmapPriorityFile(p);
    std::string e = error;
    EXPECT_NE(e.find(c.reason), std::string::npos) << e;
    EXPECT_NE(e.find(dir.file()), std::string::npos) << "names the path: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(PriorityFileTest, HoldStepsAreShortAndOnlyForAHoldingDeadline) {
  const uint64_t now = 1'000'000 * kMs;
  struct Case {
    const char* name;
    uint64_t hold;
    int64_t want;
  };
  const Case cases[] = {
      {"no deadline", 0, 0},
      {"in the past", now - 1, 0},
      {"now", now, 0},
      {"5 ms ahead", now + 5 * kMs, static_cast<int64_t>(5 * kMs)},
      {"1 s ahead: one step", now + 1000 * kMs, kHoldStepNs},
      {"the furthest that holds", now + kMaxHoldAheadNs, kHoldStepNs},
      {"past the furthest", now + kMaxHoldAheadNs + 1, 0},
      {"the end of time", UINT64_MAX, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(HoldStepNs(c.hold, now), c.want);
  }
  EXPECT_EQ(HoldStepNs(5, 0), 5) << "at the clock's start";
}

}  // namespace
}  // namespace accelpool::cuda
