#include "common/metrics.h"

#include <gtest/gtest.h>

#include <limits>
#include <thread>
#include <vector>

namespace accelpool {
namespace {

TEST(MetricsTest, CounterExposition) {
  MetricsRegistry reg;
  auto c = reg.AddCounter("accelpool_binds_total", "Binds by result.", {"result"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  (*c)->WithLabels({"ok"}).Inc();
  (*c)->WithLabels({"ok"}).Inc(2);
  (*c)->WithLabels({"conflict"}).Inc();
  (*c)->WithLabels({"ok"}).Inc(-5);  // ignored
  EXPECT_EQ(reg.Serialize(),
            "# HELP accelpool_binds_total Binds by result.\n"
            "# TYPE accelpool_binds_total counter\n"
            "accelpool_binds_total{result=\"conflict\"} 1\n"
            "accelpool_binds_total{result=\"ok\"} 3\n");
}

TEST(MetricsTest, GaugeAndLabelEscaping) {
  MetricsRegistry reg;
  auto g = reg.AddGauge("accelpool_free", "Free \\ devices\nper node.", {"node", "vendor"});
  ASSERT_TRUE(g.ok());
  Gauge& a = (*g)->WithLabels({"n\"1\\x\ny", "nvidia"});
  a.Set(4);
  a.Dec();
  a.Add(0.5);
  EXPECT_DOUBLE_EQ(a.Value(), 3.5);
  EXPECT_EQ(reg.Serialize(),
            "# HELP accelpool_free Free \\\\ devices\\nper node.\n"
            "# TYPE accelpool_free gauge\n"
            "accelpool_free{node=\"n\\\"1\\\\x\\ny\",vendor=\"nvidia\"} 3.5\n");
}

TEST(MetricsTest, SeriesOfThingsGoneAreRemoved) {
  MetricsRegistry reg;
  auto g = reg.AddGauge("accelpool_used", "Used.", {"node", "device"});
  ASSERT_TRUE(g.ok());
  (*g)->WithLabels({"a", "d0"}).Set(1);
  (*g)->WithLabels({"a", "d1"}).Set(2);
  (*g)->WithLabels({"b", "d0"}).Set(3);
  EXPECT_EQ((*g)->RemoveIf([](const std::vector<std::string>& v) { return v[0] == "b"; }), 1u);
  EXPECT_EQ((*g)->RemoveIf([](const std::vector<std::string>& v) { return v[1] == "d1"; }), 1u);
  EXPECT_EQ((*g)->RemoveIf([](const std::vector<std::string>&) { return false; }), 0u);
  EXPECT_EQ(reg.Serialize(),
            "# HELP accelpool_used Used.\n"
            "# TYPE accelpool_used gauge\n"
            "accelpool_used{node=\"a\",device=\"d0\"} 1\n");
  // A series set again after its removal starts over.
  EXPECT_DOUBLE_EQ((*g)->WithLabels({"b", "d0"}).Value(), 0);
}

TEST(MetricsTest, HistogramBuckets) {
  MetricsRegistry reg;
  auto h = reg.AddHistogram("accelpool_latency_seconds", "Latency.", {"op"}, {0.1, 1});
  ASSERT_TRUE(h.ok());
  Histogram& f = (*h)->WithLabels({"filter"});
  f.Observe(0.05);
  f.Observe(0.1);  // le is inclusive
  f.Observe(0.5);
  f.Observe(7);
  EXPECT_EQ(reg.Serialize(),
            "# HELP accelpool_latency_seconds Latency.\n"
            "# TYPE accelpool_latency_seconds histogram\n"
            "accelpool_latency_seconds_bucket{op=\"filter\",le=\"0.1\"} 2\n"
            "accelpool_latency_seconds_bucket{op=\"filter\",le=\"1\"} 3\n"
            "accelpool_latency_seconds_bucket{op=\"filter\",le=\"+Inf\"} 4\n"
            "accelpool_latency_seconds_sum{op=\"filter\"} 7.65\n"
            "accelpool_latency_seconds_count{op=\"filter\"} 4\n");
}

TEST(MetricsTest, RegistrationErrors) {
  struct Case {
    std::string name;
    std::vector<std::string> labels;
    StatusCode want;
  };
  const std::vector<Case> cases = {
      {"ok_name", {"a"}, StatusCode::kOk},
      {"9starts_with_digit", {}, StatusCode::kInvalidArgument},
      {"has-dash", {}, StatusCode::kInvalidArgument},
      {"", {}, StatusCode::kInvalidArgument},
      {"good", {"bad-label"}, StatusCode::kInvalidArgument},
      {"good2", {"__reserved"}, StatusCode::kInvalidArgument},
      {"good3", {"with:colon"}, StatusCode::kInvalidArgument},
  };
  for (const auto& c : cases) {
    MetricsRegistry reg;
    auto r = reg.AddCounter(c.name, "h", c.labels);
    EXPECT_EQ(r.status().code(), c.want) << c.name;
  }
  MetricsRegistry reg;
  auto first = reg.AddCounter("x_total", "h", {"a"});
  ASSERT_TRUE(first.ok());
  auto again = reg.AddCounter("x_total", "h", {"a"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(reg.AddGauge("x_total", "h", {"a"}).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(reg.AddCounter("x_total", "h", {"b"}).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(reg.AddHistogram("h_le", "h", {"le"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.AddHistogram("h_bounds", "h", {}, {1, 1}).status().code(),
            StatusCode::kInvalidArgument);
  // +Inf is every histogram's last bucket already; -Inf holds nothing.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(reg.AddHistogram("h_inf", "h", {}, {1, inf}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.AddHistogram("h_minus_inf", "h", {}, {-inf, 1}).status().code(),
            StatusCode::kInvalidArgument);
}

// What Prometheus would refuse the whole page for is refused at registration:
// a reserved name, a label named twice, one family's series carrying
// another's name (a histogram writes <name>_bucket, _sum and _count).
TEST(MetricsTest, RegistrationRefusesWhatWouldBreakThePage) {
  MetricsRegistry reg;
  EXPECT_EQ(reg.AddGauge("__reserved", "h").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.AddCounter("twice_total", "h", {"a", "b", "a"}).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(reg.AddHistogram("op_seconds", "h").ok());
  for (const char* series : {"op_seconds_count", "op_seconds_sum", "op_seconds_bucket"}) {
    const Status st = reg.AddCounter(series, "h").status();
    EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << series;
    EXPECT_NE(st.message().find("which metric op_seconds writes"), std::string::npos)
        << st.message();
  }
  ASSERT_TRUE(reg.AddGauge("queue_count", "h").ok());
  EXPECT_EQ(reg.AddHistogram("queue", "h").status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(reg.AddGauge("queue_counts", "h").ok());
}

// A label value that is not UTF-8 (a device id from a library, a pod name
// read raw) would make Prometheus refuse the whole scrape: such bytes become
// U+FFFD, valid multi-byte characters stay.
TEST(MetricsTest, LabelValuesThatAreNotUtf8AreReplaced) {
  EXPECT_EQ(EscapeLabelValue("GPU-\xff\x01"), "GPU-\xEF\xBF\xBD\x01");
  EXPECT_EQ(EscapeLabelValue("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(EscapeLabelValue("\xC3"), "\xEF\xBF\xBD");  // cut short
  EXPECT_EQ(EscapeLabelValue("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\n"), "a\\\"b\\\\c\\n");
}

// Bucket bounds print as other client libraries print `le`: 0.0005 and
// 100000, never 5e-04 or 1e+05, so that a rule on le="0.0005" matches.
TEST(MetricsTest, BucketBoundsPrintInFixedNotation) {
  MetricsRegistry reg;
  auto h = reg.AddHistogram("span_seconds", "h", {}, {0.0005, 2.5, 100000});
  ASSERT_TRUE(h.ok());
  (*h)->Get().Observe(1);
  const std::string page = reg.Serialize();
  for (const char* le : {"le=\"0.0005\"", "le=\"2.5\"", "le=\"100000\"", "le=\"+Inf\""}) {
    EXPECT_NE(page.find(le), std::string::npos) << le << "\n" << page;
  }
}

TEST(MetricsTest, WrongLabelCountNeverCrashes) {
  MetricsRegistry reg;
  auto c = reg.AddCounter("c_total", "h", {"a", "b"});
  ASSERT_TRUE(c.ok());
  (*c)->WithLabels({"only"}).Inc();
  (*c)->WithLabels({"x", "y", "extra"}).Inc();
  const std::string text = reg.Serialize();
  EXPECT_NE(text.find("c_total{a=\"only\",b=\"\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("c_total{a=\"x\",b=\"y\"} 1"), std::string::npos) << text;
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry reg;
  auto c = reg.AddCounter("n_total", "h", {"t"});
  auto h = reg.AddHistogram("n_seconds", "h");
  ASSERT_TRUE(c.ok() && h.ok());
  constexpr int kThreads = 4, kPer = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) {
        (*c)->WithLabels({t % 2 ? "odd" : "even"}).Inc();
        (*h)->Get().Observe(0.001);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_DOUBLE_EQ((*c)->WithLabels({"odd"}).Value() + (*c)->WithLabels({"even"}).Value(),
                   kThreads * kPer);
  EXPECT_EQ((*h)->Get().Read().count, static_cast<uint64_t>(kThreads * kPer));
}

}  // namespace
}  // namespace accelpool
