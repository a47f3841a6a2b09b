#include "vendors/fake/fake_driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "vendors/fake/inventory_file.h"

namespace accelpool::vendors::fake {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "accelpool-fake-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

void Write(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, path);
}

TEST(InventoryFileTest, ParsesProfilesAndOverrides) {
  struct Case {
    std::string name;
    std::string text;
    core::Vendor want_vendor;
    size_t want_devices;
    std::string want_kind;
    int32_t want_max_shares;
  };
  const std::vector<Case> cases = {
      {"nvidia hgx",
       R"({"version":1,"inventories":[{"vendor":"nvidia","profile":"nvidia-hgx-8"}]})",
       core::Vendor::kNvidia, 8, "nvidia-hgx-8", 10},
      {"ascend 910c", R"({"version":1,"inventories":[{"vendor":"ascend","profile":"ascend-910c-x16",
         "super_node":"sp-3"}]})",
       core::Vendor::kAscend, 16, "ascend-910c-x16", 1},
      {"count only", R"({"version":1,"inventories":[{"vendor":"hygon","count":3,"max_shares":4}]})",
       core::Vendor::kHygon, 3, "", 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto invs = ParseInventoryFile(c.text, "node-a");
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    ASSERT_EQ(invs->size(), 1u);
    const core::NodeInventory& inv = (*invs)[0];
    EXPECT_EQ(inv.vendor, c.want_vendor);
    EXPECT_EQ(inv.devices.size(), c.want_devices);
    EXPECT_EQ(inv.topology.kind, c.want_kind);
    EXPECT_EQ(inv.devices[0].max_shares, c.want_max_shares);
    EXPECT_EQ(inv.node, "node-a");
  }
}

TEST(InventoryFileTest, OverridesApplyByIndexAndKeepNuma) {
  auto invs = ParseInventoryFile(
      R"({"version":1,"inventories":[{"vendor":"ascend","profile":"ascend-910b-x8",
          "devices":[{"index":0,"numa":6,"id":"NPU-a"},{"index":1,"numa":0},
                     {"index":2,"numa":6,"healthy":false}]}]})",
      "n");
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = (*invs)[0];
  EXPECT_EQ(inv.devices[0].id, "NPU-a");
  EXPECT_EQ(inv.devices[0].numa, 6);
  EXPECT_EQ(inv.devices[1].numa, 0);
  EXPECT_FALSE(inv.devices[2].healthy);
  EXPECT_EQ(inv.devices[3].id, "ASCEND-n-3");
}

TEST(InventoryFileTest, BadInputIsAClearError) {
  struct Case {
    std::string name;
    std::string text;
    std::string want_substring;
  };
  const std::vector<Case> cases = {
      {"not json", "{version: 1", "not valid JSON"},
      {"wrong version", R"({"version":2,"inventories":[]})", "$.version must be 1"},
      {"no inventories", R"({"version":1})", "$.inventories must be an array"},
      {"unknown vendor", R"({"version":1,"inventories":[{"vendor":"acme","count":1}]})",
       "\"acme\" is not a vendor"},
      {"unknown profile", R"({"version":1,"inventories":[{"vendor":"nvidia","profile":"x"}]})",
       "unknown profile"},
      {"no count", R"({"version":1,"inventories":[{"vendor":"nvidia"}]})", "give a \"profile\""},
      {"index out of range",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,"devices":[{"index":5}]}]})",
       "devices[0].index: 5 is out of range 0..1"},
      {"wrong type",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,"memory_mib":"8G"}]})",
       "memory_mib must be an integer"},
      {"duplicate vendor",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1},{"vendor":"nvidia","count":1}]})",
       "a second inventory of vendor nvidia"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto invs = ParseInventoryFile(c.text, "n");
    ASSERT_FALSE(invs.ok());
    EXPECT_EQ(invs.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(invs.status().message().find(c.want_substring), std::string::npos)
        << invs.status().message();
  }
}

TEST(FakeDriverTest, MissingFileSaysWhatToCheck) {
  FakeDriver d({"/nonexistent/inventory.json", "n"});
  auto invs = d.Discover();
  ASSERT_FALSE(invs.ok());
  EXPECT_EQ(invs.status().code(), StatusCode::kNotFound);
  EXPECT_NE(invs.status().message().find("--fake-inventory"), std::string::npos);
}

TEST(FakeDriverTest, ServesSeveralVendorsAndBuildsVendorEnv) {
  TempDir dir;
  Write(dir.File("inv.json"),
        R"({"version":1,"inventories":[{"vendor":"nvidia","count":2},
                                        {"vendor":"ascend","profile":"ascend-910c-x16"}]})");
  FakeDriver d({dir.File("inv.json"), "n"});
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  ASSERT_EQ(invs->size(), 2u);
  const core::Device& npu2 = (*invs)[1].devices[2];
  const core::Device& npu3 = (*invs)[1].devices[3];
  auto spec = d.BuildContainerSpec({{npu2, 0, 0, true}, {npu3, 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ(spec->env.at("ASCEND_RT_VISIBLE_DEVICES"), "0,1");
  EXPECT_TRUE(spec->devices.empty());

  core::Device stranger = npu2;
  stranger.id = "NPU-elsewhere";
  auto bad = d.BuildContainerSpec({{stranger, 0, 0, true}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(FakeDriverTest, HealthFollowsFileEditsBothWaysAndSurvivesBadEdits) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  auto doc = [](bool healthy) {
    return std::string(R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,)") +
           R"("devices":[{"index":1,"healthy":)" + (healthy ? "true" : "false") + "}]}]}";
  };
  Write(path, doc(true));
  FakeDriver d({path, "n", std::chrono::milliseconds(10)});
  ASSERT_TRUE(d.Discover().ok());

  std::mutex mu;
  std::vector<HealthEvent> events;
  std::jthread watcher([&](std::stop_token stop) {
    Status st = d.WatchHealth(stop, [&](const HealthEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      events.push_back(e);
    });
    EXPECT_TRUE(st.ok());
  });
  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 300; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (events.size() >= n) {
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Write(path, doc(false));
  d.Reload();
  ASSERT_TRUE(wait_for(1));
  Write(path, "{ not json");  // a bad edit changes nothing
  d.Reload();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  Write(path, doc(true));
  d.Reload();
  ASSERT_TRUE(wait_for(2));
  watcher.request_stop();
  watcher.join();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, "NVIDIA-n-1");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_TRUE(events[1].healthy);
}

}  // namespace
}  // namespace accelpool::vendors::fake
