#include "vendors/backends.h"

#include <gtest/gtest.h>

namespace accelpool::vendors {
namespace {

TEST(BackendsTest, NamesAreCheckedAndAbsentLibrariesAreSkippedByAuto) {
  struct Case {
    std::string backends;
    std::string fake_inventory;
    StatusCode want;
    size_t want_drivers;
  };
  // No vendor library is installed where the tests run: "auto" finds nothing
  // (and says why for each backend), a named backend is an error.
  const std::vector<Case> cases = {
      {"auto", "", StatusCode::kOk, 0},
      {"fake", "inv.json", StatusCode::kOk, 1},
      {"auto,fake", "inv.json", StatusCode::kOk, 1},
      {"fake", "", StatusCode::kInvalidArgument, 0},
      {"acme", "", StatusCode::kInvalidArgument, 0},
      {"", "", StatusCode::kInvalidArgument, 0},
      {"nvidia", "", StatusCode::kUnavailable, 0},
      {"ascend", "", StatusCode::kUnavailable, 0},
      {"hygon", "", StatusCode::kUnavailable, 0},
      {"thead", "", StatusCode::kUnavailable, 0},
      {"kunlunxin", "", StatusCode::kUnavailable, 0},
      {"metax", "", StatusCode::kUnavailable, 0},
      {"mthreads", "", StatusCode::kUnavailable, 0},
      {"cambricon", "", StatusCode::kUnavailable, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.backends);
    std::vector<std::string> skipped;
    auto drivers = MakeBackends({c.backends, "n", c.fake_inventory, 0}, &skipped);
    EXPECT_EQ(drivers.status().code(), c.want) << drivers.status().ToString();
    if (drivers.ok()) {
      EXPECT_EQ(drivers->size(), c.want_drivers);
      if (c.backends.rfind("auto", 0) == 0) {
        EXPECT_EQ(skipped.size(), HardwareBackends().size());
      }
    }
  }
}

TEST(BackendsTest, AMissingNvmlSaysHowTheRuntimeInjectsIt) {
  auto drivers = MakeBackends({"nvidia", "n", "", 0}, nullptr);
  ASSERT_EQ(drivers.status().code(), StatusCode::kUnavailable);
  for (const char* want : {"backend nvidia", "libnvidia-ml.so.1", "NVIDIA_VISIBLE_DEVICES=all",
                           "NVIDIA_DRIVER_CAPABILITIES=utility"}) {
    EXPECT_NE(drivers.status().message().find(want), std::string::npos)
        << want << " not in: " << drivers.status().message();
  }
}

TEST(BackendsTest, RetryWhileUnavailableBacksOffUntilTheLibraryLoads) {
  using std::chrono::milliseconds;
  struct Case {
    std::string name;
    std::vector<StatusCode> tries;  // what each call of the factory answers
    int stop_after_waits;           // waits answered true before one answers false; -1: all true
    StatusCode want;
    std::vector<int64_t> want_delays_ms;
  };
  const std::vector<Case> cases = {
      {"loads at once", {StatusCode::kOk}, -1, StatusCode::kOk, {}},
      {"library appears on the fifth try",
       {StatusCode::kUnavailable, StatusCode::kUnavailable, StatusCode::kUnavailable,
        StatusCode::kUnavailable, StatusCode::kOk},
       -1,
       StatusCode::kOk,
       {5, 10, 20, 25}},  // doubled, capped at 25
      {"a bad flag is not waited on",
       {StatusCode::kInvalidArgument},
       -1,
       StatusCode::kInvalidArgument,
       {}},
      {"another error after waiting",
       {StatusCode::kUnavailable, StatusCode::kInternal},
       -1,
       StatusCode::kInternal,
       {5}},
      {"stopped while waiting",
       {StatusCode::kUnavailable, StatusCode::kUnavailable, StatusCode::kOk},
       1,
       StatusCode::kCancelled,
       {5, 10}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    size_t calls = 0;
    std::vector<int64_t> delays;
    auto make = [&]() -> StatusOr<std::vector<VendorDriverPtr>> {
      const StatusCode code = c.tries.at(calls++);
      if (code == StatusCode::kOk) {
        return std::vector<VendorDriverPtr>{};
      }
      return Status(code, "backend nvidia: no vendor library could be loaded");
    };
    auto wait = [&](const Status& why, milliseconds delay) {
      EXPECT_EQ(why.code(), StatusCode::kUnavailable);
      delays.push_back(delay.count());
      return c.stop_after_waits < 0 || static_cast<int>(delays.size()) < c.stop_after_waits + 1;
    };
    auto got = RetryWhileUnavailable(make, Backoff{milliseconds(5), milliseconds(25)}, wait);
    EXPECT_EQ(got.status().code(), c.want) << got.status().ToString();
    EXPECT_EQ(delays, c.want_delays_ms);
  }
}

}  // namespace
}  // namespace accelpool::vendors
