// accelpool-device-plugin: the per-node device plugin (DaemonSet).
//
// Flags, wiring and lifecycle only; see docs/device-plugin.md. SIGTERM or
// SIGINT stops serving; SIGHUP re-reads the fake backend's inventory file.
// A named backend whose library is missing is waited for (one log line
// saying what to do, then retries with backoff) while /healthz and /metrics
// are served, so the pod does not crash-loop.
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "api/inventory_codec.h"
#include "api/task_priority.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/signals.h"
#include "common/strings.h"
#include "http/http.h"
#include "kube/client.h"
#include "kube/config.h"
#include "plugin/foreign_memory.h"
#include "plugin/health_events.h"
#include "plugin/kube_reporter.h"
#include "plugin/library_install.h"
#include "plugin/node_plugin.h"
#include "plugin/node_publisher.h"
#include "plugin/pod_resources.h"
#include "plugin/pod_sync.h"
#include "plugin/priority_watch.h"
#include "plugin/process_owner.h"
#include "plugin/state_dirs.h"
#include "vendors/backends.h"
#include "vendors/fake/fake_driver.h"

namespace accelpool::plugin {
namespace {

constexpr const char* kUsage = R"(usage: accelpool-device-plugin [flags]
  --backend=LIST            auto|fake|nvidia|ascend|hygon|thead|kunlunxin|metax|mthreads|
                            cambricon, comma-separated (default auto)
  --fake-inventory=FILE     inventory file for --backend=fake (see docs/device-plugin.md)
  --device-plugin-dir=DIR   kubelet's device-plugins dir (default /var/lib/kubelet/device-plugins)
  --node-name=NAME          this node (default $NODE_NAME)
  --kubeconfig=FILE         kubeconfig; default: $KUBECONFIG (a list is merged), then in-cluster
  --metrics-listen=H:P      serve /metrics there (default 0.0.0.0:9402; "" disables)
  --max-shares=N            slots per shareable device (default: vendor split, 10 for NVIDIA)
  --mig-strategy=S          mixed|single: NVIDIA MIG devices as nvidia.com/mig-<profile>
                            (default mixed) or as nvidia.com/gpu (single: one MIG layout
                            on every GPU of the node)
  --imex-channel=N          hand IMEX channel N (/dev/nvidia-caps-imex-channels/channelN) to
                            every container granted NVIDIA GPUs, for memory shared across the
                            nodes of a multi-node NVLink domain (default: none)
  --ascend-vnpu             serve shares of Ascend NPUs as dynamic vNPUs, made at container
                            start by the Ascend Docker Runtime from a virtualization
                            template (ASCEND_VNPU_SPECS); off: NPUs are granted whole
  --log-level=LEVEL         trace|debug|info|warn|error (default info)
  --rediscover-every=DUR    check the node's device set this often and serve a change seen
                            twice in a row (MIG layout changed, a card added or gone);
                            SIGHUP checks at once (default 60s; 0s: only at start and SIGHUP)
  --foreign-memory-min-mib=N
                            publish device memory in use that no grant accounts for (a
                            leftover process, a pod that sets NVIDIA_VISIBLE_DEVICES itself)
                            once it reaches N MiB: the scheduler then keeps whole-device pods
                            off the device and fits shares beside it (default 2048; 0: off)
  --foreign-memory-share-mib=N
                            memory each container holding a share may use beyond its grant
                            (its CUDA context; default 512)
  --foreign-memory-every=DUR
                            read the devices' memory in use this often (default 30s, at
                            least 5s); a change is published when two readings agree
  --foreign-memory-vendors=LIST
                            the backends whose devices' memory in use is measured, comma
                            separated (default nvidia; the fake backend always is): check
                            --print-memory-use on an idle node of another vendor before
                            adding it (its figures should be near 0; where a driver counts
                            what it reserves as used, every idle device would look held)
  --host-proc=DIR           the host's /proc (the chart mounts it read-only at /host/proc):
                            the Event for foreign memory then names each process holding
                            it, with its command and pod (default: none; PIDs only)
  --no-kube                 serve kubelet only: no pod lookup, no inventory publishing
  --print-inventory         discover, print the inventory JSON and exit
  --print-memory-use        discover, print the memory processes hold on each device (the
                            foreign memory check's input) as JSON and exit
  --state-root=DIR          host dir for per-container enforcement state
                            (default /var/lib/accelpool/containers)
  --state-dir-size-mib=N    cap each container's state dir with a tmpfs of N MiB and 64
                            files, mounted by the plugin (needs a privileged plugin and
                            mountPropagation Bidirectional on --state-root); where the mount
                            is refused the dirs stay uncapped, with a warning (default 0:
                            plain dirs, no cap; the chart passes 4 to a privileged plugin)
  --cuda-library=FILE       host path of libaccelpool-cuda.so
                            (default /usr/local/accelpool/lib/libaccelpool-cuda.so)
  --preload-file=FILE       host file mounted at /etc/ld.so.preload in fractional NVIDIA
                            containers (default /usr/local/accelpool/ld.so.preload)
  --no-preload              do not mount /etc/ld.so.preload into fractional NVIDIA containers
  --install-cuda-library=FILE
                            install FILE (the library in the image) at --cuda-library and
                            write --preload-file naming it, then exit: each file is replaced
                            by rename, never rewritten, so running containers keep theirs
  --no-enforcement          do not add the libaccelpool-cuda contract at all
  --nvidia-sharing=MODE     shim|mps: how fractional NVIDIA grants are held to their share
                            (default shim; mps needs an MPS control daemon on the node)
  --mps-pipe-dir=DIR        host dir of the MPS daemon's pipes, mounted at the same path
                            (default /tmp/nvidia-mps)
  --mps-shm-dir=DIR         host dir mounted at /dev/shm in MPS clients (default: none)
  --cdi                     also answer CDI device names
  --priority-every=DUR      task priority between fractional NVIDIA containers sharing a GPU
                            (nvidia.com/priority 0 high, 1 low): read the high-priority
                            containers' launch counters this often, and hold the launches of
                            the low-priority ones on a GPU where a high-priority one is busy
                            (default 1s; 0s: off, every container runs unheld)
  --priority-busy-for=DUR   how long a GPU stays busy after the last launch of a
                            high-priority container seen on it (default 5s)
  --high-priority-namespaces=LIST
                            comma-separated namespaces whose pods may have high task priority;
                            a container of another namespace's pod that asks for it (the
                            webhook refuses such a pod unless bypassed) runs as low priority,
                            logged and counted once per pod. "*" is every namespace (HAMi's
                            behaviour, for a cluster of one tenant); give the extender the same
                            list (default empty: none)
  --pod-resources-socket=PATH
                            kubelet's pod-resources API, asked which pod kubelet is admitting
                            when several wait with the same request (default
                            /var/lib/kubelet/pod-resources/kubelet.sock; "" disables)
  --assignment-key-dir=DIR  refuse an assignment of a pod kubelet may still admit unless its
                            accelpool.io/assignment-signature verifies with the key set in DIR
                            (the extender's --assignment-key-dir; default off)
)";

struct Flags {
  std::string backend = "auto";
  std::string fake_inventory;
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string node;
  std::string kubeconfig;
  std::string metrics_listen = "0.0.0.0:9402";
  std::string metrics_host;   // of --metrics-listen
  uint16_t metrics_port = 0;  // of --metrics-listen
  std::string max_shares = "0";
  std::string log_level = "info";
  std::string rediscover_every = "60s";
  std::chrono::seconds rediscover{60};
  std::string foreign_min_mib = "2048";
  std::string foreign_share_mib = "512";
  std::string state_dir_size_mib = "0";
  int64_t state_dir_size = 0;
  std::string foreign_every = "30s";
  std::string priority_every = "1s";
  std::string priority_busy_for = "5s";
  std::chrono::seconds priority_period{1};
  std::chrono::seconds priority_busy{5};
  std::string high_priority_namespaces;
  api::HighPriorityNamespaces high_priority;  // default: none
  std::string host_proc;
  std::string foreign_vendors = "nvidia";
  std::set<std::string> foreign_vendor_set;
  int64_t foreign_min = 2048;
  int64_t foreign_share = 512;
  std::chrono::seconds foreign_period{30};
  std::string state_root = "/var/lib/accelpool/containers";
  std::string cuda_library = "/usr/local/accelpool/lib/libaccelpool-cuda.so";
  std::string preload_file = "/usr/local/accelpool/ld.so.preload";
  std::string install_cuda_library;
  std::string nvidia_sharing = "shim";
  std::string mig_strategy = "mixed";
  std::string imex_channel;  // "" = none
  int32_t imex_channel_number = -1;
  std::string mps_pipe_dir = "/tmp/nvidia-mps";
  std::string mps_shm_dir;
  std::string assignment_key_dir;
  std::string pod_resources_socket = kDefaultPodResourcesSocket;
  bool no_kube = false;
  bool print_inventory = false;
  bool print_memory_use = false;
  bool no_preload = false;
  bool no_enforcement = false;
  bool cdi = false;
  bool ascend_vnpu = false;
};

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::map<std::string, std::string*> strings = {{"backend", &f.backend},
                                                 {"fake-inventory", &f.fake_inventory},
                                                 {"device-plugin-dir", &f.plugin_dir},
                                                 {"node-name", &f.node},
                                                 {"kubeconfig", &f.kubeconfig},
                                                 {"metrics-listen", &f.metrics_listen},
                                                 {"max-shares", &f.max_shares},
                                                 {"log-level", &f.log_level},
                                                 {"rediscover-every", &f.rediscover_every},
                                                 {"state-root", &f.state_root},
                                                 {"state-dir-size-mib", &f.state_dir_size_mib},
                                                 {"cuda-library", &f.cuda_library},
                                                 {"preload-file", &f.preload_file},
                                                 {"install-cuda-library", &f.install_cuda_library},
                                                 {"nvidia-sharing", &f.nvidia_sharing},
                                                 {"mig-strategy", &f.mig_strategy},
                                                 {"imex-channel", &f.imex_channel},
                                                 {"mps-pipe-dir", &f.mps_pipe_dir},
                                                 {"mps-shm-dir", &f.mps_shm_dir},
                                                 {"assignment-key-dir", &f.assignment_key_dir},
                                                 {"pod-resources-socket", &f.pod_resources_socket},
                                                 {"foreign-memory-min-mib", &f.foreign_min_mib},
                                                 {"foreign-memory-share-mib", &f.foreign_share_mib},
                                                 {"foreign-memory-every", &f.foreign_every},
                                                 {"priority-every", &f.priority_every},
                                                 {"priority-busy-for", &f.priority_busy_for},
                                                 {"host-proc", &f.host_proc},
                                                 {"foreign-memory-vendors", &f.foreign_vendors}};
  strings["high-priority-namespaces"] = &f.high_priority_namespaces;
  std::map<std::string, bool*> bools = {{"no-kube", &f.no_kube},
                                        {"print-inventory", &f.print_inventory},
                                        {"print-memory-use", &f.print_memory_use},
                                        {"no-preload", &f.no_preload},
                                        {"no-enforcement", &f.no_enforcement},
                                        {"cdi", &f.cdi},
                                        {"ascend-vnpu", &f.ascend_vnpu}};
  ACCELPOOL_RETURN_IF_ERROR(ParseFlagTable(argc, argv, strings, bools));
  if (f.node.empty()) {
    if (const char* env = std::getenv("NODE_NAME"); env != nullptr) {
      f.node = env;
    }
  }
  for (const auto& [value, flag] :
       {std::pair{&f.cuda_library, "--cuda-library"}, std::pair{&f.preload_file, "--preload-file"},
        std::pair{&f.plugin_dir, "--device-plugin-dir"},
        std::pair{&f.state_root, "--state-root"}}) {
    if (value->empty() || (*value)[0] != '/') {
      return InvalidArgumentError(std::string(flag) + " must be an absolute host path");
    }
  }
  if (f.node.empty() && !f.print_inventory && !f.print_memory_use &&
      f.install_cuda_library.empty()) {
    return InvalidArgumentError(
        "the node name is unknown; pass --node-name or set NODE_NAME "
        "from the downward API (spec.nodeName)");
  }
  if (f.node.empty()) {
    f.node = "local";
  }
  if (f.nvidia_sharing != "shim" && f.nvidia_sharing != "mps") {
    return InvalidArgumentError("--nvidia-sharing must be shim or mps, not \"" + f.nvidia_sharing +
                                "\"");
  }
  if (f.mig_strategy != "mixed" && f.mig_strategy != "single") {
    return InvalidArgumentError("--mig-strategy must be mixed or single, not \"" + f.mig_strategy +
                                "\"");
  }
  if (!f.imex_channel.empty()) {
    // NVIDIA's driver makes 2048 channels (NVreg_ImexChannelCount's default).
    if (f.imex_channel.size() > 4 ||
        f.imex_channel.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(f.imex_channel) > 2047) {
      return InvalidArgumentError("--imex-channel must be a channel number 0..2047, not \"" +
                                  f.imex_channel + "\"");
    }
    f.imex_channel_number = std::stoi(f.imex_channel);
  }
  if (f.nvidia_sharing == "mps" && (f.mps_pipe_dir.empty() || f.mps_pipe_dir[0] != '/')) {
    return InvalidArgumentError(
        "--mps-pipe-dir must be an absolute host path (the MPS control daemon's "
        "CUDA_MPS_PIPE_DIRECTORY)");
  }
  if (!f.assignment_key_dir.empty() && f.no_kube) {
    return InvalidArgumentError(
        "--assignment-key-dir checks the pods' assignments, which --no-kube does not read; "
        "drop one of them");
  }
  if (!f.mps_shm_dir.empty() && f.mps_shm_dir[0] != '/') {
    return InvalidArgumentError("--mps-shm-dir must be an absolute host path");
  }
  StatusOr<std::chrono::seconds> every = ParseDurationFlag("rediscover-every", f.rediscover_every);
  if (!every.ok()) {
    return every.status();
  }
  f.rediscover = *every;
  StatusOr<std::chrono::seconds> foreign_every =
      ParseDurationFlag("foreign-memory-every", f.foreign_every);
  if (!foreign_every.ok()) {
    return foreign_every.status();
  }
  if (foreign_every->count() < 5) {
    return InvalidArgumentError("--foreign-memory-every must be at least 5s (the plugin's tick)");
  }
  f.foreign_period = *foreign_every;
  StatusOr<std::chrono::seconds> priority_every =
      ParseDurationFlag("priority-every", f.priority_every);
  if (!priority_every.ok()) {
    return priority_every.status();
  }
  f.priority_period = *priority_every;
  StatusOr<std::chrono::seconds> priority_busy =
      ParseDurationFlag("priority-busy-for", f.priority_busy_for);
  if (!priority_busy.ok()) {
    return priority_busy.status();
  }
  if (priority_busy->count() < 1) {
    return InvalidArgumentError("--priority-busy-for must be at least 1s");
  }
  f.priority_busy = *priority_busy;
  StatusOr<api::HighPriorityNamespaces> high =
      api::HighPriorityNamespaces::Parse(f.high_priority_namespaces);
  if (!high.ok()) {
    return high.status();
  }
  f.high_priority = *high;
  for (size_t at = 0; at <= f.foreign_vendors.size();) {
    const size_t comma = std::min(f.foreign_vendors.find(',', at), f.foreign_vendors.size());
    const std::string name = f.foreign_vendors.substr(at, comma - at);
    at = comma + 1;
    if (name.empty()) continue;
    const std::optional<core::Vendor> v = core::ParseVendor(name);
    if (!v.has_value() || *v == core::Vendor::kIluvatar || *v == core::Vendor::kEnflame) {
      return InvalidArgumentError(
          "--foreign-memory-vendors: \"" + name +
          "\" is not a backend that measures memory in use; name some of nvidia, ascend, "
          "hygon, kunlunxin, metax, mthreads, cambricon, thead");
    }
    f.foreign_vendor_set.insert(name);
  }
  if (!f.host_proc.empty() && f.host_proc.front() != '/') {
    return InvalidArgumentError("--host-proc must be an absolute path (the host's /proc as "
                                "mounted in this container, e.g. /host/proc), not \"" +
                                f.host_proc + "\"");
  }
  for (const auto& [text, value, flag] :
       {std::tuple{&f.foreign_min_mib, &f.foreign_min, "--foreign-memory-min-mib"},
        std::tuple{&f.foreign_share_mib, &f.foreign_share, "--foreign-memory-share-mib"},
        std::tuple{&f.state_dir_size_mib, &f.state_dir_size, "--state-dir-size-mib"}}) {
    char* stop = nullptr;
    const long long v = std::strtoll(text->c_str(), &stop, 10);  // NOLINT(runtime/int)
    if (stop == text->c_str() || *stop != '\0' || v < 0 || v > (int64_t{1} << 30)) {
      return InvalidArgumentError(std::string(flag) + " must be a whole number of MiB, 0.." +
                                  std::to_string(int64_t{1} << 30) + ", not \"" + *text + "\"");
    }
    *value = v;
  }
  if (!f.metrics_listen.empty()) {
    // The port in full: a typo must not serve /metrics on a port nobody scrapes.
    const size_t colon = f.metrics_listen.rfind(':');
    const std::string port =
        colon == std::string::npos ? std::string() : f.metrics_listen.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535) {
      return InvalidArgumentError(
          "--metrics-listen must be HOST:PORT with a port 0..65535 (\"\" "
          "disables it), not \"" +
          f.metrics_listen + "\"");
    }
    f.metrics_host = f.metrics_listen.substr(0, colon);
    if (f.metrics_host.size() >= 2 && f.metrics_host.front() == '[' &&
        f.metrics_host.back() == ']') {
      f.metrics_host = f.metrics_host.substr(1, f.metrics_host.size() - 2);  // [::]:9402
    }
    f.metrics_port = static_cast<uint16_t>(std::stoi(port));
  }
  char* end = nullptr;
  long shares = std::strtol(f.max_shares.c_str(), &end, 10);  // NOLINT(runtime/int)
  if (end == f.max_shares.c_str() || *end != '\0' || shares < 0 || shares > 100) {
    return InvalidArgumentError("--max-shares must be 0..100 (0 = the vendor's default)");
  }
  return f;
}

// The message of the Node Event a device check's change gets.
std::string DescribeDeviceChange(const DeviceChange& c) {
  auto list = [](const std::vector<std::string>& ids) {
    return ids.empty() ? std::string("none") : StrJoin(ids, ", ");
  };
  std::string msg = "the device check serves a new device set (" + std::to_string(c.devices) +
                    " devices): added " + list(c.added) + "; removed " + list(c.removed);
  if (!c.held.empty()) {
    msg += ". Pods still hold removed devices: " + list(c.held) +
           "; delete them so that their controllers place them again";
  }
  return msg;
}

// What the foreign memory check measures, and how it names what holds memory.
struct HolderNaming {
  std::string host_proc;  // --host-proc; "" reads no process
  const PodSync* pods = nullptr;
  std::set<std::string> vendors;       // --foreign-memory-vendors (the fake backend always)
  UngrantedUses* ungranted = nullptr;  // pods using devices they were not granted
};

// The processes holding memory on each device whose backend lists them (of
// the measured backends). A failure is logged when it changes (`said`).
std::map<std::string, std::vector<vendors::ProcessMemory>> MemoryHolders(
    const std::set<vendors::VendorDriver*>& drivers, const HolderNaming& naming, const Logger& log,
    std::map<std::string, std::string>* said) {
  std::map<std::string, std::vector<vendors::ProcessMemory>> out;
  for (vendors::VendorDriver* d : drivers) {
    if (d == nullptr) continue;
    const std::string name(d->Name());
    if (name != "fake" && !naming.vendors.contains(name)) continue;
    StatusOr<std::map<std::string, std::vector<vendors::ProcessMemory>>> held = d->MemoryHolders();
    const std::string now = held.ok() || held.status().code() == StatusCode::kUnimplemented
                                ? ""
                                : held.status().ToString();
    if (now != (*said)["processes/" + name] && !now.empty()) {
      log.Warn("listing the processes that hold device memory failed; none are named",
               {{"backend", name}, {"error", now}});
    }
    (*said)["processes/" + name] = now;
    if (held.ok()) out.merge(*held);
  }
  return out;
}

// One round of the foreign memory check (plugin/foreign_memory.h): every
// backend's memory in use, against the node's grants; a published change is
// logged and, when a device gains or loses foreign memory, an Event on the
// Node naming the processes that hold it. `said` holds what was last logged
// per backend about its query, so a backend without one, or failing the same
// way, says so once.
void CheckForeignMemory(NodePlugin& plugin, const AssignmentStore& store, ForeignMemory& foreign,
                        PluginMetrics* metrics, KubeReporter* reporter, const std::string& node,
                        const HolderNaming& naming, const Logger& log,
                        std::map<std::string, std::string>* said) {
  const SnapshotPtr snap = plugin.state().Get();
  std::set<vendors::VendorDriver*> drivers(snap->drivers.begin(), snap->drivers.end());
  std::map<std::string, int64_t> used;
  for (vendors::VendorDriver* d : drivers) {
    if (d == nullptr) continue;
    const std::string name(d->Name());
    StatusOr<std::map<std::string, int64_t>> in_use =
        name == "fake" || naming.vendors.contains(name)
            ? d->MemoryInUse()
            : StatusOr<std::map<std::string, int64_t>>(UnimplementedError(
                  name + " is not in --foreign-memory-vendors (chart: "
                         "devicePlugin.foreignMemory.vendors); its library's figure can be "
                         "checked on an idle node with --print-memory-use before adding it"));
    std::string now = in_use.ok() ? "" : in_use.status().ToString();
    if (now != (*said)[name]) {
      if (in_use.ok()) {
        log.Info("reading device memory in use again", {{"backend", name}});
      } else if (in_use.status().code() == StatusCode::kUnimplemented) {
        log.Info("foreign device memory is not measured on this backend",
                 {{"backend", name}, {"reason", now}});
      } else {
        log.Warn("reading device memory in use failed; the devices keep their last figures",
                 {{"backend", name}, {"error", now}});
      }
      (*said)[name] = now;
    }
    if (in_use.ok()) used.merge(*in_use);
  }
  const std::vector<PodAssignment> assignments = store.All();
  std::vector<ForeignChange> changes = foreign.Observe(snap->inventories, used, assignments);
  // What holds memory on each device, every round: a pod using a device it
  // was not granted is reported whatever the amount (two NVML calls per GPU
  // and a few small /proc reads per process).
  const std::map<std::string, std::vector<vendors::ProcessMemory>> holders =
      MemoryHolders(drivers, naming, log, said);
  const auto owner_of = [&naming](int64_t pid) { return ReadProcessOwner(naming.host_proc, pid); };
  const auto pod_of = [&naming](const std::string& uid) {
    return naming.pods != nullptr ? naming.pods->PodKeyOfUid(uid) : std::string();
  };
  if (naming.ungranted != nullptr) {
    for (const UngrantedUse& u :
         naming.ungranted->Observe(snap->inventories, holders, owner_of, pod_of, assignments)) {
      const std::string text = DescribeUngrantedUse(u, node);
      log.Warn("a pod uses a device it was not granted", {{"pod", u.holder.pod},
                                                          {"device", u.device},
                                                          {"pid", u.holder.pid},
                                                          {"command", u.holder.command},
                                                          {"used_mib", u.holder.used_mib}});
      const std::optional<PodRef> pod =
          naming.pods != nullptr ? naming.pods->PodOfUid(u.holder.pod_uid) : std::nullopt;
      if (reporter != nullptr && pod.has_value()) {
        reporter->PodEvent(*pod, kube::EventKind::kWarning, kUngrantedDeviceMemoryReason, text,
                           "DeviceUse");
      }
    }
    if (metrics != nullptr) {
      metrics->SetUngrantedUses(static_cast<double>(naming.ungranted->Current()));
    }
  }
  constexpr size_t kHoldersNamed = 3;
  for (ForeignChange& c : changes) {
    // Every holder for the log line and the metric; the largest for the
    // Node's Event.
    std::vector<ForeignHolder> all;
    if (const auto it = holders.find(c.device); c.after_mib > c.before_mib && it != holders.end()) {
      NameHolders(it->second, owner_of, pod_of, assignments, it->second.size(), &c);
      all = c.holders;
      NameHolders(it->second, owner_of, pod_of, assignments, kHoldersNamed, &c);
    }
    for (const ForeignHolder& h : all) {
      if (metrics != nullptr) metrics->ForeignHolderNamed(HolderKind(h));
    }
    const std::string text = DescribeForeignChange(c);
    nlohmann::json named = nlohmann::json::array();
    for (const ForeignHolder& h : all) {
      named.push_back({{"pid", h.pid},
                       {"used_mib", h.used_mib},
                       {"command", h.command},
                       {"pod", h.pod},
                       {"pod_uid", h.pod_uid},
                       {"granted", h.granted}});
    }
    log.Log(c.after_mib > 0 ? LogLevel::kWarn : LogLevel::kInfo,
            c.after_mib > 0 ? "device memory in use that no grant accounts for"
                            : "device memory no grant accounted for is freed",
            {{"device", c.device},
             {"foreign_mib", c.after_mib},
             {"before_mib", c.before_mib},
             {"used_mib", c.used_mib},
             {"granted_mib", c.granted_mib},
             {"holders", named.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)}});
    if (reporter != nullptr && (c.before_mib == 0 || c.after_mib == 0)) {
      reporter->NodeEvent(node,
                          c.after_mib > 0 ? kube::EventKind::kWarning : kube::EventKind::kNormal,
                          c.after_mib > 0 ? kForeignMemoryReason : kForeignMemoryFreedReason, text,
                          "ForeignMemory");
    }
  }
  if (metrics != nullptr) {
    for (const auto& [id, r] : foreign.Readings()) {
      metrics->SetMemoryInUse(std::string(core::VendorName(r.vendor)), id,
                              static_cast<double>(r.used_mib), static_cast<double>(r.foreign_mib));
    }
  }
}

// True when SIGTERM or SIGINT is pending (main blocks them in every thread),
// which it then takes.
bool StopPending() {
  const sigset_t stop_set = SignalSet({SIGTERM, SIGINT});
  timespec none{0, 0};
  return sigtimedwait(&stop_set, nullptr, &none) > 0;
}

int Fatal(const Logger& log, const std::string& what, const Status& st) {
  log.Error(what, {{"error", st.ToString()}});
  std::fprintf(stderr, "accelpool-device-plugin: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

int PrintInventory(std::vector<vendors::VendorDriverPtr>& drivers) {
  api::InventoryDocument doc;
  int rc = 0;
  for (auto& d : drivers) {
    // What the plugin's start would serve: a device that cannot be read is
    // left out, with its error logged.
    StatusOr<std::vector<core::NodeInventory>> invs = d->DiscoverPartial();
    if (!invs.ok()) {
      std::fprintf(stderr, "%s: %s\n", std::string(d->Name()).c_str(),
                   invs.status().ToString().c_str());
      rc = 1;
      continue;
    }
    for (auto& inv : *invs) {
      doc.inventories.push_back(std::move(inv));
    }
  }
  std::printf("%s\n", api::InventoryToJson(doc).dump(2).c_str());
  return doc.inventories.empty() ? 1 : rc;
}

// {"devices": {"<id>": MiB in use}, "not_measured": {"<backend>": "why"},
//  "processes": {"<id>": [{"pid", "used_mib", "command", "pod_uid"}]}}: what
// the foreign memory check reads, for comparison with the vendor's tool
// (command and pod_uid with --host-proc).
int PrintMemoryUse(std::vector<vendors::VendorDriverPtr>& drivers, const std::string& host_proc) {
  nlohmann::json out = {{"devices", nlohmann::json::object()},
                        {"not_measured", nlohmann::json::object()},
                        {"processes", nlohmann::json::object()}};
  int rc = 0;
  for (auto& d : drivers) {
    const std::string name(d->Name());
    if (StatusOr<std::vector<core::NodeInventory>> invs = d->DiscoverPartial(); !invs.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), invs.status().ToString().c_str());
      rc = 1;
      continue;
    }
    StatusOr<std::map<std::string, int64_t>> used = d->MemoryInUse();
    if (!used.ok()) {
      out["not_measured"][name] = used.status().ToString();
      continue;
    }
    for (const auto& [id, mib] : *used) out["devices"][id] = mib;
    StatusOr<std::map<std::string, std::vector<vendors::ProcessMemory>>> held = d->MemoryHolders();
    if (!held.ok()) {
      out["processes_not_listed"][name] = held.status().ToString();
      continue;
    }
    for (const auto& [id, procs] : *held) {
      nlohmann::json list = nlohmann::json::array();
      for (const vendors::ProcessMemory& p : procs) {
        const ProcessOwner o = ReadProcessOwner(host_proc, p.pid);
        list.push_back({{"pid", p.pid},
                        {"used_mib", p.used_mib},
                        {"command", o.command},
                        {"pod_uid", o.place.pod_uid}});
      }
      out["processes"][id] = std::move(list);
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return rc;
}

// --install-cuda-library: the chart's init container on NVIDIA nodes.
int InstallLibrary(const Flags& flags, const Logger& log) {
  LibraryInstall install{flags.install_cuda_library, flags.cuda_library, flags.preload_file,
                         EnforcementOptions().library_container};
  StatusOr<LibraryInstallResult> r = InstallEnforcementLibrary(install);
  if (!r.ok()) {
    return Fatal(log, "installing the enforcement library", r.status());
  }
  auto said = [](bool written) { return std::string(written ? "installed" : "unchanged"); };
  log.Info("enforcement library ready on this node", {{"library", flags.cuda_library},
                                                      {"library_file", said(r->library_written)},
                                                      {"bytes", r->library_bytes},
                                                      {"preload_file", flags.preload_file},
                                                      {"preload", said(r->preload_written)}});
  return 0;
}

int Run(const Flags& flags) {
  LogOptions lo;
  lo.level = flags.log_level;
  StatusOr<Logger> root = NewLogger("accelpool-device-plugin", lo);
  if (!root.ok()) {
    std::fprintf(stderr, "accelpool-device-plugin: %s\n", root.status().ToString().c_str());
    return 2;
  }
  Logger log = *root;
  // The vendor backends write through spdlog's default logger: their lines
  // take --log-level and the JSON format too.
  RouteDefaultLogTo(log.Child("vendor"));
  std::vector<std::string> skipped;
  vendors::BackendOptions bo{flags.backend,
                             flags.node,
                             flags.fake_inventory,
                             static_cast<int32_t>(std::stoi(flags.max_shares)),
                             flags.mig_strategy == "single",
                             flags.ascend_vnpu,
                             flags.imex_channel_number};
  if (!flags.install_cuda_library.empty()) {
    return InstallLibrary(flags, log);
  }
  if (flags.print_inventory) {
    StatusOr<std::vector<vendors::VendorDriverPtr>> drivers = vendors::MakeBackends(bo, &skipped);
    if (!drivers.ok()) {
      return Fatal(log, "backends", drivers.status());
    }
    return PrintInventory(*drivers);
  }
  if (flags.print_memory_use) {
    StatusOr<std::vector<vendors::VendorDriverPtr>> drivers = vendors::MakeBackends(bo, &skipped);
    if (!drivers.ok()) {
      return Fatal(log, "backends", drivers.status());
    }
    return PrintMemoryUse(*drivers, flags.host_proc);
  }

  // /healthz and /metrics come up first: they are served while a named
  // backend's library is still missing.
  std::atomic<bool> serving{false};
  MetricsRegistry registry;
  StatusOr<std::unique_ptr<PluginMetrics>> metrics = PluginMetrics::New(registry);
  if (!metrics.ok()) {
    return Fatal(log, "metrics", metrics.status());
  }
  std::unique_ptr<http::HttpServer> metrics_server;
  if (!flags.metrics_listen.empty()) {
    http::ServerOptions so;
    so.host = flags.metrics_host;
    so.port = flags.metrics_port;
    so.log = log.Child("http");
    metrics_server = http::NewHttpServer(so);
    metrics_server->Handle("GET", "/metrics", [&registry](const http::Request&) {
      http::Response r;
      r.headers["content-type"] = kMetricsContentType;
      r.body = registry.Serialize();
      return r;
    });
    // Live as long as the process runs (a plugin waiting for a library or a
    // device is not restarted for it); ready only once it serves kubelet, so
    // that a rollout of a plugin that cannot serve stops, and the DaemonSet's
    // unavailable count shows it.
    metrics_server->Handle("GET", "/healthz", [&serving](const http::Request&) {
      return http::Response::Json(
          200, serving.load() ? R"({"ok":true,"serving":true})" : R"({"ok":true,"serving":false})");
    });
    metrics_server->Handle("GET", "/readyz", [&serving](const http::Request&) {
      return serving.load()
                 ? http::Response::Json(200, R"({"ready":true})")
                 : http::Response::Json(
                       503, R"({"ready":false,"reason":"not serving kubelet yet: see the log"})");
    });
    Status st = metrics_server->Start();
    if (!st.ok()) {
      return Fatal(log, "metrics server", st);
    }
  }

  std::string last_wait;
  StatusOr<std::vector<vendors::VendorDriverPtr>> drivers = vendors::RetryWhileUnavailable(
      [&] {
        skipped.clear();
        return vendors::MakeBackends(bo, &skipped);
      },
      vendors::Backoff{},
      [&](const Status& why, std::chrono::milliseconds delay) {
        const LogFields fields = {{"reason", why.message()},
                                  {"retry_in_s", static_cast<int64_t>(delay.count() / 1000)}};
        if (why.message() != last_wait) {
          log.Warn(
              "the backend's library is not loadable; serving /healthz and /metrics and "
              "retrying with backoff: make the library visible in this container as the "
              "reason says",
              fields);
          last_wait = why.message();
        } else {
          log.Debug("backend library still missing", fields);
        }
        const sigset_t stop_set = SignalSet({SIGTERM, SIGINT});
        const auto secs = std::chrono::duration_cast<std::chrono::seconds>(delay);
        timespec wait{static_cast<time_t>(secs.count()),
                      static_cast<long>((delay - secs).count() * 1000000)};  // NOLINT(runtime/int)
        return sigtimedwait(&stop_set, nullptr, &wait) < 0;
      });
  if (!drivers.ok()) {
    if (drivers.status().code() == StatusCode::kCancelled) {
      log.Info("stopped before any backend was ready");
      if (metrics_server != nullptr) {
        metrics_server->Stop();
      }
      return 0;
    }
    return Fatal(log, "backends", drivers.status());
  }
  if (!last_wait.empty()) {
    log.Info("the backend's library loads now; starting");
  }
  for (const std::string& s : skipped) {
    log.Info("backend skipped: no devices of that vendor", {{"reason", s}});
  }
  std::vector<vendors::fake::FakeDriver*> fakes;
  for (auto& d : *drivers) {
    if (auto* f = dynamic_cast<vendors::fake::FakeDriver*>(d.get()); f != nullptr) {
      fakes.push_back(f);
    }
  }

  // The files fractional NVIDIA containers mount: checked now and with every
  // state-dir sweep (5 min), said when that changes.
  bool mounts_library = false;
  for (const auto& d : *drivers) {
    mounts_library |=
        !flags.no_enforcement && flags.nvidia_sharing == "shim" && d->Name() == "nvidia";
  }
  std::string library_missing;
  auto check_library = [&, m = metrics->get()] {
    if (!mounts_library) return;
    std::string missing =
        MissingEnforcementFiles(flags.cuda_library, flags.preload_file, !flags.no_preload);
    if (missing != library_missing) {
      if (!missing.empty()) {
        log.Warn("the enforcement library is not installed", {{"reason", missing}});
      } else {
        log.Info("the enforcement library is installed", {{"library", flags.cuda_library}});
      }
    }
    library_missing = missing;
    if (m != nullptr) m->SetEnforcementFilesMissing(!missing.empty());
  };
  check_library();

  AssignmentStore store;
  // Only a plugin that makes state dirs removes them (--no-enforcement: none).
  const StateDirs state_dirs(flags.state_root);
  const StateDirs* sweep_dirs = flags.no_enforcement ? nullptr : &state_dirs;
  std::unique_ptr<kube::KubeClient> client;
  std::unique_ptr<KubeReporter> reporter;
  std::unique_ptr<api::AssignmentKeyRing> keys;  // outlives pods
  std::unique_ptr<PodSync> pods;
  std::unique_ptr<NodePublisher> publisher;
  if (!flags.no_kube) {
    StatusOr<kube::KubeConfig> kc = kube::LoadDefault(flags.kubeconfig, kube::ProcessEnv());
    if (!kc.ok()) {
      return Fatal(log, "kubernetes config", kc.status());
    }
    kc->metrics = &registry;
    StatusOr<std::unique_ptr<kube::KubeClient>> c = kube::NewKubeClient(*kc);
    if (!c.ok()) {
      return Fatal(log, "kubernetes client", c.status());
    }
    client = std::move(c).value();
    reporter = std::make_unique<KubeReporter>(client.get(), log.Child("reporter"));
    pods = std::make_unique<PodSync>(client.get(), flags.node, &store, reporter.get(),
                                     log.Child("pods"), sweep_dirs);
    if (!flags.assignment_key_dir.empty()) {
      StatusOr<std::unique_ptr<api::AssignmentKeyRing>> ring =
          api::AssignmentKeyRing::Open(flags.assignment_key_dir);
      if (!ring.ok()) {
        return Fatal(log, "--assignment-key-dir", ring.status());
      }
      keys = std::move(ring).value();
      keys->OnReloadError([log, m = metrics->get()](const Status& st) {
        log.Warn("re-reading the assignment keys failed; keeping the keys read before",
                 {{"error", st.ToString()}});
        if (m != nullptr) m->AssignmentKeyReloadFailed();
      });
      pods->SetAssignmentKeys(keys.get());
      log.Info("verifying assignment signatures",
               {{"key_dir", flags.assignment_key_dir}, {"signing_key", keys->SigningKeyId()}});
    }
    pods->SetHighPriorityNamespaces(flags.high_priority);
    if (PluginMetrics* m = metrics->get(); m != nullptr) {
      pods->OnRefused([m](const std::string& reason) { m->AssignmentRefused(reason); });
      pods->OnPriorityNotGranted([m] { m->PriorityNotGranted(); });
    }
    publisher = std::make_unique<NodePublisher>(client.get(), flags.node, log.Child("node"),
                                                vendors::BackendVendors(flags.backend));
    pods->Start();
    // In one-second slices: a SIGTERM meanwhile ends the plugin before it
    // registers a socket kubelet would then find gone.
    bool synced = false;
    for (int s = 0; s < 30 && !synced; ++s) {
      synced = pods->WaitForSync(std::chrono::seconds(1));
      if (!synced && StopPending()) {
        log.Info("shutting down before serving", {{"waited_for", "the node's pods"}});
        pods->Stop();
        if (metrics_server != nullptr) {
          metrics_server->Stop();
        }
        return 0;
      }
    }
    if (!synced) {
      log.Warn("pods not listed within 30 s; serving anyway, lookups refresh on demand");
    }
  }

  NodePluginOptions po;
  po.node = flags.node;
  po.plugin_dir = flags.plugin_dir;
  po.rediscover_every = flags.rediscover;
  po.enforcement.enabled = !flags.no_enforcement;
  po.enforcement.preload = !flags.no_preload;
  po.enforcement.state_root = flags.state_root;
  po.enforcement.state_dir_size_mib = flags.state_dir_size;
  if (PluginMetrics* m = metrics->get(); m != nullptr) {
    m->SetStateDirsUncapped(mounts_library && flags.state_dir_size == 0);
  }
  po.enforcement.library_host = flags.cuda_library;
  po.enforcement.preload_host = flags.preload_file;
  po.enforcement.cdi = flags.cdi;
  po.enforcement.sharing =
      flags.nvidia_sharing == "mps" ? NvidiaSharing::kMps : NvidiaSharing::kShim;
  po.enforcement.mps_pipe_dir = flags.mps_pipe_dir;
  po.enforcement.mps_shm_dir = flags.mps_shm_dir;
  po.enforcement.priority = flags.priority_period.count() > 0;
  // Health changes become Events on the Node, at most one per device a
  // minute (a flapping device's changes are folded; the tick below sends them).
  HealthEvents health_events(std::chrono::seconds(60));
  PodSync* pod_sync = pods.get();
  // Memory in use outside every grant, published with the inventory.
  // Only against the node's pods: without them (--no-kube) no grant is
  // known, and every byte in use would look foreign.
  const bool foreign_on = flags.foreign_min > 0 && pods != nullptr;
  ForeignMemory foreign({.min_mib = std::max<int64_t>(1, flags.foreign_min),
                         .per_share_mib = flags.foreign_share,
                         .confirm = 2});
  std::map<std::string, std::string> foreign_said;
  UngrantedUses ungranted;
  const HolderNaming naming{flags.host_proc, pod_sync, flags.foreign_vendor_set, &ungranted};
  // What a previous run published stays until this run has read the devices
  // twice: a restart (a rolling upgrade) must not hand a busy GPU out whole.
  if (publisher != nullptr && foreign_on) {
    StatusOr<std::vector<core::NodeInventory>> found = publisher->Found();
    if (found.ok()) {
      foreign.Restore(*found);
    } else {
      log.Warn("reading the node's published inventory failed; foreign memory is measured afresh",
               {{"error", found.status().ToString()}});
    }
  }
  NodePlugin plugin(
      po, std::move(drivers).value(), &store, metrics->get(), reporter.get(), log.Child("plugin"),
      pod_sync == nullptr ? std::function<Status()>() : [pod_sync] { return pod_sync->Refresh(); });
  if (pod_sync != nullptr) {
    plugin.allocator().SetWideRefresh([pod_sync] { return pod_sync->RefreshNotEnded(); });
  }
  NodePublisher* pub = publisher.get();
  // The served inventories with the published foreign memory figures, on the
  // Node (a no-op unless something changed); a failure is retried next tick.
  // On the plugin's publisher thread (a device change, and the 5 s tick's
  // PublishAgain): an apiserver that does not answer holds up neither the
  // main loop nor kubelet's side.
  auto publish = [pub, log, &foreign, &keys](std::vector<core::NodeInventory> invs) {
    foreign.Apply(&invs);
    StatusOr<bool> wrote = pub->Publish(invs);
    if (!wrote.ok()) {
      log.Warn("publishing the inventory failed; retried with backoff (5 s up to 5 min)",
               {{"error", wrote.status().ToString()}});
    }
    // The key ids this plugin verifies with, for a key rotation to see when
    // a new key has reached this node.
    wrote = pub->PublishKeyIds(keys != nullptr ? keys->KeyIds() : std::vector<std::string>());
    if (!wrote.ok()) {
      log.Warn("publishing the assignment key ids failed", {{"error", wrote.status().ToString()}});
    }
  };
  if (pub != nullptr) {
    plugin.OnInventory(publish);
  }
  auto post_health = [rep = reporter.get(), node = flags.node](const HealthNotice& n) {
    rep->NodeEvent(node, n.healthy ? kube::EventKind::kNormal : kube::EventKind::kWarning,
                   n.EventReason(), n.Message(), "Health");
  };
  if (KubeReporter* rep = reporter.get(); rep != nullptr) {
    plugin.OnDevicesChanged([rep, node = flags.node](const DeviceChange& c) {
      rep->NodeEvent(node, c.held.empty() ? kube::EventKind::kNormal : kube::EventKind::kWarning,
                     kDevicesChangedReason, DescribeDeviceChange(c));
    });
    plugin.OnHealthChanged([&health_events, post_health](const vendors::HealthEvent& e) {
      std::optional<HealthNotice> now = health_events.Changed(
          {e.device_id, std::string(core::VendorName(e.vendor)), e.healthy, e.reason, 0},
          HealthEvents::Clock::now());
      if (now) post_health(*now);
    });
  }
  std::unique_ptr<PodResourcesClient> pod_resources;
  if (!flags.pod_resources_socket.empty()) {
    pod_resources = std::make_unique<PodResourcesClient>(flags.pod_resources_socket,
                                                         std::chrono::milliseconds(1000));
    plugin.allocator().SetKubeletView([pr = pod_resources.get()] { return pr->List(); });
    struct stat st {};
    if (::stat(flags.pod_resources_socket.c_str(), &st) != 0) {
      log.Warn(
          "kubelet's pod-resources socket is not there (yet); pods waiting on this node with "
          "the same request can only be told apart by their slot ids until it is",
          {{"socket", flags.pod_resources_socket}});
    }
  }
  Status started = plugin.Start();
  while (!started.ok()) {
    log.Warn("not serving yet; retrying discovery in 60 s (or at once on SIGHUP)",
             {{"reason", started.ToString()}});
    const sigset_t wait_set = SignalSet({SIGTERM, SIGINT, SIGHUP});
    timespec wait{60, 0};
    const int sig = sigtimedwait(&wait_set, nullptr, &wait);
    if (sig == SIGHUP) {
      // As on a serving plugin: the operator says the devices are there now.
      log.Info("SIGHUP: discovering again and re-reading the fake inventory",
               {{"backends", static_cast<int64_t>(fakes.size())}});
      for (auto* f : fakes) {
        f->Reload();
      }
    } else if (sig > 0) {
      log.Info("shutting down before serving", {{"waited_for", "a device to serve"}});
      if (pods != nullptr) {
        pods->Stop();
      }
      if (metrics_server != nullptr) {
        metrics_server->Stop();
      }
      return 0;
    }
    started = plugin.Start();
  }
  serving.store(true);
  metrics->get()->SetServing(true);
  log.Info("serving",
           {{"node", flags.node}, {"resources", static_cast<int64_t>(plugin.Resources().size())}});
  // Task priority between the fractional NVIDIA containers of a GPU
  // (docs/device-plugin.md, "Task priority"); the thread stops, and releases
  // its holds, before the watch and the dirs go.
  StateDirs priority_dirs(flags.state_root);
  std::unique_ptr<PriorityWatch> priority;
  std::jthread priority_thread;
  if (po.enforcement.enabled && po.enforcement.priority &&
      po.enforcement.sharing == NvidiaSharing::kShim) {
    const std::chrono::milliseconds every = flags.priority_period;
    priority = std::make_unique<PriorityWatch>(
        PriorityWatchOptions{
            .every = every,
            .busy_for = flags.priority_busy,
            .hold_ahead = std::max<std::chrono::milliseconds>(std::chrono::seconds(3), 3 * every)},
        &store, &priority_dirs, metrics->get(), log.Child("priority"));
    priority_thread = std::jthread([w = priority.get()](std::stop_token st) { w->Run(st); });
    log.Info("task priority on", {{"high_priority_namespaces",
                                   flags.high_priority.Nobody() ? std::string("none")
                                                                : flags.high_priority.ToString()}});
  }

  const sigset_t set = SignalSet({SIGTERM, SIGINT, SIGHUP});
  // Every 5 s: usage gauges from the assignments (off kubelet's path; a
  // scrape sees a new pod's share within one tick), and the inventory and
  // the assignment key ids again (no-ops unless an earlier write failed or
  // something changed). Every
  // 5 min, starting now: the state dirs of pods that went while the plugin
  // was not watching (deleted pods' dirs go at once).
  constexpr int kSweepEvery = 60;
  const int foreign_every =
      static_cast<int>(std::max<int64_t>(1, flags.foreign_period.count() / 5));
  int ticks = 0;
  while (true) {
    // Not before the node's pods are listed: a grant not read yet would
    // make its container's memory look foreign.
    if (foreign_on && ticks % foreign_every == 0 &&
        pods->WaitForSync(std::chrono::milliseconds(0))) {
      CheckForeignMemory(plugin, store, foreign, metrics->get(), reporter.get(), flags.node,
                         naming, log, &foreign_said);
    }
    if (ticks++ % kSweepEvery == 0) {
      if (pods != nullptr) {
        static_cast<void>(pods->SweepStateDirs());  // logged there
      }
      check_library();
    }
    timespec tick{5, 0};
    int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig < 0) {
      if (reporter != nullptr) {
        for (const HealthNotice& n : health_events.Due(HealthEvents::Clock::now())) {
          post_health(n);
        }
      }
      plugin.allocator().RefreshUsageMetrics();
      if (pub != nullptr) {
        // The inventory and the key ids, on the plugin's publisher thread
        // (`publish` above).
        plugin.PublishAgain();
      }
      continue;
    }
    if (sig == SIGHUP) {
      log.Info("SIGHUP: checking the node's devices and re-reading the fake inventory",
               {{"backends", static_cast<int64_t>(fakes.size())}});
      for (auto* f : fakes) {
        f->Reload();
      }
      plugin.CheckDevicesNow();
      continue;
    }
    log.Info("shutting down", {{"signal", sig}});
    break;
  }
  plugin.Stop();
  if (pods != nullptr) {
    pods->Stop();
  }
  if (metrics_server != nullptr) {
    metrics_server->Stop();
  }
  return 0;
}

}  // namespace
}  // namespace accelpool::plugin

int main(int argc, char** argv) {
  // The vendor backends log with spdlog's default logger: keep stdout for
  // --print-inventory's JSON.
  accelpool::RouteDefaultLogToStderr();
  // Block the signals before any thread starts so only sigwait sees them; a
  // peer that closed its connection (kube-scheduler after its timeout, a
  // scraper) must cost one failed write, never the process.
  accelpool::BlockDaemonSignals();
  // Before any thread: new apiserver connections stop re-reading the system
  // CA bundle (the clients share one trust store, see http.h).
  accelpool::http::DisableDefaultCaPaths();
  auto flags = accelpool::plugin::ParseFlags(argc, argv);
  if (!flags.ok()) {
    return accelpool::FlagsExit(flags.status(), "accelpool-device-plugin",
                                accelpool::plugin::kUsage);
  }
  return accelpool::plugin::Run(*flags);
}
