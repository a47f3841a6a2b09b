#include "plugin/pod_sync.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "api/inventory_codec.h"
#include "api/signature_test_util.h"
#include "core/profiles.h"
#include "cuda/priority_format.h"
#include "kube/fake_api_test.h"
#include "kube/fake_apiserver.h"
#include "kube/hooked_client.h"
#include "plugin/foreign_memory.h"
#include "plugin/health_events.h"
#include "plugin/kube_reporter.h"
#include "plugin/node_publisher.h"
#include "plugin/priority_file.h"
#include "plugin/priority_watch.h"
#include "plugin/test_util.h"

namespace accelpool::plugin {
namespace {

using nlohmann::json;
using testing::Ctr;
using testing::Dev;

constexpr const char* kPods = "/api/v1/namespaces/default/pods";

std::string AssignmentText(const std::string& node, const std::string& slot_device = "GPU-a",
                           const std::string& container = "main") {
  api::Assignment a;
  a.node = node;
  a.policy = "accelpool";
  a.containers = {Ctr(container, "nvidia.com/gpu", core::Vendor::kNvidia,
                      {Dev(slot_device, 0, 1, 1024, 100, false)})};
  return api::SerializeAssignment(a);
}

// Entries of `resource` for the containers `names` (what a reporter writes).
std::vector<api::AllocatedResource> Of(const std::vector<std::string>& names,
                                       const std::string& resource = "nvidia.com/gpu") {
  std::vector<api::AllocatedResource> out;
  for (const std::string& n : names) out.push_back({n, resource});
  return out;
}

// The containers an allocation record names, each once.
std::vector<std::string> Names(const api::Allocation& a) {
  return testing::RecordingReporter::Names(a.allocated);
}

// A pod with one container "main" asking for one nvidia.com/gpu.
json PodJson(const std::string& name, const std::string& node, json annotations,
             const std::string& phase = "Pending") {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name},
        {"namespace", "default"},
        {"uid", "uid-" + name},
        {"creationTimestamp", "2026-11-30T02:00:00Z"},
        {"annotations", annotations}}},
      {"spec",
       {{"nodeName", node},
        {"containers", json::array({{{"name", "main"},
                                     {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}})}}},
      {"status", {{"phase", phase}}}};
}

TEST(EntryFromPodTest, ReadsAssignmentsAndRejectsBadOnes) {
  api::Allocation done;
  done.allocated = Of({"main"});
  struct Case {
    std::string name;
    json pod;
    StatusCode want;
    bool want_entry;
    size_t want_allocated;
    size_t want_presumed = 0;
  };
  const std::vector<Case> cases = {
      {"pending", PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}),
       StatusCode::kOk, true, 0},
      {"allocated before a restart",
       PodJson("p", "node-a",
               {{"accelpool.io/assignment", AssignmentText("node-a")},
                {"accelpool.io/allocation", api::SerializeAllocation(done)}}),
       StatusCode::kOk, true, 1},
      // An Allocate failed and the pod was never admitted: kubelet turned it
      // away, so it is no entry at all (nothing pending, nothing held).
      {"a failed Allocate, never admitted",
       PodJson("p", "node-a",
               {{"accelpool.io/assignment", AssignmentText("node-a")},
                {"accelpool.io/allocation",
                 R"({"version":1,"phase":"Failed","containers":["main"],"message":"x"})"}}),
       StatusCode::kOk, false, 0},
      // Admitted (a container restarted after kubelet lost its checkpoint,
      // and that Allocate failed): the containers allocated before keep
      // their place.
      {"allocated before a failed Allocate of an admitted pod",
       PodJson("p", "node-a",
               {{"accelpool.io/assignment", AssignmentText("node-a")},
                {"accelpool.io/allocation",
                 R"({"version":1,"phase":"Failed","containers":["main"],"message":"x"})"}},
               "Running"),
       StatusCode::kOk, true, 1},
      // Kubelet makes every Allocate of a pod at admission, before it reports
      // any container status: an admitted pod whose allocation record was
      // never written has its containers presumed allocated.
      {"admitted, allocation never written",
       PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}, "Running"),
       StatusCode::kOk, true, 0, 1},
      {"admitted, still Pending with container statuses",
       [] {
         json p = PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
         p["status"]["containerStatuses"] =
             json::array({{{"name", "main"}, {"state", {{"waiting", json::object()}}}}});
         return p;
       }(),
       StatusCode::kOk, true, 0, 1},
      {"admitted and recorded",
       PodJson("p", "node-a",
               {{"accelpool.io/assignment", AssignmentText("node-a")},
                {"accelpool.io/allocation", api::SerializeAllocation(done)}},
               "Running"),
       StatusCode::kOk, true, 1, 0},
      {"no assignment", PodJson("p", "node-a", json::object()), StatusCode::kOk, false, 0},
      {"finished",
       PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}, "Succeeded"),
       StatusCode::kOk, false, 0},
      {"malformed", PodJson("p", "node-a", {{"accelpool.io/assignment", "{\"version\":1,"}}),
       StatusCode::kInvalidArgument, false, 0},
      {"foreign node",
       PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-b")}}),
       StatusCode::kFailedPrecondition, false, 0},
      {"not an object", json::array(), StatusCode::kInvalidArgument, false, 0},
      {"a container the pod does not have",
       PodJson("p", "node-a",
               {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-a", "other")}}),
       StatusCode::kInvalidArgument, false, 0},
      {"a container name that is a path",
       PodJson("p", "node-a",
               {{"accelpool.io/assignment",
                 R"({"version":1,"node":"node-a","containers":[{"name":"../../etc",)"
                 R"("vendor":"nvidia","resource":"nvidia.com/gpu","devices":[]}]})"}}),
       StatusCode::kInvalidArgument, false, 0},
      {"a uid that is a path",
       [] {
         json p = PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
         p["metadata"]["uid"] = "../x";
         return p;
       }(),
       StatusCode::kInvalidArgument, false, 0},
      {"annotations of the wrong type", PodJson("p", "node-a", json::array({1, 2})),
       StatusCode::kOk, false, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto e = EntryFromPod(c.pod, "node-a");
    EXPECT_EQ(e.status().code(), c.want) << e.status().ToString();
    if (e.ok()) {
      EXPECT_EQ(e->has_value(), c.want_entry);
      if (e->has_value()) {
        EXPECT_EQ((*e)->allocated.size(), c.want_allocated);
        EXPECT_EQ((*e)->presumed.size(), c.want_presumed);
      }
    } else if (c.pod.is_object()) {
      EXPECT_NE(e.status().message().find("delete the pod"), std::string::npos);
    }
  }
}

// An admitted pod whose allocation record was lost must not stay a possible
// caller: it would make every later pod of the same shape ambiguous.
TEST(EntryFromPodTest, AnAdmittedPodIsNoCallerWhileAnotherPodWaits) {
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  sync.Apply(PodJson("admitted", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}},
                     "Running"));
  EXPECT_EQ(store.PendingContainers(), 0u);
  sync.Apply(
      PodJson("next", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-b")}}));
  EXPECT_EQ(store.PendingContainers(), 1u);
  // Kubelet's ids name nobody (it picked them itself): the only pending pod.
  auto m = store.Match("nvidia.com/gpu", {"GPU-c::4"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->pod.name, "next");
  // Steering goes to the waiting pod's slots, not the admitted one's.
  PreferredAnswer pref = store.Preferred("nvidia.com/gpu", {"GPU-a::1", "GPU-b::1"}, {}, 1);
  ASSERT_TRUE(pref.slots.has_value());
  EXPECT_EQ(*pref.slots, std::vector<std::string>{"GPU-b::1"});
}

// A refresh's read that began before the pod ended (kubelet rejected it and
// the watch delivered Failed) must not bring it back as pending: its slots
// would name it for the pod created in its place.
TEST(EntryFromPodTest, AnOlderVersionOfAnEndedPodIsNotAppliedAgain) {
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  const json pending =
      PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
  sync.Apply(pending);
  EXPECT_EQ(store.PendingContainers(), 1u);
  json failed = pending;
  failed["status"]["phase"] = "Failed";
  sync.Apply(failed);
  EXPECT_EQ(store.PendingContainers(), 0u);
  sync.Apply(pending);  // read by a refresh before the watch's Failed
  EXPECT_EQ(store.PendingContainers(), 0u);
}

// When nobody else could be calling, an Allocate for the admitted pod (one
// kubelet makes after the pod reported a status) still finds it.
TEST(EntryFromPodTest, APresumedContainerAnswersWhenNobodyElseCouldBeCalling) {
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  sync.Apply(PodJson("admitted", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}},
                     "Running"));
  PreferredAnswer pref = store.Preferred("nvidia.com/gpu", {"GPU-a::1", "GPU-b::1"}, {}, 1);
  ASSERT_TRUE(pref.slots.has_value());
  EXPECT_EQ(*pref.slots, std::vector<std::string>{"GPU-a::1"});
  auto m = store.Match("nvidia.com/gpu", {"GPU-b::3"});  // ids that name nobody
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->pod.name, "admitted");
  store.MarkAllocated(m->pod.uid, m->container.resource, {m->container.name});
  EXPECT_EQ(store.AllocatedContainers(m->pod.uid), Of({"main"}));
  EXPECT_EQ(store.All().front().presumed.size(), 0u);
}

// Kubelet admits an admitted-looking pod container by container: an init
// container, then a regular one on the init container's device (kubelet
// reuses it and sends the same ids), then another. Each call must find its
// own container, not repeat the one before.
TEST(EntryFromPodTest, PresumedContainersAreFoundInKubeletsOrder) {
  api::Assignment a;
  a.node = "node-a";
  a.policy = "accelpool";
  a.containers = {
      Ctr("warmup", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 2048, 100, false)},
          core::ContainerKind::kInit),
      Ctr("a", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 2048, 100, false)}),
      Ctr("b", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-b", 1, 2, 3072, 200, false)})};
  json pod = PodJson("multi", "node-a", {{"accelpool.io/assignment", api::SerializeAssignment(a)}},
                     "Running");
  json gpu = {{"limits", {{"nvidia.com/gpu", "1"}}}};
  pod["spec"]["initContainers"] = json::array({{{"name", "warmup"}, {"resources", gpu}}});
  pod["spec"]["containers"] =
      json::array({{{"name", "a"}, {"resources", gpu}}, {{"name", "b"}, {"resources", gpu}}});
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  sync.Apply(pod);
  ASSERT_EQ(store.All().size(), 1u);
  const std::set<std::string> available = {"GPU-a::1", "GPU-b::2", "GPU-c::0"};
  for (const auto& [container, must] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"warmup", {}}, {"a", {"GPU-a::1"}}, {"b", {}}}) {
    SCOPED_TRACE(container);
    PreferredAnswer pref = store.Preferred("nvidia.com/gpu", available, must, 1);
    ASSERT_TRUE(pref.slots.has_value());
    auto m = store.Match("nvidia.com/gpu", *pref.slots);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->container.name, container);
    store.MarkAllocated(m->pod.uid, m->container.resource, {m->container.name});
  }
  EXPECT_EQ(store.PendingContainers(), 0u);
}

TEST(UnassignedRequestsTest, WhatAPodKubeletMayStillAdmitAsksForWithoutAnAssignment) {
  auto assignment = api::ParseAssignment(AssignmentText("node-a"));
  ASSERT_TRUE(assignment.ok());
  auto with = [](json pod, const std::string& ptr, json v) {
    pod[json::json_pointer(ptr)] = std::move(v);
    return pod;
  };
  const json plain = PodJson("p", "node-a", json::object());
  struct Case {
    std::string name;
    json pod;
    const api::Assignment* assignment;
    std::vector<UnassignedRequest> want;
  };
  const std::vector<Case> cases = {
      {"no assignment", plain, nullptr, {{"main", "nvidia.com/gpu", 1}}},
      {"covered by the assignment", plain, &*assignment, {}},
      {"running", with(plain, "/status/phase", "Running"), nullptr, {}},
      {"no phase yet",
       with(plain, "/status", json::object()),
       nullptr,
       {{"main", "nvidia.com/gpu", 1}}},
      {"admitted",
       with(plain, "/status/containerStatuses", json::array({{{"name", "main"}}})),
       nullptr,
       {}},
      {"deleted before kubelet admitted it (it may still)",
       with(plain, "/metadata/deletionTimestamp", "2026-11-30T03:00:00Z"),
       nullptr,
       {{"main", "nvidia.com/gpu", 1}}},
      {"deleted after kubelet admitted it",
       with(with(plain, "/metadata/deletionTimestamp", "2026-11-30T03:00:00Z"),
            "/status/containerStatuses", json::array({{{"name", "main"}}})),
       nullptr,
       {}},
      {"an init container beside a covered one",
       with(
           plain, "/spec/initContainers",
           json::array({{{"name", "warm"},
                         {"resources", {{"requests", {{"nvidia.com/gpu", "2"}, {"cpu", "1"}}}}}}})),
       &*assignment,
       {{"warm", "nvidia.com/gpu", 2}}},
      {"limits win, odd quantities count as any",
       with(plain, "/spec/containers/0/resources",
            {{"requests", {{"nvidia.com/gpu", 1}, {"huawei.com/Ascend910C", "0"}}},
             {"limits", {{"nvidia.com/gpu", "1.5"}, {"memory", "1Gi"}}}}),
       nullptr,
       {{"main", "nvidia.com/gpu", -1}}},
      {"malformed spec", with(plain, "/spec/containers", "nope"), nullptr, {}},
      {"not an object", json::array(), nullptr, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(UnassignedRequestsOf(c.pod, c.assignment), c.want);
  }
}

TEST(UnassignedRequestsTest, PodsWithoutAValidAssignmentBlockTheFallback) {
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  // The victim's assignment names GPU-b::1; kubelet sends GPU-a::9.
  sync.Apply(PodJson("victim", "node-a",
                     {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-b")}}));
  const std::vector<std::string> ids = {"GPU-a::9"};
  ASSERT_TRUE(store.Match("nvidia.com/gpu", ids).ok());
  const std::vector<json> strangers = {
      PodJson("default-scheduler", "node-a", json::object()),
      PodJson("malformed", "node-a", {{"accelpool.io/assignment", "{"}}),
      PodJson("foreign", "node-a", {{"accelpool.io/assignment", AssignmentText("node-b")}}),
  };
  for (const json& stranger : strangers) {
    SCOPED_TRACE(stranger["metadata"]["name"].get<std::string>());
    sync.Apply(stranger);
    auto m = store.Match("nvidia.com/gpu", ids);
    EXPECT_EQ(m.status().code(), StatusCode::kAborted) << m.status().ToString();
    // Once the stranger is admitted (or gone), the victim is the only caller again.
    json admitted = stranger;
    admitted["status"]["containerStatuses"] = json::array({{{"name", "main"}}});
    sync.Apply(admitted);
    EXPECT_TRUE(store.Match("nvidia.com/gpu", ids).ok());
    sync.Apply(stranger);
    sync.Forget(stranger);
    EXPECT_TRUE(store.Match("nvidia.com/gpu", ids).ok());
  }
}

// An assignment must be what kubelet will ask for: each entry names the
// resource its container asks through, with one device per device asked
// for. One that does not (fewer devices, no resource, another resource) is
// refused as malformed, with an Event, and the pod's requests count as asked
// without an assignment: the pod's own Allocate must not be steered to the
// only other pod waiting with its shape.
TEST(UnassignedRequestsTest, AnAssignmentThatDoesNotMatchThePodsRequestsIsRefused) {
  const auto pod = [](const std::string& name, const std::string& count, const std::string& text) {
    json p = PodJson(name, "node-a", {{"accelpool.io/assignment", text}});
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = count;
    return p;
  };
  const auto text = [](const std::string& resource, std::vector<api::AssignedDevice> devices) {
    api::Assignment a;
    a.node = "node-a";
    a.containers = {Ctr("main", resource, core::Vendor::kNvidia, std::move(devices))};
    return api::SerializeAssignment(a);
  };
  const std::vector<api::AssignedDevice> two = {Dev("GPU-a", 0, 1, 1024, 100, false),
                                                Dev("GPU-b", 1, 1, 1024, 100, false)};
  AssignmentStore store;
  testing::RecordingReporter reporter;
  PodSync sync(nullptr, "node-a", &store, &reporter, Logger());
  sync.Apply(pod("victim", "2", text("nvidia.com/gpu", two)));
  const std::vector<std::string> ids = {"GPU-a::8", "GPU-b::8"};
  ASSERT_TRUE(store.Match("nvidia.com/gpu", ids).ok());
  struct Case {
    std::string name;
    json pod;
  };
  const std::vector<Case> strangers = {
      {"fewer devices than asked for",
       pod("fewer", "2", text("nvidia.com/gpu", {Dev("GPU-a", 0, 2, 1024, 100, false)}))},
      {"no resource", pod("unnamed", "2", text("", two))},
      {"a resource the container does not ask for",
       pod("other", "2", text("nvidia.com/mig-1g.18gb", two))},
  };
  for (const Case& c : strangers) {
    SCOPED_TRACE(c.name);
    const size_t events = reporter.entries().size();
    sync.Apply(c.pod);
    EXPECT_TRUE(store.All().size() == 1) << "the stranger's assignment is not stored";
    auto m = store.Match("nvidia.com/gpu", ids);
    EXPECT_EQ(m.status().code(), StatusCode::kAborted) << m.status().ToString();
    ASSERT_EQ(reporter.entries().size(), events + 1);
    EXPECT_EQ(reporter.entries().back().pod,
              "default/" + c.pod["metadata"]["name"].get<std::string>());
    EXPECT_NE(reporter.entries().back().message.find("delete the pod"), std::string::npos);
    sync.Forget(c.pod);
    EXPECT_TRUE(store.Match("nvidia.com/gpu", ids).ok());
  }
  // An admitted pod's entries are not checked: its grants go on counting.
  json admitted = strangers[0].pod;
  admitted["status"]["phase"] = "Running";
  auto e = EntryFromPod(admitted, "node-a");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->has_value());
}

// On a node with a plugin per vendor, the NVIDIA plugin's record of a
// container that also asks for an Ascend die says nothing of the die: the
// Ascend plugin still waits for that Allocate. A record of an older plugin
// (names only) stands for every resource of the container, as it meant.
TEST(EntryFromPodTest, WhatIsAllocatedIsReadPerResource) {
  api::Assignment a;
  a.node = "node-a";
  a.containers = {
      Ctr("main", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-a", 0, 1, 1024, 100, false)}),
      Ctr("main", "huawei.com/Ascend910C", core::Vendor::kAscend, {Dev("NPU-2", 2, 0)})};
  const auto pod = [&](const std::string& record) {
    json p = PodJson("p", "node-a",
                     {{"accelpool.io/assignment", api::SerializeAssignment(a)},
                      {"accelpool.io/allocation", record}});
    p["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910C"] = "1";
    return p;
  };
  const auto pending = [](const json& p) {
    auto e = EntryFromPod(p, "node-a");
    EXPECT_TRUE(e.ok() && e->has_value()) << e.status().ToString();
    if (!e.ok() || !e->has_value()) return size_t{0};
    AssignmentStore store;
    store.Upsert((*e)->pod, (*e)->assignment, (*e)->allocated, (*e)->presumed);
    return store.PendingContainers();
  };
  api::Allocation nvidia;
  nvidia.allocated = Of({"main"});
  EXPECT_EQ(pending(pod(api::SerializeAllocation(nvidia))), 1u);
  AssignmentStore store;
  auto e = EntryFromPod(pod(api::SerializeAllocation(nvidia)), "node-a");
  ASSERT_TRUE(e.ok() && e->has_value());
  store.Upsert((*e)->pod, (*e)->assignment, (*e)->allocated, (*e)->presumed);
  auto m = store.Match("huawei.com/Ascend910C", {"NPU-9::0"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->container.resource, "huawei.com/Ascend910C");
  EXPECT_FALSE(m->repeat);
  // Both written: nothing waits.
  api::Allocation both = nvidia;
  both.allocated.push_back({"main", "huawei.com/Ascend910C"});
  EXPECT_EQ(pending(pod(api::SerializeAllocation(both))), 0u);
  // An older plugin's record.
  EXPECT_EQ(pending(pod(R"({"version":1,"phase":"Allocated","containers":["main"]})")), 0u);
}

// What the extender writes passes: a fractional share (one device), several
// devices, an init container and a sidecar with their own entries, and a
// 910C module (both dies for a count of 2).
TEST(EntryFromPodTest, AssignmentsAsTheExtenderWritesThemPass) {
  api::Assignment a;
  a.node = "node-a";
  a.containers = {
      Ctr("warm", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-a", 0, 3, 2048, 200, false)},
          core::ContainerKind::kInit),
      Ctr("proxy", "nvidia.com/gpu", core::Vendor::kNvidia, {Dev("GPU-b", 1, 3, 1024, 100, false)},
          core::ContainerKind::kSidecar),
      Ctr("main", "nvidia.com/gpu", core::Vendor::kNvidia,
          {Dev("GPU-a", 0, 1, 4096, 250, false), Dev("GPU-b", 1, 1, 4096, 250, false)}),
      Ctr("main", "huawei.com/Ascend910C", core::Vendor::kAscend,
          {Dev("NPU-0", 2, 0), Dev("NPU-1", 3, 0)}),
  };
  json p = PodJson("p", "node-a", {{"accelpool.io/assignment", api::SerializeAssignment(a)}});
  p["spec"]["containers"][0]["resources"] = {
      {"limits",
       {{"nvidia.com/gpu", "2"}, {"nvidia.com/gpumem", "4096"}, {"huawei.com/Ascend910C", "2"}}}};
  p["spec"]["initContainers"] = json::array(
      {{{"name", "warm"},
        {"resources", {{"limits", {{"nvidia.com/gpu", 1}, {"nvidia.com/gpumem", "2048"}}}}}},
       {{"name", "proxy"},
        {"restartPolicy", "Always"},
        {"resources", {{"requests", {{"nvidia.com/gpu", "1"}}}}}}});
  auto e = EntryFromPod(p, "node-a");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ((*e)->assignment.containers.size(), 4u);

  // A container that asked for memory alone (no webhook to add the count):
  // its entry is under the memory name, which is no count, and passes.
  api::Assignment mem;
  mem.node = "node-a";
  mem.containers = {Ctr("main", "nvidia.com/gpumem", core::Vendor::kNvidia,
                        {Dev("GPU-a", 0, 2, 8000, 0, false)})};
  json q = PodJson("q", "node-a", {{"accelpool.io/assignment", api::SerializeAssignment(mem)}});
  q["spec"]["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpumem", "8000"}}}};
  auto m = EntryFromPod(q, "node-a");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->has_value());
}

// The node's pods are named by uid for the foreign memory check, whatever
// they ask for: a pod with no device request (one that reaches devices by
// itself) too. A static pod is found by its own uid (its cgroup's) through
// its mirror pod. A pod that ended, or was deleted, is no longer named.
TEST(PodSyncNamesTest, ThePodsOfTheNodeAreNamedByUidUntilTheyEnd) {
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  json plain = PodJson("notebook", "node-a", json::object(), "Running");
  plain["spec"]["containers"][0].erase("resources");
  sync.Apply(plain);
  sync.Apply(
      PodJson("etcd-node-a", "node-a", {{"kubernetes.io/config.mirror", "static-uid"}}, "Running"));
  sync.Apply(PodJson("broken", "node-a", {{"accelpool.io/assignment", "{"}}));
  EXPECT_EQ(sync.PodKeyOfUid("uid-notebook"), "default/notebook");
  EXPECT_EQ(sync.PodKeyOfUid("static-uid"), "default/etcd-node-a");
  EXPECT_EQ(sync.PodKeyOfUid("uid-etcd-node-a"), "default/etcd-node-a");
  ASSERT_TRUE(sync.PodOfUid("static-uid").has_value());
  EXPECT_EQ(sync.PodOfUid("static-uid")->uid, "uid-etcd-node-a");  // the mirror's, for Events
  EXPECT_FALSE(sync.PodOfUid("uid-other").has_value());
  EXPECT_EQ(sync.PodKeyOfUid("uid-broken"), "default/broken");
  EXPECT_EQ(sync.PodKeyOfUid("uid-other"), "");
  EXPECT_EQ(sync.PodKeyOfUid(""), "");
  plain["status"]["phase"] = "Succeeded";
  sync.Apply(plain);
  EXPECT_EQ(sync.PodKeyOfUid("uid-notebook"), "");
  // A delete event with only the uid still takes the static pod's uid away.
  sync.Forget({{"metadata", {{"uid", "uid-etcd-node-a"}, {"namespace", "default"}}}});
  EXPECT_EQ(sync.PodKeyOfUid("static-uid"), "");
  EXPECT_EQ(sync.PodKeyOfUid("uid-etcd-node-a"), "");
}

// After a watch expiry the informer's relist keys pods by namespace/name: a
// pod deleted and created again under its name while the watch was down comes
// as an update from the old object to the new one. The old pod is gone: its
// allocated containers, its name and its state dirs go with it.
TEST(PodSyncUpdateTest, ANewUidUnderTheSameNameForgetsTheOldPod) {
  testing::TempDir dir;
  const StateDirs dirs(dir.File("containers"));
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger(), &dirs);
  api::Allocation done;
  done.allocated = Of({"main"});
  const json old = PodJson("p", "node-a",
                           {{"accelpool.io/assignment", AssignmentText("node-a")},
                            {"accelpool.io/allocation", api::SerializeAllocation(done)}},
                           "Running");
  sync.Apply(old);
  ASSERT_TRUE(dirs.Create("uid-p", "main").ok());
  json now =
      PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-b")}});
  now["metadata"]["uid"] = "uid-p2";
  sync.Update(old, now);
  const std::vector<PodAssignment> all = store.All();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].pod.uid, "uid-p2");
  EXPECT_TRUE(all[0].allocated.empty());
  EXPECT_EQ(sync.PodKeyOfUid("uid-p"), "");
  EXPECT_EQ(sync.PodKeyOfUid("uid-p2"), "default/p");
  ASSERT_TRUE(sync.WaitForRemovals(std::chrono::seconds(10)));
  EXPECT_FALSE(std::filesystem::exists(dir.File("containers/uid-p_main")));
  // The same pod changed: nothing is forgotten.
  json later = now;
  later["metadata"]["resourceVersion"] = "7";
  ASSERT_TRUE(dirs.Create("uid-p2", "main").ok());
  sync.Update(now, later);
  EXPECT_EQ(store.All().size(), 1u);
  ASSERT_TRUE(sync.WaitForRemovals(std::chrono::seconds(10)));
  EXPECT_TRUE(std::filesystem::exists(dir.File("containers/uid-p2_main")));
}

// A deleted pod's state dirs are removed off the informer's thread: a dir a
// container filled with millions of files takes long to remove, and the
// node's other pod events must not wait for it. The remover here blocks
// until released, standing in for such a dir.
TEST(PodSyncUpdateTest, ForgetReturnsWhileTheStateDirsAreStillBeingRemoved) {
  testing::TempDir dir;
  const StateDirs dirs(dir.File("containers"));
  AssignmentStore store;
  // Declared before `sync`, so that they outlive the remover thread it joins
  // (a failed assertion leaves with the remover still waiting on them).
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::vector<std::string> removed;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger(), &dirs);
  // Destroyed before `sync`: whatever ends the test lets the remover go, so
  // that joining it cannot hang.
  struct LetGo {
    std::function<void()> go;
    ~LetGo() { go(); }
  } let_go{[&] {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }};
  sync.SetPodDirRemover([&](const std::string& uid, size_t* n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return released; });
    removed.push_back(uid);
    *n = 1;
    return dirs.RemovePod(uid);
  });
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE(dirs.Create(std::string("uid-") + name, "main").ok());
  }
  const json a = PodJson("a", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
  json b = a;
  b["metadata"]["name"] = "b";
  b["metadata"]["uid"] = "uid-b";
  sync.Apply(a);
  sync.Apply(b);
  // Both return while the first removal is held: on a thread, so that a
  // Forget that blocked fails the test instead of hanging it.
  std::future<void> forgot = std::async(std::launch::async, [&] {
    sync.Forget(a);
    sync.Forget(b);
    sync.Forget(b);  // queued once
  });
  ASSERT_EQ(forgot.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "Forget waited for the removal";
  EXPECT_TRUE(store.All().empty()) << "the pods are forgotten before their dirs go";
  EXPECT_FALSE(sync.WaitForRemovals(std::chrono::milliseconds(50)));
  EXPECT_TRUE(std::filesystem::exists(dir.File("containers/uid-a_main")));
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  ASSERT_TRUE(sync.WaitForRemovals(std::chrono::seconds(10)));
  EXPECT_EQ(removed, (std::vector<std::string>{"uid-a", "uid-b"}));
  EXPECT_FALSE(std::filesystem::exists(dir.File("containers/uid-a_main")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("containers/uid-b_main")));
}

// Stop ends the removal under way and leaves the queued ones to the next
// sweep: a plugin told to stop does not work through a long queue first.
TEST(PodSyncUpdateTest, StopFinishesTheRemovalUnderWayAndLeavesTheRestToTheSweep) {
  testing::TempDir dir;
  const StateDirs dirs(dir.File("containers"));
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger(), &dirs);
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool released = false;
  std::vector<std::string> removed;
  sync.SetPodDirRemover([&](const std::string& uid, size_t*) {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
    removed.push_back(uid);
    return Status::Ok();
  });
  for (const char* name : {"a", "b", "c"}) {
    json pod = PodJson(name, "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
    sync.Forget(pod);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return entered; }));
  }
  std::future<void> stopped = std::async(std::launch::async, [&] { sync.Stop(); });
  // Long enough for the async Stop to have marked the remover stopping
  // before the removal under way is released (else the remover would go on
  // to the next pod, as it should while not stopping).
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(1)), std::future_status::timeout)
      << "Stop must wait for the removal under way";
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(removed, std::vector<std::string>{"uid-a"});
  sync.Forget(PodJson("d", "node-a", {}));  // after Stop: left to the sweep
  EXPECT_TRUE(sync.WaitForRemovals(std::chrono::milliseconds(0)));
  EXPECT_EQ(removed.size(), 1u);
}

// A refresh reads a pod, the watch's delete event forgets it, then the
// refresh applies what it read: the deleted pod must not come back (it would
// stay a possible caller, and an allocated one would stay until the plugin
// restarts).
TEST(PodSyncUpdateTest, APodReadBeforeItsDeleteIsNotAppliedAfterIt) {
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  const json pod = PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
  sync.Apply(pod);
  ASSERT_EQ(store.PendingContainers(), 1u);
  sync.Forget(pod);
  sync.Apply(pod);  // the refresh's late Apply
  EXPECT_TRUE(store.All().empty());
  EXPECT_EQ(store.PendingContainers(), 0u);
  EXPECT_EQ(sync.PodKeyOfUid("uid-p"), "");
  // Another pod under that name is another uid: applied.
  json again = pod;
  again["metadata"]["uid"] = "uid-p2";
  sync.Apply(again);
  EXPECT_EQ(store.PendingContainers(), 1u);
}

// A pod being deleted keeps running through its grace period: its grants
// still count, so the memory its containers hold on their devices is neither
// foreign memory nor an ungranted use (no Warning Event on a pod that is
// merely shutting down). It is never an Allocate caller, a repeat or a pod
// admitted again; it leaves the store when it finishes or is deleted.
TEST(PodSyncTerminatingTest, APodBeingDeletedKeepsItsGrantsButIsNoCaller) {
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
  api::Allocation done;
  done.allocated = Of({"main"});
  json pod = PodJson("p", "node-a",
                     {{"accelpool.io/assignment", AssignmentText("node-a")},
                      {"accelpool.io/allocation", api::SerializeAllocation(done)}},
                     "Running");
  pod["metadata"]["deletionTimestamp"] = "2026-11-30T03:00:00Z";
  sync.Apply(pod);
  const std::vector<PodAssignment> all = store.All();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(all[0].terminating);
  EXPECT_EQ(all[0].allocated, AllocatedSet({{"main", "nvidia.com/gpu"}}));
  EXPECT_EQ(store.PendingContainers(), 0u);

  core::NodeInventory inv;
  inv.node = "node-a";
  inv.vendor = core::Vendor::kNvidia;
  core::Device gpu;
  gpu.id = "GPU-a";
  gpu.vendor = core::Vendor::kNvidia;
  gpu.memory_mib = 81920;
  gpu.max_shares = 10;
  inv.devices.push_back(gpu);
  // Its 1 GiB grant, its context and a little more: within the allowance.
  ForeignMemory foreign({.min_mib = 2048, .per_share_mib = 512, .confirm = 1});
  EXPECT_TRUE(foreign.Observe({inv}, {{"GPU-a", 3000}}, all).empty());
  UngrantedUses uses;
  const auto owner_of = [](int64_t pid) {
    return ProcessOwner{pid, true, "python3", {"uid-p", ""}};
  };
  const auto pod_of = [&](const std::string& uid) { return sync.PodKeyOfUid(uid); };
  EXPECT_TRUE(uses.Observe({inv}, {{"GPU-a", {{10, 1000}}}}, owner_of, pod_of, all).empty());

  // Kubelet reports its slot free: not offered as a pod admitted again, and
  // not matched as a repeat.
  EXPECT_FALSE(store.Preferred("nvidia.com/gpu", {"GPU-a::1"}, {}, 1).slots.has_value());
  EXPECT_FALSE(store.Match("nvidia.com/gpu", {"GPU-a::1"}).ok());

  // Finished: gone from the store.
  pod["status"]["phase"] = "Succeeded";
  sync.Apply(pod);
  EXPECT_TRUE(store.All().empty());
  // A pod deleted before kubelet admitted it may still be admitted (kubelet
  // admits a pod it first sees already deleted): it stays a waiting pod,
  // not a terminating one, so its own Allocate finds its own grant.
  json waiting = PodJson("w", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
  waiting["metadata"]["deletionTimestamp"] = "2026-11-30T03:00:00Z";
  auto e = EntryFromPod(waiting, "node-a");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE(e->has_value());
  EXPECT_FALSE((*e)->terminating);
  EXPECT_TRUE((*e)->presumed.empty());
  sync.Apply(waiting);
  auto w = store.Match("nvidia.com/gpu", {"GPU-a::1"});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->pod.name, "w");
  // Turned away at admission (this plugin's Allocate failed, the pod never
  // ran): no caller of anything, not even by its requests.
  json rejected = PodJson("r", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}});
  rejected["metadata"]["annotations"]["accelpool.io/allocation"] =
      api::SerializeAllocation(api::Allocation{api::AllocationPhase::kFailed, {}, "no state dir"});
  e = EntryFromPod(rejected, "node-a");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE(e->has_value());
  EXPECT_TRUE(UnassignedRequestsOf(rejected, nullptr).empty());
  // Admitted and then deleted, it is terminating: counted, never matched.
  waiting["status"]["containerStatuses"] = json::array({{{"name", "main"}}});
  e = EntryFromPod(waiting, "node-a");
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_TRUE((*e)->terminating);
}

// A pod whose assignment the extender signed, for pod uid-<name> on `node`.
json SignedPodJson(api::AssignmentKeyRing& keys, const std::string& name, const std::string& node,
                   const std::string& text) {
  json ann = {{"accelpool.io/assignment", text}};
  StatusOr<std::string> sig = keys.Sign("uid-" + name, node, text);
  EXPECT_TRUE(sig.ok()) << sig.status().ToString();
  ann["accelpool.io/assignment-signature"] = sig.ok() ? *sig : "";
  return PodJson(name, "node-a", ann);
}

TEST(SignedAssignmentTest, OnlyTheExtendersAssignmentIsAllocatedFrom) {
  api::testing::TempKeyDir dir;
  std::unique_ptr<api::AssignmentKeyRing> keys = dir.Ring();
  const std::string text = AssignmentText("node-a");
  const json signed_pod = SignedPodJson(*keys, "p", "node-a", text);
  auto ok = EntryFromPod(signed_pod, "node-a", keys.get());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->has_value());

  auto with = [&](const std::function<void(json&)>& edit) {
    json p = signed_pod;
    edit(p);
    return p;
  };
  const json* ann = &signed_pod["metadata"]["annotations"];
  struct Case {
    std::string name;
    json pod;
    std::string reason;
    StatusCode code = StatusCode::kPermissionDenied;
  } refused[] = {
      {"no signature", PodJson("p", "node-a", {{"accelpool.io/assignment", text}}),
       "has no accelpool.io/assignment-signature"},
      {"assignment edited after the bind", with([&](json& p) {
         p["metadata"]["annotations"]["accelpool.io/assignment"] =
             AssignmentText("node-a", "GPU-b");
       }),
       "does not match"},
      {"copied onto another pod", with([&](json& p) { p["metadata"]["uid"] = "uid-other"; }),
       "does not match"},
      {"not a signature", with([&](json& p) {
         p["metadata"]["annotations"]["accelpool.io/assignment-signature"] = "x";
       }),
       "not a v1 signature"},
      {"a key this node does not have", with([&](json& p) {
         p["metadata"]["annotations"]["accelpool.io/assignment-signature"] =
             "v1.k7." + (*ann)["accelpool.io/assignment-signature"].get<std::string>().substr(6);
       }),
       "key \"k7\"", StatusCode::kNotFound},
  };
  for (const Case& c : refused) {
    SCOPED_TRACE(c.name);
    auto e = EntryFromPod(c.pod, "node-a", keys.get());
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), c.code);
    EXPECT_NE(e.status().message().find(c.reason), std::string::npos) << e.status().message();
    EXPECT_NE(e.status().message().find("delete the pod"), std::string::npos);
    // Without a key ring nothing is checked.
    EXPECT_TRUE(EntryFromPod(c.pod, "node-a").ok());
  }
  // An admitted pod's assignment is used for no more Allocates (and may
  // predate signing): not checked, so its usage still counts.
  json running = PodJson("p", "node-a", {{"accelpool.io/assignment", text}}, "Running");
  auto r = EntryFromPod(running, "node-a", keys.get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->has_value());
}

TEST(SignedAssignmentTest, AForgedAssignmentIsReportedCountedAndBooksNothing) {
  api::testing::TempKeyDir dir;
  std::unique_ptr<api::AssignmentKeyRing> keys = dir.Ring();
  AssignmentStore store;
  testing::RecordingReporter reporter;
  PodSync sync(nullptr, "node-a", &store, &reporter, Logger());
  sync.SetAssignmentKeys(keys.get());
  std::vector<std::string> refused;
  sync.OnRefused([&](const std::string& reason) { refused.push_back(reason); });

  // The victim holds GPU-b::1 by a signed assignment; a tenant's pod claims
  // the same slot with an assignment written by hand.
  sync.Apply(SignedPodJson(*keys, "victim", "node-a", AssignmentText("node-a", "GPU-b")));
  json forged =
      PodJson("forged", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-b")}});
  sync.Apply(forged);
  sync.Apply(forged);  // the same version again: reported once
  json newer = forged;
  newer["metadata"]["resourceVersion"] = "999";  // a status update of the same pod: not again
  sync.Apply(newer);
  ASSERT_EQ(refused, std::vector<std::string>{"signature"});
  auto entries = reporter.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].pod, "default/forged");
  EXPECT_NE(entries[0].message.find("accelpool.io/assignment-signature"), std::string::npos);
  EXPECT_EQ(store.All().size(), 1u) << "only the victim's assignment is held";
  // kubelet's call with the victim's slot finds the victim, and the forged
  // pod (now a pod without an assignment) keeps the fallback rule shut.
  auto m = store.Match("nvidia.com/gpu", {"GPU-b::1"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->pod.name, "victim");
  EXPECT_EQ(store.Match("nvidia.com/gpu", {"GPU-a::9"}).status().code(), StatusCode::kAborted);

  // Malformed and foreign assignments count under their own reasons.
  sync.Apply(PodJson("broken", "node-a", {{"accelpool.io/assignment", "{"}}));
  sync.Apply(PodJson("foreign", "node-a", {{"accelpool.io/assignment", AssignmentText("node-b")}}));
  EXPECT_EQ(refused, (std::vector<std::string>{"signature", "malformed", "other_node"}));
}

using KubeSideTest = kube::testing::FakeApiTest;

TEST_F(KubeSideTest, PodSyncReadsPendingAssignmentsBackAndReportsBadOnes) {
  api::Allocation done;
  done.allocated = Of({"main"});
  api_.Put(kPods,
           PodJson("pending", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}));
  api_.Put(kPods, PodJson("running", "node-a",
                          {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-b")},
                           {"accelpool.io/allocation", api::SerializeAllocation(done)}}));
  api_.Put(kPods, PodJson("broken", "node-a", {{"accelpool.io/assignment", "not json"}}));
  api_.Put(kPods,
           PodJson("elsewhere", "node-b", {{"accelpool.io/assignment", AssignmentText("node-b")}}));
  AssignmentStore store;
  testing::RecordingReporter reporter;
  PodSync sync(client_.get(), "node-a", &store, &reporter, Logger());
  sync.Start();
  ASSERT_TRUE(sync.WaitForSync(std::chrono::seconds(5)));
  EXPECT_EQ(store.All().size(), 2u);
  EXPECT_EQ(store.PendingContainers(), 1u);
  auto entries = reporter.entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].pod, "default/broken");
  EXPECT_NE(entries[0].message.find("unreadable"), std::string::npos);

  // A deleted pod leaves the store.
  api_.Remove(kPods, "pending");
  for (int i = 0; i < 1000 && store.All().size() != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(store.All().size(), 1u);
  sync.Stop();
  // Refresh lists the node's Pending pods synchronously: it adds a pending
  // pod the watch has not delivered, skips a running one, and keeps the
  // allocated pod it does not list.
  api_.Put(kPods,
           PodJson("late", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}));
  api_.Put(kPods,
           PodJson("late-running", "node-a",
                   {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-c")}}, "Running"));
  api_.Put(kPods,
           PodJson("late-done", "node-a",
                   {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-d")}}, "Succeeded"));
  size_t requests = api_.Requests().size();
  EXPECT_TRUE(sync.Refresh().ok());
  EXPECT_EQ(store.PendingContainers(), 1u);
  EXPECT_EQ(store.All().size(), 2u) << "running (allocated) and late; not late-running";
  ASSERT_EQ(api_.Requests().size(), requests + 2);
  EXPECT_NE(api_.Requests()[requests].find("status.phase=Pending"), std::string::npos)
      << api_.Requests()[requests];
  EXPECT_EQ(api_.Requests()[requests + 1], std::string("GET ") + kPods + "/late")
      << "only the pod the store did not hold is read in full";

  // RefreshNotEnded lists every pod that has not ended: late-running too
  // (kubelet may admit a running pod again, and its phase need not trail the
  // admission; its container is presumed allocated), not late-done.
  requests = api_.Requests().size();
  EXPECT_TRUE(sync.RefreshNotEnded().ok());
  EXPECT_EQ(store.All().size(), 3u) << "running, late and late-running; not late-done";
  EXPECT_EQ(store.PendingContainers(), 1u) << "late-running's container is presumed allocated";
  ASSERT_EQ(api_.Requests().size(), requests + 2);
  EXPECT_NE(api_.Requests()[requests].find("status.phase!=Succeeded,status.phase!=Failed"),
            std::string::npos)
      << api_.Requests()[requests];
  EXPECT_EQ(api_.Requests()[requests + 1], std::string("GET ") + kPods + "/late-running")
      << "late is held at its version already";

  // A pending pod that went while the watch was down is dropped by the next
  // refresh; the allocated ones stay for the watch to remove.
  api_.Remove(kPods, "late");
  EXPECT_TRUE(sync.Refresh().ok());
  EXPECT_EQ(store.PendingContainers(), 0u);
  EXPECT_EQ(store.All().size(), 2u);
}

// A running pod whose assignment is refused (it names another node) is
// reported once: a refresh of the Pending pods, which does not list it,
// does not make its next status update count and post the refusal again.
TEST_F(KubeSideTest, ARefusalIsReportedOnceAcrossARefreshThatDoesNotListThePod) {
  json pod =
      PodJson("moved", "node-a", {{"accelpool.io/assignment", AssignmentText("other")}}, "Running");
  pod["metadata"]["resourceVersion"] = "10";
  api_.Put(kPods, pod);
  AssignmentStore store;
  testing::RecordingReporter reporter;
  PodSync sync(client_.get(), "node-a", &store, &reporter, Logger());
  std::vector<std::string> refused;
  sync.OnRefused([&](const std::string& reason) { refused.push_back(reason); });
  sync.Apply(pod);
  ASSERT_EQ(refused, std::vector<std::string>{"other_node"});
  ASSERT_EQ(reporter.entries().size(), 1u);

  ASSERT_TRUE(sync.Refresh().ok());           // no Pending pod on the node
  pod["metadata"]["resourceVersion"] = "11";  // the watch's next update of the pod
  sync.Apply(pod);
  EXPECT_EQ(refused, std::vector<std::string>{"other_node"});
  ASSERT_EQ(reporter.entries().size(), 1u);
  EXPECT_FALSE(reporter.entries()[0].ok);
  // A re-read of every live pod that lists it keeps the record too.
  ASSERT_TRUE(sync.RefreshNotEnded().ok());
  EXPECT_EQ(sync.RefusalsRemembered(), 1u);
  // Deleted while the watch was down (no Forget comes): a re-read of every
  // live pod does not list it, and its record goes.
  api_.Remove(kPods, "moved");
  ASSERT_TRUE(sync.RefreshNotEnded().ok());
  EXPECT_EQ(sync.RefusalsRemembered(), 0u);
}

// What one Refresh asked the apiserver since `from`: lists, and the names of
// the pods it read one by one.
struct RefreshRequests {
  int lists = 0;
  std::vector<std::string> gets;
};
RefreshRequests RequestsSince(const kube::FakeApiServer& api, size_t from) {
  RefreshRequests r;
  const std::vector<std::string> all = api.Requests();
  const std::string get = std::string("GET ") + kPods + "/";
  for (size_t i = from; i < all.size(); ++i) {
    if (all[i].rfind("GET /api/v1/pods?", 0) == 0) {
      // The stopped informer's last watch can reach the server after Stop()
      // returned (the request was on the wire when the stop came): it is not
      // one of the refresh's lists.
      if (all[i].find("watch=") == std::string::npos) ++r.lists;
    } else if (all[i].rfind(get, 0) == 0) {
      r.gets.push_back(all[i].substr(get.size()));
    }
  }
  std::sort(r.gets.begin(), r.gets.end());
  return r;
}

// A key rotation's race: the extender signs with a key that has not reached
// this node's Secret volume yet. The pod is refused for now (counted as
// unknown_key, reported once), and re-read by the next lookup's refresh, which
// finds it once the key is here; a forged signature is not retried.
TEST_F(KubeSideTest, AnAssignmentSignedWithAKeyNotHereYetIsReadAgainOnTheNextRefresh) {
  api::testing::TempKeyDir node_dir;  // k1 only
  api::testing::TempKeyDir extender_dir(
      {{"signing", "k2"}, {"k1", api::testing::kTestKey}, {"k2", std::string(40, 'z')}});
  std::unique_ptr<api::AssignmentKeyRing> node_keys =
      std::move(api::AssignmentKeyRing::Open(node_dir.path(), std::chrono::seconds(3600),
                                             std::chrono::milliseconds(0)))
          .value();
  std::unique_ptr<api::AssignmentKeyRing> extender_keys = extender_dir.Ring();
  api_.Put(kPods,
           SignedPodJson(*extender_keys, "early", "node-a", AssignmentText("node-a", "GPU-e")));
  AssignmentStore store;
  testing::RecordingReporter reporter;
  PodSync sync(client_.get(), "node-a", &store, &reporter, Logger());
  sync.SetAssignmentKeys(node_keys.get());
  std::vector<std::string> refused;
  sync.OnRefused([&](const std::string& reason) { refused.push_back(reason); });
  sync.Start();
  ASSERT_TRUE(sync.WaitForSync(std::chrono::seconds(5)));
  sync.Stop();
  ASSERT_EQ(refused, std::vector<std::string>{"unknown_key"});
  ASSERT_EQ(reporter.entries().size(), 1u);
  EXPECT_NE(reporter.entries()[0].message.find("rotation"), std::string::npos)
      << reporter.entries()[0].message;
  EXPECT_FALSE(store.Match("nvidia.com/gpu", {api::SlotId("GPU-e", 1)}).ok());

  // Still missing: read again, refused again, but reported only once.
  size_t mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  EXPECT_EQ(RequestsSince(api_, mark).gets, std::vector<std::string>{"early"});
  EXPECT_EQ(refused.size(), 1u);
  EXPECT_EQ(reporter.entries().size(), 1u);

  // kubelet updates the Secret volume: the next refresh reads the pod, the
  // ring re-reads for the unknown key id, and the assignment is held.
  std::ofstream(std::filesystem::path(node_dir.path()) / "k2") << std::string(40, 'z');
  ASSERT_TRUE(sync.Refresh().ok());
  auto m = store.Match("nvidia.com/gpu", {api::SlotId("GPU-e", 1)});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->pod.name, "early");
  // Held at its version now: not read again.
  mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  EXPECT_TRUE(RequestsSince(api_, mark).gets.empty());

  // A signature that does not match is final: its version is kept, so it is
  // not read again on every lookup.
  json forged =
      SignedPodJson(*extender_keys, "forged", "node-a", AssignmentText("node-a", "GPU-f"));
  forged["metadata"]["annotations"]["accelpool.io/assignment"] = AssignmentText("node-a", "GPU-g");
  api_.Put(kPods, forged);
  ASSERT_TRUE(sync.Refresh().ok());
  EXPECT_EQ(refused, (std::vector<std::string>{"unknown_key", "signature"}));
  mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  EXPECT_TRUE(RequestsSince(api_, mark).gets.empty());
}

// The refresh on kubelet's path lists metadata only and reads in full just
// the pods the store does not hold at their current version; the store ends
// as a refresh from whole pods would leave it: assignments checked against
// the pod's containers, malformed ones refused with a reason, pods without
// an assignment still blocking the fallback rule.
TEST_F(KubeSideTest, RefreshReadsInFullOnlyThePodsTheStoreDoesNotHold) {
  for (int i = 0; i < 5; ++i) {
    const std::string name = "known-" + std::to_string(i);
    api_.Put(kPods, PodJson(name, "node-a",
                            {{"accelpool.io/assignment",
                              AssignmentText("node-a", "GPU-k" + std::to_string(i))}}));
  }
  AssignmentStore store;
  testing::RecordingReporter reporter;
  PodSync sync(client_.get(), "node-a", &store, &reporter, Logger());
  sync.Start();
  ASSERT_TRUE(sync.WaitForSync(std::chrono::seconds(5)));
  sync.Stop();  // from here on, only Refresh brings news
  ASSERT_EQ(store.PendingContainers(), 5u);

  // Unchanged pods are not read again.
  size_t mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  RefreshRequests r = RequestsSince(api_, mark);
  EXPECT_EQ(r.lists, 1);
  EXPECT_TRUE(r.gets.empty()) << r.gets.front();

  // Bound while the watch lags: two pods with assignments (two candidates
  // for the same resource and count), one of another scheduler asking for a
  // GPU, one whose assignment names a container it does not have, one whose
  // assignment does not parse; and a known pod whose assignment changed.
  api_.Put(kPods, PodJson("new-a", "node-a",
                          {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-a")}}));
  api_.Put(kPods, PodJson("new-b", "node-a",
                          {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-b")}}));
  api_.Put(kPods, PodJson("stranger", "node-a", json::object()));
  api_.Put(kPods,
           PodJson("wrong-container", "node-a",
                   {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-c", "sidecar")}}));
  api_.Put(kPods, PodJson("malformed", "node-a", {{"accelpool.io/assignment", "{\"node\":"}}));
  api_.Put(kPods, PodJson("known-0", "node-a",
                          {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-moved")}}));
  mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  r = RequestsSince(api_, mark);
  EXPECT_EQ(r.lists, 1);
  EXPECT_EQ(r.gets, (std::vector<std::string>{"known-0", "malformed", "new-a", "new-b", "stranger",
                                              "wrong-container"}));

  // Each new pod's own slots find it.
  for (const char* name : {"new-a", "new-b"}) {
    const std::string device = std::string("GPU-") + (name[4] == 'a' ? "a" : "b");
    auto m = store.Match("nvidia.com/gpu", {api::SlotId(device, 1)});
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().ToString();
    EXPECT_EQ(m->pod.name, name);
    EXPECT_FALSE(m->by_fallback);
  }
  auto moved = store.Match("nvidia.com/gpu", {api::SlotId("GPU-moved", 1)});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->pod.name, "known-0");
  // Ids naming nobody: several pods could be the caller, so no fallback.
  auto nobody = store.Match("nvidia.com/gpu", {"GPU-z::9"});
  EXPECT_EQ(nobody.status().code(), StatusCode::kAborted) << nobody.status().ToString();
  EXPECT_NE(nobody.status().message().find("default/stranger/main"), std::string::npos)
      << "the pod without an assignment is counted: " << nobody.status().message();
  // The two refused assignments are reported with a reason and not stored.
  std::map<std::string, std::string> refused;
  for (const auto& e : reporter.entries()) refused[e.pod] = e.message;
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_NE(refused["default/wrong-container"].find("\"sidecar\", which the pod does not have"),
            std::string::npos)
      << refused["default/wrong-container"];
  EXPECT_NE(refused["default/malformed"].find("unreadable"), std::string::npos)
      << refused["default/malformed"];
  EXPECT_EQ(store.PendingContainers(), 7u) << "5 known, new-a, new-b";

  // Nothing changed since: the next refresh reads nothing in full and
  // reports nothing again.
  mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  r = RequestsSince(api_, mark);
  EXPECT_EQ(r.lists, 1);
  EXPECT_TRUE(r.gets.empty()) << r.gets.front();
  EXPECT_EQ(reporter.entries().size(), 2u);

  // Gone while the watch lags: new-b (unallocated) leaves the store, the
  // pods without a valid assignment stop blocking; new-a is then the only
  // possible caller.
  for (const char* name : {"new-b", "stranger", "wrong-container", "malformed"}) {
    api_.Remove(kPods, name);
  }
  for (int i = 0; i < 5; ++i) api_.Remove(kPods, "known-" + std::to_string(i));
  ASSERT_TRUE(sync.Refresh().ok());
  auto only = store.Match("nvidia.com/gpu", {"GPU-z::9"});
  ASSERT_TRUE(only.ok()) << only.status().ToString();
  EXPECT_EQ(only->pod.name, "new-a");
  EXPECT_TRUE(only->by_fallback);

  // No pending pod left (kube-apiserver then answers "items": null).
  api_.Remove(kPods, "new-a");
  ASSERT_TRUE(sync.Refresh().ok());
  EXPECT_EQ(store.PendingContainers(), 0u);
}

// A pod bound after a refresh's list began reaches the store on the watch
// while the refresh is still reading: the list cannot show it, and the
// refresh must not drop it (kubelet may be admitting it right then).
TEST_F(KubeSideTest, ARefreshKeepsPodsTheWatchAppliedAfterItsList) {
  api_.Put(kPods, PodJson("listed", "node-a",
                          {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-a")}}));
  AssignmentStore store;
  testing::RecordingReporter reporter;
  kube::testing::HookedClient hooked(*client_);
  PodSync sync(&hooked, "node-a", &store, &reporter, Logger());
  const json late =
      PodJson("late", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-b")}});
  for (const bool whole : {false, true}) {
    SCOPED_TRACE(whole ? "whole pods" : "metadata list");
    api_.ServeFullListsOnly(whole);
    hooked.after_list = [&] {
      hooked.after_list = nullptr;
      sync.Apply(late);  // the watch, while the refresh goes on
    };
    ASSERT_TRUE(sync.Refresh().ok());
    for (const char* name : {"listed", "late"}) {
      auto m = store.Match("nvidia.com/gpu",
                           {api::SlotId(name == std::string("late") ? "GPU-b" : "GPU-a", 1)});
      ASSERT_TRUE(m.ok()) << name << ": " << m.status().ToString();
      EXPECT_EQ(m->pod.name, name);
    }
    // The next refresh, whose list does not show it either, may drop it:
    // it was applied before that list began.
    ASSERT_TRUE(sync.Refresh().ok());
    EXPECT_EQ(store.PendingContainers(), 1u);
  }
}

// More changed pods than PodSync::kMaxFetches: one list of whole pods
// instead of their reads, with the same result.
TEST_F(KubeSideTest, RefreshRelistsWholePodsWhenManyChanged) {
  AssignmentStore store;
  PodSync sync(client_.get(), "node-a", &store, nullptr, Logger());
  const size_t n = PodSync::kMaxFetches + 1;
  for (size_t i = 0; i < n; ++i) {
    api_.Put(kPods, PodJson("burst-" + std::to_string(i), "node-a",
                            {{"accelpool.io/assignment",
                              AssignmentText("node-a", "GPU-" + std::to_string(i))}}));
  }
  api_.Put(kPods, PodJson("stranger", "node-a", json::object()));
  size_t mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  RefreshRequests r = RequestsSince(api_, mark);
  EXPECT_EQ(r.lists, 2) << "metadata, then whole pods";
  EXPECT_TRUE(r.gets.empty()) << r.gets.front();
  EXPECT_EQ(store.PendingContainers(), n);
  EXPECT_EQ(store.Match("nvidia.com/gpu", {"GPU-z::9"}).status().code(), StatusCode::kAborted);
  // What the full list applied counts as held: the next refresh reads nothing.
  mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  r = RequestsSince(api_, mark);
  EXPECT_EQ(r.lists, 1);
  EXPECT_TRUE(r.gets.empty()) << r.gets.front();
}

// An apiserver that answers the metadata-only list with whole pods (it
// cannot transform lists): the refresh applies those, one request, same
// result, and still prunes what is no longer pending.
TEST_F(KubeSideTest, RefreshUsesWholePodsWhenTheServerIgnoresTheMetadataAccept) {
  api_.ServeFullListsOnly(true);
  AssignmentStore store;
  testing::RecordingReporter reporter;
  PodSync sync(client_.get(), "node-a", &store, &reporter, Logger());
  api_.Put(kPods, PodJson("a", "node-a",
                          {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-a")}}));
  api_.Put(kPods,
           PodJson("bad", "node-a",
                   {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-c", "sidecar")}}));
  size_t mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  RefreshRequests r = RequestsSince(api_, mark);
  EXPECT_EQ(r.lists, 1);
  EXPECT_TRUE(r.gets.empty()) << r.gets.front();
  auto m = store.Match("nvidia.com/gpu", {api::SlotId("GPU-a", 1)});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->pod.name, "a");
  ASSERT_EQ(reporter.entries().size(), 1u);
  EXPECT_EQ(reporter.entries()[0].pod, "default/bad");

  api_.Remove(kPods, "a");
  ASSERT_TRUE(sync.Refresh().ok());
  EXPECT_EQ(store.PendingContainers(), 0u);

  // A server that starts answering metadata later (upgraded): the pods the
  // whole-pod refresh applied are not read again.
  api_.ServeFullListsOnly(false);
  api_.Put(kPods, PodJson("c", "node-a",
                          {{"accelpool.io/assignment", AssignmentText("node-a", "GPU-c")}}));
  mark = api_.Requests().size();
  ASSERT_TRUE(sync.Refresh().ok());
  r = RequestsSince(api_, mark);
  EXPECT_EQ(r.lists, 1);
  EXPECT_EQ(r.gets, (std::vector<std::string>{"c"}));
}

TEST_F(KubeSideTest, ReporterWritesAllocationStateAndEvents) {
  api_.Put(kPods, PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}));
  KubeReporter reporter(client_.get(), Logger());
  PodRef ref{"default", "p", "uid-p", ""};
  reporter.Allocated(ref, Of({"main"}));
  reporter.Flush();
  auto pod = api_.Object(kPods, "p");
  ASSERT_TRUE(pod.has_value());
  auto alloc = api::ParseAllocation(
      (*pod)["metadata"]["annotations"]["accelpool.io/allocation"].get<std::string>());
  ASSERT_TRUE(alloc.ok());
  EXPECT_EQ(alloc->phase, api::AllocationPhase::kAllocated);
  EXPECT_EQ(Names(*alloc), (std::vector<std::string>{"main"}));

  reporter.Failed(ref, "nvidia.com/gpu", "unknown slot id \"GPU-x::0\"", Of({"main"}));
  reporter.Failed(std::nullopt, "nvidia.com/gpu", "nothing to attach an event to", {});
  reporter.Flush();
  pod = api_.Object(kPods, "p");
  alloc = api::ParseAllocation(
      (*pod)["metadata"]["annotations"]["accelpool.io/allocation"].get<std::string>());
  ASSERT_TRUE(alloc.ok());
  EXPECT_EQ(alloc->phase, api::AllocationPhase::kFailed);
  // The container allocated before keeps its place in the record; the pod,
  // never admitted, was turned away by kubelet: a restarted plugin takes
  // none of its containers for pending ones.
  EXPECT_EQ(Names(*alloc), (std::vector<std::string>{"main"}));
  auto entry = EntryFromPod(*pod, "node-a");
  ASSERT_TRUE(entry.ok());
  EXPECT_FALSE(entry->has_value());
  int events = 0;
  for (const std::string& r : api_.Requests()) {
    events += r.rfind("POST", 0) == 0 && r.find("/events") != std::string::npos;
  }
  EXPECT_EQ(events, 1);
}

// On a node with two vendors each vendor's plugin writes the state of its
// own containers of a pod asking both: neither write loses the other's, a
// failure keeps both lists, and a pod created again under the name (another
// uid) is not written.
TEST_F(KubeSideTest, TwoVendorsPluginsWriteOneAllocationStateWithoutLosingEachOthers) {
  api_.Put(kPods, PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}));
  KubeReporter nvidia(client_.get(), Logger());
  KubeReporter ascend(client_.get(), Logger());
  PodRef ref{"default", "p", "uid-p", ""};
  auto state = [&] {
    auto pod = api_.Object(kPods, "p");
    EXPECT_TRUE(pod.has_value());
    auto a = api::ParseAllocation(
        (*pod)["metadata"]["annotations"]["accelpool.io/allocation"].get<std::string>());
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : api::Allocation{};
  };
  nvidia.Allocated(ref, Of({"gpu"}));
  nvidia.Flush();
  ascend.Allocated(ref, Of({"npu"}, "huawei.com/Ascend910C"));
  ascend.Flush();
  EXPECT_EQ(Names(state()), (std::vector<std::string>{"gpu", "npu"}));
  EXPECT_EQ(state().phase, api::AllocationPhase::kAllocated);
  nvidia.Allocated(ref, Of({"gpu", "gpu-side"}));
  nvidia.Flush();
  EXPECT_EQ(Names(state()), (std::vector<std::string>{"gpu", "npu", "gpu-side"}));

  ascend.Failed(ref, "huawei.com/Ascend910C", "unknown slot id",
                Of({"npu"}, "huawei.com/Ascend910C"));
  ascend.Flush();
  EXPECT_EQ(state().phase, api::AllocationPhase::kFailed);
  EXPECT_EQ(state().message, "unknown slot id");
  EXPECT_EQ(Names(state()), (std::vector<std::string>{"gpu", "npu", "gpu-side"}));

  // Another pod under the name: the write is refused, not retried.
  json again = PodJson("p", "node-a", json::object());
  again["metadata"]["uid"] = "uid-p-2";
  api_.Put(kPods, again);
  nvidia.Allocated(ref, Of({"gpu"}));
  nvidia.Flush();
  auto pod = api_.Object(kPods, "p");
  ASSERT_TRUE(pod.has_value());
  EXPECT_FALSE((*pod)["metadata"]["annotations"].contains("accelpool.io/allocation"));
}

// The device check's change becomes an Event on the Node, in namespace
// default, with the node's name as uid as kubelet's node events have.
TEST_F(KubeSideTest, ReporterWritesANodeEvent) {
  KubeReporter reporter(client_.get(), Logger());
  reporter.NodeEvent("node-a", kube::EventKind::kWarning, kDevicesChangedReason,
                     "added MIG-p; removed MIG-y");
  reporter.Flush();
  auto events = client_->List(kube::Events(), "default", {});
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->items.size(), 1u);
  const json& ev = events->items[0];
  EXPECT_EQ(ev["reason"], kDevicesChangedReason);
  EXPECT_EQ(ev["type"], "Warning");
  EXPECT_EQ(ev["note"], "added MIG-p; removed MIG-y");
  EXPECT_EQ(ev["regarding"]["kind"], "Node");
  EXPECT_EQ(ev["regarding"]["name"], "node-a");
  EXPECT_EQ(ev["regarding"]["uid"], "node-a");
  EXPECT_FALSE(ev["regarding"].contains("namespace"));
  EXPECT_EQ(ev["action"], "DeviceCheck");
  // A health change: its own reason and action.
  HealthNotice n{"GPU-a", "nvidia", false, "XID 48 (double-bit ECC error)", 0};
  reporter.NodeEvent("node-a", kube::EventKind::kWarning, n.EventReason(), n.Message(), "Health");
  reporter.Flush();
  events = client_->List(kube::Events(), "default", {});
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->items.size(), 2u);
  const json& health =
      events->items[0]["reason"] == kDeviceUnhealthyReason ? events->items[0] : events->items[1];
  EXPECT_EQ(health["reason"], kDeviceUnhealthyReason);
  EXPECT_EQ(health["action"], "Health");
  EXPECT_EQ(health["note"], n.Message());
}

// A pod that holds memory on a device it was not granted gets a Warning
// Event of its own, in its namespace, so `kubectl describe pod` shows it.
TEST_F(KubeSideTest, ReporterWritesAPodEvent) {
  KubeReporter reporter(client_.get(), Logger());
  reporter.PodEvent(PodRef{"team-a", "notebook-0", "uid-nb", ""}, kube::EventKind::kWarning,
                    kUngrantedDeviceMemoryReason, "process 4242 (python3) of this pod holds 8 GiB",
                    "ForeignMemory");
  reporter.Flush();
  auto events = client_->List(kube::Events(), "team-a", {});
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->items.size(), 1u);
  const json& ev = events->items[0];
  EXPECT_EQ(ev["reason"], kUngrantedDeviceMemoryReason);
  EXPECT_EQ(ev["type"], "Warning");
  EXPECT_EQ(ev["regarding"]["kind"], "Pod");
  EXPECT_EQ(ev["regarding"]["namespace"], "team-a");
  EXPECT_EQ(ev["regarding"]["name"], "notebook-0");
  EXPECT_EQ(ev["regarding"]["uid"], "uid-nb");
  EXPECT_EQ(ev["action"], "ForeignMemory");
}

TEST_F(KubeSideTest, StateDirsOfPodsThatAreGoneAreRemoved) {
  namespace fs = std::filesystem;
  testing::TempDir dir;
  const StateDirs dirs(dir.File("containers"));
  for (const std::string name : {"deleted", "running", "finished", "gone-while-down", "new"}) {
    ASSERT_TRUE(dirs.Create("uid-" + name, "main").ok());
  }
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const std::string name : {"deleted", "running", "finished", "gone-while-down"}) {
    fs::last_write_time(dir.File("containers/uid-" + name + "_main"), old);
  }
  auto exists = [&](const std::string& name) {
    return fs::exists(dir.File("containers/uid-" + name + "_main"));
  };
  const json assigned = {{"accelpool.io/assignment", AssignmentText("node-a")}};
  api_.Put(kPods, PodJson("deleted", "node-a", assigned));
  api_.Put(kPods, PodJson("running", "node-a", assigned, "Running"));
  api_.Put(kPods, PodJson("finished", "node-a", assigned, "Succeeded"));
  AssignmentStore store;
  PodSync sync(client_.get(), "node-a", &store, nullptr, Logger(), &dirs);
  sync.Start();
  ASSERT_TRUE(sync.WaitForSync(std::chrono::seconds(5)));

  // Deleted: its dirs go at once.
  api_.Remove(kPods, "deleted");
  for (int i = 0; i < 1000 && exists("deleted"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(exists("deleted"));
  // The sweep removes what went while nobody watched, and nothing else: pods
  // that exist (running or finished) and a dir newer than the list (its pod
  // may have been bound after it) stay.
  ASSERT_TRUE(sync.SweepStateDirs().ok());
  EXPECT_FALSE(exists("gone-while-down"));
  EXPECT_TRUE(exists("running"));
  EXPECT_TRUE(exists("finished"));
  EXPECT_TRUE(exists("new"));
  sync.Stop();

  // A sweep that cannot list the pods removes nothing.
  fs::last_write_time(dir.File("containers/uid-new_main"), old);
  api_.FailNext(1, 503);
  EXPECT_FALSE(sync.SweepStateDirs().ok());
  EXPECT_TRUE(exists("new"));
}

// Answers lists asked of the watch cache at a version (resourceVersionMatch
// set) without one pod, as a watch cache that lags behind a binding would.
class LaggingCacheClient final : public kube::KubeClient {
 public:
  LaggingCacheClient(kube::KubeClient& inner, std::string hidden)
      : hidden(std::move(hidden)), inner_(inner) {}
  std::string hidden;  // "": the cache has caught up
  StatusOr<kube::ListResult> List(const kube::Resource& r, const std::string& ns,
                                  const kube::ListOptions& o) override {
    StatusOr<kube::ListResult> got = inner_.List(r, ns, o);
    if (got.ok() && !o.resource_version_match.empty()) {
      std::erase_if(got->items, [&](const json& item) {
        return kube::StringAt(item, json::json_pointer("/metadata/name")) == hidden;
      });
    }
    return got;
  }
  Status Watch(const kube::Resource& r, const std::string& ns, const kube::WatchOptions& o,
               const std::function<void(kube::WatchEvent&)>& on_event,
               std::stop_token stop) override {
    return inner_.Watch(r, ns, o, on_event, stop);
  }
  StatusOr<json> Get(const kube::Resource& r, const std::string& ns,
                     const std::string& name) override {
    return inner_.Get(r, ns, name);
  }
  StatusOr<json> Create(const kube::Resource& r, const std::string& ns, const json& object,
                        const std::string& name, const std::string& subresource,
                        std::optional<std::chrono::milliseconds> within) override {
    return inner_.Create(r, ns, object, name, subresource, within);
  }
  StatusOr<json> Update(const kube::Resource& r, const std::string& ns, const std::string& name,
                        const json& object) override {
    return inner_.Update(r, ns, name, object);
  }
  StatusOr<json> Patch(const kube::Resource& r, const std::string& ns, const std::string& name,
                       kube::PatchType type, const json& patch,
                       const std::string& subresource) override {
    return inner_.Patch(r, ns, name, type, patch, subresource);
  }
  Status Delete(const kube::Resource& r, const std::string& ns, const std::string& name) override {
    return inner_.Delete(r, ns, name);
  }

 private:
  kube::KubeClient& inner_;
};

// Every node sweeps, so the sweep's list is served from the watch cache (at
// least as new as the informer's version, unpaged: a limit sends it to etcd
// on older apiservers). A dir that list would remove is removed only when a
// consistent list agrees: a lagging cache may omit a pod bound a moment ago.
TEST_F(KubeSideTest, TheSweepListsFromTheWatchCacheAndConfirmsRemovalsConsistently) {
  namespace fs = std::filesystem;
  testing::TempDir dir;
  const StateDirs dirs(dir.File("containers"));
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const std::string name : {"live", "gone"}) {
    ASSERT_TRUE(dirs.Create("uid-" + name, "main").ok());
    fs::last_write_time(dir.File("containers/uid-" + name + "_main"), old);
  }
  const json put =
      api_.Put(kPods, PodJson("live", "node-a",
                              {{"accelpool.io/assignment", AssignmentText("node-a")}}, "Running"));
  const std::string version = put["metadata"]["resourceVersion"];  // the informer's last
  LaggingCacheClient lagging(*client_, "live");
  AssignmentStore store;
  PodSync sync(&lagging, "node-a", &store, nullptr, Logger(), &dirs);
  sync.Start();
  ASSERT_TRUE(sync.WaitForSync(std::chrono::seconds(5)));
  auto sweep_lists = [&](size_t from) {
    std::vector<std::string> out;
    const std::vector<std::string> all = api_.Requests();
    for (size_t i = from; i < all.size(); ++i) {
      if (all[i].rfind(std::string("GET /api/v1/pods?"), 0) == 0 &&
          all[i].find("watch=true") == std::string::npos) {
        out.push_back(all[i]);
      }
    }
    return out;
  };

  size_t mark = api_.Requests().size();
  ASSERT_TRUE(sync.SweepStateDirs().ok());
  std::vector<std::string> lists = sweep_lists(mark);
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_NE(lists[0].find("resourceVersionMatch=NotOlderThan"), std::string::npos) << lists[0];
  EXPECT_NE(lists[0].find("&resourceVersion=" + version + "&resourceVersionMatch=NotOlderThan"),
            std::string::npos)
      << lists[0];
  EXPECT_EQ(lists[0].find("limit="), std::string::npos) << lists[0];
  EXPECT_EQ(lists[1].find("resourceVersion"), std::string::npos) << lists[1];
  EXPECT_TRUE(fs::exists(dir.File("containers/uid-live_main")));
  EXPECT_FALSE(fs::exists(dir.File("containers/uid-gone_main")));

  // The cache caught up and nothing is left to remove: the cached list is
  // all it asks for.
  lagging.hidden.clear();
  mark = api_.Requests().size();
  ASSERT_TRUE(sync.SweepStateDirs().ok());
  lists = sweep_lists(mark);
  ASSERT_EQ(lists.size(), 1u);
  EXPECT_NE(lists[0].find("resourceVersionMatch=NotOlderThan"), std::string::npos) << lists[0];
  EXPECT_TRUE(fs::exists(dir.File("containers/uid-live_main")));
  sync.Stop();
}

TEST_F(KubeSideTest, ReporterRetriesTransientFailuresWithBoundedBackoff) {
  api_.Put(kPods, PodJson("p", "node-a", {{"accelpool.io/assignment", AssignmentText("node-a")}}));
  KubeReporterOptions o;
  o.max_attempts = 3;
  o.backoff_initial = std::chrono::milliseconds(5);
  o.backoff_max = std::chrono::milliseconds(20);
  KubeReporter reporter(client_.get(), Logger(), o);
  const PodRef ref{"default", "p", "uid-p", ""};
  // Each try of a write reads the pod first (the state is merged with what
  // is there), so a failing apiserver fails the read: tries are the reads.
  auto patches = [&] {
    int n = 0;
    for (const std::string& r : api_.Requests()) {
      n += r.rfind("GET", 0) == 0 && r.find("/pods/") != std::string::npos;
    }
    return n;
  };
  auto written = [&] {
    auto pod = api_.Object(kPods, "p");
    auto a = api::ParseAllocation(
        (*pod)["metadata"]["annotations"].value("accelpool.io/allocation", "{}"));
    return a.ok() ? Names(*a) : std::vector<std::string>{"<none>"};
  };

  // Two failures (503), then the write goes through.
  api_.FailNext(2, 503);
  reporter.Allocated(ref, Of({"main"}));
  reporter.Flush();
  EXPECT_EQ(patches(), 3);
  EXPECT_EQ(written(), (std::vector<std::string>{"main"}));

  // Bounded: after max_attempts failures the write is given up.
  api_.FailNext(3, 503);
  reporter.Allocated(ref, Of({"main", "side"}));
  reporter.Flush();
  EXPECT_EQ(patches(), 6);
  EXPECT_EQ(written(), (std::vector<std::string>{"main"}));

  // A pod that is gone is not retried.
  reporter.Allocated({"default", "gone", "uid-gone", ""}, Of({"main"}));
  reporter.Flush();
  EXPECT_EQ(patches(), 7);

  // A newer state supersedes a retrying older one: the older never lands last.
  api_.FailNext(1, 503);
  reporter.Allocated(ref, Of({"main"}));
  reporter.Allocated(ref, Of({"main", "side"}));
  reporter.Flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  reporter.Flush();
  EXPECT_EQ(written(), (std::vector<std::string>{"main", "side"}));

  // Queuing never waits for the apiserver (kubelet's Allocate calls it):
  // with every request held unanswered, ten reports still return.
  api_.HoldRequests(true);
  auto queued = std::async(std::launch::async, [&] {
    for (int i = 0; i < 10; ++i) {
      reporter.Failed(ref, "nvidia.com/gpu", "boom", Of({"main"}));
    }
  });
  const bool returned = queued.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  for (int i = 0; i < 1000 && api_.Held() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(api_.Held(), 0) << "the reporter writes in the background";
  api_.HoldRequests(false);
  queued.wait();
  EXPECT_TRUE(returned) << "Failed() waited for the apiserver";
  reporter.Flush();
}

TEST_F(KubeSideTest, PublisherWritesOnlyChangesWithLabels) {
  api_.Put("/api/v1/nodes",
           {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "node-a"}}}});
  auto inv = core::MakeProfileNode("ascend-910c-x16", "node-a");
  ASSERT_TRUE(inv.ok());
  inv->topology.super_node = "sp-3";
  NodePublisher pub(client_.get(), "node-a", Logger());
  struct Step {
    std::string name;
    bool healthy0;
    bool want_write;
    int64_t want_generation;
  };
  const std::vector<Step> steps = {{"first", true, true, 1},
                                   {"unchanged", true, false, 1},
                                   {"health change", false, true, 2},
                                   {"back", true, true, 3}};
  for (const Step& s : steps) {
    SCOPED_TRACE(s.name);
    inv->devices[0].healthy = s.healthy0;
    auto wrote = pub.Publish({*inv});
    ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
    EXPECT_EQ(*wrote, s.want_write);
    EXPECT_EQ(pub.generation(), s.want_generation);
  }
  auto node = api_.Object("/api/v1/nodes", "node-a");
  ASSERT_TRUE(node.has_value());
  const json& labels = (*node)["metadata"]["labels"];
  EXPECT_EQ(labels["accelpool.io/vendor.ascend"], "true");
  EXPECT_EQ(labels["accelpool.io/model.ascend"], "Ascend910C");
  EXPECT_EQ(labels["accelpool.io/super-node"], "sp-3");
  auto doc = api::ParseInventory(
      (*node)["metadata"]["annotations"]["accelpool.io/inventory"].get<std::string>(), "node-a");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->generation, 3);

  // A restarted plugin continues from the stored generation and writes nothing new.
  NodePublisher again(client_.get(), "node-a", Logger());
  auto wrote = again.Publish({*inv});
  ASSERT_TRUE(wrote.ok());
  EXPECT_FALSE(*wrote);
  EXPECT_EQ(again.generation(), 3);
}

TEST(NodeLabelsTest, SanitisesModelNames) {
  core::NodeInventory inv;
  inv.vendor = core::Vendor::kMthreads;
  core::Device d;
  d.model = "MTT S4000";
  inv.devices.push_back(d);
  auto labels = NodeLabels({inv});
  EXPECT_EQ(labels.at("accelpool.io/model.mthreads"), "MTT_S4000");
  EXPECT_EQ(labels.count("accelpool.io/super-node"), 0u);
}

}  // namespace
}  // namespace accelpool::plugin

namespace accelpool::plugin {
namespace {

// A Running pod of `ns` whose container "main" holds a share of GPU-a
// (slot `slot`) and sets nvidia.com/priority to `priority` ("" for none).
json SharePod(const std::string& name, const std::string& ns, const std::string& priority,
              int32_t slot) {
  api::Assignment a;
  a.node = "node-a";
  a.policy = "accelpool";
  a.containers = {Ctr("main", "nvidia.com/gpu", core::Vendor::kNvidia,
                      {Dev("GPU-a", 0, slot, 1024, 100, false)})};
  api::Allocation done;
  done.allocated = Of({"main"});
  json p = PodJson(name, "node-a",
                   {{"accelpool.io/assignment", api::SerializeAssignment(a)},
                    {"accelpool.io/allocation", api::SerializeAllocation(done)}},
                   "Running");
  p["metadata"]["namespace"] = ns;
  if (!priority.empty()) {
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/priority"] = priority;
  }
  return p;
}

// The containers of pod `name` the store holds as high priority; {"?"}
// when it holds no such pod.
std::set<std::string> HighOf(const AssignmentStore& store, const std::string& name) {
  for (const PodAssignment& p : store.All()) {
    if (p.pod.name == name) return p.pod.high_priority;
  }
  return {"?"};
}

// Defence in depth behind the webhook (a pod created past it: a bypass label,
// failurePolicy Ignore while the extender was down): a container that asks
// for high task priority in a namespace not granted it is stored without it,
// so that Allocate sets it low and PriorityWatch never counts it high. The
// pod is logged once with the reason and counted once. In a granted
// namespace, or with "*", it keeps its priority.
TEST(PodSyncPriorityTest, HighPriorityIsNeverTakenOutsideTheGrantedNamespaces) {
  std::vector<std::string> lines;
  StatusOr<Logger> log = NewLogger(
      "test", {.level = "info", .sink = [&](std::string_view l) { lines.emplace_back(l); }});
  ASSERT_TRUE(log.ok());
  AssignmentStore store;
  PodSync sync(nullptr, "node-a", &store, nullptr, *log);
  int counted = 0;
  sync.OnPriorityNotGranted([&] { ++counted; });
  auto warnings = [&] {
    return std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("high task priority in a namespace not granted it") != std::string::npos;
    });
  };

  // The default: no namespace is granted it.
  const json tenant = SharePod("tenant", "team-a", "0", 1);
  sync.Apply(tenant);
  EXPECT_TRUE(HighOf(store, "tenant").empty());
  EXPECT_EQ(counted, 1);
  ASSERT_EQ(warnings(), 1);
  const std::string said = *std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("not granted it") != std::string::npos;
  });
  EXPECT_NE(said.find("team-a/tenant"), std::string::npos) << said;
  EXPECT_NE(said.find("--high-priority-namespaces"), std::string::npos) << said;
  EXPECT_NE(said.find("\"containers\":\"main\""), std::string::npos) << said;
  // Once per pod, whatever its later versions.
  json again = tenant;
  again["metadata"]["resourceVersion"] = "2";
  sync.Apply(again);
  EXPECT_EQ(counted, 1);
  EXPECT_EQ(warnings(), 1);
  EXPECT_TRUE(HighOf(store, "tenant").empty());
  // The name PodSync keeps for the pod (foreign memory naming) has none either.
  ASSERT_TRUE(sync.PodOfUid("uid-tenant").has_value());
  EXPECT_TRUE(sync.PodOfUid("uid-tenant")->high_priority.empty());

  // Granted namespaces keep it.
  StatusOr<api::HighPriorityNamespaces> granted =
      api::HighPriorityNamespaces::Parse("online,batch");
  ASSERT_TRUE(granted.ok());
  sync.SetHighPriorityNamespaces(*granted);
  sync.Apply(SharePod("infer", "online", "0", 2));
  EXPECT_EQ(HighOf(store, "infer"), std::set<std::string>{"main"});
  sync.Apply(SharePod("other", "team-b", "0", 3));
  EXPECT_TRUE(HighOf(store, "other").empty());
  EXPECT_EQ(counted, 2);
  // Low priority, set or not, is nothing to grant.
  sync.Apply(SharePod("low", "team-b", "1", 4));
  sync.Apply(SharePod("unset", "team-b", "", 5));
  EXPECT_EQ(counted, 2);
  EXPECT_EQ(warnings(), 2);

  StatusOr<api::HighPriorityNamespaces> every = api::HighPriorityNamespaces::Parse("*");
  ASSERT_TRUE(every.ok());
  sync.SetHighPriorityNamespaces(*every);
  sync.Apply(SharePod("anyone", "team-c", "0", 6));
  EXPECT_EQ(HighOf(store, "anyone"), std::set<std::string>{"main"});
  EXPECT_EQ(counted, 2);
}

// What a tenant gains by asking for high priority without the grant: nothing.
// Its launch counter moves (the shim or the tenant itself writes its own
// priority file) and the other container on its GPU is not held; the same
// pod in a granted namespace holds it.
TEST(PodSyncPriorityTest, APodNotGrantedHighPriorityHoldsNobodyOnItsGpu) {
  auto bump = [&](const std::string& state) {
    const int fd = open(PriorityFilePath(state).c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    uint64_t n = 0;
    const off_t at = static_cast<off_t>(cuda::LaunchesOffset(0));
    ASSERT_EQ(pread(fd, &n, sizeof(n), at), static_cast<ssize_t>(sizeof(n)));
    ++n;
    ASSERT_EQ(pwrite(fd, &n, sizeof(n), at), static_cast<ssize_t>(sizeof(n)));
    close(fd);
  };
  auto state_of = [](const StateDirs& dirs, const std::string& pod) {
    StatusOr<std::string> d = dirs.Create("uid-" + pod, "main");
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    const std::string state = StateDirs::StateSubdir(*d);
    EXPECT_TRUE(EnsurePriorityFile(state).ok());
    return state;
  };
  for (const char* granted : {"", "team-a"}) {
    SCOPED_TRACE(std::string("granted: ") + granted);
    testing::TempDir dir;
    const StateDirs dirs(dir.File("containers"));
    AssignmentStore store;
    PodSync sync(nullptr, "node-a", &store, nullptr, Logger());
    StatusOr<api::HighPriorityNamespaces> list = api::HighPriorityNamespaces::Parse(granted);
    ASSERT_TRUE(list.ok());
    sync.SetHighPriorityNamespaces(*list);
    sync.Apply(SharePod("attacker", "team-a", "0", 1));
    sync.Apply(SharePod("victim", "team-b", "", 2));
    const std::string attacker = state_of(dirs, "attacker");
    const std::string victim = state_of(dirs, "victim");
    PriorityWatch w({}, &store, &dirs, nullptr, Logger());
    const auto t0 = std::chrono::steady_clock::now();
    w.Poll(t0, 100'000'000'000ULL);
    bump(attacker);
    w.Poll(t0 + std::chrono::seconds(1), 101'000'000'000ULL);
    StatusOr<uint64_t> hold = ReadHold(victim, 0);
    ASSERT_TRUE(hold.ok()) << hold.status().ToString();
    if (std::string(granted).empty()) {
      EXPECT_TRUE(w.Held().empty());
      EXPECT_EQ(*hold, 0u);
    } else {
      EXPECT_EQ(w.Held(), std::set<std::string>{"team-b/victim/main"});
      EXPECT_GT(*hold, 0u);
    }
  }
}

}  // namespace
}  // namespace accelpool::plugin
