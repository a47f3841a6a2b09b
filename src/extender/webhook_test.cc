#include "extender/webhook.h"

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "extender/test_util.h"
#include "kube/config.h"

namespace accelpool::extender {
namespace {

nlohmann::json Review(const nlohmann::json& pod) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request", {{"uid", "req-1"}, {"operation", "CREATE"}, {"object", pod}}}};
}

nlohmann::json PodWithLimits(const nlohmann::json& limits, const std::string& scheduler = "") {
  nlohmann::json pod = {{"metadata", {{"name", "p"}, {"namespace", "ns"}}},
                        {"spec", {{"containers", {{{"name", "main"},
                                                   {"resources", {{"limits", limits}}}}}}}}};
  if (!scheduler.empty()) pod["spec"]["schedulerName"] = scheduler;
  return pod;
}

TEST(WebhookTest, MutatesRoutesAndRejects) {
  Cache cache;
  testing::AddGpuNode(cache, "a");
  WebhookOptions o;
  o.refuse_oversized = true;
  Webhook w(o, &cache, Logger());
  struct Case {
    const char* name;
    nlohmann::json pod;
    bool want_allowed;
    std::string want_patch;  // decoded JSONPatch, "" = none
    const char* want_message;
  };
  const Case cases[] = {
      {"memory only gets a count and the scheduler", PodWithLimits({{"nvidia.com/gpumem", "4096"}}),
       true,
       R"([{"op":"add","path":"/spec/containers/0/resources/limits/nvidia.com~1gpu","value":"1"},)"
       R"({"op":"add","path":"/spec/schedulerName","value":"accelpool-scheduler"}])",
       ""},
      {"a memory amount of 0 is not given: no count for it",
       PodWithLimits({{"nvidia.com/gpumem", "0"}}), true, "", ""},
      {"compute beside a memory amount of 0 still gets its count",
       PodWithLimits({{"nvidia.com/gpumem", "0"}, {"nvidia.com/gpucores", "30"}}), true,
       R"([{"op":"add","path":"/spec/containers/0/resources/limits/nvidia.com~1gpu","value":"1"},)"
       R"({"op":"add","path":"/spec/schedulerName","value":"accelpool-scheduler"}])",
       ""},
      {"count only is just routed", PodWithLimits({{"nvidia.com/gpu", "2"}}, "default-scheduler"),
       true, R"([{"op":"add","path":"/spec/schedulerName","value":"accelpool-scheduler"}])", ""},
      {"another scheduler is left alone", PodWithLimits({{"nvidia.com/gpu", "2"}}, "volcano"), true,
       "", ""},
      {"no accelerator", PodWithLimits({{"cpu", "2"}}), true, "", ""},
      {"more devices than any node", PodWithLimits({{"nvidia.com/gpu", "9"}}), false, "",
       "largest node has 8"},
      {"fractional count", PodWithLimits({{"nvidia.com/gpu", "1.5"}}), false, "", "1.5"},
      {"a count of zero is no accelerator pod, whatever else it sets",
       [] {
         nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "0"}});
         pod["spec"]["nodeName"] = "n1";
         pod["spec"]["containers"][0]["env"] = {
             {{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "none"}}};
         return pod;
       }(),
       true, "", ""},
      {"more whole devices than any node, over two containers",
       [] {
         nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "5"}});
         pod["spec"]["containers"].push_back(
             {{"name", "side"}, {"resources", {{"limits", {{"nvidia.com/gpu", "5"}}}}}});
         return pod;
       }(),
       false, "", "together ask for 10 whole nvidia devices but the largest node has 8"},
      {"two containers sharing devices fit where their counts add past the node",
       [] {
         nlohmann::json pod = PodWithLimits(
             {{"nvidia.com/gpu", "5"}, {"nvidia.com/gpumem", "1024"}}, "default-scheduler");
         pod["spec"]["containers"].push_back(
             {{"name", "side"},
              {"resources",
               {{"limits", {{"nvidia.com/gpu", "5"}, {"nvidia.com/gpumem", "1024"}}}}}});
         return pod;
       }(),
       true, R"([{"op":"add","path":"/spec/schedulerName","value":"accelpool-scheduler"}])", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Reply r = w.Mutate(Review(c.pod).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const nlohmann::json got = nlohmann::json::parse(r.body);
    EXPECT_EQ(got["apiVersion"], "admission.k8s.io/v1");
    EXPECT_EQ(got["kind"], "AdmissionReview");
    EXPECT_EQ(got["response"]["uid"], "req-1");
    EXPECT_EQ(got["response"]["allowed"], c.want_allowed);
    if (c.want_patch.empty()) {
      EXPECT_FALSE(got["response"].contains("patch"));
    } else {
      ASSERT_TRUE(got["response"].contains("patch")) << r.body;
      EXPECT_EQ(got["response"]["patchType"], "JSONPatch");
      EXPECT_EQ(got["response"]["patch"], kube::Base64Encode(c.want_patch));
    }
    if (!c.want_allowed) {
      EXPECT_NE(got["response"]["status"]["message"].get<std::string>().find(c.want_message),
                std::string::npos)
          << r.body;
    }
  }
}

// A pod asking for an accelpool resource kube-scheduler does not send to the
// extender (a chip name missing from the scheduler's managedResources) would
// be bound without an assignment: refused at creation with the name to add.
// A name given as 0 asks for nothing; a pod whose names are all managed is
// routed as usual.
TEST(WebhookTest, AResourceTheSchedulerDoesNotManageIsRefusedWithTheNameToAdd) {
  WebhookOptions o;
  o.managed_resources = {"nvidia.com/gpu", "nvidia.com/gpumem", "huawei.com/Ascend910B3"};
  Webhook w(o, nullptr, Logger());
  auto answer = [&](const nlohmann::json& pod) {
    Reply r = w.Mutate(Review(pod).dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return nlohmann::json::parse(r.body)["response"];
  };
  nlohmann::json got = answer(PodWithLimits({{"huawei.com/Ascend950", "1"}}));
  EXPECT_EQ(got["allowed"], false);
  const std::string message = got["status"]["message"].get<std::string>();
  EXPECT_NE(message.find("huawei.com/Ascend950"), std::string::npos) << message;
  EXPECT_NE(message.find("scheduler.countResources"), std::string::npos) << message;
  // The count the webhook adds for a memory-only request is checked too.
  got = answer(PodWithLimits({{"huawei.com/Ascend910B3-memory", "16384"}}));
  EXPECT_EQ(got["allowed"], false);
  EXPECT_NE(got["status"]["message"].get<std::string>().find("Ascend910B3-memory"),
            std::string::npos);
  EXPECT_EQ(
      answer(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}}))["allowed"],
      true);
  EXPECT_EQ(
      answer(PodWithLimits({{"nvidia.com/gpu", "1"}, {"huawei.com/Ascend950", "0"}}))["allowed"],
      true);
}

// By default a pod no node holds now is admitted, pending, with a warning
// that says why: a cluster autoscaler adds nodes only for pending pods, and
// a node republishing its inventory is briefly missing from the cache.
TEST(WebhookTest, APodNoNodeHoldsNowIsAdmittedWithAWarningByDefault) {
  Cache cache;
  testing::AddGpuNode(cache, "a");
  Webhook w(WebhookOptions{"accelpool-scheduler"}, &cache, Logger());
  for (const nlohmann::json& pod :
       {PodWithLimits({{"nvidia.com/gpu", "9"}}),
        PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "9000000"}})}) {
    Reply r = w.Mutate(Review(pod).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const nlohmann::json got = nlohmann::json::parse(r.body);
    EXPECT_EQ(got["response"]["allowed"], true) << r.body;
    ASSERT_TRUE(got["response"].contains("warnings")) << r.body;
    const std::string warning = got["response"]["warnings"].back().get<std::string>();
    EXPECT_NE(warning.find("no node in the cluster can hold this pod now"), std::string::npos)
        << warning;
    EXPECT_NE(warning.find("the largest"), std::string::npos) << warning;
    // Still routed to accelpool's scheduler.
    EXPECT_NE(kube::Base64Decode(got["response"]["patch"].get<std::string>())
                  ->find("accelpool-scheduler"),
              std::string::npos);
  }
}

TEST(WebhookTest, PolicyAnnotationMustNameAPolicy) {
  Cache cache;
  testing::AddGpuNode(cache, "a");
  Webhook w(WebhookOptions{"accelpool-scheduler"}, &cache, Logger());
  struct Case {
    const char* key;
    const char* value;
    bool want_allowed;
  };
  const Case cases[] = {
      {"accelpool.io/policy", "spread", true},
      {"hami.io/gpu-scheduler-policy", "binpack", true},
      {"accelpool.io/policy", " Topology ", true},
      {"accelpool.io/policy", "fastest", false},
      {"hami.io/gpu-scheduler-policy", "topology-aware", true},
      {"hami.io/gpu-scheduler-policy", "binpack, numa", true},
      {"hami.io/gpu-scheduler-policy", "mutex,topology-aware", true},
      {"hami.io/gpu-scheduler-policy", "binpack,fastest", false},
      {"hami.io/node-scheduler-policy", "spread", true},
      {"accelpool.io/node-policy", "binpack", true},
      {"hami.io/node-scheduler-policy", "least-loaded", false},
      {"accelpool.io/node-policy", "fastest", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + "=" + c.value);
    nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
    pod["metadata"]["annotations"] = {{c.key, c.value}};
    const nlohmann::json got = nlohmann::json::parse(w.Mutate(Review(pod).dump()).body);
    EXPECT_EQ(got["response"]["allowed"], c.want_allowed) << got.dump();
    if (!c.want_allowed) {
      const std::string msg = got["response"]["status"]["message"];
      EXPECT_NE(msg.find(c.value), std::string::npos) << msg;
      EXPECT_NE(msg.find("binpack, spread"), std::string::npos) << msg;
    }
  }
}

// HAMi annotations accelpool does not honour are admitted with a warning
// (kubectl prints it) that says what the pod gets instead.
TEST(WebhookTest, HamiModesItDoesNotReadAreAdmittedWithAWarning) {
  Webhook w(WebhookOptions{"accelpool-scheduler"}, nullptr, Logger());
  auto warnings = [&](const nlohmann::json& annotations) {
    nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "1024"}});
    pod["metadata"]["annotations"] = annotations;
    const nlohmann::json got = nlohmann::json::parse(w.Mutate(Review(pod).dump()).body);
    EXPECT_TRUE(got["response"]["allowed"].get<bool>()) << got.dump();
    return got["response"].value("warnings", nlohmann::json::array());
  };
  EXPECT_TRUE(warnings(nlohmann::json::object()).empty());
  EXPECT_TRUE(warnings({{"nvidia.com/vgpu-mode", "hami-core"}}).empty());  // what it gets anyway
  const nlohmann::json mig = warnings({{"nvidia.com/vgpu-mode", "mig"}});
  ASSERT_EQ(mig.size(), 1u);
  EXPECT_NE(mig[0].get<std::string>().find("nvidia.com/mig-<profile>"), std::string::npos) << mig;
  const nlohmann::json both =
      warnings({{"nvidia.com/vgpu-mode", "mig"}, {"huawei.com/vnpu-mode", "hami-core"}});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_NE(both[1].get<std::string>().find("templates"), std::string::npos) << both;
  // The quoted value is cut and kept printable.
  const nlohmann::json odd = warnings({{"nvidia.com/vgpu-mode", "x\ny" + std::string(100, 'z')}});
  ASSERT_EQ(odd.size(), 1u);
  const std::string text = odd[0].get<std::string>();
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_NE(text.find("vgpu-mode=x?y" + std::string(29, 'z') + " is not read"), std::string::npos)
      << text;
}

// A count name no accelpool device plugin advertises is admitted (another
// plugin may serve it) with a warning that says what nodes do advertise.
TEST(WebhookTest, CountNamesNoNodeAdvertisesAreAdmittedWithAWarning) {
  Webhook w(WebhookOptions{"accelpool-scheduler"}, nullptr, Logger());
  auto warnings = [&](const std::map<std::string, std::string>& limits) {
    const nlohmann::json got =
        nlohmann::json::parse(w.Mutate(Review(PodWithLimits(limits)).dump()).body);
    EXPECT_TRUE(got["response"]["allowed"].get<bool>()) << got.dump();
    return got["response"].value("warnings", nlohmann::json::array());
  };
  for (const char* served :
       {"nvidia.com/gpu", "huawei.com/Ascend910B3", "huawei.com/Ascend310P",
        "huawei.com/Ascend910C", "mthreads.com/gpu", "nvidia.com/mig-1g.18gb"}) {
    EXPECT_TRUE(warnings({{served, "1"}}).empty()) << served;
  }
  struct Case {
    const char* name;
    const char* hint;
  };
  const Case cases[] = {
      {"huawei.com/Ascend910", "the chip's own name"},
      {"huawei.com/Ascend910B", "huawei.com/Ascend910B3"},
      {"huawei.com/npu", "huawei.com/Ascend910A"},
      {"huawei.com/Ascend310P3", "ask for huawei.com/Ascend310P"},
      {"mthreads.com/vgpu", "ask for mthreads.com/gpu (whole devices"},
      {"kunlunxin.com/vxpu", "ask for kunlunxin.com/xpu"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const nlohmann::json got = warnings({{c.name, "1"}});
    ASSERT_EQ(got.size(), 1u) << got;
    const std::string text = got[0].get<std::string>();
    EXPECT_EQ(text.rfind(std::string(c.name) + " is not advertised", 0), 0u) << text;
    EXPECT_NE(text.find(c.hint), std::string::npos) << text;
  }
}

TEST(WebhookTest, APodCannotSetTheVariablesThePluginAppliesItsGrantThrough) {
  Cache cache;
  testing::AddGpuNode(cache, "a");
  Webhook strict(WebhookOptions{"accelpool-scheduler"}, &cache, Logger());
  Webhook trusting(WebhookOptions{"accelpool-scheduler", /*allow_device_env=*/true}, &cache,
                   Logger());
  struct Case {
    const char* list;
    nlohmann::json env;
    const char* want_refused_for;  // nullptr = allowed
  };
  const Case cases[] = {
      {"containers", {{{"name", "ACCELPOOL_CUDA_DISABLE"}, {"value", "1"}}}, "enforcement"},
      {"containers",
       {{{"name", "ACCELPOOL_CUDA_MEMORY_LIMIT_0"}, {"value", "81920"}}},
       "enforcement"},
      {"containers", {{{"name", "CUDA_DEVICE_MEMORY_LIMIT"}, {"value", "80g"}}}, "enforcement"},
      {"containers", {{{"name", "CUDA_DEVICE_SM_LIMIT"}, {"value", "100"}}}, "enforcement"},
      {"initContainers",
       {{{"name", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"},
         {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "k"}}}}}}},
       "enforcement"},
      {"containers", {{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "all"}}}, "device selection"},
      {"containers", {{{"name", "ASCEND_VISIBLE_DEVICES"}, {"value", "0-7"}}}, "device selection"},
      {"containers", {{{"name", "NVIDIA_IMEX_CHANNELS"}, {"value", "all"}}}, "device selection"},
      {"containers",
       {{{"name", "ASCEND_RUNTIME_OPTIONS"}, {"value", "VIRTUAL"}}},
       "device selection"},
      // In-process selectors only narrow what is mounted; other names are the pod's own.
      {"containers", {{{"name", "CUDA_VISIBLE_DEVICES"}, {"value", "0"}}}, nullptr},
      {"containers", {{{"name", "ASCEND_RT_VISIBLE_DEVICES"}, {"value", "0"}}}, nullptr},
      {"containers", {{{"name", "XPU_VISIBLE_DEVICES"}, {"value", "0"}}}, nullptr},
      {"containers", {{{"name", "MACA_VISIBLE_DEVICES"}, {"value", "0"}}}, nullptr},
      {"containers",
       {{{"name", "MTHREADS_VISIBLE_DEVICES"}, {"value", "all"}}},
       "device selection"},
      {"containers", {{{"name", "ACCELPOOL"}, {"value", "x"}}, {{"name", 5}}, 7}, nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.env.dump());
    nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}});
    nlohmann::json container = {{"name", "side"}, {"env", c.env}};
    pod["spec"][c.list].push_back(container);
    nlohmann::json got = nlohmann::json::parse(strict.Mutate(Review(pod).dump()).body);
    EXPECT_EQ(got["response"]["allowed"], c.want_refused_for == nullptr) << got.dump();
    if (c.want_refused_for != nullptr) {
      const std::string msg = got["response"]["status"]["message"];
      const std::string name = c.env[0]["name"];
      EXPECT_NE(msg.find("container side sets " + name), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.want_refused_for), std::string::npos) << msg;
      EXPECT_NE(msg.find("Remove it from the pod spec"), std::string::npos) << msg;
    }
    got = nlohmann::json::parse(trusting.Mutate(Review(pod).dump()).body);
    EXPECT_TRUE(got["response"]["allowed"].get<bool>()) << "allow_device_env admits it";
    // A pod that asks for no accelerator is not this webhook's business.
    nlohmann::json cpu = PodWithLimits({{"cpu", "1"}});
    cpu["spec"][c.list].push_back(container);
    got = nlohmann::json::parse(strict.Mutate(Review(cpu).dump()).body);
    EXPECT_TRUE(got["response"]["allowed"].get<bool>());
  }
}

TEST(WebhookTest, APodCannotBeCreatedWithTheAnnotationsAccelpoolWrites) {
  Cache cache;
  testing::AddGpuNode(cache, "a");
  Webhook hook(WebhookOptions{"accelpool-scheduler"}, &cache, Logger());
  const std::pair<const char*, const char*> cases[] = {
      {"accelpool.io/assignment", "the accelpool scheduler"},
      {"accelpool.io/assignment-signature", "the accelpool scheduler"},
      {"accelpool.io/allocation", "the accelpool device plugin"},
  };
  for (const auto& [key, writer] : cases) {
    SCOPED_TRACE(key);
    nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
    pod["metadata"]["annotations"] = {{key, ""}, {"team", "a"}};
    nlohmann::json got = nlohmann::json::parse(hook.Mutate(Review(pod).dump()).body);
    ASSERT_FALSE(got["response"]["allowed"].get<bool>()) << got.dump();
    const std::string msg = got["response"]["status"]["message"];
    EXPECT_NE(msg.find(std::string("annotation ") + key + " is written only by " + writer),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("delete the line"), std::string::npos) << msg;
  }
  // Other annotations, and none at all, are the pod's own.
  nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
  pod["metadata"]["annotations"] = {{"accelpool.io/policy", "binpack"}, {"team", "a"}};
  EXPECT_TRUE(nlohmann::json::parse(hook.Mutate(Review(pod).dump()).body)["response"]["allowed"]
                  .get<bool>());
}

nlohmann::json Response(const Reply& r) {
  EXPECT_EQ(r.status, 200) << r.body;
  const nlohmann::json got = nlohmann::json::parse(r.body);
  EXPECT_EQ(got["response"]["uid"], "req-1");
  return got["response"];
}

// High task priority holds other tenants' launches on the GPU: only the
// namespaces the platform lists may ask for it (none by default; "*" is
// every one, HAMi's behaviour). A pod of another is refused with what to do.
TEST(WebhookTest, HighTaskPriorityIsRefusedOutsideTheGrantedNamespaces) {
  const nlohmann::json high = PodWithLimits(
      {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}, {"nvidia.com/priority", "0"}});
  const nlohmann::json low = PodWithLimits(
      {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}, {"nvidia.com/priority", "1"}});
  const nlohmann::json unset =
      PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4096"}});
  auto answer = [](const Webhook& w, nlohmann::json review) {
    return Response(w.Mutate(review.dump()));
  };
  auto in = [](const nlohmann::json& pod, const std::string& ns) {
    nlohmann::json r = Review(pod);
    r["request"]["namespace"] = ns;  // what the apiserver sends; the object may have none
    r["request"]["object"]["metadata"].erase("namespace");
    return r;
  };
  auto with = [](const char* list) {
    WebhookOptions o;
    StatusOr<api::HighPriorityNamespaces> l = api::HighPriorityNamespaces::Parse(list);
    EXPECT_TRUE(l.ok()) << l.status().message();
    o.high_priority_namespaces = *l;
    return o;
  };
  {
    const Webhook w(WebhookOptions(), nullptr, Logger());  // the default: nobody
    nlohmann::json got = answer(w, in(high, "team-a"));
    EXPECT_EQ(got["allowed"], false);
    const std::string message = got["status"]["message"].get<std::string>();
    EXPECT_NE(message.find("container main asks for high task priority"), std::string::npos)
        << message;
    EXPECT_NE(message.find("namespace \"team-a\""), std::string::npos) << message;
    EXPECT_NE(message.find("devicePlugin.priority.highPriorityNamespaces"), std::string::npos)
        << message;
    EXPECT_NE(message.find("remove nvidia.com/priority"), std::string::npos) << message;
    // The pod's own metadata.namespace when the request names none.
    got = answer(w, Review(high));
    EXPECT_EQ(got["allowed"], false);
    EXPECT_NE(got["status"]["message"].get<std::string>().find("namespace \"ns\""),
              std::string::npos);
    // Low priority, set or not, is no grant.
    EXPECT_EQ(answer(w, in(low, "team-a"))["allowed"], true);
    EXPECT_EQ(answer(w, in(unset, "team-a"))["allowed"], true);
    // An init container (a sidecar) asks as well.
    nlohmann::json sidecar = unset;
    sidecar["spec"]["initContainers"] = {
        {{"name", "side"},
         {"restartPolicy", "Always"},
         {"resources", {{"limits", {{"nvidia.com/gpu", "1"}, {"nvidia.com/priority", "0"}}}}}}};
    got = answer(w, in(sidecar, "team-a"));
    EXPECT_EQ(got["allowed"], false);
    EXPECT_NE(got["status"]["message"].get<std::string>().find("container side "),
              std::string::npos);
  }
  {
    const Webhook w(with("online,batch-high"), nullptr, Logger());
    EXPECT_EQ(answer(w, in(high, "online"))["allowed"], true);
    EXPECT_EQ(answer(w, in(high, "batch-high"))["allowed"], true);
    EXPECT_EQ(answer(w, in(high, "team-a"))["allowed"], false);
    EXPECT_EQ(answer(w, in(high, "onlinex"))["allowed"], false);
  }
  {
    const Webhook w(with("*"), nullptr, Logger());
    EXPECT_EQ(answer(w, in(high, "team-a"))["allowed"], true);
    EXPECT_EQ(answer(w, in(high, "default"))["allowed"], true);
  }
}

// kube-apiserver sends "nvidia.com/gpumem: 4000" as "4k" (canonical quantity).
TEST(WebhookTest, CanonicalQuantitiesFromTheApiserverAreAdmitted) {
  Cache cache;
  testing::AddGpuNode(cache, "a");
  Webhook w(WebhookOptions{"accelpool-scheduler"}, &cache, Logger());
  const nlohmann::json resp = Response(w.Mutate(
      Review(PodWithLimits({{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "4k"}})).dump()));
  EXPECT_EQ(resp["allowed"], true) << resp.dump();
  EXPECT_EQ(resp["patch"],
            kube::Base64Encode(
                R"([{"op":"add","path":"/spec/schedulerName","value":"accelpool-scheduler"}])"));
}

// Only CREATE of the pod itself is routed and checked. An UPDATE cannot
// change spec.schedulerName (the apiserver would refuse the whole update), and
// a subresource (status, binding, ephemeralcontainers, eviction) or another
// kind carries no pod to route: all are allowed as they are.
TEST(WebhookTest, OnlyCreateOfAPodIsMutated) {
  Webhook w(WebhookOptions{"accelpool-scheduler"}, nullptr, Logger());
  const nlohmann::json pod = PodWithLimits({{"nvidia.com/gpumem", "4096"}});
  struct Case {
    const char* name;
    nlohmann::json request;  // merged into the request
  };
  const Case cases[] = {
      {"update", {{"operation", "UPDATE"}}},
      {"delete", {{"operation", "DELETE"}}},
      {"connect", {{"operation", "CONNECT"}}},
      {"subresource", {{"subResource", "ephemeralcontainers"}}},
      {"status", {{"subResource", "status"}}},
      {"another kind", {{"kind", {{"group", "batch"}, {"version", "v1"}, {"kind", "Job"}}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json review = Review(pod);
    review["request"].update(c.request);
    const nlohmann::json resp = Response(w.Mutate(review.dump()));
    EXPECT_EQ(resp["allowed"], true);
    EXPECT_FALSE(resp.contains("patch")) << resp.dump();
  }
  // The apiserver's own CREATE, with kind and dryRun, is mutated as usual.
  nlohmann::json review = Review(pod);
  review["request"]["kind"] = {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}};
  review["request"]["dryRun"] = true;
  EXPECT_TRUE(Response(w.Mutate(review.dump())).contains("patch"));
}

// spec.nodeName at creation skips the scheduler: the pod would get no
// assignment, the extender would not count its devices and could give them to
// another pod. It is refused with what to write instead. A mirror pod (the
// apiserver's record of a kubelet static pod) is allowed as it is.
TEST(WebhookTest, APodCreatedOnANodeIsRefused) {
  Webhook w(WebhookOptions{"accelpool-scheduler"}, nullptr, Logger());
  nlohmann::json pod = PodWithLimits({{"nvidia.com/gpu", "1"}});
  pod["spec"]["nodeName"] = "node-a";
  nlohmann::json resp = Response(w.Mutate(Review(pod).dump()));
  EXPECT_EQ(resp["allowed"], false);
  EXPECT_EQ(resp["status"]["code"], 400);
  const std::string msg = resp["status"]["message"].get<std::string>();
  EXPECT_NE(msg.find("spec.nodeName"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kubernetes.io/hostname: node-a"), std::string::npos) << msg;

  pod["metadata"]["annotations"] = {{"kubernetes.io/config.mirror", "abc"}};
  nlohmann::json review = Review(pod);
  review["request"]["userInfo"] = {{"username", "system:node:node-a"}};
  resp = Response(w.Mutate(review.dump()));
  EXPECT_EQ(resp["allowed"], true);
  EXPECT_FALSE(resp.contains("patch")) << resp.dump();
  // The annotation from anyone but a node exempts nothing: a forged
  // assignment beside it would otherwise reach the device plugin unchecked.
  pod["metadata"]["annotations"]["accelpool.io/assignment"] = "{}";
  for (const nlohmann::json& user :
       {nlohmann::json{{"username", "alice"}}, nlohmann::json{{"username", "system:nodes"}},
        nlohmann::json()}) {
    SCOPED_TRACE(user.dump());
    review = Review(pod);
    if (!user.is_null()) review["request"]["userInfo"] = user;
    resp = Response(w.Mutate(review.dump()));
    EXPECT_EQ(resp["allowed"], false) << resp.dump();
  }
}

// A memory or compute name of an Ascend or Iluvatar chip that is matched as a
// pattern (not in the fixed table) gets its own chip's count name, the one the
// device plugin advertises for it, not the vendor-wide one.
TEST(WebhookTest, ADefaultCountNamesThePatternChip) {
  Webhook w(WebhookOptions{"accelpool-scheduler"}, nullptr, Logger());
  struct Case {
    const char* memory;
    const char* want_path;
  };
  const Case cases[] = {
      {"huawei.com/Ascend950-memory", "/spec/containers/0/resources/limits/huawei.com~1Ascend950"},
      {"huawei.com/Ascend910B4-2-core",
       "/spec/containers/0/resources/limits/huawei.com~1Ascend910B4-2"},
      {"iluvatar.ai/BI-V200.vMem", "/spec/containers/0/resources/limits/iluvatar.ai~1BI-V200-vgpu"},
      {"huawei.com/Ascend910B-memory",
       "/spec/containers/0/resources/limits/huawei.com~1Ascend910B"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.memory);
    const nlohmann::json resp =
        Response(w.Mutate(Review(PodWithLimits({{c.memory, "50"}})).dump()));
    ASSERT_EQ(resp["allowed"], true) << resp.dump();
    const nlohmann::json patch =
        nlohmann::json::parse(kube::Base64Decode(resp["patch"].get<std::string>()).value());
    EXPECT_EQ(patch[0]["path"], c.want_path) << patch.dump();
  }
}

TEST(WebhookTest, BadReviewIs400) {
  Webhook w(WebhookOptions{}, nullptr, Logger());
  for (
      const char* body :
      {"", "{", "[]", R"({"request":5})",
       // not admission.k8s.io/v1 AdmissionReview: the answer would not be understood
       R"({"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}})",
       R"({"apiVersion":"admission.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u"}})",
       R"({"request":{"uid":"u"}})",
       // no uid to answer with
       R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}})",
       R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}})"}) {
    SCOPED_TRACE(body);
    for (const Reply& r : {w.Mutate(body), w.MutateHostPod(body)}) {
      EXPECT_EQ(r.status, 400);
      EXPECT_NE(r.body.find("AdmissionReview"), std::string::npos) << r.body;
    }
  }
}

// Every answer is counted by route and result
// (accelpool_extender_admissions_total).
TEST(WebhookTest, EveryAnswerIsCountedByRouteAndResult) {
  MetricsRegistry registry;
  StatusOr<ExtenderMetrics> metrics = ExtenderMetrics::Register(registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  Webhook w(WebhookOptions{}, nullptr, Logger(), &*metrics);
  const nlohmann::json cpu = PodWithLimits({{"cpu", "1"}});
  w.Mutate(Review(PodWithLimits({{"nvidia.com/gpu", "1"}})).dump());    // routed
  w.Mutate(Review(PodWithLimits({{"nvidia.com/gpu", "1.5"}})).dump());  // refused
  w.Mutate(Review(cpu).dump());                                         // not ours
  w.Mutate("{");
  w.MutateHostPod(Review(cpu).dump());
  w.MutateHostPod(Review(PodWithLimits({{"nvidia.com/gpu", "1"}})).dump());
  auto count = [&](const char* route, const char* result) {
    return metrics->admissions->WithLabels({route, result}).Value();
  };
  EXPECT_EQ(count("devices", "mutated"), 1);
  EXPECT_EQ(count("devices", "refused"), 1);
  EXPECT_EQ(count("devices", "unchanged"), 1);
  EXPECT_EQ(count("devices", "bad_request"), 1);
  EXPECT_EQ(count("devices", "error"), 0);
  EXPECT_EQ(count("host-pods", "mutated"), 1);
  EXPECT_EQ(count("host-pods", "unchanged"), 1);
  EXPECT_NE(registry.Serialize().find(
                "accelpool_extender_admissions_total{route=\"host-pods\",result=\"refused\"} 0"),
            std::string::npos);
}

// The host-pod route: a pod that asks for no device is sent to accelpool's
// scheduler, unless it is a fixture of its node or the cluster, is already
// placed or names another scheduler; a pod that asks for devices is the main
// route's, and this one leaves it alone.
TEST(WebhookTest, TheHostPodRouteSendsPodsThatAskForNoDeviceToAccelpool) {
  Webhook w(WebhookOptions{"accelpool-scheduler", false, "accelpool-scheduler-hosts"}, nullptr,
            Logger());
  auto cpu_pod = [] {
    nlohmann::json pod = PodWithLimits({{"cpu", "4"}, {"memory", "8Gi"}});
    pod["metadata"]["ownerReferences"] = {{{"kind", "ReplicaSet"}, {"name", "web"}}};
    return pod;
  };
  struct Case {
    const char* name;
    nlohmann::json pod;
    bool routed;
  };
  std::vector<Case> cases;
  cases.push_back({"cpu only", cpu_pod(), true});
  cases.push_back({"no resources at all", {{"spec", {{"containers", {{{"name", "c"}}}}}}}, true});
  nlohmann::json zero = PodWithLimits({{"nvidia.com/gpu", "0"}, {"cpu", "1"}});
  cases.push_back({"a count of 0", zero, true});
  nlohmann::json named_default = cpu_pod();
  named_default["spec"]["schedulerName"] = "default-scheduler";
  cases.push_back({"default-scheduler by name", named_default, true});
  cases.push_back({"asks for a GPU", PodWithLimits({{"nvidia.com/gpu", "1"}}), false});
  cases.push_back({"asks for GPU memory", PodWithLimits({{"nvidia.com/gpumem", "4096"}}), false});
  cases.push_back({"does not parse", PodWithLimits({{"nvidia.com/gpu", "1.5"}}), false});
  nlohmann::json other = cpu_pod();
  other["spec"]["schedulerName"] = "volcano";
  cases.push_back({"another scheduler", other, false});
  nlohmann::json placed = cpu_pod();
  placed["spec"]["nodeName"] = "n1";
  cases.push_back({"spec.nodeName", placed, false});
  nlohmann::json ds = cpu_pod();
  ds["metadata"]["ownerReferences"] = {{{"kind", "DaemonSet"}, {"name", "cni"}}};
  cases.push_back({"DaemonSet pod", ds, false});
  for (const char* pc : {"system-node-critical", "system-cluster-critical"}) {
    nlohmann::json critical = cpu_pod();
    critical["spec"]["priorityClassName"] = pc;
    cases.push_back({pc, critical, false});
  }
  nlohmann::json mirror = cpu_pod();
  mirror["metadata"]["annotations"] = {{"kubernetes.io/config.mirror", "x"}};
  cases.push_back({"mirror pod", mirror, false});
  nlohmann::json forged = cpu_pod();
  forged["metadata"]["annotations"] = {{"accelpool.io/assignment", "{}"}};
  cases.push_back({"an annotation only accelpool writes", forged, false});
  nlohmann::json bad_annotation = cpu_pod();
  bad_annotation["metadata"]["annotations"] = {{"accelpool.io/exclusive", "maybe"}};
  cases.push_back({"an annotation the extender cannot read", bad_annotation, false});
  cases.push_back({"no spec", {{"metadata", {{"name", "p"}}}}, false});
  cases.push_back({"spec not an object", {{"spec", 5}}, false});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const nlohmann::json resp = Response(w.MutateHostPod(Review(c.pod).dump()));
    EXPECT_EQ(resp["allowed"], true) << resp.dump();
    ASSERT_EQ(resp.contains("patch"), c.routed) << resp.dump();
    if (c.routed) {
      EXPECT_EQ(resp["patchType"], "JSONPatch");
      EXPECT_EQ(
          nlohmann::json::parse(kube::Base64Decode(resp["patch"].get<std::string>()).value()),
          nlohmann::json::parse(
              R"([{"op":"add","path":"/spec/schedulerName","value":"accelpool-scheduler-hosts"}])"));
    }
  }
  // Only CREATE of a pod.
  nlohmann::json update = Review(cpu_pod());
  update["request"]["operation"] = "UPDATE";
  EXPECT_FALSE(Response(w.MutateHostPod(update.dump())).contains("patch"));
  // The main route lets such a pod through unchanged.
  EXPECT_FALSE(Response(w.Mutate(Review(cpu_pod()).dump())).contains("patch"));
}

}  // namespace
}  // namespace accelpool::extender
