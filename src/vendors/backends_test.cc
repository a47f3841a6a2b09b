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

}  // namespace
}  // namespace accelpool::vendors
