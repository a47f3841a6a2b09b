// ProcessOwner: what the node's /proc says about a process that holds device
// memory (a PID the vendor library lists): its command, and the pod and
// container its cgroup places it in. The foreign memory check uses it to name
// what holds memory that no grant accounts for, so that an operator reads
// "pod team-a/notebook-0" in the Node Event instead of hunting for a PID.
//
// The PIDs a vendor library lists are the host's (the kernel driver sees the
// init PID namespace), so the proc root must be the host's: the chart mounts
// the host's /proc read-only and passes --host-proc. With any other proc root
// a PID would name an unrelated process, so without one nothing is read.
//
// Every cgroup layout kubelet makes is read, on cgroup v1 and v2, with the
// systemd and the cgroupfs drivers: the pod's cgroup is a path component
// holding "pod" and the pod UID (dashes, or underscores under systemd), and
// the next component names the container (a bare id under cgroupfs;
// "cri-containerd-<id>.scope", "crio-<id>.scope" or "docker-<id>.scope"
// under systemd).
//
// Thread-safety: pure functions (reading files).
#ifndef ACCELPOOL_PLUGIN_PROCESS_OWNER_H_
#define ACCELPOOL_PLUGIN_PROCESS_OWNER_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace accelpool::plugin {

// Where a /proc/<pid>/cgroup text places a process.
struct CgroupPlace {
  std::string pod_uid;       // lower case, with dashes; "" when in no pod's cgroup
  std::string container_id;  // 64 hex digits; "" when the layout does not name one
  friend bool operator==(const CgroupPlace&, const CgroupPlace&) = default;
};

// Reads the first pod cgroup any line of the text names. Text that is not a
// cgroup file places the process nowhere.
CgroupPlace PlaceFromCgroup(std::string_view cgroup_text);

struct ProcessOwner {
  int64_t pid = 0;
  bool visible = false;  // found under the proc root
  std::string command;   // its comm, printable ASCII only ("" when not visible)
  CgroupPlace place;
};

// Reads <proc_root>/<pid>/comm and cgroup. Not visible when proc_root is
// empty, the pid is not positive, or the process is not there (it exited).
ProcessOwner ReadProcessOwner(const std::string& proc_root, int64_t pid);

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_PROCESS_OWNER_H_
