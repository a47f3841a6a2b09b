#include "plugin/foreign_memory.h"

#include <gtest/gtest.h>

namespace accelpool::plugin {
namespace {

constexpr int64_t kGpuMib = 81920;

std::vector<core::NodeInventory> Node(int gpus) {
  core::NodeInventory inv;
  inv.node = "n1";
  inv.vendor = core::Vendor::kNvidia;
  for (int i = 0; i < gpus; ++i) {
    core::Device d;
    d.index = i;
    d.id = "GPU-" + std::to_string(i);
    d.vendor = core::Vendor::kNvidia;
    d.memory_mib = kGpuMib;
    d.max_shares = 10;
    inv.devices.push_back(d);
  }
  return {inv};
}

// A pod whose one container holds `mib` of device `id` (whole when `whole`),
// allocated or only assigned.
PodAssignment Pod(const std::string& name, const std::string& id, int64_t mib, bool whole,
                  bool allocated = true) {
  PodAssignment p;
  p.pod = PodRef{"default", name, name + "-uid", ""};
  api::AssignedContainer c;
  c.name = "main";
  c.vendor = core::Vendor::kNvidia;
  c.resource = "nvidia.com/gpu";
  c.devices.push_back(api::AssignedDevice{.id = id,
                                          .index = 0,
                                          .slot = id + "::0",
                                          .memory_mib = whole ? kGpuMib : mib,
                                          .compute = whole ? 1000 : 250,
                                          .exclusive = whole});
  p.assignment.node = "n1";
  p.assignment.containers.push_back(c);
  if (allocated) p.allocated.insert({"main", "nvidia.com/gpu"});
  return p;
}

int64_t Published(const ForeignMemory& f, const std::string& id) {
  std::vector<core::NodeInventory> invs = Node(4);
  f.Apply(&invs);
  for (const core::Device& d : invs[0].devices) {
    if (d.id == id) return d.foreign_mib;
  }
  return -1;
}

TEST(ForeignMemoryTest, MemoryNoGrantAccountsForIsPublishedOnceConfirmed) {
  ForeignMemory f({.min_mib = 2048, .per_share_mib = 512, .confirm = 2});
  const auto invs = Node(4);
  // GPU-0: 20 GiB + a little in use, nothing granted. GPU-1: two shares of
  // 8 GiB using their grants and contexts. GPU-2 held whole by a pod using
  // it all. GPU-3: 1.5 GiB in use (the driver's reserve on an old library),
  // below the floor.
  const std::vector<PodAssignment> pods = {
      Pod("a", "GPU-1", 8192, false), Pod("b", "GPU-1", 8192, false), Pod("c", "GPU-2", 0, true)};
  const std::map<std::string, int64_t> used = {
      {"GPU-0", 20480 + 300}, {"GPU-1", 2 * 8192 + 2 * 500}, {"GPU-2", kGpuMib}, {"GPU-3", 1536}};
  EXPECT_TRUE(f.Observe(invs, used, pods).empty()) << "published after one reading";
  EXPECT_EQ(Published(f, "GPU-0"), 0);
  const std::vector<ForeignChange> changes = f.Observe(invs, used, pods);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].device, "GPU-0");
  EXPECT_EQ(changes[0].before_mib, 0);
  EXPECT_EQ(changes[0].after_mib, 20480);  // rounded down to whole GiB
  EXPECT_EQ(changes[0].used_mib, 20780);
  EXPECT_EQ(Published(f, "GPU-0"), 20480);
  for (const char* id : {"GPU-1", "GPU-2", "GPU-3"}) EXPECT_EQ(Published(f, id), 0) << id;
  const std::string text = DescribeForeignChange(changes[0]);
  EXPECT_NE(text.find("20 GiB of its memory is in use and no grant"), std::string::npos) << text;
  EXPECT_NE(text.find("nvidia-smi"), std::string::npos) << text;
  EXPECT_NE(text.find("60 GiB beside it"), std::string::npos) << text;
  const std::map<std::string, ForeignReading> readings = f.Readings();
  EXPECT_EQ(readings.at("GPU-0").used_mib, 20780);
  EXPECT_EQ(readings.at("GPU-0").foreign_mib, 20480);
  EXPECT_EQ(readings.at("GPU-2").used_mib, kGpuMib);
  EXPECT_EQ(readings.at("GPU-2").foreign_mib, 0);
}

TEST(ForeignMemoryTest, ChangesNeedReadingsInARowThatAgree) {
  ForeignMemory f({.min_mib = 2048, .per_share_mib = 512, .confirm = 2});
  const auto invs = Node(1);
  auto round = [&](int64_t used) { return f.Observe(invs, {{"GPU-0", used}}, {}); };
  // A spike between two quiet readings publishes nothing.
  EXPECT_TRUE(round(0).empty());
  EXPECT_TRUE(round(30720).empty());
  EXPECT_TRUE(round(0).empty());
  EXPECT_EQ(Published(f, "GPU-0"), 0);
  // Rising: to the smaller of the last two readings.
  EXPECT_TRUE(round(30720).empty());
  ASSERT_EQ(round(40960).size(), 1u);
  EXPECT_EQ(Published(f, "GPU-0"), 30720);
  // Between the last two: unchanged.
  EXPECT_TRUE(round(30720).empty());
  // A dip for one reading: unchanged; falling for two: to the larger.
  EXPECT_TRUE(round(0).empty());
  EXPECT_EQ(Published(f, "GPU-0"), 30720);
  EXPECT_TRUE(round(30720).empty());
  EXPECT_TRUE(round(4096).empty());
  const std::vector<ForeignChange> down = round(0);
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].after_mib, 4096);
  const std::vector<ForeignChange> freed = round(0);
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].after_mib, 0);
  EXPECT_NE(DescribeForeignChange(freed[0]).find("freed"), std::string::npos);
  EXPECT_EQ(Published(f, "GPU-0"), 0);
}

TEST(ForeignMemoryTest, OnlyAllocatedGrantsCountAndAPendingOneDoesNotHideMemory) {
  ForeignMemory f({.min_mib = 2048, .per_share_mib = 0, .confirm = 1});
  const auto invs = Node(1);
  // Assigned but not yet allocated: its container has not started, so the
  // memory in use is not its.
  std::vector<PodAssignment> pods = {Pod("a", "GPU-0", 16384, false, /*allocated=*/false)};
  ASSERT_EQ(f.Observe(invs, {{"GPU-0", 16384}}, pods).size(), 1u);
  EXPECT_EQ(Published(f, "GPU-0"), 16384);
  // Allocated: it is the container's.
  pods[0].allocated.insert({"main", "nvidia.com/gpu"});
  ASSERT_EQ(f.Observe(invs, {{"GPU-0", 16384}}, pods).size(), 1u);
  EXPECT_EQ(Published(f, "GPU-0"), 0);
  // Presumed allocated (an admitted pod whose record was lost): the same.
  pods[0].allocated.clear();
  pods[0].presumed.insert({"main", "nvidia.com/gpu"});
  EXPECT_TRUE(f.Observe(invs, {{"GPU-0", 16384}}, pods).empty());
  EXPECT_EQ(Published(f, "GPU-0"), 0);
}

// A grant that names no memory and no compute share holds the whole device
// (as Allocate enforces it: no limits), even when not marked exclusive: the
// memory its container uses is not foreign.
TEST(ForeignMemoryTest, AGrantWithNoSharesNamedHoldsTheWholeDevice) {
  ForeignMemory f({.min_mib = 2048, .per_share_mib = 512, .confirm = 1});
  const auto invs = Node(1);
  PodAssignment p = Pod("a", "GPU-0", 0, false);
  p.assignment.containers[0].devices[0].memory_mib = 0;
  p.assignment.containers[0].devices[0].compute = 0;
  EXPECT_TRUE(f.Observe(invs, {{"GPU-0", 40960}}, {p}).empty());
  EXPECT_EQ(Published(f, "GPU-0"), 0);
}

TEST(ForeignMemoryTest, UnreadDevicesKeepTheirFigureAndGoneDevicesAreForgotten) {
  ForeignMemory f({.min_mib = 1024, .per_share_mib = 512, .confirm = 1});
  std::vector<core::NodeInventory> invs = Node(2);
  ASSERT_EQ(f.Observe(invs, {{"GPU-0", 8192}, {"GPU-1", 8192}}, {}).size(), 2u);
  // GPU-1's library did not answer this round: it keeps its figure.
  ASSERT_EQ(f.Observe(invs, {{"GPU-0", 0}}, {}).size(), 1u);
  EXPECT_EQ(Published(f, "GPU-0"), 0);
  EXPECT_EQ(Published(f, "GPU-1"), 8192);
  // GPU-1 left the node: forgotten, and a foreign figure never exceeds the
  // device's memory.
  invs[0].devices.pop_back();
  EXPECT_TRUE(f.Observe(invs, {{"GPU-0", 0}}, {}).empty());
  EXPECT_EQ(f.Readings().count("GPU-1"), 0u);
  invs[0].devices[0].memory_mib = 4096;
  ASSERT_EQ(f.Observe(invs, {{"GPU-0", 9000}}, {}).size(), 1u);
  EXPECT_EQ(f.Readings().at("GPU-0").foreign_mib, 4096);
  // A MIG instance is never read nor marked.
  invs[0].devices[0].partition = "1g.18gb";
  f.Apply(&invs);
  EXPECT_EQ(invs[0].devices[0].foreign_mib, 0);
}

// A restarted plugin keeps what the previous run published until its own
// readings agree otherwise: a rolling upgrade must not hand a busy GPU out
// whole for the minute its first two readings take.
TEST(ForeignMemoryTest, ARestartKeepsWhatWasPublishedUntilTwoReadingsAgree) {
  std::vector<core::NodeInventory> before = Node(2);
  before[0].devices[0].foreign_mib = 8192;
  ForeignMemory f({.min_mib = 2048, .per_share_mib = 512, .confirm = 2});
  f.Restore(before);
  EXPECT_EQ(Published(f, "GPU-0"), 8192);
  EXPECT_EQ(Published(f, "GPU-1"), 0);
  const auto invs = Node(2);
  // Still held: one reading, then a second that agrees, change nothing.
  EXPECT_TRUE(f.Observe(invs, {{"GPU-0", 8192}, {"GPU-1", 0}}, {}).empty());
  EXPECT_TRUE(f.Observe(invs, {{"GPU-0", 9000}, {"GPU-1", 0}}, {}).empty());
  EXPECT_EQ(Published(f, "GPU-0"), 8192);
  // Freed while the plugin was down: cleared after two readings, not one.
  ForeignMemory g({.min_mib = 2048, .per_share_mib = 512, .confirm = 2});
  g.Restore(before);
  EXPECT_TRUE(g.Observe(invs, {{"GPU-0", 0}}, {}).empty());
  EXPECT_EQ(Published(g, "GPU-0"), 8192);
  ASSERT_EQ(g.Observe(invs, {{"GPU-0", 0}}, {}).size(), 1u);
  EXPECT_EQ(Published(g, "GPU-0"), 0);
  // A device already read is not overwritten by a later Restore.
  g.Restore(before);
  EXPECT_EQ(Published(g, "GPU-0"), 0);
}

// The processes on a device are named largest first, at most `limit`, each
// with its command and pod from the host's /proc and the node's pods: a pod
// without a grant on the device, a pod sharing it, a process whose pod is no
// longer on the node, a host process and one not found. The Event names
// them and says what to do about each kind, and stays under an Event's 1024
// bytes with the longest names.
TEST(ForeignMemoryTest, HoldersAreNamedWithTheirPodsAndTheEventSaysWhatToDo) {
  const std::vector<PodAssignment> pods = {Pod("sharer", "GPU-0", 8192, false)};
  std::map<int64_t, ProcessOwner> procs;
  procs[4242] = {4242, true, "python3", {"rogue-uid", ""}};
  procs[4300] = {4300, true, "vllm", {"sharer-uid", ""}};
  procs[17] = {17, true, "Xorg", {}};
  procs[5000] = {5000, true, "train.py", {"gone-uid", ""}};
  const auto owner_of = [&](int64_t pid) {
    const auto it = procs.find(pid);
    if (it != procs.end()) return it->second;
    ProcessOwner unseen;
    unseen.pid = pid;
    return unseen;
  };
  const auto pod_of = [](const std::string& uid) {
    return uid == "rogue-uid"    ? std::string("team-a/notebook-0")
           : uid == "sharer-uid" ? std::string("default/sharer")
                                 : std::string();
  };
  ForeignChange c{.device = "GPU-0",
                  .vendor = core::Vendor::kNvidia,
                  .model = "NVIDIA H200",
                  .before_mib = 0,
                  .after_mib = 20480,
                  .used_mib = 30000,
                  .granted_mib = 8192,
                  .shares = 1,
                  .device_mib = kGpuMib,
                  .holders = {},
                  .more_holders = 0};
  const std::vector<vendors::ProcessMemory> listed = {
      {17, 310}, {4242, 18000}, {4300, 9000}, {5000, -1}, {6000, 2000}};
  NameHolders(listed, owner_of, pod_of, pods, 3, &c);
  ASSERT_EQ(c.holders.size(), 3u);
  EXPECT_EQ(c.more_holders, 2u);
  EXPECT_EQ(c.holders[0].pid, 4242);
  EXPECT_EQ(c.holders[0].pod, "team-a/notebook-0");
  EXPECT_FALSE(c.holders[0].granted);
  EXPECT_EQ(c.holders[1].pid, 4300);
  EXPECT_TRUE(c.holders[1].granted);
  EXPECT_EQ(c.holders[2].pid, 6000);
  EXPECT_FALSE(c.holders[2].visible);
  std::string text = DescribeForeignChange(c);
  for (const char* want :
       {"Held by PID 4242 (python3) of pod team-a/notebook-0, which has no grant on it: 18000 MiB",
        "PID 4300 (vllm) of pod default/sharer, which shares it beyond its grant: 9000 MiB",
        "PID 6000 (not found in the host's /proc): 2000 MiB", "and 2 more process(es)",
        "give it a device request, or delete it", "docs/enforcement.md", "nvidia-smi"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_EQ(text.find("outlived its pod"), std::string::npos) << text;
  EXPECT_EQ(HolderKind(c.holders[0]), "pod_without_grant");
  EXPECT_EQ(HolderKind(c.holders[1]), "pod_beyond_grant");
  EXPECT_EQ(HolderKind(c.holders[2]), "unknown");
  // The pod without a grant is told, in an Event of its own, what it holds
  // where and what to change.
  const std::string told = DescribeUngrantedUse(
      {"GPU-0", core::Vendor::kNvidia, "NVIDIA H200", c.holders[0]}, "gpu-node-7");
  for (const char* want :
       {"process 4242 (python3) of this pod holds 18000 MiB on device GPU-0 (nvidia) of node "
        "gpu-node-7, which the scheduler did not grant it",
        "Ask for the device in the pod's resources (nvidia.com/gpu, or nvidia.com/gpumem",
        "stop the pod from setting NVIDIA_VISIBLE_DEVICES itself"}) {
    EXPECT_NE(told.find(want), std::string::npos) << want << "\n" << told;
  }

  NameHolders(listed, owner_of, pod_of, pods, 10, &c);
  EXPECT_EQ(c.holders.size(), 5u);
  EXPECT_EQ(c.more_holders, 0u);
  text = DescribeForeignChange(c);
  for (const char* want : {"PID 17 (Xorg), not in a pod: 310 MiB",
                           "PID 5000 (train.py) of a pod that ended or left this node (uid "
                           "gone-uid), left over: memory "
                           "not reported",
                           "A process outlived its pod", "A host process"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_EQ(HolderKind(c.holders[3]), "host");
  EXPECT_EQ(HolderKind(c.holders[4]), "left_over");

  // The longest names Kubernetes allows, three holders of every kind: the
  // text still fits an Event note.
  const std::string long_pod = std::string(63, 'n') + "/" + std::string(253, 'p');
  const auto long_pod_of = [&](const std::string& uid) {
    return uid == "gone-uid" ? std::string() : long_pod;
  };
  c.device = "GPU-" + std::string(40, 'f');
  procs[4242].command = std::string(15, 'c');
  NameHolders(listed, owner_of, long_pod_of, pods, 3, &c);
  c.holders[2] = {.pid = 4194304,
                  .used_mib = 143771,
                  .visible = true,
                  .command = "x",
                  .pod_uid = "0f6b4e1c-2a3d-4b5c-8d9e-0123456789ab",
                  .pod = "",
                  .granted = false};
  text = DescribeForeignChange(c);
  EXPECT_LT(text.size(), 1024u) << text;
  EXPECT_NE(text.find("..."), std::string::npos) << "a long pod name is shortened: " << text;
  // The same on every vendor that measures, whose words differ in length.
  for (core::Vendor v :
       {core::Vendor::kAscend, core::Vendor::kHygon, core::Vendor::kKunlunxin, core::Vendor::kMetax,
        core::Vendor::kMthreads, core::Vendor::kCambricon, core::Vendor::kThead}) {
    c.vendor = v;
    c.model = std::string(63, 'm');
    text = DescribeForeignChange(c);
    EXPECT_LT(text.size(), 1024u) << core::VendorName(v) << ": " << text;
  }
}

// Each vendor's texts name its own tool, the way a pod without a grant
// reaches its devices, and the resource to ask for: the NVIDIA words on an
// Ascend node would send the operator to a tool that is not there.
TEST(ForeignMemoryTest, TheTextsSpeakTheDevicesVendor) {
  ForeignHolder rogue{.pid = 899293,
                      .used_mib = 57280,
                      .visible = true,
                      .command = "VLLMWorker_TP",
                      .pod_uid = "rogue-uid",
                      .pod = "team-a/infer-0",
                      .granted = false};
  ForeignHolder gone{.pid = 6000,
                     .used_mib = 2000,
                     .visible = false,
                     .command = "",
                     .pod_uid = "",
                     .pod = "",
                     .granted = false};
  struct Case {
    core::Vendor vendor;
    std::string model;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {core::Vendor::kAscend,
       "Ascend910B3",
       {"npu-smi on the node", "reaches it when it sets ASCEND_VISIBLE_DEVICES itself",
        "resources (huawei.com/Ascend910B3)", "stop the pod from setting ASCEND_VISIBLE_DEVICES"}},
      // HIP_VISIBLE_DEVICES only narrows what is mounted: the way in is the nodes.
      {core::Vendor::kHygon,
       "K100_AI",
       {"hy-smi on the node", "reaches it when it runs privileged or mounts the device nodes",
        "resources (hygon.com/dcu)", "stop the pod from running privileged or mounting"}},
      {core::Vendor::kNvidia,
       "NVIDIA H200",
       {"nvidia-smi on the node", "NVIDIA_VISIBLE_DEVICES=all reaches every GPU",
        "resources (nvidia.com/gpu, or nvidia.com/gpumem and nvidia.com/gpucores for a share)"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(core::VendorName(k.vendor));
    ForeignChange c{.device = "D-0",
                    .vendor = k.vendor,
                    .model = k.model,
                    .before_mib = 0,
                    .after_mib = 59392,
                    .used_mib = 59392,
                    .granted_mib = 0,
                    .shares = 0,
                    .device_mib = 65536,
                    .holders = {rogue, gone},
                    .more_holders = 0};
    const std::string text = DescribeForeignChange(c) + " | " +
                             DescribeUngrantedUse({"D-0", k.vendor, k.model, rogue}, "node-1");
    for (const std::string& want : k.want) {
      EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
    }
    if (k.vendor != core::Vendor::kNvidia) {
      EXPECT_EQ(text.find("NVIDIA"), std::string::npos) << text;
      EXPECT_EQ(text.find("nvidia"), std::string::npos) << text;
    }
    // Without holders, the text says where to look, in the same words.
    c.holders.clear();
    const std::string bare = DescribeForeignChange(c);
    EXPECT_NE(bare.find(k.want[0]), std::string::npos) << bare;
  }
}

// Pods using a device they were not granted are found from the processes on
// each device every round, whatever the amount: each use is new once (one
// per pod and device, its largest process), stays known while it lasts, and
// is new again after it stopped. A pod with a grant on the device, a pod
// granted another device, a host process and a process whose pod is gone
// are told apart.
TEST(UngrantedUsesTest, EachPodUsingADeviceItWasNotGrantedIsNewOnceWhileItLasts) {
  const auto invs = Node(3);
  const std::vector<PodAssignment> pods = {Pod("sharer", "GPU-1", 8192, false),
                                           Pod("other", "GPU-2", 0, true)};
  std::map<int64_t, ProcessOwner> procs;
  procs[10] = {10, true, "python3", {"rogue-uid", ""}};
  procs[11] = {11, true, "python3", {"rogue-uid", ""}};
  procs[20] = {20, true, "vllm", {"sharer-uid", ""}};
  procs[30] = {30, true, "train", {"other-uid", ""}};
  procs[40] = {40, true, "Xorg", {}};
  procs[50] = {50, true, "old", {"gone-uid", ""}};
  const auto owner_of = [&](int64_t pid) { return procs.at(pid); };
  const auto pod_of = [](const std::string& uid) {
    return uid == "gone-uid" ? std::string() : "default/" + uid.substr(0, uid.find('-'));
  };
  std::map<std::string, std::vector<vendors::ProcessMemory>> holders = {
      {"GPU-0", {{10, 300}, {11, 900}, {40, 100}, {50, 700}}},
      {"GPU-1", {{20, 9000}, {30, 500}}},
      {"GPU-9", {{10, 100}}},  // not a device of this node
  };
  UngrantedUses uses;
  std::vector<UngrantedUse> fresh = uses.Observe(invs, holders, owner_of, pod_of, pods);
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_EQ(fresh[0].device, "GPU-0");
  EXPECT_EQ(fresh[0].holder.pod, "default/rogue");
  EXPECT_EQ(fresh[0].holder.pid, 11);  // its larger process
  EXPECT_EQ(fresh[0].vendor, core::Vendor::kNvidia);
  EXPECT_EQ(fresh[1].device, "GPU-1");
  EXPECT_EQ(fresh[1].holder.pod, "default/other");  // granted GPU-2, not GPU-1
  EXPECT_EQ(uses.Current(), 2u);
  EXPECT_TRUE(uses.Observe(invs, holders, owner_of, pod_of, pods).empty()) << "reported twice";
  EXPECT_EQ(uses.Current(), 2u);
  holders["GPU-0"] = {{40, 100}};
  EXPECT_TRUE(uses.Observe(invs, holders, owner_of, pod_of, pods).empty());
  EXPECT_EQ(uses.Current(), 1u);
  holders["GPU-0"] = {{10, 300}};
  fresh = uses.Observe(invs, holders, owner_of, pod_of, pods);
  ASSERT_EQ(fresh.size(), 1u) << "a use that stopped and started again is new again";
  EXPECT_EQ(fresh[0].holder.pid, 10);
  EXPECT_TRUE(uses.Observe(invs, {}, owner_of, pod_of, pods).empty());
  EXPECT_EQ(uses.Current(), 0u);
}

}  // namespace
}  // namespace accelpool::plugin
