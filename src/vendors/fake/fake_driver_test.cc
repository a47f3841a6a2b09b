#include "vendors/fake/fake_driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "vendors/fake/inventory_file.h"
#include "vendors/test_util.h"

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
      {"used above the memory",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1,"memory_mib":1024,)"
       R"("devices":[{"index":0,"used_mib":2048}]}]})",
       "devices[0].used_mib: 2048 is out of range 0..1024"},
      {"negative used",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1,)"
       R"("devices":[{"index":0,"used_mib":-5}]}]})",
       "used_mib: -5 is out of range"},
      {"processes not a list",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1,)"
       R"("devices":[{"index":0,"processes":{"pid":1}}]}]})",
       "devices[0].processes must be an array of at most 64"},
      {"pid zero",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1,)"
       R"("devices":[{"index":0,"processes":[{"pid":0,"used_mib":1}]}]}]})",
       "devices[0].processes[0].pid: 0 is out of range 1..4194304"},
      {"pid twice",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1,)"
       R"("devices":[{"index":0,"processes":[{"pid":7},{"pid":7}]}]}]})",
       "processes[1].pid: 7 is listed twice"},
      {"process above the memory",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1,"memory_mib":1024,)"
       R"("devices":[{"index":0,"processes":[{"pid":7,"used_mib":2048}]}]}]})",
       "devices[0].processes: pid 7 holds 2048 MiB, more than the device's memory_mib 1024"},
      {"process memory below -1",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":1,)"
       R"("devices":[{"index":0,"processes":[{"pid":7,"used_mib":-2}]}]}]})",
       "processes[0].used_mib: -2 is below -1"},
      // Integers that do not fit are refused, never truncated (99999999999 used to
      // become NUMA node 1215752191).
      {"numa beyond int32",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
           "devices":[{"index":1,"numa":99999999999}]}]})",
       "inventories[0].devices[0].numa: 99999999999 is out of range -2147483648..2147483647"},
      {"numa beyond int64",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
           "devices":[{"index":1,"numa":18446744073709551615}]}]})",
       "devices[0].numa: 18446744073709551615 is out of range"},
      {"max_shares that would wrap to 1",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,"max_shares":4294967297}]})",
       "inventories[0].max_shares: 4294967297 is out of range"},
      {"index beyond int64",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
           "devices":[{"index":9223372036854775808}]}]})",
       "devices[0].index: 9223372036854775808 is out of range"},
      {"negative numa", R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
           "devices":[{"index":0,"numa":-7}]}]})",
       "devices[0].numa: -7 is out of range -1..1023"},
      {"negative compute units",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,"compute_units":-1}]})",
       "compute_units must not be negative"},
      {"duplicate id in one inventory",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":3,
           "devices":[{"index":0,"id":"GPU-x"},{"index":2,"id":"GPU-x"}]}]})",
       "inventories[0] device 2: id \"GPU-x\" is already the id of inventories[0] device 0"},
      {"override equal to another device's default id",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
           "devices":[{"index":0,"id":"NVIDIA-n-1"}]}]})",
       "inventories[0] device 1: id \"NVIDIA-n-1\" is already the id of inventories[0] device 0"},
      {"duplicate id across vendors",
       R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,"devices":[{"index":1,"id":"ACC-7"}]},
           {"vendor":"ascend","count":2,"devices":[{"index":0,"id":"ACC-7"}]}]})",
       "inventories[1] device 0: id \"ACC-7\" is already the id of inventories[0] device 1"},
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

// A fake Ascend node with more than one slot per chip stands for one whose
// plugin runs with --ascend-vnpu: a share is a vNPU, as the Ascend backend
// serves it (the index stands for the physical id).
TEST(FakeDriverTest, AnAscendShareIsServedAsADynamicVnpu) {
  TempDir dir;
  Write(dir.File("inv.json"),
        R"({"version":1,"inventories":[{"vendor":"ascend","profile":"ascend-910b-x8",
                                         "max_shares":4}]})");
  FakeDriver d({dir.File("inv.json"), "n"});
  auto invs = d.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::Device& chip = (*invs)[0].devices[5];
  EXPECT_EQ(chip.model, "Ascend910B3");
  EXPECT_EQ((*invs)[0].topology.slices.memory_sizes, (std::vector<int64_t>{16384, 32768}));
  auto spec = d.BuildContainerSpec({{chip, 16384, 250, false}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("ASCEND_VISIBLE_DEVICES"), "5");
  EXPECT_EQ(spec->env.at("ASCEND_VNPU_SPECS"), "vir05_1c_16g");
  auto whole = d.BuildContainerSpec({{chip, 0, 0, true}});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->env.count("ASCEND_VNPU_SPECS"), 0u);
  core::Device one_slot = chip;
  one_slot.max_shares = 1;
  auto alone = d.BuildContainerSpec({{one_slot, 16384, 250, false}});
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_EQ(alone->env.count("ASCEND_VNPU_SPECS"), 0u) << "one slot: the share holds the chip";
}

// Two NVIDIA GPUs, GPU 1 healthy or not.
std::string GpuOneHealthy(bool healthy) {
  return std::string(R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,)") +
         R"("devices":[{"index":1,"healthy":)" + (healthy ? "true" : "false") + "}]}]}";
}

TEST(FakeDriverTest, HealthFollowsFileEditsBothWaysAndSurvivesBadEdits) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  Write(path, GpuOneHealthy(true));
  FakeDriver d({path, "n", std::chrono::milliseconds(10)});
  ASSERT_TRUE(d.Discover().ok());

  testing::HealthRecorder health(d);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Write(path, GpuOneHealthy(false));
  d.Reload();
  ASSERT_TRUE(health.WaitFor(1, std::chrono::seconds(10)));
  Write(path, "{ not json");  // a bad edit changes nothing
  d.Reload();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  Write(path, GpuOneHealthy(true));
  d.Reload();
  ASSERT_TRUE(health.WaitFor(2, std::chrono::seconds(10)));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, "NVIDIA-n-1");
  EXPECT_FALSE(events[0].healthy);
  EXPECT_TRUE(events[1].healthy);
}

// Writes `text` over the file in place (same inode) and sets its
// modification time to `mtime`: an editor's save, or a writer caught half
// way, within one tick of the file system's clock.
void WriteInPlace(const std::string& path, const std::string& text, fs::file_time_type mtime) {
  std::ofstream(path, std::ios::trunc) << text;
  fs::last_write_time(path, mtime);
}

// Waits for `health` to record GPU 1 going unhealthy, and stops it: that is
// the one event.
void ExpectOnlyGpuOneWentUnhealthy(testing::HealthRecorder& health) {
  ASSERT_TRUE(health.WaitFor(1, std::chrono::seconds(10)));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device_id, "NVIDIA-n-1");
  EXPECT_FALSE(events[0].healthy);
}

// A read that fails is tried again at the next poll: the edit that completes
// a file caught half written can carry the same modification time (one clock
// tick), size and inode as the half, and must not be missed.
TEST(FakeDriverTest, AReadThatFailsIsTriedAgainUntilTheFileParses) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  Write(path, GpuOneHealthy(true));
  FakeDriver d({path, "n", std::chrono::milliseconds(10)});
  ASSERT_TRUE(d.Discover().ok());
  testing::HealthRecorder health(d);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));

  const fs::file_time_type tick = fs::last_write_time(path) + std::chrono::seconds(5);
  std::string done = GpuOneHealthy(false);
  std::string half = done;
  half.back() = ' ';  // the closing brace not written yet: same size, no JSON
  WriteInPlace(path, half, tick);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // read, and refused
  EXPECT_EQ(health.Count(), 0u);
  WriteInPlace(path, done, tick);
  ExpectOnlyGpuOneWentUnhealthy(health);
}

// A file replaced (a new inode, as an atomic rename or a ConfigMap update
// makes it) within the same clock tick as the version before is a change,
// even at the same size.
TEST(FakeDriverTest, AFileReplacedWithinOneClockTickIsReadAgain) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  const std::string done = GpuOneHealthy(false);
  std::string before = GpuOneHealthy(true);
  before.insert(1, " ");  // as long as `done`
  ASSERT_EQ(before.size(), done.size());
  Write(path, before);
  const fs::file_time_type tick = fs::last_write_time(path);
  FakeDriver d({path, "n", std::chrono::milliseconds(10)});
  ASSERT_TRUE(d.Discover().ok());
  testing::HealthRecorder health(d);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Write(path, done);
  fs::last_write_time(path, tick);
  ExpectOnlyGpuOneWentUnhealthy(health);
}

// The memory usage query answers the file's "used_mib" of every whole
// device as the file is now (0 where not given; a MIG instance reports
// none), and an edit that does not parse is an error, not zeros.
TEST(FakeDriverTest, MemoryInUseFollowsTheFile) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":3,"memory_mib":16384,)"
              R"("devices":[{"index":1,"used_mib":4096},{"index":2,"partition":"1g.18gb"}]}]})");
  FakeDriver d({path, "n", std::chrono::milliseconds(10)});
  ASSERT_TRUE(d.Discover().ok());
  StatusOr<std::map<std::string, int64_t>> used = d.MemoryInUse();
  ASSERT_TRUE(used.ok()) << used.status().ToString();
  const std::map<std::string, int64_t> want = {{"NVIDIA-n-0", 0}, {"NVIDIA-n-1", 4096}};
  EXPECT_EQ(*used, want);
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":3,"memory_mib":16384,)"
              R"("devices":[{"index":0,"used_mib":100}]}]})");
  used = d.MemoryInUse();
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(used->at("NVIDIA-n-0"), 100);
  EXPECT_EQ(used->at("NVIDIA-n-1"), 0);
  Write(path, "{ not json");
  EXPECT_FALSE(d.MemoryInUse().ok());
}

// The per-process query answers the file's "processes" of every whole device
// (an empty list where not given; a MIG instance lists none), as the file is
// now; an edit that does not parse is an error.
TEST(FakeDriverTest, MemoryHoldersFollowTheFile) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":3,"memory_mib":16384,)"
              R"("devices":[{"index":1,"used_mib":4096,"processes":[{"pid":4242,"used_mib":4000},)"
              R"({"pid":17}]},{"index":2,"partition":"1g.18gb"}]}]})");
  FakeDriver d({path, "n", std::chrono::milliseconds(10)});
  ASSERT_TRUE(d.Discover().ok());
  auto holders = d.MemoryHolders();
  ASSERT_TRUE(holders.ok()) << holders.status().ToString();
  const std::map<std::string, std::vector<ProcessMemory>> want = {
      {"NVIDIA-n-0", {}}, {"NVIDIA-n-1", {{4242, 4000}, {17, -1}}}};
  EXPECT_EQ(*holders, want);
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":3,"memory_mib":16384}]})");
  holders = d.MemoryHolders();
  ASSERT_TRUE(holders.ok());
  EXPECT_TRUE(holders->at("NVIDIA-n-1").empty());
  Write(path, "{ not json");
  EXPECT_FALSE(d.MemoryHolders().ok());
}

// The device check reads the file too (Discover, every --rediscover-every):
// reading it first must not take the change away from the health watch.
// Seen in the end-to-end suite as a device marked unhealthy that stayed
// healthy in kubelet.
TEST(FakeDriverTest, ADiscoveryBetweenAnEditAndTheWatchKeepsTheHealthChange) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  Write(path, GpuOneHealthy(true));
  FakeDriver d({path, "n", std::chrono::milliseconds(1000)});
  ASSERT_TRUE(d.Discover().ok());
  testing::HealthRecorder health(d);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Write(path, GpuOneHealthy(false));
  ASSERT_TRUE(d.Discover().ok());  // before the watch's next look at the file
  ASSERT_TRUE(health.WaitFor(1, std::chrono::seconds(5)));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].healthy);
}

// An edit made after the discovery a watch starts from, before the watch
// looked at the file, is reported when it starts.
TEST(FakeDriverTest, AWatchReportsAnEditMadeSinceItsDiscovery) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":2}]})");
  // A poll longer than the wait below, so the edit must be reported when the
  // watch starts, not at its first poll; the wait is generous for a loaded
  // machine or ThreadSanitizer. Not longer still: the watch sleeps a whole
  // poll before it sees the stop, so Stop() takes up to one poll.
  FakeDriver d({path, "n", std::chrono::milliseconds(5000)});
  ASSERT_TRUE(d.Discover().ok());
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,)"
              R"("devices":[{"index":0,"healthy":false}]}]})");
  testing::HealthRecorder health(d);
  ASSERT_TRUE(health.WaitFor(1, std::chrono::seconds(4)));
  EXPECT_EQ(health.Stop()[0].device_id, "NVIDIA-n-0");
}

TEST(FakeDriverTest, AnEditThatFailsValidationKeepsTheLastGoodInventory) {
  TempDir dir;
  const std::string path = dir.File("inv.json");
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":2}]})");
  FakeDriver d({path, "n", std::chrono::milliseconds(10)});
  auto good = d.Discover();
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  const core::Device gpu1 = (*good)[0].devices[1];

  testing::HealthRecorder health(d);
  // Marks GPU 1 unhealthy, but repeats an id and carries a NUMA node that does not fit.
  for (const std::string& bad :
       {std::string(R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
           "devices":[{"index":0,"id":"NVIDIA-n-1"},{"index":1,"healthy":false}]}]})"),
        std::string(R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
           "devices":[{"index":1,"healthy":false,"numa":99999999999}]}]})")}) {
    Write(path, bad);
    d.Reload();
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    EXPECT_EQ(health.Count(), 0u);
    auto rediscovered = d.Discover();
    ASSERT_FALSE(rediscovered.ok());
    EXPECT_EQ(rediscovered.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(rediscovered.status().message().find(path), std::string::npos);
    // The devices read last are still served.
    EXPECT_TRUE(d.BuildContainerSpec({{gpu1, 0, 0, true}}).ok());
  }
  Write(path, R"({"version":1,"inventories":[{"vendor":"nvidia","count":2,
      "devices":[{"index":1,"healthy":false}]}]})");
  d.Reload();
  health.WaitFor(1, std::chrono::seconds(10));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device_id, "NVIDIA-n-1");
  EXPECT_FALSE(events[0].healthy);
}

}  // namespace
}  // namespace accelpool::vendors::fake
