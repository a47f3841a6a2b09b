#include "plugin/allocator.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include "api/resources.h"
#include "common/metrics.h"
#include "cuda/region_format.h"
#include "plugin/file_replace.h"
#include "plugin/foreign_memory.h"
#include "plugin/priority_file.h"
#include "plugin/test_util.h"
#include "vendors/ascend/vnpu.h"
#include "vendors/fake/fake_driver.h"

namespace accelpool::plugin {
namespace {

using testing::Ctr;
using testing::Dev;
using testing::Pod;
using testing::RecordingReporter;
using testing::TempDir;

constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kNpu = "huawei.com/Ascend910C";

// Every holder kind and the ungranted-use gauge are there at 0 before the
// first foreign memory is seen, so that dashboards and alerts on them have a
// series to read (and increase() sees the first one).
TEST(PluginMetricsTest, ForeignMemorySeriesAreRenderedFromTheStartAndCount) {
  MetricsRegistry registry;
  StatusOr<std::unique_ptr<PluginMetrics>> m = PluginMetrics::New(registry);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::string page = registry.Serialize();
  for (const char* kind : kHolderKinds) {
    const std::string line =
        std::string("accelpool_plugin_foreign_memory_holders_total{kind=\"") + kind + "\"} 0";
    EXPECT_NE(page.find(line), std::string::npos) << line << "\n" << page;
  }
  EXPECT_NE(page.find("accelpool_plugin_ungranted_device_uses 0"), std::string::npos) << page;
  (*m)->ForeignHolderNamed("left_over");
  (*m)->SetUngrantedUses(2);
  page = registry.Serialize();
  EXPECT_NE(page.find(R"(accelpool_plugin_foreign_memory_holders_total{kind="left_over"} 1)"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("accelpool_plugin_ungranted_device_uses 2"), std::string::npos) << page;
}

TEST(PluginMetricsTest, SignatureSeriesAreRenderedFromTheStartAndCount) {
  MetricsRegistry registry;
  StatusOr<std::unique_ptr<PluginMetrics>> m = PluginMetrics::New(registry);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::string page = registry.Serialize();
  for (const char* line : {R"(accelpool_plugin_assignments_refused_total{reason="signature"} 0)",
                           R"(accelpool_plugin_assignments_refused_total{reason="malformed"} 0)",
                           "accelpool_plugin_assignment_key_reload_errors_total 0"}) {
    EXPECT_NE(page.find(line), std::string::npos) << line << "\n" << page;
  }
  (*m)->AssignmentRefused("signature");
  (*m)->AssignmentRefused("signature");
  (*m)->AssignmentKeyReloadFailed();
  page = registry.Serialize();
  EXPECT_NE(page.find(R"(accelpool_plugin_assignments_refused_total{reason="signature"} 2)"),
            std::string::npos);
  EXPECT_NE(page.find("accelpool_plugin_assignment_key_reload_errors_total 1"), std::string::npos);
}

class AllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory());
    driver_ = std::make_unique<vendors::fake::FakeDriver>(
        vendors::fake::FakeDriverOptions{dir_.File("inv.json"), "node-a"});
    auto invs = driver_->Discover();
    ASSERT_TRUE(invs.ok()) << invs.status().ToString();
    npu_ = (*invs)[1].devices[0].id.substr(
        0, (*invs)[1].devices[0].id.size() - 1);  // "ASCEND-node-a-"
    state_.Reset(*invs, {driver_.get(), driver_.get()});
    auto m = PluginMetrics::New(registry_);
    ASSERT_TRUE(m.ok());
    metrics_ = std::move(m).value();
    EnforcementOptions e;
    e.state_root = dir_.File("containers");
    allocator_ = std::make_unique<Allocator>("node-a", &state_, &store_, metrics_.get(), &reporter_,
                                             e, Logger());
  }

  void Assign(const PodRef& pod, std::vector<api::AssignedContainer> containers,
              const std::string& node = "node-a") {
    api::Assignment a;
    a.node = node;
    a.policy = "accelpool";
    a.containers = std::move(containers);
    store_.Upsert(pod, a, {});
  }

  std::string Npu(int i) const { return npu_ + std::to_string(i); }

  TempDir dir_;
  std::unique_ptr<vendors::fake::FakeDriver> driver_;
  std::string npu_;
  DeviceState state_;
  AssignmentStore store_;
  MetricsRegistry registry_;
  std::unique_ptr<PluginMetrics> metrics_;
  RecordingReporter reporter_;
  std::unique_ptr<Allocator> allocator_;
};

TEST_F(AllocatorTest, AnswersEachShapeFromItsAssignment) {
  Assign(Pod("infer"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  Assign(Pod("train"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 0), Dev("GPU-b", 1, 0)})});
  Assign(Pod("pair"),
         {Ctr("main", kNpu, core::Vendor::kAscend, {Dev(Npu(2), 2, 0), Dev(Npu(3), 3, 0)})});
  struct Case {
    std::string name;
    std::string resource;
    std::vector<std::string> ids;
    std::string want_pod;
    std::map<std::string, std::string> want_env;
    std::vector<std::string> absent_env;
    size_t want_mounts;
  };
  const std::vector<Case> cases = {
      {"fractional",
       kGpu,
       {"GPU-a::1"},
       "default/infer",
       {{"NVIDIA_VISIBLE_DEVICES", "GPU-a"},
        {"CUDA_VISIBLE_DEVICES", "GPU-a"},
        {"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "4096"},
        {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"},
        {"CUDA_DEVICE_MEMORY_LIMIT_0", "4096m"},
        {"CUDA_DEVICE_SM_LIMIT", "25"},
        {"ACCELPOOL_CUDA_STATE_DIR", "/var/run/accelpool"},
        {"ACCELPOOL_CUDA_PRIORITY", "low"},
        {"ACCELPOOL_CUDA_DEVICE_UUIDS", "GPU-a"}},
       {},
       4},
      {"whole cards",
       kGpu,
       {"GPU-b::0", "GPU-a::0"},
       "default/train",
       {{"NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b"}},
       {"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "ACCELPOOL_CUDA_COMPUTE_LIMIT", "ACCELPOOL_CUDA_PRIORITY"},
       0},
      {"paired module",
       kNpu,
       {Npu(2) + "::0", Npu(3) + "::0"},
       "default/pair",
       {{"ASCEND_VISIBLE_DEVICES", "2,3"}, {"ASCEND_RT_VISIBLE_DEVICES", "0,1"}},
       {"ACCELPOOL_CUDA_STATE_DIR"},
       0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto answers = allocator_->Allocate(c.resource, {c.ids});
    ASSERT_TRUE(answers.ok()) << answers.status().ToString();
    ASSERT_EQ(answers->size(), 1u);
    const ContainerAnswer& a = (*answers)[0];
    EXPECT_EQ(a.pod.Key(), c.want_pod);
    for (const auto& [k, v] : c.want_env) {
      ASSERT_TRUE(a.spec.env.count(k)) << k;
      EXPECT_EQ(a.spec.env.at(k), v) << k;
    }
    for (const std::string& k : c.absent_env) {
      EXPECT_EQ(a.spec.env.count(k), 0u) << k;
    }
    EXPECT_EQ(a.spec.mounts.size(), c.want_mounts);
  }
  // The fractional container's state dir exists on the host side.
  EXPECT_TRUE(std::filesystem::is_directory(dir_.File("containers/uid-infer_main")));
  EXPECT_EQ(store_.PendingContainers(), 0u);
  auto entries = reporter_.entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_TRUE(entries[0].ok);
  EXPECT_NE(registry_.Serialize().find(
                R"(accelpool_plugin_allocate_total{resource="nvidia.com/gpu",result="ok"} 2)"),
            std::string::npos);
}

// The extender's webhook refuses pods that set, in their own env, a variable
// the plugin applies a grant through (api::DeviceControlledEnv). Every such
// variable the plugin sets must be on that list, and the in-process
// selectors, which only narrow what is mounted, must not be.
bool InProcessSelector(const std::string& name) {
  for (core::Vendor v : core::AllVendors()) {
    for (const vendors::VisibleEnv& e : vendors::TraitsFor(v).visible_env) {
      if (e.name == name && e.kind == vendors::VisibleIdKind::kContainerOrdinal) {
        return true;
      }
    }
  }
  return name == "CUDA_VISIBLE_DEVICES";  // NVIDIA's, by UUID: narrows, never widens
}

TEST(DeviceControlledEnvTest, EveryRuntimeHookVariableIsGuarded) {
  for (core::Vendor v : core::AllVendors()) {
    const vendors::VendorTraits& t = vendors::TraitsFor(v);
    for (const vendors::VisibleEnv& e : t.visible_env) {
      SCOPED_TRACE(e.name);
      EXPECT_EQ(api::DeviceControlledEnv(e.name).has_value(), !InProcessSelector(e.name));
    }
  }
}

TEST_F(AllocatorTest, EveryVariableAGrantIsAppliedThroughIsGuardedByTheWebhook) {
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  e.sharing = NvidiaSharing::kMps;
  e.mps_pipe_dir = "/run/nvidia/mps";
  Allocator mps("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger());
  Assign(Pod("infer"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  Assign(Pod("mps"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 1, 2048, 500, false)})});
  Assign(Pod("pair"),
         {Ctr("main", kNpu, core::Vendor::kAscend, {Dev(Npu(2), 2, 0), Dev(Npu(3), 3, 0)})});
  std::vector<vendors::ContainerSpec> specs;
  for (auto [allocator, resource, id] :
       {std::tuple{allocator_.get(), kGpu, std::string("GPU-a::1")},
        std::tuple{&mps, kGpu, std::string("GPU-b::1")},
        std::tuple{allocator_.get(), kNpu, Npu(2) + "::0"}}) {
    std::vector<std::string> ids = {id};
    if (resource == kNpu) {
      ids.push_back(Npu(3) + "::0");
    }
    auto answers = allocator->Allocate(resource, {ids});
    ASSERT_TRUE(answers.ok()) << answers.status().ToString();
    specs.push_back((*answers)[0].spec);
  }
  size_t guarded = 0;
  for (const vendors::ContainerSpec& spec : specs) {
    for (const auto& [name, value] : spec.env) {
      SCOPED_TRACE(name);
      EXPECT_EQ(api::DeviceControlledEnv(name).has_value(), !InProcessSelector(name));
      guarded += InProcessSelector(name) ? 0 : 1;
    }
  }
  EXPECT_GE(guarded, 12u) << "the shim's and HAMi's contract, MPS's, and the hook variables";
}

TEST(DeviceControlledEnvTest, TheAscendVnpuTemplateIsGuarded) {
  vendors::GrantedDevice g;
  g.device.id = "NPU-0";
  g.device.vendor = core::Vendor::kAscend;
  g.device.model = "Ascend910B3";
  g.device.compute_units = 20;
  g.device.memory_mib = 65536;
  g.memory_mib = 16384;
  g.compute = 250;
  g.exclusive = false;
  StatusOr<vendors::ContainerSpec> spec = vendors::ascend::VnpuContainerSpec({g}, 3);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->env.size(), 3u);
  for (const auto& [name, value] : spec->env) {
    SCOPED_TRACE(name);
    EXPECT_EQ(api::DeviceControlledEnv(name).has_value(), !InProcessSelector(name));
  }
  EXPECT_EQ(api::DeviceControlledEnv("ASCEND_VNPU_SPECS"),
            std::optional<std::string_view>("enforcement"));
}

// nvidia.com/priority 0 on the container: high; the priority file is made in
// its state dir, and the priority is in the limits file the shim reads.
TEST_F(AllocatorTest, AHighPriorityContainerIsToldSoAndGetsItsPriorityFile) {
  PodRef infer = Pod("infer");
  infer.high_priority.insert("main");
  Assign(infer, {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  auto answers = allocator_->Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(answers.ok()) << answers.status().ToString();
  EXPECT_EQ((*answers)[0].spec.env.at("ACCELPOOL_CUDA_PRIORITY"), "high");
  const std::string dir = dir_.File("containers/uid-infer_main");
  StatusOr<uint64_t> launches = ReadLaunches(StateDirs::StateSubdir(dir), 0);
  ASSERT_TRUE(launches.ok()) << launches.status().ToString();
  EXPECT_EQ(*launches, 0u);
  StatusOr<std::string> limits = ReadRegularFile(StateDirs::LimitsFile(dir), 1 << 16);
  ASSERT_TRUE(limits.ok());
  EXPECT_NE(limits->find("ACCELPOOL_CUDA_PRIORITY=high\n"), std::string::npos) << *limits;
}

TEST_F(AllocatorTest, MpsModeHandsFractionalGrantsToTheMpsDaemon) {
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  e.sharing = NvidiaSharing::kMps;
  e.mps_pipe_dir = "/run/nvidia/mps";
  e.mps_shm_dir = "/run/nvidia/mps-shm";
  Allocator mps("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger());
  Assign(Pod("infer"),
         {Ctr("main", kGpu, core::Vendor::kNvidia,
              {Dev("GPU-a", 0, 1, 4096, 250, false), Dev("GPU-b", 1, 1, 2048, 500, false)})});
  Assign(Pod("train"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 0)})});

  auto frac = mps.Allocate(kGpu, {{"GPU-a::1", "GPU-b::1"}});
  ASSERT_TRUE(frac.ok()) << frac.status().ToString();
  const vendors::ContainerSpec& spec = (*frac)[0].spec;
  EXPECT_EQ(spec.env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");  // the smaller share
  EXPECT_EQ(spec.env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4096M,1=2048M");
  EXPECT_EQ(spec.env.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/nvidia/mps");
  EXPECT_EQ(spec.env.at("ACCELPOOL_CUDA_DISABLE"), "1");
  for (const char* k :
       {"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "ACCELPOOL_CUDA_COMPUTE_LIMIT", "ACCELPOOL_CUDA_STATE_DIR",
        "CUDA_DEVICE_SM_LIMIT", "ACCELPOOL_CUDA_PRIORITY"}) {
    EXPECT_EQ(spec.env.count(k), 0u) << k;
  }
  ASSERT_EQ(spec.mounts.size(), 2u) << "the pipe dir and /dev/shm; no shim, no preload";
  EXPECT_EQ(spec.mounts[0].host_path, "/run/nvidia/mps");
  EXPECT_EQ(spec.mounts[0].container_path, "/run/nvidia/mps");
  EXPECT_FALSE(spec.mounts[0].read_only) << "clients write to the daemon's pipes";
  EXPECT_EQ(spec.mounts[1].host_path, "/run/nvidia/mps-shm");
  EXPECT_EQ(spec.mounts[1].container_path, "/dev/shm");
  EXPECT_FALSE(std::filesystem::exists(dir_.File("containers/uid-infer_main")))
      << "no shim state under MPS";

  // MPS reads the limits by CUDA ordinal, which follows the PCI bus (the
  // node's device order), not the grant's order.
  Assign(Pod("reversed"),
         {Ctr("main", kGpu, core::Vendor::kNvidia,
              {Dev("GPU-b", 1, 2, 2048, 500, false), Dev("GPU-a", 0, 2, 4096, 250, false)})});
  auto reversed = mps.Allocate(kGpu, {{"GPU-b::2", "GPU-a::2"}});
  ASSERT_TRUE(reversed.ok()) << reversed.status().ToString();
  EXPECT_EQ((*reversed)[0].spec.env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4096M,1=2048M");

  // A whole card is the container's own: no MPS limits.
  auto whole = mps.Allocate(kGpu, {{"GPU-a::0"}});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ((*whole)[0].spec.env.count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), 0u);
  EXPECT_TRUE((*whole)[0].spec.mounts.empty());
}

// Caps are numbered by the grant's order; a process whose launcher set its
// CUDA_VISIBLE_DEVICES to one of the GPUs numbers it 0. The contract names
// each index's device by UUID, in the order of NVIDIA_VISIBLE_DEVICES, so
// the shim can map the process's ordinals back; in the limits file too.
TEST_F(AllocatorTest, TheContractNamesEachDeviceIndexByUuid) {
  Assign(Pod("infer"),
         {Ctr("main", kGpu, core::Vendor::kNvidia,
              {Dev("GPU-b", 1, 1, 2048, 500, false), Dev("GPU-a", 0, 1, 4096, 250, false)})});
  auto answers = allocator_->Allocate(kGpu, {{"GPU-b::1", "GPU-a::1"}});
  ASSERT_TRUE(answers.ok()) << answers.status().ToString();
  const vendors::ContainerSpec& spec = (*answers)[0].spec;
  const std::string visible = spec.env.at("NVIDIA_VISIBLE_DEVICES");
  EXPECT_EQ(spec.env.at("ACCELPOOL_CUDA_DEVICE_UUIDS"), visible);
  EXPECT_EQ(spec.env.at("CUDA_VISIBLE_DEVICES"), visible);
  const bool a_first = visible.rfind("GPU-a", 0) == 0;
  EXPECT_EQ(spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), a_first ? "4096" : "2048")
      << "index i's cap is the i-th listed device's";
  EXPECT_EQ(spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_1"), a_first ? "2048" : "4096");
  std::ifstream in(dir_.File("containers/uid-infer_main/limits"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("ACCELPOOL_CUDA_DEVICE_UUIDS=" + visible + "\n"), std::string::npos) << text;
}

TEST_F(AllocatorTest, StateDirsAreWritableByAnyUserOfTheContainer) {
  Assign(Pod("infer"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  auto answers = allocator_->Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(answers.ok()) << answers.status().ToString();
  auto perms = std::filesystem::status(dir_.File("containers/uid-infer_main/state")).permissions();
  using std::filesystem::perms;
  EXPECT_EQ(perms & perms::all, perms::all) << "a non-root process creates the region file";
  EXPECT_NE(perms & perms::sticky_bit, perms::none);
}

// With the cap on, each fractional container's state/ gets its tmpfs before
// it is answered; where the mount is refused the container still starts (a
// plain dir), and the plugin warns once, saying what to do, and sets the
// uncapped gauge.
TEST_F(AllocatorTest, StateDirsAreCappedOrTheRefusalIsSaidOnce) {
  std::vector<std::string> lines;
  std::mutex lines_mu;
  StatusOr<Logger> log = NewLogger("test", {.level = "info", .sink = [&](std::string_view l) {
                                              std::lock_guard<std::mutex> lock(lines_mu);
                                              lines.emplace_back(l);
                                            }});
  ASSERT_TRUE(log.ok());
  testing::FakeMountCalls calls;
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  e.state_dir_size_mib = 4;
  e.mount_calls = &calls;
  Allocator capped("node-a", &state_, &store_, metrics_.get(), &reporter_, e, *log);
  Assign(Pod("one"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  ASSERT_TRUE(capped.Allocate(kGpu, {{"GPU-a::1"}}).ok());
  ASSERT_EQ(calls.calls.size(), 1u);
  EXPECT_EQ(calls.calls[0], "mount tmpfs " + dir_.File("containers/uid-one_main/state") +
                                " tmpfs 14 size=4m,nr_inodes=64,mode=1777");
  EXPECT_NE(registry_.Serialize().find("accelpool_plugin_state_dirs_uncapped 0"),
            std::string::npos);

  calls.mount_error = EPERM;
  Assign(Pod("two"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 1, 4096, 250, false)})});
  Assign(Pod("three"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 4096, 250, false)})});
  ASSERT_TRUE(capped.Allocate(kGpu, {{"GPU-b::1"}}).ok());
  ASSERT_TRUE(capped.Allocate(kGpu, {{"GPU-b::2"}}).ok());
  EXPECT_EQ(calls.calls.size(), 3u);
  size_t warnings = 0;
  for (const std::string& l : lines) {
    if (l.find("not size-capped") != std::string::npos) {
      ++warnings;
      EXPECT_NE(l.find("mountPropagation Bidirectional"), std::string::npos) << l;
      EXPECT_NE(l.find("--state-dir-size-mib=0"), std::string::npos) << l;
    }
  }
  EXPECT_EQ(warnings, 1u);
  EXPECT_NE(registry_.Serialize().find("accelpool_plugin_state_dirs_uncapped 1"),
            std::string::npos);
}

TEST_F(AllocatorTest, TheContractIsAlsoMountedReadOnlyBesideTheLibrary) {
  Assign(Pod("infer"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  auto answers = allocator_->Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(answers.ok()) << answers.status().ToString();
  const vendors::ContainerSpec& spec = (*answers)[0].spec;
  const std::string dir = dir_.File("containers/uid-infer_main");
  std::map<std::string, std::pair<std::string, bool>> mounts;  // container path -> host, ro
  for (const auto& m : spec.mounts) {
    mounts[m.container_path] = {m.host_path, m.read_only};
  }
  const EnforcementOptions defaults;
  ASSERT_TRUE(mounts.count(defaults.state_mount));
  EXPECT_EQ(mounts[defaults.state_mount], std::make_pair(dir + "/state", false));
  const std::string limits_path = defaults.library_container + ".limits";
  ASSERT_TRUE(mounts.count(limits_path)) << "the shim reads <library>.limits";
  EXPECT_EQ(mounts[limits_path], std::make_pair(dir + "/limits", true));

  std::ifstream in(dir + "/limits");
  std::map<std::string, std::string> file;
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    ASSERT_NE(eq, std::string::npos) << line;
    file[line.substr(0, eq)] = line.substr(eq + 1);
  }
  // Exactly the enforcement variables of the env, with the same values.
  std::map<std::string, std::string> want;
  for (const auto& [name, value] : spec.env) {
    if (api::DeviceControlledEnv(name) == std::optional<std::string_view>("enforcement")) {
      want[name] = value;
    }
  }
  EXPECT_EQ(file, want);
  EXPECT_EQ(file["ACCELPOOL_CUDA_MEMORY_LIMIT_0"], "4096");
  EXPECT_EQ(file["ACCELPOOL_CUDA_COMPUTE_LIMIT"], "25");
  auto perms = std::filesystem::status(dir + "/limits").permissions();
  using std::filesystem::perms;
  EXPECT_EQ(perms & (perms::group_write | perms::others_write), perms::none);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos)
        << "a temporary file was left: " << entry.path();
  }
}

TEST_F(AllocatorTest, MultiContainerPodsAreAnsweredPerContainer) {
  // init and main share one slot (kubelet reuses init devices); a sidecar has its own.
  Assign(Pod("multi"),
         {Ctr("warmup", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2, 2048, 100, false)},
              core::ContainerKind::kInit),
          Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2, 2048, 100, false)}),
          Ctr("side", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 4, 1024, 50, false)})});
  auto init = allocator_->Allocate(kGpu, {{"GPU-a::2"}});
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  EXPECT_EQ((*init)[0].container, "warmup");
  auto main = allocator_->Allocate(kGpu, {{"GPU-a::2"}});
  ASSERT_TRUE(main.ok());
  EXPECT_EQ((*main)[0].container, "main");
  auto side = allocator_->Allocate(kGpu, {{"GPU-b::4"}});
  ASSERT_TRUE(side.ok());
  EXPECT_EQ((*side)[0].container, "side");
  EXPECT_EQ((*side)[0].spec.env.at("ACCELPOOL_CUDA_COMPUTE_LIMIT"), "5");
  // kubelet retrying an Allocate gets the same answer, not an error.
  auto again = allocator_->Allocate(kGpu, {{"GPU-b::4"}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].container, "side");
  auto entries = reporter_.entries();
  ASSERT_FALSE(entries.empty());
  EXPECT_EQ(entries.back().containers, (std::vector<std::string>{"warmup", "main", "side"}));
}

// A container asking for the devices of two vendors has one assignment
// entry per resource, and kubelet allocates each on its own. Once its NVIDIA
// entry is allocated, its Ascend entry still waits: another pod waiting with
// the same Ascend request must not take its place, nor it the other's.
TEST_F(AllocatorTest, AContainerOfTwoVendorsIsAllocatedPerResource) {
  Assign(Pod("a", "2026-11-30T01:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)}),
          Ctr("main", kNpu, core::Vendor::kAscend, {Dev(Npu(2), 2, 0)})});
  Assign(Pod("b", "2026-11-30T01:05:00Z"),
         {Ctr("main", kNpu, core::Vendor::kAscend, {Dev(Npu(5), 5, 0)})});
  auto gpu = allocator_->Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)[0].pod.name, "a");
  EXPECT_EQ(store_.PendingContainers(), 2u) << "a's Ascend entry and b's";
  EXPECT_EQ(reporter_.entries().back().allocated,
            (std::vector<api::AllocatedResource>{{"main", kGpu}}));
  // Kubelet admits a: its Ascend call is steered to a's own die.
  std::vector<std::string> dies;
  for (int i = 0; i < 16; ++i) dies.push_back(Npu(i) + "::0");
  auto preferred = allocator_->Preferred(kNpu, {{dies, {}, 1}});
  ASSERT_EQ(preferred.size(), 1u);
  EXPECT_EQ(preferred[0], std::vector<std::string>{Npu(2) + "::0"});
  auto npu = allocator_->Allocate(kNpu, {preferred[0]});
  ASSERT_TRUE(npu.ok()) << npu.status().ToString();
  EXPECT_EQ((*npu)[0].pod.name, "a");
  EXPECT_EQ((*npu)[0].spec.env.at("ASCEND_VISIBLE_DEVICES"), "2");
  EXPECT_EQ(reporter_.entries().back().allocated,
            (std::vector<api::AllocatedResource>{{"main", kGpu}, {"main", kNpu}}));
  // Then b, with its own.
  auto b = allocator_->Allocate(kNpu, {{Npu(5) + "::0"}});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)[0].pod.name, "b");
  EXPECT_EQ(store_.PendingContainers(), 0u);
}

// Kubelet may ask for several containers in one Allocate call. The store is
// marked only when the whole call succeeded, so each request must leave out
// the containers the call's earlier requests were answered with: otherwise
// two requests that both resolve to "the only candidate" get the same
// pending container, and its grant is handed out twice.
TEST_F(AllocatorTest, OneCallNeverAnswersTheSameContainerTwice) {
  Assign(Pod("two"), {Ctr("first", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 0)}),
                      Ctr("second", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 0)})});
  // Ids that name no assignment: each request goes by the only candidate.
  auto both = allocator_->Allocate(kGpu, {{"GPU-a::3"}, {"GPU-b::3"}});
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_EQ((*both)[0].container, "first");
  EXPECT_EQ((*both)[1].container, "second");
  EXPECT_EQ((*both)[1].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
  // A third request in one call has nobody left to be: refused, not a
  // second copy of a grant.
  Assign(Pod("one"), {Ctr("only", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1)})});
  auto three = allocator_->Allocate(kGpu, {{"GPU-a::4"}, {"GPU-a::5"}});
  EXPECT_FALSE(three.ok());
}

// Two pods of one Job, created in the same second, wait on the node with the
// same shape. Kubelet admits job-b first (it was bound first), but job-a sorts
// first. Kubelet's calls name no pod: its pod-resources view does (it lists a
// pod from just before admitting it), so each pod gets its own grant.
TEST_F(AllocatorTest, SameShapePodsAreToldApartByKubeletsView) {
  Assign(Pod("job-a"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  Assign(Pod("job-b"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 1, 40960, 1000, false)})});
  KubeletView view = {{"default/running", {{"c", {kGpu}}}}, {"default/job-b", {{"main", {}}}}};
  int asked = 0;
  allocator_->SetKubeletView([&]() -> StatusOr<KubeletView> {
    ++asked;
    return view;
  });
  std::vector<std::string> all;
  for (const char* d : {"GPU-a", "GPU-b"}) {
    for (int i = 0; i < 10; ++i) all.push_back(api::SlotId(d, i));
  }
  auto pref = allocator_->Preferred(kGpu, {{all, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-b::1"}));
  auto b = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)[0].pod.name, "job-b");
  EXPECT_EQ((*b)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "40960");
  EXPECT_EQ(asked, 2);  // Preferred and Allocate each found two pods waiting

  // Kubelet picked job-a's slot for job-b anyway (no preference asked, or a
  // topology hint): job-b is still answered with its own grant.
  store_.Remove("uid-job-b");
  Assign(Pod("job-b"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 1, 40960, 1000, false)})});
  auto again = allocator_->Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)[0].pod.name, "job-b");
  EXPECT_EQ((*again)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");

  // Then job-a: kubelet lists job-b with its device and job-a without.
  view["default/job-b"]["main"] = {kGpu};
  view["default/job-a"]["main"] = {};
  pref = allocator_->Preferred(kGpu, {{all, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-a::1"}));
  auto a = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)[0].pod.name, "job-a");
  EXPECT_EQ((*a)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "4096");
  EXPECT_EQ(store_.PendingContainers(), 0u);
}

// A kubelet before 1.34 lists the pods it turned away at admission until they
// are deleted, and admits one pod at a time: turned-away was refused (by
// another admit handler, no Allocate here) a moment before admitted is
// admitted, its Failed status not on the plugin's watch yet. Both are listed
// without devices. No order names the caller for sure (creation times tie
// within a second; an older pod may reach kubelet after a newer one), so the
// node's pods are read again until the Failed status arrives, and the call
// is refused when it does not. (The oldest's slots were answered, its grant
// handed to the newer pod; once its Failed status arrived the extender
// released devices the newer pod used.)
TEST_F(AllocatorTest, OfSeveralPodsKubeletListsAsBeingAdmittedNoneIsGuessed) {
  Assign(Pod("turned-away", "2026-11-30T02:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  Assign(Pod("admitted", "2026-11-30T02:00:01Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 1, 40960, 1000, false)})});
  KubeletView view = {{"default/turned-away", {{"main", {}}}},
                      {"default/admitted", {{"main", {}}}}};
  std::atomic<int> refreshes = 0;  // the re-reads run on a thread of their own
  std::atomic<int> failed_at = 0;  // the re-read that first sees turned-away Failed; 0: none
  Allocator allocator("node-a", &state_, &store_, nullptr, &reporter_, EnforcementOptions{},
                      Logger(), [&] {
                        if (++refreshes == failed_at) store_.Remove("uid-turned-away");
                        return Status::Ok();
                      });
  allocator.SetRefreshBudget(std::chrono::milliseconds(400));
  allocator.SetKubeletView([&]() -> StatusOr<KubeletView> { return view; });
  std::vector<std::string> all;
  for (const char* d : {"GPU-a", "GPU-b"}) {
    for (int i = 0; i < 10; ++i) all.push_back(api::SlotId(d, i));
  }
  // Preferred offers neither pod's slots (one was turned away), so that
  // kubelet takes nobody's; Allocate settles who calls.
  auto pref = allocator.Preferred(kGpu, {{all, {}, 1}});
  ASSERT_EQ(pref[0].size(), 1u);
  EXPECT_NE(pref[0][0], "GPU-a::1");
  EXPECT_NE(pref[0][0], "GPU-b::1");
  refreshes = 0;

  // The Failed status does not arrive: refused, naming both pods.
  auto r = allocator.Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("default/turned-away"), std::string::npos);
  EXPECT_NE(r.status().message().find("default/admitted"), std::string::npos);
  EXPECT_GE(refreshes.load(), 2) << "read again until the budget ran out";
  EXPECT_EQ(store_.PendingContainers(), 2u) << "nothing marked allocated, nobody forgotten";

  // It arrives at the second re-read: admitted gets its own grant, whatever
  // ids kubelet chose.
  refreshes = 0;
  failed_at = 2;
  r = allocator.Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].pod.name, "admitted");
  EXPECT_EQ((*r)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
  EXPECT_EQ(refreshes.load(), 2);
  EXPECT_EQ(store_.PendingContainers(), 0u);
}

// An Allocate that fails for a pod surely its own makes kubelet turn the pod
// away; the store forgets it at once. A re-read of the node's pods (or an
// update of the pod) before its Failed status arrives must not bring it back
// as a candidate, or the next pod of its shape could get its grant.
TEST_F(AllocatorTest, APodTurnedAwayStaysForgottenThroughAReRead) {
  Assign(Pod("gone"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  ASSERT_TRUE(store_.RejectAdmission("uid-gone"));
  EXPECT_EQ(store_.PendingContainers(), 0u);
  // The re-read still shows it Pending.
  Assign(Pod("gone"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  store_.SetUnassigned(Pod("gone"), {{"main", kGpu, 1}});
  EXPECT_EQ(store_.PendingContainers(), 0u);
  // Another pod of the shape, bound later, is the only candidate.
  Assign(Pod("next", "2026-11-30T02:00:05Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 2048, 100, false)})});
  auto r = allocator_->Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].pod.name, "next");
  EXPECT_EQ((*r)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
}

// After a node restart kubelet calls Allocate again for a running pod's
// containers (it lost their devices); a failure there makes it retry the
// container's start, it does not turn the pod away. So a failed repeat keeps
// the pod: its next call is answered again.
TEST_F(AllocatorTest, AFailedRepeatKeepsThePod) {
  Assign(Pod("running"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 7, 2048, 300, false)})});
  ASSERT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::7"}}).ok());
  ASSERT_TRUE(state_.SetHealth("GPU-a", false));
  auto failed = allocator_->Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(store_.AllocatedContainers("uid-running").size(), 1u) << "the pod was forgotten";
  ASSERT_TRUE(state_.SetHealth("GPU-a", true));
  auto again = allocator_->Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)[0].pod.name, "running");
  EXPECT_TRUE((*again)[0].repeat);
}

// Kubelet's view could not be read to confirm the one pod the slot ids name:
// the node's pods are read again before the ids are trusted. Here the named
// pod was deleted (the watch lagged) and the caller was bound a moment ago.
TEST_F(AllocatorTest, AnUnreadableKubeletViewMakesTheSlotIdsConfirmedOnFreshPods) {
  Assign(Pod("deleted"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  int refreshes = 0;
  Allocator allocator(
      "node-a", &state_, &store_, nullptr, &reporter_, EnforcementOptions{}, Logger(), [&] {
        ++refreshes;
        store_.Remove("uid-deleted");
        Assign(Pod("new", "2026-11-30T02:00:05Z"),
               {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 2048, 100, false)})});
        return Status::Ok();
      });
  allocator.SetKubeletView(
      []() -> StatusOr<KubeletView> { return UnavailableError("pod-resources socket gone"); });
  auto r = allocator.Allocate(kGpu, {{"GPU-a::1"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(refreshes, 1);
  EXPECT_EQ((*r)[0].pod.name, "new");
  EXPECT_EQ((*r)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
}

// Kubelet writes its device checkpoint after Allocate and before it starts
// the container. One that dies in between has no record of the pod when it
// comes back, admits it again and asks again: the same slots are preferred
// and the same grant answered, with or without kubelet's view, and nothing is
// booked twice.
TEST_F(AllocatorTest, AKubeletThatLostItsCheckpointIsAnsweredTheSameAgain) {
  Assign(Pod("p"), {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 7, 2048, 300, false)})});
  std::vector<std::string> all;
  for (const char* d : {"GPU-a", "GPU-b"}) {
    for (int i = 0; i < 10; ++i) all.push_back(api::SlotId(d, i));
  }
  auto pref = allocator_->Preferred(kGpu, {{all, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-a::7"}));
  auto first = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(store_.PendingContainers(), 0u);

  // Kubelet restarted without its checkpoint: every slot is free again in its
  // eyes, and its pod-resources view lists p without devices.
  for (bool with_view : {false, true}) {
    SCOPED_TRACE(with_view ? "with kubelet's view" : "without kubelet's view");
    if (with_view) {
      allocator_->SetKubeletView([]() -> StatusOr<KubeletView> {
        return KubeletView{{"default/p", {{"c", {}}}}};
      });
    }
    pref = allocator_->Preferred(kGpu, {{all, {}, 1}});
    EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-a::7"}));
    auto again = allocator_->Allocate(kGpu, {pref[0]});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ((*again)[0].pod.name, "p");
    EXPECT_EQ((*again)[0].container, "c");
    EXPECT_EQ((*again)[0].spec.env, (*first)[0].spec.env);
    EXPECT_EQ(store_.PendingContainers(), 0u);
  }
  // Operators see it: two containers answered again.
  EXPECT_NE(registry_.Serialize().find(
                R"(accelpool_plugin_allocate_repeats_total{resource="nvidia.com/gpu"} 2)"),
            std::string::npos);

  // Such an answer is confirmed on the node's pods as they are now: when the
  // re-read shows p gone and a new pod q waiting (the watch lagged both),
  // kubelet is steered to q's slots and q gets its own grant.
  int refreshes = 0;
  Allocator fresh(
      "node-a", &state_, &store_, nullptr, &reporter_, EnforcementOptions{}, Logger(), [&] {
        ++refreshes;
        store_.Remove("uid-p");
        Assign(Pod("q", "2026-11-30T03:00:00Z"),
               {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 1024, 100, false)})});
        return Status::Ok();
      });
  pref = fresh.Preferred(kGpu, {{all, {}, 1}});
  EXPECT_EQ(refreshes, 1);
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-b::3"}));
  auto q = fresh.Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ((*q)[0].pod.name, "q");
  EXPECT_EQ(refreshes, 1);  // q was found pending by its slots: nothing to confirm
}

// A repeat answers with a grant handed out before, so it must be confirmed:
// when the node's pods cannot be re-read, only kubelet's view can tell a pod
// kubelet admits again (listed, its container without devices) from a
// finished pod the watch has not reported whose slots kubelet now hands to a
// pod bound a moment ago. Unconfirmed, the call is refused and no state dir
// is made for anyone.
TEST_F(AllocatorTest, ARepeatIsRefusedWhenNeitherThePodsNorKubeletConfirmIt) {
  Assign(Pod("p"), {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 7, 2048, 300, false)})});
  store_.MarkAllocated("uid-p", kGpu, {"c"});
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  Allocator unread("node-a", &state_, &store_, nullptr, &reporter_, e, Logger(),
                   [] { return UnavailableError("the apiserver is unreachable"); });
  // No view at all, a view that cannot be read, a view without p, a view
  // listing p's container with its devices (p still runs as it was): refused.
  const std::vector<std::optional<StatusOr<KubeletView>>> refused = {
      std::nullopt,
      StatusOr<KubeletView>(UnavailableError("no socket")),
      StatusOr<KubeletView>(KubeletView{{"default/q", {{"c", {}}}}}),
      StatusOr<KubeletView>(KubeletView{{"default/p", {{"c", {kGpu}}}}}),
  };
  for (size_t i = 0; i < refused.size(); ++i) {
    SCOPED_TRACE(i);
    if (refused[i].has_value()) {
      const StatusOr<KubeletView> view = *refused[i];
      unread.SetKubeletView([view] { return view; });
    }
    auto r = unread.Allocate(kGpu, {{"GPU-a::7"}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
    EXPECT_NE(r.status().message().find("could not be re-read"), std::string::npos)
        << r.status().message();
    EXPECT_FALSE(std::filesystem::exists(dir_.File("containers/uid-p_c")));
  }
  // Kubelet lists p, its container without devices: it admits p again.
  unread.SetKubeletView([] {
    return StatusOr<KubeletView>(KubeletView{{"default/p", {{"c", {}}}}});
  });
  auto again = unread.Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)[0].pod.name, "p");
  EXPECT_TRUE((*again)[0].repeat);
  EXPECT_TRUE(std::filesystem::exists(dir_.File("containers/uid-p_c")));
}

// The same crash while another pod of the shape waits to be admitted.
// Kubelet admits the older pod first, and lists only the pods it has reached:
// p (its container without devices), not q. Its view sends p to its own slots
// and grant, then q to its own. Without the view the waiting pod would win.
TEST_F(AllocatorTest, KubeletsViewTellsAPodAdmittedAgainFromOneWaiting) {
  Assign(Pod("p", "2026-11-30T01:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 7, 2048, 300, false)})});
  auto first = allocator_->Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Assign(Pod("q", "2026-11-30T03:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 1024, 100, false)})});
  std::vector<std::string> all;
  for (const char* d : {"GPU-a", "GPU-b"}) {
    for (int i = 0; i < 10; ++i) all.push_back(api::SlotId(d, i));
  }
  KubeletView view = {{"default/p", {{"c", {}}}}};
  int asked = 0;
  allocator_->SetKubeletView([&]() -> StatusOr<KubeletView> {
    ++asked;
    return view;
  });
  auto pref = allocator_->Preferred(kGpu, {{all, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-a::7"}));
  EXPECT_EQ(asked, 1);
  auto p = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[0].pod.name, "p");
  EXPECT_EQ((*p)[0].spec.env, (*first)[0].spec.env);
  EXPECT_EQ(store_.PendingContainers(), 1u);  // q still waits

  // Then q: kubelet lists p with its device again and q without.
  view["default/p"]["c"] = {kGpu};
  view["default/q"]["c"] = {};
  std::vector<std::string> free_now = all;
  free_now.erase(std::find(free_now.begin(), free_now.end(), "GPU-a::7"));
  pref = allocator_->Preferred(kGpu, {{free_now, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-b::3"}));
  auto q = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ((*q)[0].pod.name, "q");
  EXPECT_EQ((*q)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "1024");
  EXPECT_EQ(store_.PendingContainers(), 0u);

  // A pod that finished while the watch lagged looks the same to the ids, but
  // kubelet lists the pod it admits: the waiting one gets its own slots.
  Assign(Pod("r", "2026-11-30T04:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 5, 1024, 100, false)})});
  view = {{"default/p", {{"c", {}}}}, {"default/q", {{"c", {kGpu}}}}, {"default/r", {{"c", {}}}}};
  pref = allocator_->Preferred(kGpu, {{all, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-b::5"}));
  auto r = allocator_->Allocate(kGpu, {{"GPU-a::7"}});  // kubelet took p's ids anyway
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].pod.name, "r");
}

// Two pods wait with the shape of an allocated one, and kubelet hands one of
// them the allocated pod's ids (it finished before the watch said so, or
// kubelet ignored the preference): kubelet's view names the caller; the
// allocated pod's grant goes to nobody else, and with both waiting pods
// listed the call is refused.
TEST_F(AllocatorTest, TheIdsOfAnAllocatedPodGoToNoneOfTwoWaitingPods) {
  Assign(Pod("p", "2026-11-30T01:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 7, 2048, 300, false)})});
  ASSERT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::7"}}).ok());
  Assign(Pod("q", "2026-11-30T03:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 1024, 100, false)})});
  Assign(Pod("r", "2026-11-30T04:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 5, 1024, 100, false)})});
  KubeletView view = {{"default/p", {{"c", {kGpu}}}}, {"default/q", {{"c", {}}}}};
  allocator_->SetKubeletView([&]() -> StatusOr<KubeletView> { return view; });
  auto q = allocator_->Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ((*q)[0].pod.name, "q");
  EXPECT_FALSE((*q)[0].repeat);
  EXPECT_EQ((*q)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "1024");

  // Both listed as being admitted: refused, never answered as p.
  Assign(Pod("s", "2026-11-30T05:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 6, 1024, 100, false)})});
  view = {{"default/p", {{"c", {kGpu}}}},
          {"default/q", {{"c", {kGpu}}}},
          {"default/r", {{"c", {}}}},
          {"default/s", {{"c", {}}}}};
  auto none = allocator_->Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kAborted) << none.status().ToString();
  EXPECT_EQ(store_.PendingContainers(), 2u);  // r and s still wait

  // Kubelet lists p as being admitted again, and neither waiting pod: p's
  // repeat.
  view = {{"default/p", {{"c", {}}}}, {"default/q", {{"c", {kGpu}}}}};
  auto again = allocator_->Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)[0].pod.name, "p");
  EXPECT_TRUE((*again)[0].repeat);
}

// Without kubelet's view nothing tells such pods apart: Preferred steers to
// the oldest, and an Allocate with ids that name neither is refused.
TEST_F(AllocatorTest, WithoutKubeletsViewSameShapePodsGoByTheSlotIds) {
  Assign(Pod("job-a"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  Assign(Pod("job-b"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 1, 4096, 250, false)})});
  auto pref = allocator_->Preferred(kGpu, {{{"GPU-a::1", "GPU-b::1", "GPU-a::5"}, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-a::1"}));
  auto nobody = allocator_->Allocate(kGpu, {{"GPU-a::5"}});
  ASSERT_FALSE(nobody.ok());
  EXPECT_EQ(nobody.status().code(), StatusCode::kAborted);
  EXPECT_NE(nobody.status().message().find("pod-resources API was not asked"), std::string::npos)
      << nobody.status().message();
  // A broken view changes nothing.
  allocator_->SetKubeletView(
      []() -> StatusOr<KubeletView> { return UnavailableError("connect: no such file"); });
  auto by_ids = allocator_->Allocate(kGpu, {{"GPU-b::1"}});
  ASSERT_TRUE(by_ids.ok()) << by_ids.status().ToString();
  EXPECT_EQ((*by_ids)[0].pod.name, "job-b");
}

// Kubelet gives the next container of a pod the devices its plain init
// containers held when they cover its count (a random pick among them), so an
// id an allocated init container held names the pod; the container is the
// pod's next pending one, answered with its own grant.
TEST_F(AllocatorTest, ReusedInitContainerDevicesNameThePodNotTheInitContainer) {
  Assign(Pod("p"),
         {Ctr("warmup", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 0, 40960, 1000, false)},
              core::ContainerKind::kInit),
          Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 0, 4096, 250, false)})});
  auto init = allocator_->Allocate(kGpu, {{"GPU-b::0"}});
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  EXPECT_EQ((*init)[0].container, "warmup");
  auto main = allocator_->Allocate(kGpu, {{"GPU-b::0"}});
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ((*main)[0].container, "main");
  EXPECT_EQ((*main)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-a");
  EXPECT_EQ((*main)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "4096");
  EXPECT_EQ(store_.PendingContainers(), 0u);
  // A later pod asking the same is answered as itself, not as p.
  Assign(Pod("q", "2026-11-30T03:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 5, 1024, 100, false)})});
  auto pref = allocator_->Preferred(kGpu, {{{"GPU-a::0", "GPU-b::5", "GPU-b::6"}, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-b::5"}));
  auto q = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)[0].pod.name, "q");

  // Two init containers on different GPUs; main shares i2's slot. Whichever
  // of their devices kubelet reuses, main gets main's grant.
  for (const char* reused : {"GPU-a::2", "GPU-b::2"}) {
    store_.Remove("uid-r");
    Assign(
        Pod("r"),
        {Ctr("i1", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2)}, core::ContainerKind::kInit),
         Ctr("i2", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2)}, core::ContainerKind::kInit),
         Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 2048, 100, false)})});
    ASSERT_EQ((*allocator_->Allocate(kGpu, {{"GPU-a::2"}}))[0].container, "i1");
    ASSERT_EQ((*allocator_->Allocate(kGpu, {{"GPU-b::2"}}))[0].container, "i2");
    auto m = allocator_->Allocate(kGpu, {{reused}});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)[0].container, "main") << reused;
    EXPECT_EQ((*m)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b") << reused;
  }
}

// Kubelet never reuses a sidecar's devices. An init container after a sidecar
// on the same device (the extender gives it the sidecar's slot) finds that slot
// taken: Preferred offers a slot nobody is promised, and the Allocate for it
// is the init container's, not main's.
TEST_F(AllocatorTest, AnInitContainerAfterASidecarOnTheSameDeviceIsAnsweredAsItself) {
  Assign(Pod("s"),
         {Ctr("side", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 3, 1024, 100, false)},
              core::ContainerKind::kSidecar),
          Ctr("setup", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 3, 1024, 100, false)},
              core::ContainerKind::kInit),
          Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 4, 2048, 200, false)})});
  Assign(Pod("other", "2026-11-30T03:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 7, 1024, 100, false)})});
  const std::vector<std::string> free = {"GPU-a::4", "GPU-a::5", "GPU-b::7"};
  auto side = allocator_->Allocate(kGpu, {{"GPU-a::3"}});
  ASSERT_TRUE(side.ok());
  EXPECT_EQ((*side)[0].container, "side");
  KubeletView view = {{"default/s", {{"side", {kGpu}}, {"main", {}}}}};
  allocator_->SetKubeletView([&]() -> StatusOr<KubeletView> { return view; });
  auto pref = allocator_->Preferred(kGpu, {{free, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-a::5"}));  // promised to nobody
  auto setup = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ((*setup)[0].container, "setup");
  EXPECT_EQ((*setup)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "1024");
  auto main = allocator_->Allocate(kGpu, {{"GPU-a::4"}});
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ((*main)[0].container, "main");
  EXPECT_EQ((*main)[0].pod.name, "s");
}

// When the caller's own slots are taken, the slots offered instead lie on the
// caller's own devices where one is free: kubelet records the ids it chose
// (pod-resources List and Get, the device health it writes into the pod's
// allocatedResourcesStatus), so they must name the devices the container
// really gets.
TEST_F(AllocatorTest, SpareSlotsLieOnTheCallersOwnDevices) {
  Assign(Pod("s"),
         {Ctr("side", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 1024, 100, false)},
              core::ContainerKind::kSidecar),
          Ctr("setup", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 1024, 100, false)},
              core::ContainerKind::kInit),
          Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 4, 2048, 200, false)})});
  auto side = allocator_->Allocate(kGpu, {{"GPU-b::3"}});
  ASSERT_TRUE(side.ok()) << side.status().ToString();
  auto pref =
      allocator_->Preferred(kGpu, {{{"GPU-a::0", "GPU-a::1", "GPU-b::4", "GPU-b::5"}, {}, 1}});
  EXPECT_EQ(pref[0], (std::vector<std::string>{"GPU-b::5"}));  // GPU-b::4 is main's
  auto setup = allocator_->Allocate(kGpu, {pref[0]});
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ((*setup)[0].container, "setup");

  // Two devices: one slot on each of them, not two on the first.
  Assign(Pod("pair", "2026-11-30T03:00:00Z"),
         {Ctr("side", kGpu, core::Vendor::kNvidia,
              {Dev("GPU-a", 0, 3, 1024, 100, false), Dev("GPU-b", 1, 6, 1024, 100, false)},
              core::ContainerKind::kSidecar),
          Ctr("main", kGpu, core::Vendor::kNvidia,
              {Dev("GPU-a", 0, 3, 1024, 100, false), Dev("GPU-b", 1, 6, 1024, 100, false)})});
  auto pair = allocator_->Allocate(kGpu, {{"GPU-a::3", "GPU-b::6"}});
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  EXPECT_EQ((*pair)[0].container, "side");
  pref = allocator_->Preferred(kGpu, {{{"GPU-a::7", "GPU-a::8", "GPU-a::9", "GPU-b::7"}, {}, 2}});
  std::vector<std::string> got = pref[0];
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"GPU-a::7", "GPU-b::7"}));
}

// A finished pod the watch has not removed yet still holds, as allocated, the
// slot the extender has since given a new pod: the new pod's pending
// container wins the ids, not a "repeat" of the old one.
TEST_F(AllocatorTest, APendingContainerWinsIdsAnOlderPodStillHoldsAsAllocated) {
  Assign(Pod("old", "2026-11-30T01:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 8, 1024, 100, false)})});
  ASSERT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::8"}}).ok());
  Assign(Pod("new", "2026-11-30T03:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 8, 2048, 200, false)})});
  // Another pod waits with the same request, so "the only candidate" cannot
  // decide: the ids must.
  Assign(Pod("other", "2026-11-30T03:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 8, 1024, 100, false)})});
  auto r = allocator_->Allocate(kGpu, {{"GPU-a::8"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].pod.name, "new");
  EXPECT_EQ((*r)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "2048");
  EXPECT_EQ(store_.PendingContainers(), 1u);  // other/main
}

TEST_F(AllocatorTest, AFailureReportsTheContainersAllocatedBefore) {
  api::Assignment a;
  a.node = "node-a";
  a.containers = {
      Ctr("warmup", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2)}, core::ContainerKind::kInit),
      Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-elsewhere", 0, 0)})};
  a.containers[1].devices[0].slot = "GPU-b::6";
  store_.Upsert(Pod("half"), a, {});
  ASSERT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::2"}}).ok());
  auto r = allocator_->Allocate(kGpu, {{"GPU-b::6"}});
  ASSERT_FALSE(r.ok());
  auto entries = reporter_.entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_FALSE(entries[1].ok);
  EXPECT_EQ(entries[1].pod, "default/half");
  EXPECT_EQ(entries[1].containers, (std::vector<std::string>{"warmup"}));
}

TEST_F(AllocatorTest, FallbackOnlyWhenOneContainerCouldBeTheCaller) {
  // kubelet sends GPU-a::9, a slot nobody was assigned (it reused an init
  // container's device, or skipped GetPreferredAllocation).
  const std::vector<std::string> ids = {"GPU-a::9"};
  struct Case {
    std::string name;
    std::vector<std::string> pending;         // pods with one pending 1-slot assignment
    std::vector<UnassignedRequest> stranger;  // what pod "stranger" asks for unassigned
    StatusCode want;
    std::string want_pod;  // answered, or reported with the failure
    std::string want_text;
  };
  const std::vector<Case> cases = {
      {"the only candidate", {"a"}, {}, StatusCode::kOk, "default/a", ""},
      {"a stranger asking for another count",
       {"a"},
       {{"main", kGpu, 2}},
       StatusCode::kOk,
       "default/a",
       ""},
      {"a stranger asking for another resource",
       {"a"},
       {{"main", kNpu, 1}},
       StatusCode::kOk,
       "default/a",
       ""},
      {"a stranger that could be the caller",
       {"a"},
       {{"main", kGpu, 1}},
       StatusCode::kAborted,
       "",
       "without one: [default/stranger/main]"},
      {"a stranger whose count does not parse",
       {"a"},
       {{"main", kGpu, -1}},
       StatusCode::kAborted,
       "",
       "accelpool extender"},
      {"two pending candidates",
       {"a", "b"},
       {},
       StatusCode::kAborted,
       "",
       "pending with an assignment: [default/a/main,default/b/main]"},
      {"only a stranger",
       {},
       {{"main", kGpu, 1}},
       StatusCode::kNotFound,
       "default/stranger",
       "pod default/stranger asks for 1 of nvidia.com/gpu but has no accelpool assignment"},
      {"nobody", {}, {}, StatusCode::kNotFound, "", "accelpool scheduler profile"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    AssignmentStore store;
    RecordingReporter reporter;
    EnforcementOptions e;
    e.state_root = dir.File("containers");
    Allocator allocator("node-a", &state_, &store, metrics_.get(), &reporter, e, Logger());
    int32_t slot = 3;
    for (const std::string& name : c.pending) {
      api::Assignment a;
      a.node = "node-a";
      a.containers = {
          Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, slot++, 1024, 100, false)})};
      store.Upsert(Pod(name), a, {});
    }
    store.SetUnassigned(Pod("stranger"), c.stranger);
    auto r = allocator.Allocate(kGpu, {ids});
    EXPECT_EQ(r.status().code(), c.want) << r.status().ToString();
    auto entries = reporter.entries();
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].ok, c.want == StatusCode::kOk);
    EXPECT_EQ(entries[0].pod, c.want_pod);
    if (r.ok()) {
      // The answer follows the assignment (GPU-b), not kubelet's pick.
      EXPECT_EQ((*r)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
      EXPECT_EQ(store.PendingContainers(), c.pending.size() - 1);
      continue;
    }
    EXPECT_NE(r.status().message().find(c.want_text), std::string::npos) << r.status().message();
    // Nothing booked, no state dir made.
    EXPECT_EQ(store.PendingContainers(), c.pending.size());
    EXPECT_FALSE(std::filesystem::exists(dir.File("containers")));
  }
  const std::string page = registry_.Serialize();
  EXPECT_NE(
      page.find(
          R"(accelpool_plugin_allocate_failures_total{resource="nvidia.com/gpu",reason="ambiguous"} 3)"),
      std::string::npos)
      << page;
}

TEST_F(AllocatorTest, FallbackIsJudgedOnFreshlyReadPods) {
  Assign(Pod("victim"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 1024, 100, false)})});
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  // The informer has not seen the stranger yet; the re-read finds it.
  int refreshes = 0;
  Allocator lagging("node-a", &state_, &store_, nullptr, &reporter_, e, Logger(), [&] {
    ++refreshes;
    store_.SetUnassigned(Pod("stranger"), {{"main", kGpu, 1}});
    return Status::Ok();
  });
  auto r = lagging.Allocate(kGpu, {{"GPU-a::9"}});
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
  EXPECT_EQ(refreshes, 1);
  EXPECT_EQ(store_.PendingContainers(), 1u);

  // A re-read that fails cannot confirm the fallback.
  store_.Remove(Pod("stranger").uid);
  Allocator offline("node-a", &state_, &store_, nullptr, &reporter_, e, Logger(),
                    [] { return UnavailableError("apiserver down"); });
  r = offline.Allocate(kGpu, {{"GPU-a::9"}});
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_NE(r.status().message().find("apiserver down"), std::string::npos);
  EXPECT_EQ(store_.PendingContainers(), 1u);

  // An exact match needs no re-read.
  refreshes = 0;
  Allocator fresh("node-a", &state_, &store_, nullptr, &reporter_, e, Logger(), [&] {
    ++refreshes;
    return Status::Ok();
  });
  EXPECT_TRUE(fresh.Allocate(kGpu, {{"GPU-b::3"}}).ok());
  EXPECT_EQ(refreshes, 0);
}

// The plugin's watch lags kubelet's: pod x, bound a moment before y, is
// admitted first while the store knows only y, so the slot ids kubelet sends
// are y's. Kubelet's view lists x, not y: the pods are read again, and x is
// answered with its own grant, y keeps its own.
TEST_F(AllocatorTest, SlotIdsOfAPodKubeletIsNotAdmittingAreCheckedOnFreshPods) {
  Assign(Pod("y"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 20480, 500, false)})});
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  int refreshes = 0;
  Allocator lagging("node-a", &state_, &store_, nullptr, &reporter_, e, Logger(), [&] {
    ++refreshes;
    Assign(Pod("x"),
           {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
    return Status::Ok();
  });
  KubeletView view = {{"default/x", {{"main", {}}}}};
  lagging.SetKubeletView([&]() -> StatusOr<KubeletView> { return view; });
  auto x = lagging.Allocate(kGpu, {{"GPU-b::3"}});
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ((*x)[0].pod.name, "x");
  EXPECT_EQ((*x)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-a");
  EXPECT_EQ((*x)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "4096");
  EXPECT_EQ(refreshes, 1);
  // Then y, which kubelet now lists (kubelet gave its slot to x: the ids
  // name nobody, y is the only container waiting).
  view["default/x"]["main"] = {kGpu};
  view["default/y"]["main"] = {};
  auto y = lagging.Allocate(kGpu, {{"GPU-b::7"}});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ((*y)[0].pod.name, "y");
  EXPECT_EQ((*y)[0].spec.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
  EXPECT_EQ(store_.PendingContainers(), 0u);
  // A view that lists nobody waiting (a kubelet that lists pods only once
  // they run) costs a re-read and changes nothing.
  Assign(Pod("z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 4, 1024, 100, false)})});
  view.clear();
  refreshes = 0;
  auto z = lagging.Allocate(kGpu, {{"GPU-b::4"}});
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ((*z)[0].pod.name, "z");
  EXPECT_EQ(refreshes, 1);
}

// A static pod asking nvidia.com/gpu: 1 has no mirror pod (so no record in
// the store) until kubelet has admitted it. With one accelpool pod p waiting
// with the same request, neither GetPreferredAllocation nor Allocate may
// take the static pod for p once kubelet's view, which lists the static pod
// and not p, has been read.
TEST_F(AllocatorTest, AStaticPodKubeletAdmitsIsNeverAnsweredAsTheWaitingPod) {
  Assign(Pod("p"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 20480, 500, false)})});
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  int refreshes = 0;
  Allocator allocator("node-a", &state_, &store_, nullptr, &reporter_, e, Logger(), [&] {
    ++refreshes;
    return Status::Ok();
  });
  KubeletView view = {{"kube-system/static-node-a", {{"main", {}}}},
                      {"default/running", {{"main", {kGpu}}}}};
  allocator.SetKubeletView([&]() -> StatusOr<KubeletView> { return view; });
  std::vector<std::string> all;
  for (const std::string d : {"GPU-a", "GPU-b"}) {
    for (int s = 0; s < 10; ++s) all.push_back(api::SlotId(d, s));
  }
  // Preferred steers the static pod away from p's slot.
  auto preferred = allocator.Preferred(kGpu, {{all, {}, 1}});
  ASSERT_EQ(preferred.size(), 1u);
  ASSERT_EQ(preferred[0].size(), 1u);
  EXPECT_NE(preferred[0][0], "GPU-b::3");
  // Whatever ids kubelet sends, the static pod is told it has no assignment.
  for (const std::string& ids : {preferred[0][0], std::string("GPU-b::3")}) {
    SCOPED_TRACE(ids);
    auto s = allocator.Allocate(kGpu, {{ids}});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kNotFound) << s.status().ToString();
    EXPECT_NE(s.status().message().find("kube-system/static-node-a"), std::string::npos)
        << s.status().ToString();
  }
  EXPECT_EQ(store_.PendingContainers(), 1u);
  // Then p's own call, which kubelet lists: p's own grant.
  view.erase("kube-system/static-node-a");
  view["kube-system/static-node-a"]["main"] = {};  // it ran without devices
  view["kube-system/static-node-a"]["main"].insert("example.com/other");
  view["default/p"]["main"] = {};
  auto got = allocator.Preferred(kGpu, {{all, {}, 1}});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::vector<std::string>{"GPU-b::3"});
  auto p = allocator.Allocate(kGpu, {{"GPU-b::3"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[0].pod.name, "p");
  EXPECT_EQ((*p)[0].spec.env.at("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "20480");
}

// A stranger in kubelet's view is only one the node's pod list lacks: before
// that list is read every pod is unknown, and a pod removed a moment ago
// (force-deleted while its containers stop) is still known. On a kubelet
// whose view lists nobody waiting, p's own call is then answered with p's
// grant.
TEST_F(AllocatorTest, NoPodIsAStrangerBeforeThePodsAreListedOrJustAfterItWent) {
  Assign(Pod("p"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 20480, 500, false)})});
  Assign(Pod("leaving"),
         {Ctr("main", "example.com/other", core::Vendor::kNvidia, {Dev("GPU-a", 0, 0)})});
  store_.Remove("uid-leaving");
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  Allocator allocator("node-a", &state_, &store_, nullptr, &reporter_, e, Logger(),
                      [] { return Status::Ok(); });
  KubeletView view = {{"default/leaving", {{"main", {}}}}};
  allocator.SetKubeletView([&]() -> StatusOr<KubeletView> { return view; });
  auto gone = allocator.Allocate(kGpu, {{"GPU-b::3"}});
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_EQ((*gone)[0].pod.name, "p");
  // Not listed yet: a pod the store does not know is no stranger either.
  Assign(Pod("q"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 4, 20480, 500, false)})});
  bool listed = false;
  store_.SetPodsListed([&listed] { return listed; });
  view = {{"kube-system/static-node-a", {{"main", {}}}}};
  auto early = allocator.Allocate(kGpu, {{"GPU-b::4"}});
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ((*early)[0].pod.name, "q");
  // Listed: the same view's static pod is a stranger asking without an
  // assignment, and a call with r's ids is refused rather than answered as r.
  Assign(Pod("r"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 5, 20480, 500, false)})});
  listed = true;
  auto late = allocator.Allocate(kGpu, {{"GPU-b::5"}});
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("kube-system/static-node-a"), std::string::npos)
      << late.status().ToString();
  store_.SetPodsListed(nullptr);
}

TEST_F(AllocatorTest, PreferredReturnsTheAssignedSlotsOfTheOldestFittingContainer) {
  Assign(Pod("first", "2026-11-30T01:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 7, 1024, 100, false)})});
  Assign(Pod("second", "2026-11-30T01:05:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 1024, 100, false)})});
  std::vector<std::string> all;
  for (const std::string d : {"GPU-a", "GPU-b"}) {
    for (int s = 0; s < 10; ++s) {
      all.push_back(api::SlotId(d, s));
    }
  }
  struct Case {
    std::string name;
    std::vector<std::string> available;
    std::vector<std::string> must;
    int32_t size;
    std::vector<std::string> want;
  };
  std::vector<std::string> without_a7 = all;
  without_a7.erase(std::find(without_a7.begin(), without_a7.end(), "GPU-a::7"));
  const std::vector<Case> cases = {
      {"oldest first", all, {}, 1, {"GPU-a::7"}},
      {"skips one whose slots are taken", without_a7, {}, 1, {"GPU-b::2"}},
      {"must include", all, {"GPU-b::2"}, 1, {"GPU-b::2"}},
      {"no fit: kubelet's order", {"GPU-b::8", "GPU-b::9"}, {}, 2, {"GPU-b::8", "GPU-b::9"}},
      // Requests kubelet never sends: no set of that size holds the
      // must-include ids, so no preference.
      {"more to include than asked for", all, {"GPU-a::3", "GPU-a::4"}, 1, {}},
      {"size zero", all, {"GPU-a::3"}, 0, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = allocator_->Preferred(kGpu, {{c.available, c.must, c.size}});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], c.want);
  }
}

TEST_F(AllocatorTest, BadInputIsAClearErrorAndBooksNothing) {
  Assign(Pod("ok"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 1024, 100, false)})});
  Assign(Pod("foreign"), {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-elsewhere", 0, 0)})});
  // The foreign assignment claims a slot id this node advertises.
  api::Assignment foreign;
  foreign.node = "node-a";
  foreign.containers = {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-elsewhere", 0, 0)})};
  foreign.containers[0].devices[0].slot = "GPU-b::6";
  store_.Upsert(Pod("foreign"), foreign, {});
  struct Case {
    std::string name;
    std::string resource;
    std::vector<std::vector<std::string>> requests;
    StatusCode want;
    std::string want_text;
    bool want_pod_reported;
  };
  const std::vector<Case> cases = {
      {"no containers", kGpu, {}, StatusCode::kInvalidArgument, "no container requests", false},
      {"empty ids", kGpu, {{}}, StatusCode::kInvalidArgument, "named no device ids", false},
      {"malformed slot", kGpu, {{"GPU-a"}}, StatusCode::kInvalidArgument, "not a slot id", false},
      {"unknown device",
       kGpu,
       {{"GPU-zzz::0"}},
       StatusCode::kInvalidArgument,
       "unknown slot id",
       false},
      {"slot past max shares",
       kGpu,
       {{"GPU-a::10"}},
       StatusCode::kInvalidArgument,
       "unknown slot id",
       false},
      {"other resource",
       kGpu,
       {{Npu(0) + "::0"}},
       StatusCode::kInvalidArgument,
       "belongs to huawei.com/Ascend910C",
       false},
      {"foreign assignment",
       kGpu,
       {{"GPU-b::6"}},
       StatusCode::kFailedPrecondition,
       "not on node node-a",
       true},
      {"second container bad: all or nothing",
       kGpu,
       {{"GPU-a::1"}, {"GPU-zzz::1"}},
       StatusCode::kInvalidArgument,
       "unknown slot id",
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    size_t before = reporter_.entries().size();
    auto r = allocator_->Allocate(c.resource, c.requests);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.want);
    EXPECT_NE(r.status().message().find(c.want_text), std::string::npos) << r.status().message();
    auto entries = reporter_.entries();
    ASSERT_EQ(entries.size(), before + 1);
    EXPECT_FALSE(entries.back().ok);
    EXPECT_EQ(!entries.back().pod.empty(), c.want_pod_reported);
    EXPECT_EQ(store_.PendingContainers(), 2u);
  }
  // After all that, the good container still allocates.
  EXPECT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::1"}}).ok());
  EXPECT_NE(registry_.Serialize().find("accelpool_plugin_allocate_failures_total{"),
            std::string::npos);
}

TEST_F(AllocatorTest, AnAssignmentMatchesOnlyUnderItsOwnResource) {
  // A container entry for the NPU resource that names a GPU slot: kubelet's
  // Allocate of that GPU slot finds nobody, and the NPU Allocate it falls
  // back to is refused, since the device is not the resource's.
  Assign(Pod("mislabeled"), {Ctr("c", kNpu, core::Vendor::kAscend, {Dev("GPU-b", 1, 7)})});
  auto gpu = allocator_->Allocate(kGpu, {{"GPU-b::7"}});
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kNotFound) << gpu.status().ToString();
  auto npu = allocator_->Allocate(kNpu, {{Npu(0) + "::0"}});
  ASSERT_FALSE(npu.ok());
  EXPECT_EQ(npu.status().code(), StatusCode::kFailedPrecondition) << npu.status().ToString();
  EXPECT_NE(npu.status().message().find("names device GPU-b of nvidia.com/gpu"), std::string::npos)
      << npu.status().message();
  EXPECT_EQ(store_.PendingContainers(), 1u);
}

TEST_F(AllocatorTest, StateDirNamesThatLeaveTheRootAreRefused) {
  // The store is fed by PodSync, which refuses such names already; the
  // allocator must not rely on it: the dir is mounted read-write.
  Assign(Pod("evil"), {Ctr("../../escaped", kGpu, core::Vendor::kNvidia,
                           {Dev("GPU-a", 0, 1, 1024, 100, false)})});
  PodRef bad_uid = Pod("bad-uid");
  bad_uid.uid = "../../escaped-uid";
  Assign(bad_uid,
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2, 1024, 100, false)})});
  for (const std::string slot : {"GPU-a::1", "GPU-a::2"}) {
    SCOPED_TRACE(slot);
    auto r = allocator_->Allocate(kGpu, {{slot}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("refusing the state dir"), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.File("escaped")));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("escaped-uid_main")));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("containers")));
  EXPECT_EQ(store_.PendingContainers(), 2u);
}

TEST(StateDirsTest, PathsAreDirectChildrenOfTheRoot) {
  struct Case {
    std::string root, path;
    bool want;
  };
  const std::vector<Case> cases = {
      {"/r", "/r/u_c", true},         {"/r/", "/r/u_c", true},
      {"/r", "/r/./u_c", true},       {"/r", "/r", false},
      {"/r", "/r/", false},           {"/r", "/r/.", false},
      {"/r", "/r/a/b", false},        {"/r", "/r/u_../../../etc", false},
      {"/r", "/r/u_../../etc", true},  // that is /r/etc
      {"/r", "/r/u_..", true},         // an odd but plain name: still inside
      {"/r", "/r/../etc", false},     {"/r", "/etc", false},
      {"/r", "/rr/u_c", false},       {"", "/u_c", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(IsDirectChild(c.root, c.path), c.want) << c.root << " " << c.path;
  }
  TempDir dir;
  StateDirs dirs(dir.File("root") + "/");
  bool created = false;
  auto p = dirs.Create("uid-1", "main", &created);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, dir.File("root/uid-1_main"));
  EXPECT_TRUE(created);
  EXPECT_TRUE(std::filesystem::is_directory(*p));
  EXPECT_TRUE(std::filesystem::is_directory(StateDirs::StateSubdir(*p)));
  ASSERT_TRUE(dirs.Create("uid-1", "main", &created).ok());
  EXPECT_FALSE(created);
  ASSERT_TRUE(dirs.WriteLimits(*p, "ACCELPOOL_CUDA_COMPUTE_LIMIT=25\n").ok());
  ASSERT_TRUE(dirs.WriteLimits(*p, "ACCELPOOL_CUDA_COMPUTE_LIMIT=10\n").ok()) << "replaced whole";
  std::ifstream limits(StateDirs::LimitsFile(*p));
  std::string content((std::istreambuf_iterator<char>(limits)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "ACCELPOOL_CUDA_COMPUTE_LIMIT=10\n");
  struct stat before {};
  struct stat after {};
  ASSERT_EQ(stat(StateDirs::LimitsFile(*p).c_str(), &before), 0);
  ASSERT_TRUE(dirs.WriteLimits(*p, "ACCELPOOL_CUDA_COMPUTE_LIMIT=10\n").ok());
  ASSERT_EQ(stat(StateDirs::LimitsFile(*p).c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "the same content is not written again";
  EXPECT_EQ(dirs.WriteLimits(dir.File("elsewhere"), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dirs.WriteLimits(dir.File("root"), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StateDirs(dir.File("root"), false).WriteLimits(*p, "x").code(),
            StatusCode::kFailedPrecondition);
  for (const auto& [uid, name] :
       std::vector<std::pair<std::string, std::string>>{{"uid-1", "../../etc"},
                                                        {"uid-1", "a/b"},
                                                        {"..", "main"},
                                                        {"u/..", "main"},
                                                        {"", "main"}}) {
    auto bad = dirs.Create(uid, name);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << uid << " " << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.File("etc")));
}

TEST(StateDirsTest, RemovesOnlyTheDirsOfPodsThatAreGone) {
  namespace fs = std::filesystem;
  TempDir dir;
  StateDirs dirs(dir.File("root"));
  // A missing root is nothing to sweep.
  EXPECT_TRUE(dirs.Sweep({}, fs::file_time_type::clock::now()).ok());
  for (const auto& [uid, name] : std::vector<std::pair<std::string, std::string>>{
           {"uid-1", "main"}, {"uid-1", "side"}, {"uid-2", "main"}, {"uid-3", "main"}}) {
    ASSERT_TRUE(dirs.Create(uid, name).ok());
  }
  testing::WriteFile(dir.File("root/uid-3_main/state/accelpool-cuda.region"),
                     "x");                            // the library's files
  fs::create_directories(dir.File("root/not-ours"));  // entries we did not make
  fs::create_directories(dir.File("root/uid-4_Not_A_Label"));
  testing::WriteFile(dir.File("root/uid-5_file"), "x");
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const fs::directory_entry& e : fs::directory_iterator(dir.File("root"))) {
    fs::last_write_time(e.path(), old);
  }
  ASSERT_TRUE(dirs.Create("uid-6", "main").ok());  // made just now
  auto names = [&] {
    std::set<std::string> out;
    for (const fs::directory_entry& e : fs::directory_iterator(dir.File("root"))) {
      out.insert(e.path().filename().string());
    }
    return out;
  };

  size_t removed = 0;
  ASSERT_TRUE(dirs.RemovePod("uid-1", &removed).ok());
  EXPECT_EQ(removed, 2u);
  ASSERT_TRUE(dirs.Remove("uid-2", "main").ok());
  ASSERT_TRUE(dirs.Remove("uid-2", "main").ok());  // already gone: fine
  // uid-3 is live; uid-6's dir is newer than the list; the rest is not ours.
  const auto listed = fs::file_time_type::clock::now() - std::chrono::minutes(1);
  ASSERT_TRUE(dirs.Sweep({"uid-3"}, listed, &removed).ok());
  EXPECT_EQ(removed, 0u);
  EXPECT_EQ(names(), (std::set<std::string>{"uid-3_main", "uid-6_main", "not-ours",
                                            "uid-4_Not_A_Label", "uid-5_file"}));
  ASSERT_TRUE(dirs.Sweep({}, listed, &removed).ok());
  EXPECT_EQ(removed, 1u);
  EXPECT_EQ(names(),
            (std::set<std::string>{"uid-6_main", "not-ours", "uid-4_Not_A_Label", "uid-5_file"}));
  // A root whose dirs someone else makes is left alone.
  StateDirs foreign(dir.File("root"), /*create=*/false);
  ASSERT_TRUE(foreign.RemovePod("uid-6", &removed).ok());
  EXPECT_EQ(removed, 0u);
  EXPECT_TRUE(fs::exists(dir.File("root/uid-6_main")));
}

TEST_F(AllocatorTest, AFailedAllocateRemovesTheStateDirsItMade) {
  api::Assignment a;
  a.node = "node-a";
  a.containers = {
      Ctr("first", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 1024, 100, false)}),
      Ctr("second", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2, 1024, 100, false)}),
      Ctr("bad", kGpu, core::Vendor::kNvidia, {Dev("GPU-elsewhere", 0, 0, 1024, 100, false)})};
  a.containers[2].devices[0].slot = "GPU-b::6";
  store_.Upsert(Pod("pod"), a, {});
  // "first" was allocated by an earlier call; kubelet then asks for all three
  // and the third fails.
  ASSERT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::1"}}).ok());
  auto r = allocator_->Allocate(kGpu, {{"GPU-a::1"}, {"GPU-a::2"}, {"GPU-b::6"}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir_.File("containers/uid-pod_first")));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("containers/uid-pod_second")));
  EXPECT_EQ(store_.PendingContainers(), 2u);
}

// kubelet turns a pod away when its Allocate fails and admits the next pod at
// once, before the first one's Failed status comes back (and its pod-resources
// List may still show the rejected pod): the store forgets the pod the failed
// call was surely for, so the next pod of the same shape is steered to its
// own slots and answered with its own grant, not the rejected pod's (whose
// devices the extender frees once that status comes).
TEST_F(AllocatorTest, APodWhoseAllocateFailedIsNoCallerOfTheNext) {
  Assign(Pod("rejected", "2026-11-30T01:00:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 7, 1024, 100, false)})});
  Assign(Pod("next", "2026-11-30T01:05:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 1024, 100, false)})});
  KubeletView view = {{"default/rejected", {{"c", {}}}}};
  auto kubelet = [&]() -> StatusOr<KubeletView> { return view; };
  // The rejected pod's call, matched for certain by kubelet's view, fails (its
  // state dir cannot be made).
  testing::WriteFile(dir_.File("not-a-dir"), "x");
  EnforcementOptions broken;
  broken.state_root = dir_.File("not-a-dir") + "/containers";
  Allocator failing("node-a", &state_, &store_, metrics_.get(), &reporter_, broken, Logger());
  failing.SetKubeletView(kubelet);
  allocator_->SetKubeletView(kubelet);
  auto failed = failing.Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(store_.PendingContainers(), 1u);
  // kubelet admits "next" and still lists the rejected pod beside it.
  view["default/next"]["c"] = {};
  std::vector<std::string> all;
  for (const std::string d : {"GPU-a", "GPU-b"}) {
    for (int s = 0; s < 10; ++s) all.push_back(api::SlotId(d, s));
  }
  EXPECT_EQ(allocator_->Preferred(kGpu, {{all, {}, 1}})[0], std::vector<std::string>{"GPU-b::2"});
  auto next = allocator_->Allocate(kGpu, {{"GPU-b::2"}});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ((*next)[0].pod.name, "next");
  EXPECT_EQ(store_.PendingContainers(), 0u);
  // Without kubelet's view, two pods of one shape make the caller a guess:
  // a failure then forgets neither.
  failing.SetKubeletView(nullptr);
  Assign(Pod("next2", "2026-11-30T01:06:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 3, 1024, 100, false)})});
  Assign(Pod("next3", "2026-11-30T01:07:00Z"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 4, 1024, 100, false)})});
  EXPECT_FALSE(failing.Allocate(kGpu, {{"GPU-a::3"}}).ok());
  EXPECT_EQ(store_.PendingContainers(), 2u);
}

TEST_F(AllocatorTest, NoAssignmentAsksForTheSchedulerProfileAndRefreshesOnce) {
  int refreshes = 0;
  Allocator a("node-a", &state_, &store_, nullptr, &reporter_, EnforcementOptions{}, Logger(), [&] {
    ++refreshes;
    return Status::Ok();
  });
  auto r = a.Allocate(kGpu, {{"GPU-a::3"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("accelpool scheduler profile"), std::string::npos);
  EXPECT_EQ(refreshes, 1);
}

// Kubelet waits on Allocate with no deadline while it admits the node's pods
// one at a time: a slow re-read of the pods fails this call after the budget
// (saying why) and goes on in the background for the next one.
TEST_F(AllocatorTest, ASlowReReadOfThePodsDoesNotHoldKubelet) {
  std::atomic<int> reads{0};
  std::atomic<bool> release{false};
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  // The re-read ends only when released (after the first call returned) or
  // after 30 s: a call that waited for it instead of its budget fails the
  // bound below.
  Allocator slow("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger(), [&] {
    for (int i = 0; i < 15000 && !release; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Assign(Pod("late"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 6)})});
    ++reads;  // after the pod is in the store
    return Status::Ok();
  });
  slow.SetRefreshBudget(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  auto first = slow.Allocate(kGpu, {{"GPU-a::6"}});
  const auto took = std::chrono::steady_clock::now() - start;
  release = true;
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(first.status().message().find("re-reading the node's pods took longer"),
            std::string::npos);
  // Kubelet does not call again for this pod: it fails the pod's admission.
  EXPECT_NE(first.status().message().find("UnexpectedAdmissionError"), std::string::npos)
      << first.status().message();
  EXPECT_EQ(first.status().message().find("kubelet retries"), std::string::npos)
      << first.status().message();
  // Generous over the 100 ms budget (a loaded machine or ThreadSanitizer
  // slows the call), and far below the 30 s the re-read would hold it.
  EXPECT_LT(took, std::chrono::milliseconds(5000));
  EXPECT_NE(registry_.Serialize().find(
                R"(accelpool_plugin_pod_rereads_total{scope="pending",result="timeout"} 1)"),
            std::string::npos)
      << registry_.Serialize();
  // The re-read finishes in the background; the next call (the pod created
  // again by its controller, here the same shape) then finds the pod at once.
  const auto released = std::chrono::steady_clock::now();
  while (reads.load() < 1 &&
         std::chrono::steady_clock::now() - released < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(reads.load(), 1);
  auto retry = slow.Allocate(kGpu, {{"GPU-a::6"}});
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ((*retry)[0].pod.name, "late");
  EXPECT_EQ(reads.load(), 1);
  EXPECT_EQ(registry_.Serialize().find(
                R"(accelpool_plugin_pod_rereads_total{scope="pending",result="ok"})"),
            std::string::npos)
      << "the store held the pod: no re-read";

  // A re-read that fails is counted apart; one that finds the caller as ok.
  Allocator offline("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger(),
                    [] { return UnavailableError("apiserver down"); });
  EXPECT_FALSE(offline.Allocate(kGpu, {{"GPU-a::5"}}).ok());
  Allocator lagging("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger(), [&] {
    Assign(Pod("later"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 5)})});
    return Status::Ok();
  });
  EXPECT_TRUE(lagging.Allocate(kGpu, {{"GPU-a::5"}}).ok());
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find(R"(accelpool_plugin_pod_rereads_total{scope="pending",result="failed"} 1)"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find(R"(accelpool_plugin_pod_rereads_total{scope="pending",result="ok"} 1)"),
            std::string::npos)
      << page;
}

// The Pending pods are re-read first; only when the caller is not among them
// (and that re-read worked) are all the pods that have not ended read: a
// running pod kubelet admits again, or one its node agent marked Running
// before the watch delivered it.
TEST_F(AllocatorTest, ACallerNotAmongThePendingPodsIsLookedForAmongTheRunningOnes) {
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  int narrow = 0;
  int wide = 0;
  Status narrow_status = Status::Ok();
  Allocator a("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger(), [&] {
    ++narrow;
    return narrow_status;
  });
  a.SetWideRefresh([&] {
    ++wide;
    Assign(Pod("running"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 6)})});
    return Status::Ok();
  });
  auto r = a.Allocate(kGpu, {{"GPU-a::6"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].pod.name, "running");
  EXPECT_EQ(narrow, 1);
  EXPECT_EQ(wide, 1);
  const std::string page = registry_.Serialize();
  EXPECT_NE(page.find(R"(accelpool_plugin_pod_rereads_total{scope="pending",result="ok"} 1)"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find(R"(accelpool_plugin_pod_rereads_total{scope="not_ended",result="ok"} 1)"),
            std::string::npos)
      << page;

  // Found among the Pending pods: nothing more is read.
  Allocator found("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger(), [&] {
    ++narrow;
    Assign(Pod("pending"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 5)})});
    return Status::Ok();
  });
  found.SetWideRefresh([&] {
    ++wide;
    return Status::Ok();
  });
  ASSERT_TRUE(found.Allocate(kGpu, {{"GPU-a::5"}}).ok());
  EXPECT_EQ(narrow, 2);
  EXPECT_EQ(wide, 1);

  // A narrow re-read that failed is not followed by a wider one (the
  // apiserver did not answer); the call fails as before.
  narrow_status = UnavailableError("apiserver down");
  EXPECT_FALSE(a.Allocate(kGpu, {{"GPU-a::4"}}).ok());
  EXPECT_EQ(narrow, 3);
  EXPECT_EQ(wide, 1);

  // GetPreferredAllocation looks the same way.
  narrow_status = Status::Ok();
  wide = 0;
  Allocator pref("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger(),
                 [] { return Status::Ok(); });
  pref.SetWideRefresh([&] {
    ++wide;
    Assign(Pod("running-2"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3)})});
    return Status::Ok();
  });
  PreferredRequest req;
  for (const char* id : {"GPU-a::3", "GPU-b::3", "GPU-b::4"}) req.available.push_back(id);
  req.size = 1;
  auto preferred = pref.Preferred(kGpu, {req});
  ASSERT_EQ(preferred.size(), 1u);
  EXPECT_EQ(preferred[0], std::vector<std::string>{"GPU-b::3"});
  EXPECT_EQ(wide, 1);
}

// A re-read of the pods that began before a call lists the pods as they were
// then: a pod bound meanwhile is not in it. A call that misses its pod while
// such a re-read runs (left over from a slow call before it) waits for it to
// end and reads again, instead of taking its answer and failing the pod's
// admission.
TEST_F(AllocatorTest, ACallDoesNotTakeTheAnswerOfAReReadBegunBeforeIt) {
  std::atomic<int> reads{0};
  std::atomic<int> began{0};
  std::atomic<bool> y_bound{false};
  EnforcementOptions e;
  e.state_root = dir_.File("containers");
  Allocator a("node-a", &state_, &store_, metrics_.get(), &reporter_, e, Logger(), [&] {
    const bool with_y = y_bound.load();  // the list is read when the re-read begins
    ++began;
    // Long, so that the second call still comes while the first re-read runs
    // on a loaded machine or under ThreadSanitizer.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    Assign(Pod("x"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 6)})});
    if (with_y) {
      Assign(Pod("y"), {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2)})});
    }
    ++reads;
    return Status::Ok();
  });
  // The second call waits for the first re-read and then its own (2 s):
  // well within this budget.
  a.SetRefreshBudget(std::chrono::seconds(10));
  StatusOr<std::vector<ContainerAnswer>> first = InternalError("not called"),
                                         second = InternalError("not called");
  std::thread ta([&] { first = a.Allocate(kGpu, {{"GPU-a::6"}}); });
  const auto started = std::chrono::steady_clock::now();
  while (began.load() < 1 &&
         std::chrono::steady_clock::now() - started < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(began.load(), 1);
  y_bound = true;  // y is bound after the first re-read listed the pods
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread tb([&] { second = a.Allocate(kGpu, {{"GPU-b::2"}}); });
  ta.join();
  tb.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)[0].pod.name, "x");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ((*second)[0].pod.name, "y");
  EXPECT_EQ(reads.load(), 2);
}

// The assigned device broke after the bind: kubelet leaves its slots out and
// picks another device's, but the container would still be given the broken
// one. It does not start; its controller creates it again elsewhere.
TEST_F(AllocatorTest, AnAssignedDeviceThatTurnedUnhealthyIsNotHandedOut) {
  Assign(Pod("p"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 2048, 100, false)})});
  testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory(false));
  auto invs = driver_->Discover();
  ASSERT_TRUE(invs.ok());
  state_.Reset(*invs, {driver_.get(), driver_.get()});
  auto r = allocator_->Allocate(kGpu, {{"GPU-a::7"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("GPU-b, which is unhealthy now; delete the pod"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(store_.PendingContainers(), 1u);  // nothing booked
}

// A failure of a call whose pod was a guess among pods of one shape marks no
// pod Failed (the plugin would stop waiting for it, and it may be another
// pod, which still waits): only the Event, which says it is a guess. A call
// surely the pod's marks it.
TEST_F(AllocatorTest, AFailureOfAGuessedCallerMarksNoPodFailed) {
  Assign(Pod("p"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 2048, 100, false)})});
  Assign(Pod("q", "2026-11-30T03:00:00Z"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 2048, 100, false)})});
  testing::WriteFile(dir_.File("inv.json"), testing::MixedInventory(false));
  auto invs = driver_->Discover();
  ASSERT_TRUE(invs.ok());
  state_.Reset(*invs, {driver_.get(), driver_.get()});
  auto guessed = allocator_->Allocate(kGpu, {{"GPU-b::2"}});
  ASSERT_FALSE(guessed.ok());
  auto entries = reporter_.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_FALSE(entries[0].ok);
  EXPECT_EQ(entries[0].pod, "default/p");
  EXPECT_EQ(entries[0].resource, "") << "no Failed state for a guess";
  EXPECT_NE(entries[0].message.find("did not name its pod for sure"), std::string::npos)
      << entries[0].message;
  EXPECT_EQ(store_.PendingContainers(), 2u);

  // With q gone, the ids name p alone: p is surely the caller.
  store_.Remove("uid-q");
  auto sure = allocator_->Allocate(kGpu, {{"GPU-b::2"}});
  ASSERT_FALSE(sure.ok());
  entries = reporter_.entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].pod, "default/p");
  EXPECT_EQ(entries[1].resource, kGpu);
  EXPECT_NE(entries[1].message.find("unhealthy now"), std::string::npos) << entries[1].message;
}

TEST_F(AllocatorTest, UsageMetricsSumAssignedShares) {
  Assign(Pod("p1"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  Assign(Pod("p2"),
         {Ctr("c", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 2, 1024, 100, false)})});
  allocator_->RefreshUsageMetrics();
  const std::string page = registry_.Serialize();
  EXPECT_NE(
      page.find(R"(accelpool_plugin_allocated_memory_mib{vendor="nvidia",device="GPU-a"} 5120)"),
      std::string::npos)
      << page;
  EXPECT_NE(page.find(R"(accelpool_plugin_allocated_compute{vendor="nvidia",device="GPU-a"} 350)"),
            std::string::npos);
  EXPECT_NE(page.find(R"(accelpool_plugin_pending_containers 2)"), std::string::npos);
}

TEST_F(AllocatorTest, CapacityMetricNamesNodeVendorModelAndMemory) {
  allocator_->RefreshUsageMetrics();
  const std::string page = registry_.Serialize();
  const core::Device* dev = state_.Get()->Find("GPU-a");
  ASSERT_NE(dev, nullptr);
  const std::string want =
      "accelpool_plugin_device_memory_mib{node=\"node-a\",vendor=\"nvidia\",model=\"" + dev->model +
      "\",device=\"GPU-a\"} " + std::to_string(dev->memory_mib);
  EXPECT_NE(page.find(want), std::string::npos) << page;
}

}  // namespace
}  // namespace accelpool::plugin

namespace accelpool::plugin {
namespace {

// A grant that names no memory and no compute share is a whole device: it
// gets no limits and no state dir, so it has no container usage series to
// report (one would say it holds 0 of a limit it does not have).
TEST_F(AllocatorTest, AGrantWithNoSharesNamedIsWholeEverywhere) {
  Assign(Pod("plain"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-b", 1, 1, 0, 0, false)})});
  auto r = allocator_->Allocate(kGpu, {{"GPU-b::1"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].spec.env.count("ACCELPOOL_CUDA_MEMORY_LIMIT_0"), 0u);
  allocator_->RefreshUsageMetrics();
  const std::string page = registry_.Serialize();
  EXPECT_EQ(
      page.find(R"(accelpool_plugin_container_memory_limit_mib{namespace="default",pod="plain")"),
      std::string::npos)
      << page;
  EXPECT_NE(page.find(R"(accelpool_plugin_allocated_compute{vendor="nvidia",device="GPU-b"} 1000)"),
            std::string::npos)
      << page;
}

TEST_F(AllocatorTest, ContainerUsageComesFromTheContainersAccountingRegion) {
  Assign(Pod("infer"),
         {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
  // Assigned, not yet allocated: no series.
  allocator_->RefreshUsageMetrics();
  EXPECT_EQ(registry_.Serialize().find("accelpool_plugin_container_memory_used_mib{"),
            std::string::npos);
  ASSERT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::1"}}).ok());
  // Allocated, no CUDA process yet: it holds nothing.
  allocator_->RefreshUsageMetrics();
  const std::string labels = R"({namespace="default",pod="infer",container="main",device="GPU-a"})";
  std::string page = registry_.Serialize();
  EXPECT_NE(page.find("accelpool_plugin_container_memory_used_mib" + labels + " 0"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("accelpool_plugin_container_memory_limit_mib" + labels + " 4096"),
            std::string::npos);
  // Two processes of the container hold 1.5 GiB on its device (ordinal 0).
  std::string bytes(sizeof(cuda::RegionLayout), '\0');
  auto* r = reinterpret_cast<cuda::RegionLayout*>(bytes.data());
  r->magic = cuda::kRegionMagic;
  r->version = cuda::kRegionLayoutVersion;
  r->size = sizeof(cuda::RegionLayout);
  r->slots[0] = cuda::SlotRecord{10, 0, 1, {1024ULL << 20}};
  r->slots[1] = cuda::SlotRecord{11, 0, 1, {512ULL << 20}};
  std::ofstream(dir_.File("containers/uid-infer_main/state/accelpool-cuda.region"),
                std::ios::binary)
      << bytes;
  allocator_->RefreshUsageMetrics();
  page = registry_.Serialize();
  EXPECT_NE(page.find("accelpool_plugin_container_memory_used_mib" + labels + " 1536"),
            std::string::npos)
      << page;
  EXPECT_NE(
      page.find(
          R"(accelpool_plugin_container_processes{namespace="default",pod="infer",container="main"} 2)"),
      std::string::npos);
  // Overwritten by the container: counted as unreadable, once per refresh.
  std::ofstream(dir_.File("containers/uid-infer_main/state/accelpool-cuda.region"),
                std::ios::binary | std::ios::trunc)
      << "junk";
  allocator_->RefreshUsageMetrics();
  page = registry_.Serialize();
  EXPECT_NE(page.find(R"(accelpool_plugin_container_usage_read_errors_total{reason="layout"} 1)"),
            std::string::npos)
      << page;
  EXPECT_EQ(page.find("accelpool_plugin_container_memory_used_mib" + labels), std::string::npos);
  // The pod is gone: its series leave.
  std::ofstream(dir_.File("containers/uid-infer_main/state/accelpool-cuda.region"),
                std::ios::binary | std::ios::trunc)
      << bytes;
  allocator_->RefreshUsageMetrics();
  EXPECT_NE(registry_.Serialize().find("accelpool_plugin_container_memory_used_mib" + labels),
            std::string::npos);
  store_.Remove("uid-infer");
  allocator_->RefreshUsageMetrics();
  page = registry_.Serialize();
  EXPECT_EQ(page.find(R"(pod="infer")"), std::string::npos) << page;
}

// A container whose accounting region cannot be read is remembered (to warn
// once) only while it is allocated: with pods coming and going, the set must
// not grow with those that went while unreadable.
TEST_F(AllocatorTest, UnreadableRegionsOfContainersThatWentAreForgotten) {
  for (int i = 0; i < 3; ++i) {
    const std::string name = "churn-" + std::to_string(i);
    Assign(Pod(name),
           {Ctr("main", kGpu, core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 4096, 250, false)})});
    ASSERT_TRUE(allocator_->Allocate(kGpu, {{"GPU-a::1"}}).ok());
    std::ofstream(dir_.File("containers/uid-" + name + "_main/state/accelpool-cuda.region"),
                  std::ios::binary | std::ios::trunc)
        << "junk";
    allocator_->RefreshUsageMetrics();
    EXPECT_EQ(allocator_->UnreadUsageContainers(), 1u);
    store_.Remove("uid-" + name);
  }
  allocator_->RefreshUsageMetrics();
  EXPECT_EQ(allocator_->UnreadUsageContainers(), 0u);
}

}  // namespace
}  // namespace accelpool::plugin
