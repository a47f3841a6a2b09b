#include "plugin/fuzz/fuzz_entry.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "api/assignment_signature.h"
#include "plugin/allocator.h"
#include "plugin/assignment_store.h"
#include "plugin/device_state.h"
#include "plugin/foreign_memory.h"
#include "plugin/pod_sync.h"
#include "plugin/process_owner.h"
#include "plugin/state_dirs.h"
#include "vendors/fake/fake_driver.h"

namespace accelpool::plugin::fuzz {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "node_pods: %s\n", what.c_str());
  std::abort();
}

// The node: a temporary folder with the fake backend's inventory file and the
// state root, removed when the process exits.
struct Fixture {
  Fixture() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ap-fuzz-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) Fail("mkdtemp failed");
    dir = tmpl;
    std::ofstream(dir / "inv.json") << R"({"version":1,"inventories":[
        {"vendor":"nvidia","count":2,"model":"H200","memory_mib":143771,
         "devices":[{"index":0,"id":"GPU-a"},{"index":1,"id":"GPU-b"}]},
        {"vendor":"ascend","profile":"ascend-910c-x16","super_node":"sp-3"}]})";
    driver = std::make_unique<vendors::fake::FakeDriver>(
        vendors::fake::FakeDriverOptions{(dir / "inv.json").string(), "node-a"});
    auto invs = driver->Discover();
    if (!invs.ok()) Fail("the fake inventory does not load: " + invs.status().ToString());
    inventories = *invs;
    state.Reset(*invs, {driver.get(), driver.get()});
    std::filesystem::create_directories(dir / "keys");
    std::ofstream(dir / "keys" / "signing") << "k1";
    std::ofstream(dir / "keys" / "k1") << "fuzz-key-0123456789-0123456789-0123456789";
    auto ring = api::AssignmentKeyRing::Open((dir / "keys").string());
    if (!ring.ok()) Fail("the key directory does not load: " + ring.status().ToString());
    keys = std::move(ring).value();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(Get().dir, ec);
    });
  }
  static Fixture& Get() {
    static Fixture* f = new Fixture();  // lives for the process, as libFuzzer expects
    return *f;
  }
  std::string StateRoot() const { return (dir / "containers").string(); }

  std::filesystem::path dir;
  std::unique_ptr<vendors::fake::FakeDriver> driver;
  std::vector<core::NodeInventory> inventories;
  DeviceState state;
  std::unique_ptr<api::AssignmentKeyRing> keys;
};

// The pod with its assignment signed for its uid on node-a (unchanged when
// it has no string assignment or uid).
nlohmann::json Signed(nlohmann::json pod, api::AssignmentKeyRing& keys) {
  if (!pod.is_object() || !pod.contains("metadata") || !pod["metadata"].is_object()) return pod;
  nlohmann::json& meta = pod["metadata"];
  const auto ann = meta.find("annotations");
  if (ann == meta.end() || !ann->is_object()) return pod;
  const auto text = ann->find("accelpool.io/assignment");
  const auto uid = meta.find("uid");
  if (text == ann->end() || !text->is_string() || uid == meta.end() || !uid->is_string()) {
    return pod;
  }
  StatusOr<std::string> sig =
      keys.Sign(uid->get<std::string>(), "node-a", text->get<std::string>());
  if (sig.ok()) (*ann)["accelpool.io/assignment-signature"] = *sig;
  return pod;
}

std::vector<std::string> Strings(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const nlohmann::json& e : j) {
      if (e.is_string()) out.push_back(e.get<std::string>());
    }
  }
  return out;
}

// obj[key] when it is a string, else "" (the harness must not throw on what
// the fuzzer writes).
std::string StringAt(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string UidOf(const nlohmann::json& pod) {
  if (!pod.is_object()) return "";
  const auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return "";
  const auto uid = meta->find("uid");
  return uid != meta->end() && uid->is_string() ? uid->get<std::string>() : "";
}

// The container's devices of `resource` in the store, or -1 when the store
// does not hold the container as allocated.
int64_t AllocatedDevices(const AssignmentStore& store, const ContainerAnswer& a,
                         const std::string& resource) {
  for (const PodAssignment& p : store.All()) {
    if (p.pod.uid != a.pod.uid) continue;
    for (const api::AssignedContainer& c : p.assignment.containers) {
      if (c.name == a.container && c.resource == resource && Holds(p.allocated, c)) {
        return static_cast<int64_t>(c.devices.size());
      }
    }
  }
  return -1;
}

int Allocate(Allocator& allocator, const AssignmentStore& store, const nlohmann::json& req,
             const std::set<std::string>& refused) {
  const std::string resource = StringAt(req, "resource");
  std::vector<std::vector<std::string>> ids;
  if (const auto it = req.find("ids"); it != req.end() && it->is_array()) {
    for (const nlohmann::json& c : *it) ids.push_back(Strings(c));
  }
  StatusOr<std::vector<ContainerAnswer>> answers = allocator.Allocate(resource, ids);
  if (!answers.ok()) {
    if (answers.status().message().empty()) Fail("an Allocate error without a reason");
    return 0;
  }
  if (answers->size() != ids.size()) Fail("Allocate answered another number of containers");
  for (size_t i = 0; i < answers->size(); ++i) {
    if (refused.count((*answers)[i].pod.uid) != 0) {
      Fail("Allocate answered for pod " + (*answers)[i].pod.Key() +
           ", whose latest assignment was refused");
    }
    const int64_t n = AllocatedDevices(store, (*answers)[i], resource);
    if (n != static_cast<int64_t>(ids[i].size())) {
      Fail("container " + (*answers)[i].container + " of pod " + (*answers)[i].pod.Key() +
           " answered for " + std::to_string(ids[i].size()) + " ids; the store holds " +
           std::to_string(n) + " allocated devices of " + resource + " for it");
    }
  }
  return static_cast<int>(answers->size());
}

void Preferred(Allocator& allocator, const nlohmann::json& req) {
  std::vector<PreferredRequest> requests;
  if (const auto it = req.find("requests"); it != req.end() && it->is_array()) {
    for (const nlohmann::json& r : *it) {
      if (!r.is_object()) continue;
      const nlohmann::json size = r.value("size", nlohmann::json());
      requests.push_back({Strings(r.value("available", nlohmann::json())),
                          Strings(r.value("must", nlohmann::json())),
                          size.is_number_integer() ? size.get<int32_t>() : 0});
    }
  }
  const auto answers = allocator.Preferred(StringAt(req, "resource"), requests);
  if (answers.size() != requests.size()) Fail("Preferred answered another number of requests");
  for (size_t i = 0; i < answers.size(); ++i) {
    const PreferredRequest& r = requests[i];
    std::set<std::string> offered(r.available.begin(), r.available.end());
    offered.insert(r.must_include.begin(), r.must_include.end());
    if (static_cast<int64_t>(answers[i].size()) > std::max<int64_t>(r.size, 0)) {
      Fail("a preferred set larger than kubelet asked for");
    }
    for (const std::string& id : answers[i]) {
      if (offered.count(id) == 0) Fail("a preferred id kubelet did not offer: " + id);
    }
    for (const std::string& id : r.must_include) {
      if (!answers[i].empty() &&
          std::find(answers[i].begin(), answers[i].end(), id) == answers[i].end()) {
        Fail("a preferred set without the must-include id " + id);
      }
    }
  }
}

// A 'v' line as kubelet's view; what is not an object or a string is skipped.
KubeletView ViewFrom(const nlohmann::json& obj) {
  KubeletView v;
  for (const auto& [pod, containers] : obj.items()) {
    auto& out = v[pod];
    if (!containers.is_object()) continue;
    for (const auto& [name, resources] : containers.items()) {
      std::vector<std::string> held = Strings(resources);
      out[name] = std::set<std::string>(held.begin(), held.end());
    }
  }
  return v;
}

// True when a pod of the store holds a grant on `device`.
bool Granted(const AssignmentStore& store, const std::string& uid, const std::string& device) {
  for (const PodAssignment& p : store.All()) {
    if (p.pod.uid != uid) continue;
    for (const api::AssignedContainer& c : p.assignment.containers) {
      for (const api::AssignedDevice& d : c.devices) {
        if (d.id == device) return true;
      }
    }
  }
  return false;
}

// An 'h' line: its processes written under the fixture's proc root, named and
// described as the foreign memory check does for GPU-a (as a device of the
// vendor its "vendor" index picks, whose words the texts use), and looked
// through for pods using GPU-a or GPU-b without a grant (the same processes
// on both).
void NameHoldersOf(const nlohmann::json& req, const std::filesystem::path& proc,
                   const PodSync& sync, const AssignmentStore& store,
                   const std::vector<core::NodeInventory>& inventories) {
  std::error_code ec;
  std::filesystem::remove_all(proc, ec);
  std::vector<vendors::ProcessMemory> listed;
  if (const auto it = req.find("processes"); it != req.end() && it->is_array()) {
    for (const nlohmann::json& p : *it) {
      if (!p.is_object() || listed.size() >= 8) continue;
      const nlohmann::json pid = p.value("pid", nlohmann::json());
      const nlohmann::json mib = p.value("used_mib", nlohmann::json());
      vendors::ProcessMemory m;
      m.pid = pid.is_number_integer() ? pid.get<int64_t>() % 100000 : 1;
      m.used_mib =
          mib.is_number_integer() ? std::max<int64_t>(-1, mib.get<int64_t>() % 200000) : -1;
      listed.push_back(m);
      if (m.pid <= 0) continue;
      const std::filesystem::path dir = proc / std::to_string(m.pid);
      std::filesystem::create_directories(dir, ec);
      std::ofstream(dir / "comm", std::ios::binary) << StringAt(p, "comm");
      std::ofstream(dir / "cgroup", std::ios::binary) << StringAt(p, "cgroup");
    }
  }
  // The device's vendor ("vendor": an index), whose words the texts use.
  struct Kind {
    core::Vendor vendor;
    const char* model;
  };
  static const Kind kKinds[] = {{core::Vendor::kNvidia, "NVIDIA H200"},
                                {core::Vendor::kAscend, "Ascend910B3"},
                                {core::Vendor::kHygon, "K100-AI"},
                                {core::Vendor::kKunlunxin, "P800"},
                                {core::Vendor::kMetax, "C500"},
                                {core::Vendor::kMthreads, "MTT S4000"},
                                {core::Vendor::kCambricon, "MLU370-X8"},
                                {core::Vendor::kThead, "PPU-ZW810E"},
                                {core::Vendor::kUnknown, ""}};
  const nlohmann::json vendor_at = req.value("vendor", nlohmann::json());
  const Kind& kind =
      kKinds[vendor_at.is_number_unsigned() ? vendor_at.get<uint64_t>() % std::size(kKinds) : 0];
  ForeignChange c{.device = "GPU-a",
                  .vendor = kind.vendor,
                  .model = kind.model,
                  .before_mib = 0,
                  .after_mib = 8192,
                  .used_mib = 9000,
                  .granted_mib = 0,
                  .shares = 0,
                  .device_mib = 143771,
                  .holders = {},
                  .more_holders = 0};
  NameHolders(
      listed, [&](int64_t pid) { return ReadProcessOwner(proc.string(), pid); },
      [&](const std::string& uid) { return sync.PodKeyOfUid(uid); }, store.All(), 3, &c);
  for (const ForeignHolder& h : c.holders) {
    for (char ch : h.command) {
      if (ch < 0x20 || ch > 0x7e) Fail("a holder's command with a byte that is not printable");
    }
    if (!h.pod_uid.empty() &&
        (h.pod_uid.size() != 36 ||
         h.pod_uid.find_first_not_of("0123456789abcdef-") != std::string::npos)) {
      Fail("a holder's pod uid that is not one: " + h.pod_uid);
    }
    if (!h.pod.empty() && h.pod_uid.empty()) Fail("a pod named for a process in no pod");
  }
  const std::string text = DescribeForeignChange(c);
  if (text.size() >= 1024) Fail("a description longer than an Event note: " + text);
  try {
    static_cast<void>(nlohmann::json(text).dump());
  } catch (const std::exception& e) {
    Fail(std::string("a description that is not valid UTF-8: ") + e.what());
  }
  const std::map<std::string, std::vector<vendors::ProcessMemory>> holders = {{"GPU-a", listed},
                                                                              {"GPU-b", listed}};
  const auto owner_of = [&](int64_t pid) { return ReadProcessOwner(proc.string(), pid); };
  const auto pod_of = [&](const std::string& uid) { return sync.PodKeyOfUid(uid); };
  UngrantedUses uses;
  const std::vector<PodAssignment> all = store.All();
  const std::vector<UngrantedUse> fresh = uses.Observe(inventories, holders, owner_of, pod_of, all);
  if (fresh.size() != uses.Current()) Fail("a first round whose uses are not all new");
  for (const UngrantedUse& u : fresh) {
    if (u.device != "GPU-a" && u.device != "GPU-b") Fail("an ungranted use of " + u.device);
    if (u.holder.pod.empty() || Granted(store, u.holder.pod_uid, u.device)) {
      Fail("an ungranted use by a pod not named, or granted the device: " + u.holder.pod_uid);
    }
    UngrantedUse spoken = u;
    spoken.vendor = kind.vendor;
    spoken.model = kind.model;
    try {
      static_cast<void>(nlohmann::json(DescribeUngrantedUse(spoken, "node-a")).dump());
    } catch (const std::exception& e) {
      Fail(std::string("an ungranted-use text that is not valid UTF-8: ") + e.what());
    }
  }
  if (!uses.Observe(inventories, holders, owner_of, pod_of, all).empty()) {
    Fail("an ungranted use reported twice while it lasts");
  }
}

}  // namespace

int FuzzNodePods(const uint8_t* data, size_t size) {
  Fixture& f = Fixture::Get();
  AssignmentStore store;
  EnforcementOptions enforcement;
  enforcement.state_root = f.StateRoot();
  Allocator allocator("node-a", &f.state, &store, nullptr, nullptr, enforcement, Logger());
  std::optional<KubeletView> view;  // 'v' lines
  allocator.SetKubeletView([&view]() -> StatusOr<KubeletView> {
    if (!view.has_value()) return UnavailableError("no pod-resources view in this input");
    return *view;
  });
  const StateDirs dirs(f.StateRoot());
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger(), &dirs);
  std::set<std::string> uids;
  std::set<std::string> refused;  // uids whose latest applied version was refused
  bool signing = false;
  int answered = 0;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty()) {
    const size_t eol = rest.find('\n');
    const std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (line.empty()) continue;
    const nlohmann::json obj = nlohmann::json::parse(line.substr(1), nullptr, false);
    if (obj.is_discarded()) continue;
    switch (line[0]) {
      case 'k':
        signing = true;
        sync.SetAssignmentKeys(f.keys.get());
        break;
      case 's':
      case 'p': {
        const nlohmann::json pod = line[0] == 's' ? Signed(obj, *f.keys) : obj;
        const std::string uid = UidOf(pod);
        if (!uid.empty()) {
          uids.insert(uid);
          // Independently of the store: is this version's assignment refused?
          if (EntryFromPod(pod, "node-a", signing ? f.keys.get() : nullptr).ok()) {
            refused.erase(uid);
          } else {
            refused.insert(uid);
          }
        }
        sync.Apply(pod);
        break;
      }
      case 'P':
        if (std::string uid = UidOf(obj); !uid.empty()) {
          uids.insert(uid);
          refused.erase(uid);
        }
        sync.Forget(obj);
        break;
      case 'a':
        if (obj.is_object()) answered += Allocate(allocator, store, obj, refused);
        break;
      case 'g':
        if (obj.is_object()) Preferred(allocator, obj);
        break;
      case 'v':
        if (obj.is_object()) view = ViewFrom(obj);
        break;
      case 'h':
        if (obj.is_object()) NameHoldersOf(obj, f.dir / "proc", sync, store, f.inventories);
        break;
      default:
        break;
    }
  }
  for (const std::string& uid : uids) {
    sync.Forget({{"metadata", {{"uid", uid}, {"namespace", "fuzz"}, {"name", "gone"}}}});
  }
  if (!store.All().empty() || store.PendingContainers() != 0) {
    Fail("the store still holds pods after every pod was deleted");
  }
  for (const std::string& uid : uids) {
    if (!sync.PodKeyOfUid(uid).empty()) Fail("pod uid " + uid + " is still named once deleted");
  }
  // The state dirs go on PodSync's remover thread.
  if (!sync.WaitForRemovals(std::chrono::seconds(30))) {
    Fail("the state dirs of deleted pods were not removed within 30 s");
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(f.StateRoot(), ec)) {
    Fail("state dir " + e.path().filename().string() + " outlived its pod");
  }
  return answered;
}

}  // namespace accelpool::plugin::fuzz
