#include "plugin/process_owner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "plugin/test_util.h"

namespace accelpool::plugin {
namespace {

using testing::TempDir;
using testing::WriteFile;

constexpr const char* kUid = "0f6b4e1c-2a3d-4b5c-8d9e-0123456789ab";
constexpr const char* kCid = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9";

// Each layout kubelet makes (cgroup v2 and v1, systemd and cgroupfs drivers,
// every QoS class, containerd, CRI-O and Docker) places the process in its
// pod; a host process, a system service and text that is not a cgroup file
// place it nowhere.
TEST(ProcessOwnerTest, EveryKubeletCgroupLayoutNamesThePodAndContainer) {
  const std::string uid = kUid;
  std::string under = uid;
  for (char& c : under) c = c == '-' ? '_' : c;
  const std::string cid = kCid;
  struct Case {
    const char* name;
    std::string text;
    CgroupPlace want;
  };
  const Case cases[] = {
      {"v2 systemd burstable containerd",
       "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + under +
           ".slice/cri-containerd-" + cid + ".scope\n",
       {uid, cid}},
      {"v2 systemd guaranteed cri-o",
       "0::/kubepods.slice/kubepods-pod" + under + ".slice/crio-" + cid + ".scope\n",
       {uid, cid}},
      {"v1 systemd besteffort docker, one line per controller",
       "12:pids:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + under +
           ".slice/docker-" + cid + ".scope\n11:memory:/kubepods.slice/kubepods-besteffort.slice/"
           "kubepods-besteffort-pod" + under + ".slice/docker-" + cid + ".scope\n1:name=systemd:/\n",
       {uid, cid}},
      {"v1 cgroupfs", "4:cpu,cpuacct:/kubepods/burstable/pod" + uid + "/" + cid + "\n", {uid, cid}},
      {"v2 cgroupfs under a kind node", "0::/docker/abc/kubepods/pod" + uid + "/" + cid, {uid, cid}},
      {"upper-case hex is read in lower case",
       "0::/kubepods/besteffort/pod0F6B4E1C-2A3D-4B5C-8D9E-0123456789AB/" + cid, {uid, cid}},
      {"the pod's own cgroup (a process of the sandbox)", "0::/kubepods/pod" + uid, {uid, ""}},
      {"a container id that is not one", "0::/kubepods/pod" + uid + "/not-a-container", {uid, ""}},
      {"a host process", "0::/user.slice/user-1000.slice/session-3.scope\n", {}},
      {"a system service", "0::/system.slice/nvidia-persistenced.service\n", {}},
      {"a uid one digit short", "0::/kubepods/pod" + uid.substr(1) + "/" + cid, {}},
      {"a uid running on", "0::/kubepods/pod" + uid + "0/" + cid, {}},
      {"not a cgroup file", "\x01\xff garbage /kubepods/pod" + uid, {}},
      {"empty", "", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(PlaceFromCgroup(c.text), c.want);
  }
}

// A process under the proc root is read: its command (only printable ASCII,
// since a process names itself) and its cgroup. A missing process, a
// non-positive pid and an empty proc root are not visible.
TEST(ProcessOwnerTest, ReadsTheCommandAndPodOfAProcess) {
  TempDir proc;
  const auto make = [&](int pid, const std::string& comm, const std::string& cgroup) {
    const std::string dir = proc.File(std::to_string(pid));
    std::filesystem::create_directories(dir);
    WriteFile(dir + "/comm", comm);
    WriteFile(dir + "/cgroup", cgroup);
  };
  make(4242, "python3\n", "0::/kubepods/burstable/pod" + std::string(kUid) + "/" + kCid + "\n");
  make(17, "Xorg\n", "0::/system.slice/display-manager.service\n");
  make(99, "n\xc3\xa4me\x1b[31m\n", "");

  ProcessOwner o = ReadProcessOwner(proc.path(), 4242);
  EXPECT_TRUE(o.visible);
  EXPECT_EQ(o.pid, 4242);
  EXPECT_EQ(o.command, "python3");
  EXPECT_EQ(o.place, (CgroupPlace{kUid, kCid}));

  o = ReadProcessOwner(proc.path(), 17);
  EXPECT_TRUE(o.visible);
  EXPECT_EQ(o.command, "Xorg");
  EXPECT_TRUE(o.place.pod_uid.empty());

  o = ReadProcessOwner(proc.path(), 99);
  EXPECT_TRUE(o.visible);
  EXPECT_EQ(o.command, "n??me?[31m");

  EXPECT_FALSE(ReadProcessOwner(proc.path(), 5).visible);
  EXPECT_FALSE(ReadProcessOwner(proc.path(), 0).visible);
  EXPECT_FALSE(ReadProcessOwner(proc.path(), -4242).visible);
  EXPECT_FALSE(ReadProcessOwner("", 4242).visible);
  EXPECT_EQ(ReadProcessOwner("", 4242).pid, 4242);
}

}  // namespace
}  // namespace accelpool::plugin
