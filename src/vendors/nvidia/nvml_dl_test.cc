// The NVML dlopen binding run against a fake libnvidia-ml (testlibs/
// fake_nvidia_ml.cc, an HGX H200 board) through NvidiaDriver, the way the device
// plugin runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>

#include "vendors/nvidia/nvidia_driver.h"
#include "vendors/nvidia/nvml_library.h"
#include "vendors/test_util.h"

namespace accelpool::vendors::nvidia {
namespace {

using vendors::testing::ExpectDiscoveryFails;
using vendors::testing::FakeDevRoot;
using vendors::testing::FakeHandle;
using vendors::testing::FakeSysfs;
using vendors::testing::HealthRecorder;

NvidiaOptions Options(const std::string& device_root = "") {
  NvidiaOptions o;
  o.node = "h200-node";
  o.recovery_quiet = std::chrono::milliseconds(50);
  o.event_wait = std::chrono::milliseconds(5);
  o.device_root = device_root;
  return o;
}

StatusOr<std::unique_ptr<NvidiaDriver>> Driver(const NvidiaOptions& o,
                                               const std::string& sysfs = "/nonexistent") {
  StatusOr<NvmlLibraryPtr> lib = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML}, sysfs);
  if (!lib.ok()) {
    return lib.status();
  }
  return std::make_unique<NvidiaDriver>(std::move(lib).value(), o);
}

// `events` are two: GPU `id` unhealthy for a reason that names `why`, then
// healthy again.
void ExpectDownThenUp(const std::vector<HealthEvent>& events, const std::string& id,
                      const std::string& why) {
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, id);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find(why), std::string::npos) << events[0].reason;
  EXPECT_EQ(events[1].device_id, id);
  EXPECT_TRUE(events[1].healthy);
}

TEST(NvmlBindingTest, MapsAnHgxH200Board) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kNvidia, 8);
  auto driver = Driver(Options(dev.root()));
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  ASSERT_EQ(invs->size(), 1u);
  const core::NodeInventory& inv = invs->front();
  EXPECT_EQ(inv.vendor, core::Vendor::kNvidia);
  EXPECT_EQ(inv.node, "h200-node");
  EXPECT_EQ(inv.topology.kind, "nvidia-hgx-8");  // every GPU's links end on NVSwitches
  ASSERT_EQ(inv.devices.size(), 8u);
  const core::Device& d0 = inv.devices[0];
  EXPECT_EQ(d0.id, "GPU-9c1e5b7a-2d4f-4a8e-b6c3-1f0e8d2a4000");
  EXPECT_EQ(d0.model, "H200");
  EXPECT_EQ(d0.memory_mib, 143771);
  EXPECT_EQ(d0.pci_bus, "00000000:1B:00.0");
  EXPECT_EQ(inv.devices[7].pci_bus, "00000000:DF:00.0");
  EXPECT_EQ(d0.max_shares, 10);
  std::vector<int32_t> numa;
  for (const core::Device& d : inv.devices) {
    numa.push_back(d.numa);
  }
  EXPECT_EQ(numa, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  // NV18 to every GPU through the switches, plus the PCIe level: NODE inside a
  // socket, SYS across.
  EXPECT_EQ(inv.LinkScore(0, 1), 20 + 1800);
  EXPECT_EQ(inv.LinkScore(0, 4), 10 + 1800);
  EXPECT_EQ(inv.LinkScore(7, 6), 20 + 1800);

  auto spec = (*driver)->BuildContainerSpec({{inv.devices[5], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("NVIDIA_VISIBLE_DEVICES"), inv.devices[5].id);
  bool found = false;
  for (const DeviceNode& n : spec->devices) {
    found = found || n.host_path == "/dev/nvidia5";
  }
  EXPECT_TRUE(found);
}

TEST(NvmlBindingTest, NumaFromSysfsWhenTheDriverCannotSay) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto numa = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_numa"));
  ASSERT_NE(numa, nullptr);
  numa(0);
  FakeSysfs sysfs;
  sysfs.Numa("0000:c3:00.0", 3);  // GPU 5; sysfs spells the domain with 4 digits
  auto driver = Driver(Options(), sysfs.root());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  numa(1);
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_EQ(invs->front().devices[5].numa, 3);
  EXPECT_EQ(invs->front().devices[4].numa, 1);  // neither says: the HGX profile's default
}

TEST(NvmlBindingTest, XidHealthIsTwoWay) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const std::string faulty = invs->front().devices[3].id;
  HealthRecorder health(**driver);
  fake.Configure(8, -1, 3, 0);  // GPU 3 falls off the bus
  health.WaitFor(1);
  fake.Configure(8, -1, -1, 0);
  health.WaitFor(2);
  const std::vector<HealthEvent> events = health.Stop();
  ExpectDownThenUp(events, faulty, "XID 79");
}

// A GPU whose driver refuses event registration (NOT_SUPPORTED) is left out;
// the others are still watched (one such GPU used to leave all unwatched).
TEST(NvmlBindingTest, AGpuWithoutEventSupportLeavesTheOthersWatched) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto unsupported =
      reinterpret_cast<void (*)(unsigned)>(fake.Symbol("accelpool_fake_nvml_events_unsupported"));
  ASSERT_NE(unsupported, nullptr);
  unsupported(0b10);  // GPU 1
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  HealthRecorder health(**driver);
  fake.Configure(8, -1, 3, 0);  // GPU 3 falls off the bus
  const bool seen = health.WaitFor(1);
  fake.Configure(8, -1, -1, 0);
  const std::vector<HealthEvent> events = health.Stop();
  unsupported(0);
  ASSERT_TRUE(seen);
  EXPECT_EQ(events[0].device_id, invs->front().devices[3].id);
  EXPECT_FALSE(events[0].healthy);
}

// A GPU whose event registration fails with an error other than "not
// supported" (NVML_ERROR_UNKNOWN) cannot be monitored: it is unhealthy, and
// the other GPUs are still watched for XIDs (it used to end the watch, and
// with it XID handling and recovery for the whole node).
TEST(NvmlBindingTest, AGpuWhoseEventRegistrationFailsIsUnhealthyAndTheOthersWatched) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto failing =
      reinterpret_cast<void (*)(unsigned, int)>(fake.Symbol("accelpool_fake_nvml_events_error"));
  ASSERT_NE(failing, nullptr);
  failing(0b10, 999);  // GPU 1: NVML_ERROR_UNKNOWN
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  HealthRecorder health(**driver);
  const bool unwatched = health.WaitFor(1);
  fake.Configure(8, -1, 3, 0);  // GPU 3 falls off the bus
  const bool seen = health.WaitFor(2);
  fake.Configure(8, -1, -1, 0);
  const bool gpu3_back = health.WaitForEvent(invs->front().devices[3].id, true);
  // Longer than recovery_quiet: the GPU that cannot be watched stays
  // unhealthy while its registration, tried again, fails.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const size_t before = health.Count();
  failing(0, 0);  // registers at the next try, then recovers
  const bool back = health.WaitFor(before + 1);
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_TRUE(unwatched);
  ASSERT_TRUE(seen);
  ASSERT_TRUE(gpu3_back);
  ASSERT_TRUE(back);
  EXPECT_EQ(events[0].device_id, invs->front().devices[1].id);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("registration failed"), std::string::npos) << events[0].reason;
  EXPECT_EQ(events[1].device_id, invs->front().devices[3].id);
  EXPECT_FALSE(events[1].healthy);
  for (size_t k = 0; k < before; ++k) {
    EXPECT_FALSE(events[k].device_id == invs->front().devices[1].id && events[k].healthy)
        << events[k].reason;
  }
  EXPECT_EQ(events.back().device_id, invs->front().devices[1].id);
  EXPECT_TRUE(events.back().healthy);
}

// When the event set itself cannot be made, the watch polls instead of
// ending: a GPU that discovery found failing still recovers.
TEST(NvmlBindingTest, AHealthWatchWithoutAnEventSetStillRecoversGpus) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto set_error =
      reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_event_set_error"));
  auto xid = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_nvml_xid"));
  ASSERT_NE(set_error, nullptr);
  ASSERT_NE(xid, nullptr);
  set_error(999);
  xid(79, 2);  // GPU 2 has rows pending remapping at discovery
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_FALSE(invs->front().devices[2].healthy);
  HealthRecorder health(**driver);
  const bool unhealthy = health.WaitFor(1);
  xid(79, -1);  // reset
  const bool recovered = health.WaitFor(2);
  const std::vector<HealthEvent> events = health.Stop();
  set_error(0);
  ASSERT_TRUE(unhealthy);
  ASSERT_TRUE(recovered);
  EXPECT_EQ(events[0].device_id, invs->front().devices[2].id);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_EQ(events[1].device_id, invs->front().devices[2].id);
  EXPECT_TRUE(events[1].healthy);
}

// The device plugin starts a backend's health watch again after its device
// set changed. Each watch registers the GPUs on a fresh event set (the fake
// refuses a GPU registered twice on one set), and the later watch still sees
// XIDs.
TEST(NvmlBindingTest, AHealthWatchStartedAgainRegistersOnAFreshEventSet) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  for (int round = 0; round < 6; ++round) {  // more rounds than the fake has event sets
    SCOPED_TRACE(round);
    HealthRecorder health(**driver);
    fake.Configure(8, -1, 2, 0);  // GPU 2 falls off the bus
    ASSERT_TRUE(health.WaitFor(1));
    fake.Configure(8, -1, -1, 0);
    const std::vector<HealthEvent> events = health.Stop();
    ASSERT_GE(events.size(), 1u);
    EXPECT_EQ(events[0].device_id, invs->front().devices[2].id);
    EXPECT_FALSE(events[0].healthy);
  }
}

// On a coherent platform (Grace Hopper) nvmlDeviceGetNumaNodeId names the
// GPU's own memory node, which holds no CPUs; locality is the nearest CPU
// memory node (nvmlDeviceGetMemoryAffinity, else sysfs).
TEST(NvmlBindingTest, NumaIsTheNearestCpuNodeNotTheGpuMemoryNode) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto numa = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_numa"));
  ASSERT_NE(numa, nullptr);
  numa(2);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  numa(1);
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  std::vector<int32_t> got;
  for (const core::Device& d : invs->front().devices) {
    got.push_back(d.numa);
  }
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

// Discovery reads each GPU once in full; its health query (memory info and
// row remapping) does not read the GPU again.
TEST(NvmlBindingTest, DiscoveryReadsEachGpuOnce) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto calls = reinterpret_cast<int (*)()>(fake.Symbol("accelpool_fake_nvml_name_calls"));
  ASSERT_NE(calls, nullptr);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  calls();
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_EQ(calls(), 8);
}

// nvmlEventSetWait_v2 answering NVML_ERROR_GPU_IS_LOST means a GPU fell off
// the bus without naming it: the GPU whose health query fails (here with
// NVML_ERROR_GPU_IS_LOST) is unhealthy until it answers again, instead of a
// logged error; the GPUs that answer stay in service.
TEST(NvmlBindingTest, GpuLostWhileWaitingMarksTheGpuThatDoesNotAnswer) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto lost = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_wait_lost"));
  ASSERT_NE(lost, nullptr);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const std::string gone = invs->front().devices[5].id;
  HealthRecorder health(**driver);
  fake.Configure(8, 5, -1, 0);  // GPU 5's queries answer "GPU is lost"
  lost(1);
  health.WaitFor(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(health.Count(), 1u) << "only the GPU that does not answer";
  fake.Configure(8, -1, -1, 0);
  lost(0);
  health.WaitFor(2);
  const std::vector<HealthEvent> events = health.Stop();
  ExpectDownThenUp(events, gone, "GPU is lost");
}

// A driver without nvmlDeviceGetPciInfo_v3 (or _v2) has only the first
// nvmlDeviceGetPciInfo, whose struct carries the bus id in its first 16
// bytes; the newer struct's busId field is past that struct's end.
TEST(NvmlBindingTest, PciBusFromAnOldDriversFirstPciInfoCall) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML_V1);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  StatusOr<NvmlLibraryPtr> lib = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML_V1}, "/nonexistent");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  NvidiaDriver driver(std::move(lib).value(), Options());
  auto invs = driver.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_EQ(invs->front().devices[0].pci_bus, "0000:1B:00.0");
  EXPECT_EQ(invs->front().devices[7].pci_bus, "0000:DF:00.0");
}

// The NVLink domain of a multi-node NVLink tray (GB200 NVL72) becomes the
// node's super node, as "<cluster uuid>.<clique>" (the value of NVIDIA's
// nvidia.com/gpu.clique label); a board that registers with a zero cluster
// UUID (single-node NVSwitch), a registration not finished or failed, GPUs
// that disagree, and a driver without the query give none.
TEST(NvmlBindingTest, TheNvlinkDomainOfAMultiNodeNvlinkTrayIsTheSuperNode) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(4, -1, -1, 0);
  auto fabric =
      reinterpret_cast<void (*)(int, int, int, int)>(fake.Symbol("accelpool_fake_nvml_fabric"));
  auto v1_only = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_fabric_v1_only"));
  ASSERT_NE(fabric, nullptr);
  ASSERT_NE(v1_only, nullptr);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  auto super_node = [&]() -> std::string {
    auto invs = (*driver)->Discover();
    EXPECT_TRUE(invs.ok()) << invs.status().ToString();
    return invs.ok() && !invs->empty() ? invs->front().topology.super_node : "<none>";
  };
  EXPECT_EQ(super_node(), "");  // completed, zero cluster UUID: the node is the domain
  fabric(3, 0, 7, -1);
  EXPECT_EQ(super_node(), "00112233-4455-6677-8899-aabbccddeeff.7");
  v1_only(1);  // the V call refuses struct v2: the first call answers
  EXPECT_EQ(super_node(), "00112233-4455-6677-8899-aabbccddeeff.7");
  v1_only(0);
  fabric(3, 0, 7, 2);  // GPU 2 in another clique
  EXPECT_EQ(super_node(), "");
  fabric(2, 0, 7, -1);  // registration in progress
  EXPECT_EQ(super_node(), "");
  fabric(1, 0, 7, -1);  // not started
  EXPECT_EQ(super_node(), "");
  fabric(3, 999, 7, -1);  // completed with an error
  EXPECT_EQ(super_node(), "");
  fabric(0, 0, 7, -1);  // not supported
  EXPECT_EQ(super_node(), "");
  fabric(3, 0, 7, -1);
  EXPECT_EQ(super_node(), "00112233-4455-6677-8899-aabbccddeeff.7");  // and back
  fabric(3, 0, -1, -1);

  FakeHandle old(ACCELPOOL_FAKE_NVIDIA_ML_V1);  // a driver without the query
  ASSERT_TRUE(old.ok());
  old.Configure(4, -1, -1, 0);
  StatusOr<NvmlLibraryPtr> lib = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML_V1}, "/nonexistent");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  NvidiaDriver old_driver(std::move(lib).value(), Options());
  auto invs = old_driver.Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  EXPECT_EQ(invs->front().topology.super_node, "");
}

// Memory in use per whole GPU: nvmlDeviceGetMemoryInfo_v2's `used`, without
// the driver's reserve; from an old driver without it, the first call's,
// which includes it. A GPU in MIG mode reports none (its memory is its
// instances'), and a GPU that fails its query is left out.
TEST(NvmlBindingTest, MemoryInUseIsWhatProcessesHoldPerWholeGpu) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(3, -1, -1, 0);
  auto used = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_nvml_used"));
  auto mig = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_mig"));
  ASSERT_NE(used, nullptr);
  ASSERT_NE(mig, nullptr);
  used(0, 20480);
  used(1, 0);
  mig(2);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  EXPECT_EQ((*driver)->MemoryInUse().status().code(), StatusCode::kFailedPrecondition);
  auto invs = (*driver)->Discover();
  mig(-1);
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  StatusOr<std::map<std::string, int64_t>> in_use = (*driver)->MemoryInUse();
  ASSERT_TRUE(in_use.ok()) << in_use.status().ToString();
  const std::map<std::string, int64_t> want = {{invs->front().devices[0].id, 20480},
                                               {invs->front().devices[1].id, 0}};
  EXPECT_EQ(*in_use, want);
  // A GPU whose query fails is left out; the others still answer.
  fake.Configure(3, 0, -1, 0);
  in_use = (*driver)->MemoryInUse();
  ASSERT_TRUE(in_use.ok()) << in_use.status().ToString();
  EXPECT_EQ(in_use->count(invs->front().devices[0].id), 0u);
  EXPECT_EQ(in_use->size(), 1u);
  used(0, 0);

  FakeHandle old(ACCELPOOL_FAKE_NVIDIA_ML_V1);
  ASSERT_TRUE(old.ok());
  old.Configure(2, -1, -1, 0);
  auto old_used = reinterpret_cast<void (*)(int, int)>(old.Symbol("accelpool_fake_nvml_used"));
  ASSERT_NE(old_used, nullptr);
  old_used(1, 1024);
  StatusOr<NvmlLibraryPtr> lib = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML_V1}, "/nonexistent");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  NvidiaDriver v1(std::move(lib).value(), Options());
  auto v1_invs = v1.Discover();
  ASSERT_TRUE(v1_invs.ok()) << v1_invs.status().ToString();
  in_use = v1.MemoryInUse();
  old_used(1, 0);
  ASSERT_TRUE(in_use.ok()) << in_use.status().ToString();
  const std::map<std::string, int64_t> with_reserve = {{v1_invs->front().devices[0].id, 512},
                                                       {v1_invs->front().devices[1].id, 1536}};
  EXPECT_EQ(*in_use, with_reserve);
}

// The processes holding memory on each whole GPU, from the compute and the
// graphics lists: a process in both is listed once with the larger figure,
// NVML_VALUE_NOT_AVAILABLE reads as -1, a list longer than the first buffer
// is read whole (the call answers NVML_ERROR_INSUFFICIENT_SIZE first), a GPU
// in MIG mode is not asked, and an old driver's first calls (16-byte
// entries) give the same answer.
TEST(NvmlBindingTest, MemoryHoldersListEveryProcessOfEveryWholeGpu) {
  using ProcessFn = void (*)(int, unsigned, int, int);
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(3, -1, -1, 0);
  auto process = reinterpret_cast<ProcessFn>(fake.Symbol("accelpool_fake_nvml_process"));
  auto mig = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_mig"));
  ASSERT_NE(process, nullptr);
  ASSERT_NE(mig, nullptr);
  process(-1, 0, 0, 0);
  process(0, 4242, 8192, 0);
  process(0, 4242, 300, 1);  // the same process's graphics context
  process(0, 17, 310, 1);
  process(0, 5001, -1, 0);
  for (unsigned k = 0; k < 10; ++k) process(1, 7000 + k, 100, 0);
  process(2, 99, 1024, 0);
  mig(2);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  EXPECT_EQ((*driver)->MemoryHolders().status().code(), StatusCode::kFailedPrecondition);
  auto invs = (*driver)->Discover();
  mig(-1);
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  auto holders = (*driver)->MemoryHolders();
  ASSERT_TRUE(holders.ok()) << holders.status().ToString();
  const std::string gpu0 = invs->front().devices[0].id;
  const std::string gpu1 = invs->front().devices[1].id;
  ASSERT_EQ(holders->size(), 2u);  // GPU 2 is in MIG mode
  const std::vector<ProcessMemory> want0 = {{17, 310}, {4242, 8192}, {5001, -1}};
  EXPECT_EQ(holders->at(gpu0), want0);
  ASSERT_EQ(holders->at(gpu1).size(), 10u);
  EXPECT_EQ(holders->at(gpu1).front(), (ProcessMemory{7000, 100}));
  EXPECT_EQ(holders->at(gpu1).back(), (ProcessMemory{7009, 100}));
  // A GPU whose query fails is left out; the others still answer.
  fake.Configure(3, 0, -1, 0);
  holders = (*driver)->MemoryHolders();
  ASSERT_TRUE(holders.ok()) << holders.status().ToString();
  EXPECT_EQ(holders->count(gpu0), 0u);
  EXPECT_EQ(holders->count(gpu1), 1u);
  process(-1, 0, 0, 0);

  FakeHandle old(ACCELPOOL_FAKE_NVIDIA_ML_V1);
  ASSERT_TRUE(old.ok());
  old.Configure(2, -1, -1, 0);
  auto old_process = reinterpret_cast<ProcessFn>(old.Symbol("accelpool_fake_nvml_process"));
  ASSERT_NE(old_process, nullptr);
  old_process(-1, 0, 0, 0);
  old_process(1, 31337, 2048, 0);
  old_process(1, 31338, -1, 1);
  StatusOr<NvmlLibraryPtr> lib = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML_V1}, "/nonexistent");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  NvidiaDriver v1(std::move(lib).value(), Options());
  auto v1_invs = v1.Discover();
  ASSERT_TRUE(v1_invs.ok()) << v1_invs.status().ToString();
  holders = v1.MemoryHolders();
  old_process(-1, 0, 0, 0);
  ASSERT_TRUE(holders.ok()) << holders.status().ToString();
  const std::vector<ProcessMemory> want_old = {{31337, 2048}, {31338, -1}};
  EXPECT_EQ(holders->at(v1_invs->front().devices[1].id), want_old);
  EXPECT_TRUE(holders->at(v1_invs->front().devices[0].id).empty());
}

// XID 48 (double-bit ECC) on a Hopper GPU marks rows for remapping, which
// takes effect at the next GPU reset: the GPU keeps answering queries, but
// must stay unhealthy until nvmlDeviceGetRemappedRows says nothing is pending.
TEST(NvmlBindingTest, GpuWithRowsPendingRemapStaysUnhealthyUntilReset) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto xid = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_nvml_xid"));
  ASSERT_NE(xid, nullptr);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  HealthRecorder health(**driver);
  xid(48, 3);
  fake.Configure(8, -1, 3, 0);  // GPU 3: XID 48, rows pending remapping
  health.WaitFor(1);
  fake.Configure(8, -1, -1, 0);  // no more XIDs; the GPU answers every query
  EXPECT_FALSE(health.WaitFor(2, std::chrono::milliseconds(400)))
      << "a GPU waiting for a reset was reported healthy";
  xid(79, -1);  // the GPU was reset: nothing pending
  health.WaitFor(2);
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("XID 48"), std::string::npos) << events[0].reason;
  EXPECT_TRUE(events[1].healthy);
  EXPECT_EQ(events[1].device_id, invs->front().devices[3].id);
}

// The page-retirement query through the binding: NOT_SUPPORTED (Ampere and
// newer) is kUnimplemented; before Ampere it says whether a page is pending.
// A GPU that reported XID 48 with a page pending stays unhealthy until the
// page is no longer pending (a driver reload).
TEST(NvmlBindingTest, AGpuWithAPagePendingRetirementAfterXid48StaysUnhealthy) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);
  auto retire = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_retire"));
  auto xid = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_nvml_xid"));
  ASSERT_NE(retire, nullptr);
  ASSERT_NE(xid, nullptr);
  StatusOr<NvmlLibraryPtr> lib = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML}, "/nonexistent");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  ASSERT_TRUE((*lib)->Init().ok());
  EXPECT_EQ((*lib)->RetiredPagesPending(0).status().code(), StatusCode::kUnimplemented);
  retire(3);
  StatusOr<bool> three = (*lib)->RetiredPagesPending(3);
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_TRUE(*three);
  StatusOr<bool> two = (*lib)->RetiredPagesPending(2);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_FALSE(*two);

  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  HealthRecorder health(**driver);
  xid(48, -1);
  fake.Configure(8, -1, 3, 0);  // GPU 3: XID 48
  health.WaitFor(1);
  fake.Configure(8, -1, -1, 0);  // no more XIDs; the GPU answers every query
  const bool held = !health.WaitFor(2, std::chrono::milliseconds(400));
  retire(-1);  // the driver was loaded again: nothing pending
  const bool back = health.WaitFor(2);
  const std::vector<HealthEvent> events = health.Stop();
  xid(79, -1);
  retire(-2);
  EXPECT_TRUE(held) << "a GPU with a page pending retirement was reported healthy";
  ASSERT_TRUE(back);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("XID 48"), std::string::npos) << events[0].reason;
  EXPECT_EQ(events[1].device_id, invs->front().devices[3].id);
  EXPECT_TRUE(events[1].healthy);
}

// A plugin that starts after the XID (a restart, an upgrade) on a GPU whose
// rows still wait for remapping: discovery offers the GPU unhealthy, and it
// recovers once the reset leaves nothing pending.
TEST(NvmlBindingTest, GpuWithRowsPendingRemapAtDiscoveryStartsUnhealthy) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 0);  // no XIDs
  auto xid = reinterpret_cast<void (*)(int, int)>(fake.Symbol("accelpool_fake_nvml_xid"));
  ASSERT_NE(xid, nullptr);
  xid(79, 3);  // GPU 3: rows pending remapping
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  auto invs = (*driver)->Discover();
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  for (size_t i = 0; i < invs->front().devices.size(); ++i) {
    EXPECT_EQ(invs->front().devices[i].healthy, i != 3) << i;
  }
  HealthRecorder health(**driver);
  ASSERT_TRUE(health.WaitFor(1));
  EXPECT_FALSE(health.WaitFor(2, std::chrono::milliseconds(300)))
      << "a GPU waiting for a reset was reported healthy";
  xid(79, -1);  // the GPU was reset: nothing pending
  ASSERT_TRUE(health.WaitFor(2));
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_id, invs->front().devices[3].id);
  EXPECT_FALSE(events[0].healthy);
  EXPECT_NE(events[0].reason.find("pending remapping"), std::string::npos) << events[0].reason;
  EXPECT_TRUE(events[1].healthy);
}

// A GPU in MIG mode is offered as its MIG devices: read through
// nvmlDeviceGetMigDeviceHandleByIndex (empty slots skipped), named by their
// profile, handed to a container with the parent's node and the capability
// nodes of their instances, and marked unhealthy with their GPU.
TEST(NvmlBindingTest, GpuInMigModeIsOfferedAsItsMigDevices) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(2, -1, -1, 0);
  auto mig = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_mig"));
  ASSERT_NE(mig, nullptr);
  mig(1);
  FakeDevRoot dev;
  dev.AddVendor(core::Vendor::kNvidia, 2);
  for (int cap : {21, 22, 30, 31}) dev.Add("/dev/nvidia-caps/nvidia-cap" + std::to_string(cap));
  NvidiaOptions o = Options(dev.root());
  o.mig_minors = dev.root() + "/mig-minors";
  std::ofstream(o.mig_minors) << "config 1\nmonitor 2\ngpu1/gi1/access 21\n"
                                 "gpu1/gi1/ci0/access 22\ngpu1/gi3/access 30\n"
                                 "gpu1/gi3/ci0/access 31\ngarbage\n";
  auto driver = Driver(o);
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  auto invs = (*driver)->Discover();
  mig(-1);
  ASSERT_TRUE(invs.ok()) << invs.status().ToString();
  const core::NodeInventory& inv = invs->front();
  ASSERT_EQ(inv.devices.size(), 5u);  // GPU 0 whole, GPU 1 as four MIG devices
  EXPECT_EQ(inv.devices[0].partition, "");
  EXPECT_EQ(inv.devices[0].max_shares, 10);
  // GPU instance 4's profile is 1g.18gb+me: named from NVML's profile, with
  // '+' as '.' as in NVIDIA's resource names.
  const std::vector<std::string> profiles = {"3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb.me"};
  for (size_t k = 0; k < 4; ++k) {
    const core::Device& d = inv.devices[k + 1];
    EXPECT_EQ(d.partition, profiles[k]) << k;
    EXPECT_EQ(d.id.rfind("MIG-", 0), 0u) << d.id;
    EXPECT_EQ(d.max_shares, 1);
    EXPECT_EQ(d.model, "H200");
    EXPECT_EQ(d.pci_bus, "00000000:43:00.0");  // the parent's
    EXPECT_EQ(d.index, static_cast<int32_t>(k + 1));
  }
  EXPECT_EQ(inv.devices[1].memory_mib, 71424);
  EXPECT_EQ(inv.devices[1].compute_units, 60);
  EXPECT_NE(inv.devices[3].id, inv.devices[4].id);
  // Two MIG devices of one GPU score as one board; a MIG device and the
  // other GPU as the two GPUs (NODE + 18 NVLinks through the switches).
  EXPECT_EQ(inv.LinkScore(1, 2), 60);
  EXPECT_EQ(inv.LinkScore(0, 3), 20 + 1800);

  auto spec = (*driver)->BuildContainerSpec({{inv.devices[1], 0, 0, true}});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->env.at("NVIDIA_VISIBLE_DEVICES"), inv.devices[1].id);
  std::vector<std::string> paths;
  for (const DeviceNode& n : spec->devices) paths.push_back(n.host_path);
  for (const char* want : {"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21",
                           "/dev/nvidia-caps/nvidia-cap22", "/dev/nvidiactl"}) {
    EXPECT_NE(std::find(paths.begin(), paths.end(), want), paths.end()) << want;
  }
  EXPECT_EQ(std::find(paths.begin(), paths.end(), "/dev/nvidia0"), paths.end());
  // GPU instance 2 has no capability entry: a clear error, not a container
  // that cannot open its device.
  auto missing = (*driver)->BuildContainerSpec({{inv.devices[2], 0, 0, true}});
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("gpu1/gi2/access"), std::string::npos)
      << missing.status().ToString();

  HealthRecorder health(**driver);
  fake.Configure(2, -1, 1, 0);  // GPU 1: XID 79
  health.WaitFor(4);
  fake.Configure(2, -1, -1, 0);
  health.WaitFor(8);
  const std::vector<HealthEvent> events = health.Stop();
  ASSERT_EQ(events.size(), 8u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_FALSE(events[k].healthy);
    EXPECT_EQ(events[k].device_id, inv.devices[k + 1].id);
    EXPECT_TRUE(events[k + 4].healthy);
  }
}

// The profile of a MIG device comes from its GPU instance when the plugin may
// open one (it runs privileged); else from the one profile of the parent whose
// slices, memory and media engines match (1g.18gb+me has the OFA, 1g.18gb and
// its +gfx twin do not and so cannot be told apart: the plain name); else, on
// a driver without profile information, from the sizes alone, as before.
TEST(NvmlBindingTest, MigProfilesWithAttributesAreNamedFromNvmlsProfiles) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(2, -1, -1, 0);
  auto mig = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_mig"));
  auto access = reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_mig_access"));
  ASSERT_NE(mig, nullptr);
  ASSERT_NE(access, nullptr);
  mig(1);
  auto nvml = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML}, "/nonexistent");
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  struct Case {
    int access;
    std::vector<std::string> names;
  };
  for (const Case& c : std::vector<Case>{{2, {"3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb+me"}},
                                         {1, {"3g.71gb", "2g.35gb", "", "1g.18gb+me"}},
                                         {0, {"", "", "", ""}}}) {
    SCOPED_TRACE(c.access);
    access(c.access);
    auto migs = (*nvml)->MigDevices(1);
    ASSERT_TRUE(migs.ok()) << migs.status().ToString();
    ASSERT_EQ(migs->size(), 4u);
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ((*migs)[k].profile_name, c.names[k]) << k;
  }
  access(2);
  mig(-1);
}
TEST(NvmlBindingTest, ErrorsAreClearAndNeverCrash) {
  struct Case {
    std::string name;
    int fail_device;
    int init_error;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"GPU lost mid-discovery",
       5,
       0,
       {"GPU 5", "nvmlDeviceGetMemoryInfo", "GPU is lost", "code 15", "nvidia-smi"}},
      {"driver not loaded", -1, 9, {"nvmlInit_v2", "Driver Not Loaded", "code 9"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
    ASSERT_TRUE(fake.ok());
    fake.Configure(8, c.fail_device, -1, c.init_error);
    auto driver = Driver(Options());
    ASSERT_TRUE(driver.ok());
    ExpectDiscoveryFails(**driver, c.want);
  }
}

// An error whose code the library has no text for (nvmlErrorString answers
// a null pointer) is still a clear error, not a crash.
TEST(NvmlBindingTest, AnErrorWithoutTextIsStillAClearError) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(8, -1, -1, 999);
  auto null_text =
      reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_null_error_text"));
  ASSERT_NE(null_text, nullptr);
  null_text(1);
  auto driver = Driver(Options());
  ASSERT_TRUE(driver.ok());
  ExpectDiscoveryFails(**driver, {"nvmlInit_v2", "code 999", "nvidia-smi"});
  null_text(0);
}

// NVML's buffers are read only up to their size: a UUID or a name that
// fills its buffer with no NUL is cut there, not read past its end. A garbage
// GPU count is refused, as the other bindings refuse it.
TEST(NvmlBindingTest, StringsAndCountsFromTheLibraryAreBounded) {
  FakeHandle fake(ACCELPOOL_FAKE_NVIDIA_ML);
  ASSERT_TRUE(fake.ok());
  fake.Configure(2, -1, -1, 0);
  auto unterminated =
      reinterpret_cast<void (*)(int)>(fake.Symbol("accelpool_fake_nvml_unterminated"));
  ASSERT_NE(unterminated, nullptr);
  unterminated(1);
  StatusOr<NvmlLibraryPtr> lib = NewDlNvml({ACCELPOOL_FAKE_NVIDIA_ML}, "/nonexistent");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  ASSERT_TRUE((*lib)->Init().ok());
  StatusOr<NvmlDeviceInfo> info = (*lib)->DeviceInfo(1);
  unterminated(0);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const std::string uuid = "GPU-9c1e5b7a-2d4f-4a8e-b6c3-1f0e8d2a4001";
  EXPECT_EQ(info->uuid, uuid + std::string(96 - uuid.size(), 'x'));
  EXPECT_EQ(info->name, "NVIDIA H200" + std::string(96 - 11, 'x'));

  fake.Configure(1 << 20, -1, -1, 0);
  StatusOr<int32_t> count = (*lib)->DeviceCount();
  EXPECT_EQ(count.status().code(), StatusCode::kInternal) << count.status().ToString();
  EXPECT_NE(count.status().message().find("1048576 GPUs"), std::string::npos)
      << count.status().message();
  fake.Configure(8, -1, -1, 0);
}

TEST(NvmlBindingTest, AbsentOrForeignLibraryIsAClearError) {
  auto absent = NewDlNvml({"/nonexistent/libnvidia-ml.so.1"});
  EXPECT_EQ(absent.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(absent.status().message().find("install the vendor driver"), std::string::npos);
  auto foreign = NewDlNvml({ACCELPOOL_FAKE_DCMI});
  ASSERT_TRUE(foreign.ok());
  Status st = (*foreign)->Init();
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("nvmlInit_v2"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace accelpool::vendors::nvidia
