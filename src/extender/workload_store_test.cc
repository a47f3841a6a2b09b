#include "extender/workload_store.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kube/fake_api_test.h"

namespace accelpool::extender {
namespace {

using json = nlohmann::json;

core::TaskShape Shape(int32_t count, int32_t compute, int64_t memory, int64_t cpu,
                      int64_t host_memory, std::string model = "") {
  core::TaskShape t;
  t.count = count;
  t.compute = compute;
  t.memory_mib = memory;
  t.cpu_milli = cpu;
  t.host_memory_mib = host_memory;
  t.model = std::move(model);
  return t;
}

WorkloadState Example() {
  WorkloadState s;
  for (int i = 0; i < 30; ++i) s.arrivals.push_back(Shape(1, 1000, 0, 8000, 16384));
  for (int i = 0; i < 20; ++i) s.arrivals.push_back(Shape(1, 300, 12288, 2000, 8192, "A10|L4"));
  s.arrivals.push_back(Shape(0, 0, 0, 500, 512));
  core::TaskShape quarter = Shape(1, 0, 0, 1000, 2048);  // gpumem-percentage: 25
  quarter.memory_percent = 25;
  s.arrivals.push_back(quarter);
  s.observed = 5000;
  s.watermark = "2026-12-01T12:00:05Z";
  s.watermark_uids = {"u-1", "u-2"};
  return s;
}

TEST(WorkloadStoreTest, ADocumentReadsBackAsWritten) {
  const WorkloadState s = Example();
  size_t kept = 0;
  const std::string text = EncodeWorkload(s, 768 * 1024, &kept);
  EXPECT_EQ(kept, s.arrivals.size());
  // Each shape once, the window as indices.
  const json doc = json::parse(text);
  EXPECT_EQ(doc["shapes"].size(), 4u);
  EXPECT_EQ(doc["arrivals"].size(), 52u);
  StatusOr<WorkloadState> back = DecodeWorkload(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  // A document an older extender wrote (shapes of six fields, no memory in
  // percent) still reads.
  json old = doc;
  for (json& shape : old["shapes"]) shape.erase(shape.size() - 1);
  old["shapes"][3][2] = 4096;  // the quarter, as it was stored then
  StatusOr<WorkloadState> older = DecodeWorkload(old.dump());
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_EQ(older->arrivals.back().memory_percent, 0);
  EXPECT_EQ(older->arrivals.back().memory_mib, 4096);
  // An empty window is a document too.
  StatusOr<WorkloadState> empty = DecodeWorkload(EncodeWorkload(WorkloadState{}));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(*empty, WorkloadState{});
}

TEST(WorkloadStoreTest, TheDefaultWindowIsAFewKilobytes) {
  // 2048 arrivals of 64 shapes, the defaults (docs/extender.md quotes it).
  WorkloadState s;
  for (int i = 0; i < 2048; ++i) {
    const int k = (i * 7919) % 64;
    s.arrivals.push_back(Shape(1 + k % 8, k < 32 ? 1000 : 250, k < 32 ? 0 : 4096 * (k % 5),
                               1000 * (k % 9), 2048 * (k % 11), k % 3 == 0 ? "A10|L4" : ""));
  }
  s.observed = 123456;
  s.watermark = "2026-12-01T12:00:05Z";
  s.watermark_uids = {"0f8e3c1a-1111-2222-3333-444455556666"};
  size_t kept = 0;
  const std::string text = EncodeWorkload(s, 768 * 1024, &kept);
  EXPECT_EQ(kept, 2048u);
  EXPECT_EQ(json::parse(text)["shapes"].size(), 64u);
  EXPECT_LT(text.size(), 8u * 1024) << text.size();
}

TEST(WorkloadStoreTest, AWindowTooLongForAConfigMapKeepsItsNewestArrivals) {
  WorkloadState s;
  for (int i = 0; i < 200000; ++i)
    s.arrivals.push_back(Shape(1 + i % 8, 1000, 0, 1000 * (i % 7), 0));
  s.observed = 200000;
  size_t kept = 0;
  const std::string text = EncodeWorkload(s, 100 * 1024, &kept);
  EXPECT_LE(text.size(), 100u * 1024);
  EXPECT_GT(kept, 10000u);  // most of what fits
  EXPECT_LT(kept, s.arrivals.size());
  StatusOr<WorkloadState> back = DecodeWorkload(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->arrivals.size(), kept);
  EXPECT_EQ(back->arrivals.back(), s.arrivals.back());
  EXPECT_EQ(back->arrivals.front(), s.arrivals[s.arrivals.size() - kept]);
  EXPECT_EQ(back->observed, 200000u);
}

TEST(WorkloadStoreTest, MalformedDocumentsAreRefusedWithTheReason) {
  const json good = json::parse(EncodeWorkload(Example()));
  auto with = [&](const char* key, json value) {
    json d = good;
    d[key] = std::move(value);
    return d.dump();
  };
  auto without = [&](const char* key) {
    json d = good;
    d.erase(key);
    return d.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {without("arrivals"), "no \"arrivals\""},
      {with("version", 2), "version 2 is not 1"},
      {with("version", "1"), "version \"1\" is not 1"},
      {with("observed", -1), "observed is -1"},
      {with("observed", 3), "observed is less than the arrivals"},
      {with("watermark", "yesterday"), "watermark \"yesterday\" is not a time"},
      {with("watermark", 5), "watermark is not a string"},
      {with("watermark_uids", json::array({""})), "watermark uid"},
      {with("shapes", json::array({json::array({1, 1000, 0, 0, 0})})), "shape 0 is not"},
      {with("shapes", json::array({json::array({1, 1001, 0, 0, 0, ""})})),
       "shape 0 compute is 1001"},
      {with("shapes", json::array({json::array({-1, 1000, 0, 0, 0, ""})})), "shape 0 count is -1"},
      {with("shapes", json::array({json::array({1, 1000, 0, 0, 0, 7})})), "shape 0 models"},
      {with("shapes", json::array({json::array({1, 0, 0, 0, 0, "", 101})})),
       "shape 0 memory percent is 101"},
      {with("shapes", json::array({json::array({1, 1000, 0, 18446744073709551615ull, 0, ""})})),
       "shape 0 cpu is 18446744073709551615"},
      {with("arrivals", json::array({0, 1, 4})), "an arrival's shape index is 4, outside 0..3"},
      {with("arrivals", json::array({0, 1.5})), "an arrival's shape index is not an integer"},
      {with("arrivals", "0,1"), "arrivals is not an array"},
  };
  for (const auto& [text, why] : cases) {
    StatusOr<WorkloadState> s = DecodeWorkload(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(why), std::string::npos)
        << "want \"" << why << "\" in: " << s.status().message();
    EXPECT_NE(s.status().message().find("rewritten on the next save"), std::string::npos);
  }
}

TEST(WorkloadStoreTest, OnlyTheApiserversTimeFormIsAWatermark) {
  EXPECT_TRUE(IsRfc3339Seconds("2026-12-01T12:00:05Z"));
  EXPECT_FALSE(IsRfc3339Seconds(""));
  EXPECT_FALSE(IsRfc3339Seconds("2026-12-01T12:00:05.123Z"));
  EXPECT_FALSE(IsRfc3339Seconds("2026-12-01T12:00:05+01:00"));
  EXPECT_FALSE(IsRfc3339Seconds("2026-12-01 12:00:05Z"));
}

class WorkloadStoreApiTest : public kube::testing::FakeApiTest {};

TEST_F(WorkloadStoreApiTest, SavesCreatesThenPatchesAndLoadsBack) {
  WorkloadStore store(*client_, "accelpool", "accelpool-workload");
  StatusOr<std::optional<WorkloadState>> none = store.Load();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());

  WorkloadState s = Example();
  ASSERT_TRUE(store.Save(s).ok());  // created
  std::optional<json> cm =
      api_.Object("/api/v1/namespaces/accelpool/configmaps", "accelpool-workload");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["metadata"]["labels"]["app.kubernetes.io/managed-by"], "accelpool-extender");
  s.observed += 1;
  s.arrivals.push_back(Shape(8, 1000, 0, 64000, 524288));
  ASSERT_TRUE(store.Save(s).ok());  // patched
  StatusOr<std::optional<WorkloadState>> back = store.Load();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(**back, s);

  // A ConfigMap made by the chart (no data yet) is patched, its other keys kept.
  api_.Put("/api/v1/namespaces/accelpool/configmaps",
           {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", "chart-made"}, {"namespace", "accelpool"}}},
            {"data", {{"README", "written by the extender"}}}});
  WorkloadStore chart(*client_, "accelpool", "chart-made");
  StatusOr<std::optional<WorkloadState>> empty = chart.Load();
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
  ASSERT_TRUE(chart.Save(s).ok());
  cm = api_.Object("/api/v1/namespaces/accelpool/configmaps", "chart-made");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["data"]["README"], "written by the extender");
  EXPECT_TRUE((*cm)["data"].contains(WorkloadStore::kDataKey));

  // A document edited by hand is refused with the reason, not used.
  (*cm)["data"][WorkloadStore::kDataKey] = "{\"version\": 1}";
  api_.Put("/api/v1/namespaces/accelpool/configmaps", *cm);
  StatusOr<std::optional<WorkloadState>> bad = chart.Load();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ConfigMap accelpool/chart-made"), std::string::npos);
  EXPECT_NE(bad.status().message().find("no \"observed\""), std::string::npos);

  // A key that is not a string (kube-apiserver would not store one) is refused too.
  (*cm)["data"][WorkloadStore::kDataKey] = 7;
  api_.Put("/api/v1/namespaces/accelpool/configmaps", *cm);
  bad = chart.Load();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ConfigMap accelpool/chart-made"), std::string::npos);
  EXPECT_NE(bad.status().message().find("workload.json is not a string"), std::string::npos);

  // The apiserver's errors pass through with what was being done.
  api_.FailNext(1, 403);
  Status denied = store.Save(s);
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("writing ConfigMap accelpool/accelpool-workload"),
            std::string::npos);
}

}  // namespace
}  // namespace accelpool::extender
