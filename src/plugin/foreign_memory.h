// ForeignMemory: device memory in use that no grant on this node accounts
// for, measured by the plugin and published with the node's inventory
// (core::Device::foreign_mib), so that the scheduler stops treating a device
// as idle when something outside accelpool holds part of it: a process left
// over from a container that ended, a pod that sets NVIDIA_VISIBLE_DEVICES
// itself and so reaches every GPU, a host daemon. Scheduling by grants alone
// hands such a device whole to the next training pod, which then fails at
// its first large allocation.
//
// Each round (Observe) takes the memory the vendor library says processes
// hold on each whole device and the node's assignments. On a device a
// container holds whole, everything in use is that container's: nothing is
// foreign. Otherwise
//
//   foreign = used - granted - shares x per_share_mib
//
// where `granted` is the memory granted to the containers on the device that
// were allocated (or are presumed so: their pod was admitted), and
// `per_share_mib` is what each may use beyond its grant (its CUDA context and
// the runtime's own buffers, which no cap counts). Below `min_mib` nothing is
// reported; above it the figure is rounded down to whole GiB, so a few MiB
// of drift never rewrites the Node.
//
// A change is published only when `confirm` readings in a row agree: the
// published figure rises to the smallest of the last readings, or falls to
// the largest of them. A process that exits a moment after its pod's grant
// is gone, or a spike between two allocations, changes nothing.
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_FOREIGN_MEMORY_H_
#define ACCELPOOL_PLUGIN_FOREIGN_MEMORY_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/types.h"
#include "plugin/assignment_store.h"
#include "plugin/process_owner.h"
#include "vendors/driver.h"

namespace accelpool::plugin {

// Node Event reasons: a device's memory in use outside every grant was
// published (Warning), and freed again (Normal).
inline constexpr const char* kForeignMemoryReason = "AccelpoolForeignMemory";
inline constexpr const char* kForeignMemoryFreedReason = "AccelpoolForeignMemoryFreed";
// Pod Event reason: a process of the pod holds memory on a device the pod
// was not granted (Warning).
inline constexpr const char* kUngrantedDeviceMemoryReason = "AccelpoolUngrantedDeviceMemory";

struct ForeignMemoryOptions {
  int64_t min_mib = 2048;       // smaller foreign figures are not reported; > 0
  int64_t per_share_mib = 512;  // allowance per container holding a share; >= 0
  int32_t confirm = 2;          // readings in a row before a change is published; >= 1
};

// A process holding memory on a device that gains foreign memory, as the
// vendor library lists it and the node's /proc and pods name it.
struct ForeignHolder {
  int64_t pid = 0;
  int64_t used_mib = -1;  // -1: the library does not say
  bool visible = false;   // found under --host-proc
  std::string command;    // its comm ("" when not visible)
  std::string pod_uid;    // the pod its cgroup names ("" when in none)
  std::string pod;        // "<ns>/<name>" of that pod on this node ("" when not on it)
  bool granted = false;   // that pod holds a grant on this device
};

// A change of one device's published figure.
struct ForeignChange {
  std::string device;
  core::Vendor vendor = core::Vendor::kUnknown;
  std::string model;
  int64_t before_mib = 0;
  int64_t after_mib = 0;
  // The reading that confirmed it.
  int64_t used_mib = 0;
  int64_t granted_mib = 0;
  int32_t shares = 0;
  int64_t device_mib = 0;
  // What holds the device's memory, largest first (NameHolders); empty when
  // the backend cannot list processes or the figure falls.
  std::vector<ForeignHolder> holders;
  size_t more_holders = 0;  // listed by the library beyond `holders`
};

// One device's figures after a round, for metrics.
struct ForeignReading {
  core::Vendor vendor = core::Vendor::kUnknown;
  int64_t used_mib = 0;
  int64_t foreign_mib = 0;  // published
};

class ForeignMemory {
 public:
  explicit ForeignMemory(ForeignMemoryOptions options);

  // One round. `used`: memory in use by device id, for the devices whose
  // library answered (the others keep their figures). Devices no longer in
  // `inventories` are forgotten. Returns the published changes.
  std::vector<ForeignChange> Observe(const std::vector<core::NodeInventory>& inventories,
                                     const std::map<std::string, int64_t>& used,
                                     const std::vector<PodAssignment>& assignments);

  // Takes the figures a previous run published (Device::foreign_mib of
  // `published`) as published now, so that a restarted plugin does not clear
  // them before it has read the devices twice; the readings then decide as
  // usual. Devices already read are left alone.
  void Restore(const std::vector<core::NodeInventory>& published);

  // Sets every device's foreign_mib to its published figure (0 when none).
  void Apply(std::vector<core::NodeInventory>* inventories) const;

  // The last reading and published figure of every device read so far.
  std::map<std::string, ForeignReading> Readings() const;

 private:
  struct DeviceState {
    core::Vendor vendor = core::Vendor::kUnknown;
    std::deque<int64_t> recent;  // the last `confirm` levels, newest last
    int64_t published = 0;
    int64_t used = 0;
  };

  const ForeignMemoryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, DeviceState> devices_;  // by device id; guarded by mu_
};

// Names the processes on `device` (as its library lists them) into
// c->holders, largest first, at most `limit` (the rest counted in
// more_holders): `owner_of` reads a process (ReadProcessOwner with the host's
// /proc), `pod_of` names a pod of this node by UID ("" when none is known),
// and `assignments` say whether that pod holds a grant on the device.
void NameHolders(const std::vector<vendors::ProcessMemory>& processes,
                 const std::function<ProcessOwner(int64_t pid)>& owner_of,
                 const std::function<std::string(const std::string& uid)>& pod_of,
                 const std::vector<PodAssignment>& assignments, size_t limit, ForeignChange* c);

// Every kind HolderKind returns (the label values of
// accelpool_plugin_foreign_memory_holders_total, exported at 0 from the start).
inline constexpr std::array<const char*, 5> kHolderKinds = {"pod_without_grant", "pod_beyond_grant",
                                                            "left_over", "host", "unknown"};

// What kind of holder it is: "pod_without_grant", "pod_beyond_grant",
// "left_over" (its pod ended or left the node), "host" (in no pod) or
// "unknown" (not found under --host-proc).
std::string HolderKind(const ForeignHolder& h);

// A pod of this node using a device it holds no grant on: one of its
// processes holds memory there, whatever the amount (a pod that asks for no
// device and sets NVIDIA_VISIBLE_DEVICES=all reaches every GPU of the node;
// its use escapes the scheduler and every quota).
struct UngrantedUse {
  std::string device;
  core::Vendor vendor = core::Vendor::kUnknown;
  std::string model;     // the device's, for the resource to ask for
  ForeignHolder holder;  // of kind pod_without_grant
};

// Finds, each round, the pods using devices they were not granted, from the
// processes on each whole device, and says which uses are new: each is
// reported once while it lasts, and again if it stops and starts again.
//
// Thread-safety: not thread-safe (the plugin's one check thread calls it).
class UngrantedUses {
 public:
  // `holders`: the processes on each device (VendorDriver::MemoryHolders);
  // devices not in `inventories` are skipped. Returns the uses not seen in
  // the previous round, one per pod and device (its largest process).
  std::vector<UngrantedUse> Observe(
      const std::vector<core::NodeInventory>& inventories,
      const std::map<std::string, std::vector<vendors::ProcessMemory>>& holders,
      const std::function<ProcessOwner(int64_t pid)>& owner_of,
      const std::function<std::string(const std::string& uid)>& pod_of,
      const std::vector<PodAssignment>& assignments);
  // The pod-and-device uses seen in the last round.
  size_t Current() const { return seen_.size(); }

 private:
  std::set<std::string> seen_;  // "<pod uid>/<device>"
};

// The Warning Event text for the pod of an ungranted use.
std::string DescribeUngrantedUse(const UngrantedUse& u, const std::string& node);

// The Node Event text for a change: how much, what holds it (when the
// holders are named), what the scheduler now does about it, and what to do.
// Under 1024 bytes (an Event's note) with up to 3 holders.
std::string DescribeForeignChange(const ForeignChange& c);

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_FOREIGN_MEMORY_H_
