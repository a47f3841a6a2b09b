// Allocator: kubelet's GetPreferredAllocation and Allocate, without gRPC.
//
// Allocate maps each container's slot ids back to the pod container the
// extender assigned them to (AssignmentStore::Match), checks the assignment
// against this node (right node, known devices, same count), and answers the
// container's devices, env and mounts from the vendor driver plus, for
// fractional NVIDIA grants, the enforcement contract of libaccelpool-cuda:
//
//   ACCELPOOL_CUDA_MEMORY_LIMIT_<i>  MiB on visible device i
//   ACCELPOOL_CUDA_COMPUTE_LIMIT     percent of the device
//   ACCELPOOL_CUDA_STATE_DIR         /var/run/accelpool, a per-container host
//                                    dir <state_root>/<pod-uid>_<container>
//                                    (StateDirs: refused unless it is a
//                                    direct child of state_root)
//   CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT  (HAMi-compatible)
//   mounts: the library, and /etc/ld.so.preload naming it (opt-out).
//
// Worked example: a container granted 4096 MiB and 250 (25%) of GPU-a gets
// ACCELPOOL_CUDA_MEMORY_LIMIT_0=4096, ACCELPOOL_CUDA_COMPUTE_LIMIT=25,
// CUDA_DEVICE_MEMORY_LIMIT_0=4096m, CUDA_DEVICE_SM_LIMIT=25.
//
// All or nothing: when any container of a call fails, the call fails, nothing
// is marked allocated, the state dirs this call made are removed again, the failure is counted and
// reported on the pod (when one was identified) through PodReporter. Kubelet
// does not retry: it rejects the pod (phase Failed, UnexpectedAdmissionError).
//
// Thread-safety: all methods may be called from any thread.
#ifndef ACCELPOOL_PLUGIN_ALLOCATOR_H_
#define ACCELPOOL_PLUGIN_ALLOCATOR_H_

#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "plugin/assignment_store.h"
#include "plugin/device_state.h"
#include "plugin/plugin_metrics.h"
#include "plugin/state_dirs.h"
#include "vendors/driver.h"

namespace accelpool::plugin {

// How a fractional NVIDIA grant is held to its share.
enum class NvidiaSharing {
  kShim,  // libaccelpool-cuda, preloaded (docs/enforcement.md)
  kMps,   // NVIDIA MPS: the node's MPS control daemon enforces the limits
};

struct EnforcementOptions {
  bool enabled = true;  // add the libaccelpool-cuda contract to fractional grants
  NvidiaSharing sharing = NvidiaSharing::kShim;
  // MPS mode: the host directory of the node's MPS control daemon's pipes,
  // mounted at the same path; and, when not empty, a host directory mounted
  // at /dev/shm (a daemon that runs in its own IPC namespace shares its
  // shared memory that way).
  std::string mps_pipe_dir = "/tmp/nvidia-mps";
  std::string mps_shm_dir;
  std::string state_root = "/var/lib/accelpool/containers";  // host side
  std::string state_mount = "/var/run/accelpool";            // container side
  bool create_state_dirs = true;  // mkdir the host dir (the plugin mounts state_root)
  // Cap each state/ with a tmpfs of this many MiB and files (StateDirs; 0:
  // a plain directory). The binary's --state-dir-size-mib; off here so that
  // a test never mounts. `mount_calls` null: the real system calls.
  int64_t state_dir_size_mib = 0;
  int64_t state_dir_inodes = 64;
  MountCalls* mount_calls = nullptr;
  std::string library_host = "/usr/local/accelpool/lib/libaccelpool-cuda.so";
  std::string library_container = "/usr/local/accelpool/lib/libaccelpool-cuda.so";
  // A host file whose content is library_container, mounted at /etc/ld.so.preload.
  std::string preload_host = "/usr/local/accelpool/ld.so.preload";
  bool preload = true;      // mount preload_host; false leaves preloading to the image
  bool hami_compat = true;  // also write CUDA_DEVICE_MEMORY_LIMIT_<i> / CUDA_DEVICE_SM_LIMIT
  bool cdi = false;         // answer CDI device names as well
  // Task priority (PriorityWatch): make each fractional container's priority
  // file and set ACCELPOOL_CUDA_PRIORITY. Needs create_state_dirs.
  bool priority = true;
};

// Whether container `c` of `p` has libaccelpool-cuda state on this node, as
// Allocator::Enforce makes it: kubelet has allocated it, its grant is
// fractional, and its vendor is enforced by the shim (NVIDIA).
bool HasShimState(const PodAssignment& p, const api::AssignedContainer& c);

// Side effects on the pod, done off kubelet's path by the implementation.
class PodReporter {
 public:
  virtual ~PodReporter() = default;
  // `allocated`: every entry (container, resource) of the pod allocated so
  // far.
  virtual void Allocated(const PodRef& pod,
                         const std::vector<api::AllocatedResource>& allocated) = 0;
  // `pod`: nullopt when no pod was identified. `resource`: "" when the
  // failure is not an Allocate (a pod's assignment was refused).
  // `allocated`: every entry of the pod allocated so far (they keep their
  // devices; the state written must not lose them).
  virtual void Failed(const std::optional<PodRef>& pod, const std::string& resource,
                      const std::string& message,
                      const std::vector<api::AllocatedResource>& allocated) = 0;
};

struct ContainerAnswer {
  PodRef pod;
  std::string container;
  vendors::ContainerSpec spec;
  // The container was allocated before: kubelet repeated the call, or admits
  // the pod again after losing its checkpoint (AssignmentStore, "Admitted again").
  bool repeat = false;
};

struct PreferredRequest {
  std::vector<std::string> available;
  std::vector<std::string> must_include;
  int32_t size = 0;
};

class Allocator {
 public:
  // `refresh`, when set, re-reads the node's pods into the store (used once
  // when a lookup misses, in case the informer lags, and before every
  // fallback match); it returns whether the re-read worked. Pointers may be
  // null except state and store; all must outlive the Allocator.
  Allocator(std::string node, DeviceState* state, AssignmentStore* store, PluginMetrics* metrics,
            PodReporter* reporter, EnforcementOptions options, Logger log,
            std::function<Status()> refresh = nullptr);

  // kInvalidArgument: empty request, malformed or unknown slot id, a slot of
  // another resource, a pod uid or container name that cannot name a state
  // dir. kNotFound: no assignment matches (AssignmentStore::Match).
  // kAborted: the ids name no assignment and more than one pod could be the
  // caller, or a fallback could not be confirmed because the pods could not
  // be re-read. kFailedPrecondition: the assignment is for another node,
  // names a device not on this node, or its count differs. Errors from the
  // vendor driver are passed on.
  StatusOr<std::vector<ContainerAnswer>> Allocate(
      const std::string& resource, const std::vector<std::vector<std::string>>& requests);

  // For each request, the slots AssignmentStore::Preferred chooses for the
  // caller; otherwise must_include then available, up to size.
  std::vector<std::vector<std::string>> Preferred(const std::string& resource,
                                                  const std::vector<PreferredRequest>& requests);

  // Kubelet's view of its pods (its pod-resources API), asked when several
  // pods could be the caller of a call (AssignmentStore: "who is calling").
  // Without it such a call goes by the slot ids and the oldest pod. Set
  // before serving.
  void SetKubeletView(std::function<StatusOr<KubeletView>()> view) {
    kubelet_view_ = std::move(view);
  }
  // A wider re-read than `refresh`: every pod of the node that has not
  // ended, running ones included (PodSync::RefreshNotEnded). Used when a
  // lookup still misses after `refresh` worked: the caller may be a running
  // pod kubelet admits again, or one whose node agent marked it Running
  // before the watch delivered it. Set before serving.
  void SetWideRefresh(std::function<Status()> refresh) { wide_.fn = std::move(refresh); }

  // Recomputes the per-device usage gauges and the pending count.
  void RefreshUsageMetrics();
  // The per-container series of RefreshUsageMetrics: for each allocated
  // fractional container under libaccelpool-cuda, the memory its processes
  // hold per device (read from its accounting region) and its cap.
  void RefreshContainerUsage(const Snapshot& snap);
  // How many containers are remembered as having an unreadable accounting
  // region (for tests: only those still allocated are kept).
  size_t UnreadUsageContainers();

  // How long a kubelet call waits for a re-read of the node's pods (default
  // 2 s); one that takes longer goes on in the background for the next call.
  void SetRefreshBudget(std::chrono::milliseconds budget) { refresh_budget_ = budget; }
  ~Allocator();

 private:
  // (pod uid, container) of a state dir made during one Allocate call.
  using MadeDirs = std::vector<std::pair<std::string, std::string>>;

  // One kind of re-read of the node's pods, run one at a time.
  struct ReRead {
    std::function<Status()> fn;
    const char* scope = "";  // its label in accelpool_plugin_pod_rereads_total
    std::mutex mu;
    std::shared_future<Status> inflight;            // guarded by mu
    std::chrono::steady_clock::time_point started;  // of inflight; guarded by mu
  };

  // refresh_ (narrow) or wide_, one at a time, waiting at most until
  // `deadline` for it. A call joins a re-read that began after it did; one
  // that began before may have listed the pods before the caller's pod was
  // bound, so the call waits for it to end and then reads again (kubelet's
  // next call after a slow one would otherwise miss a pod bound meanwhile
  // and fail its admission).
  Status Refresh(ReRead& which, std::chrono::steady_clock::time_point deadline);
  Status Refresh() { return Refresh(narrow_, std::chrono::steady_clock::now() + refresh_budget_); }
  // One container request of a call; `answered`: the containers the call's
  // earlier requests were answered with (never matched again). `*sure` says
  // whether `*pod` is the caller for certain (matched, not by a guess among
  // pods of one shape), `*again` whether its container was allocated before
  // (a repeat, or presumed).
  StatusOr<ContainerAnswer> One(const std::string& resource, const Snapshot& snap,
                                const std::vector<std::string>& ids,
                                const AnsweredContainers& answered, std::optional<PodRef>* pod,
                                MadeDirs* made, bool* sure, bool* again);
  Status Enforce(const PodRef& pod, const std::string& container,
                 const std::vector<vendors::GrantedDevice>& grants, vendors::ContainerSpec* spec,
                 MadeDirs* made) const;

  const std::string node_;
  DeviceState* const state_;
  AssignmentStore* const store_;
  PluginMetrics* const metrics_;
  PodReporter* const reporter_;
  const EnforcementOptions options_;
  const Logger log_;
  const std::function<Status()> refresh_;
  std::function<StatusOr<KubeletView>()> kubelet_view_;
  std::chrono::milliseconds refresh_budget_{2000};
  ReRead narrow_;  // fn: refresh_
  ReRead wide_;    // fn: SetWideRefresh
  const StateDirs dirs_;
  std::mutex usage_mu_;                 // serialises RefreshUsageMetrics's container series
  std::set<std::string> usage_unread_;  // containers whose region failed to read; by usage_mu_
};

}  // namespace accelpool::plugin

#endif  // ACCELPOOL_PLUGIN_ALLOCATOR_H_
