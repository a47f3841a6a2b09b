#include "extender/wire.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace accelpool::extender {
namespace {

// Golden documents in kube-scheduler's exact encoding (encoding/json of the
// extender v1 Go types: field names as keys, nil as null).
constexpr const char* kFilterArgsNames = R"({
  "Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": {}},
  "Nodes": null,
  "NodeNames": ["node-a", "node-b"]
})";

constexpr const char* kFilterArgsNodes = R"({
  "Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}},
  "Nodes": {"metadata": {}, "items": [
    {"metadata": {"name": "node-a", "labels": {"x": "y"}}},
    {"metadata": {"name": "node-b"}}]},
  "NodeNames": null
})";

TEST(WireTest, DecodesBothNodeCacheModes) {
  struct Case {
    const char* name;
    const char* body;
    bool names_mode;
  };
  for (const Case& c : {Case{"NodeNames", kFilterArgsNames, true},
                        Case{"Nodes", kFilterArgsNodes, false}}) {
    SCOPED_TRACE(c.name);
    StatusOr<ExtenderArgs> a = DecodeExtenderArgs(c.body);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->node_names.has_value(), c.names_mode);
    EXPECT_EQ(a->nodes.has_value(), !c.names_mode);
    EXPECT_EQ(a->CandidateNames(), (std::vector<std::string>{"node-a", "node-b"}));
    EXPECT_EQ(a->pod["metadata"]["uid"], "u-1");
    EXPECT_TRUE(a->unknown_keys.empty());
  }
}

TEST(WireTest, NodeNamesStreamedLikeTheTreeWouldRead) {
  // NodeNames is decoded straight into the list; these shapes must read as
  // the JSON tree path reads them.
  StatusOr<ExtenderArgs> a = DecodeExtenderArgs(
      R"({"NodeNames": ["x"], "Pod": {"metadata": {"uid": "u"}}, "NodeNames": ["a\"b", "c\u00e9"]})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->CandidateNames(), (std::vector<std::string>{"a\"b", "c\xc3\xa9"}));  // last wins
  EXPECT_EQ(a->pod["metadata"]["uid"], "u");
  a = DecodeExtenderArgs(R"({"NodeNames": null, "Pod": {}})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(a->node_names.has_value());
  a = DecodeExtenderArgs(R"({"NodeNames": [], "Pod": {}})");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->node_names.has_value());
  EXPECT_TRUE(a->node_names->empty());
  a = DecodeExtenderArgs(R"({"Pod": {"spec": {"NodeNames": [1, {"k": [2]}]}}, "NodeNames": ["n"]})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();  // only the top-level key is the list
  EXPECT_EQ(a->CandidateNames(), std::vector<std::string>{"n"});
  EXPECT_EQ(a->pod["spec"]["NodeNames"].size(), 2u);
  for (const char* bad : {R"({"NodeNames": ["a", ["b"]]})", R"({"NodeNames": [{"k": "v"}, "a"]})",
                          R"({"NodeNames": ["a", null]})", R"({"NodeNames": ["a", true]})"}) {
    SCOPED_TRACE(bad);
    a = DecodeExtenderArgs(bad);
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.status().message().find("NodeNames must be an array of strings"), std::string::npos)
        << a.status().message();
  }
  a = DecodeExtenderArgs(R"({"NodeNames": ["a", "b")");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("malformed JSON"), std::string::npos) << a.status().message();
}

TEST(WireTest, KeysMatchCaseInsensitivelyLikeGo) {
  StatusOr<ExtenderArgs> a = DecodeExtenderArgs(R"({"pod": {}, "nodenames": ["n"], "Extra": 1})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->CandidateNames(), std::vector<std::string>{"n"});
  EXPECT_EQ(a->unknown_keys, std::vector<std::string>{"Extra"});
}

TEST(WireTest, RejectsBadInputWithClearErrors) {
  struct Case {
    const char* name;
    std::string body;
    const char* want;  // substring of the message
  };
  const Case cases[] = {
      {"empty", "", "empty body"},
      {"truncated", R"({"Pod": {"metadata": )", "malformed JSON"},
      {"not an object", "[1,2]", "must be a JSON object"},
      {"names not strings", R"({"NodeNames": [1]})", "NodeNames must be an array of strings"},
      {"names not array", R"({"NodeNames": "a"})", "NodeNames must be an array"},
      {"pod not object", R"({"Pod": 3})", "Pod must be"},
      {"nodes items bad", R"({"Nodes": {"items": [{"metadata": {}}]}})", "metadata.name"},
      {"deep", std::string(500, '[') + std::string(500, ']'), "nested deeper"},
      {"invalid utf8 ok but garbage", "{\"Pod\": \xff}", "malformed JSON"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    StatusOr<ExtenderArgs> a = DecodeExtenderArgs(c.body);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find(c.want), std::string::npos) << a.status().message();
  }
}

TEST(WireTest, EncodesFilterResultGolden) {
  FilterResult r;
  r.node_names = std::vector<std::string>{"node-a"};
  r.failed_nodes = {{"node-b", "insufficient memory"}};
  r.failed_and_unresolvable = {{"node-c", "no devices"}};
  EXPECT_EQ(EncodeFilterResult(r),
            R"({"Error":"","FailedAndUnresolvableNodes":{"node-c":"no devices"},)"
            R"("FailedNodes":{"node-b":"insufficient memory"},"NodeNames":["node-a"],"Nodes":null})");
  FilterResult with_nodes;
  with_nodes.nodes = std::vector<Json>{Json{{"metadata", {{"name", "node-a"}}}}};
  with_nodes.error = "boom";
  EXPECT_EQ(EncodeFilterResult(with_nodes),
            R"({"Error":"boom","FailedAndUnresolvableNodes":{},"FailedNodes":{},"NodeNames":null,)"
            R"("Nodes":{"items":[{"metadata":{"name":"node-a"}}],"metadata":{}}})");
  StatusOr<FilterResult> back = DecodeFilterResult(EncodeFilterResult(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->node_names, r.node_names);
  EXPECT_EQ(back->failed_nodes, r.failed_nodes);
  EXPECT_EQ(back->failed_and_unresolvable, r.failed_and_unresolvable);
}

TEST(WireTest, HostPriorityListGoldenAndRoundTrip) {
  std::vector<HostPriority> list = {{"node-a", 10}, {"node-b", 3}};
  const std::string golden = R"([{"Host":"node-a","Score":10},{"Host":"node-b","Score":3}])";
  EXPECT_EQ(EncodeHostPriorityList(list), golden);
  StatusOr<std::vector<HostPriority>> back = DecodeHostPriorityList(golden);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, list);
  EXPECT_EQ(EncodeHostPriorityList({}), "[]");
}

TEST(WireTest, HostileNamesAreEscapedByTheDirectEncoders) {
  // Names with quotes, backslashes, control characters and invalid UTF-8 come
  // back from the decoder as they went in (invalid UTF-8 replaced), and the
  // output is always valid JSON.
  const std::vector<std::string> names = {"a\"b", "back\\slash", "tab\there", "",
                                          std::string("bad\xff\xfe"), "ok-1.two_3:4"};
  std::vector<HostPriority> list;
  for (const std::string& n : names) list.push_back({n, 7});
  StatusOr<std::vector<HostPriority>> back = DecodeHostPriorityList(EncodeHostPriorityList(list));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].find('\xff') == std::string::npos) {
      EXPECT_EQ((*back)[i].host, names[i]);
    } else {
      EXPECT_EQ((*back)[i].host.rfind("bad", 0), 0u);
    }
  }
  FilterResult r;
  r.node_names = names;
  r.failed_nodes = {{"q\"uote", "why \"so\"\n"}};
  StatusOr<FilterResult> f = DecodeFilterResult(EncodeFilterResult(r));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(f->node_names.has_value());
  EXPECT_EQ(f->node_names->size(), names.size());
  EXPECT_EQ(f->failed_nodes, r.failed_nodes);
}

TEST(WireTest, BindingArgsAndResult) {
  StatusOr<BindingArgs> a = DecodeBindingArgs(
      R"({"PodName":"p","PodNamespace":"ns","PodUID":"u-1","Node":"node-a"})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->pod_name, "p");
  EXPECT_EQ(a->pod_namespace, "ns");
  EXPECT_EQ(a->pod_uid, "u-1");
  EXPECT_EQ(a->node, "node-a");
  EXPECT_EQ(EncodeBindingResult(""), R"({"Error":""})");
  EXPECT_EQ(EncodeBindingResult("no"), R"({"Error":"no"})");
  StatusOr<BindingArgs> missing = DecodeBindingArgs(R"({"PodName":"p","PodUID":"u"})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("PodNamespace"), std::string::npos);
  StatusOr<BindingArgs> wrong = DecodeBindingArgs(R"({"PodName":7})");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("PodName must be a string"), std::string::npos);
}

TEST(WireTest, PreemptionMetaAndFullVictims) {
  struct Case {
    const char* name;
    const char* body;
  };
  const Case cases[] = {
      {"meta", R"({"Pod":{},"NodeNameToVictims":null,"NodeNameToMetaVictims":
                  {"node-a":{"Pods":[{"UID":"v1"},{"UID":"v2"}],"NumPDBViolations":1}}})"},
      {"full", R"({"Pod":{},"NodeNameToVictims":
                  {"node-a":{"Pods":[{"metadata":{"uid":"v1"}},{"metadata":{"uid":"v2"}}],
                             "NumPDBViolations":1}},"NodeNameToMetaVictims":null})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    StatusOr<PreemptionArgs> a = DecodePreemptionArgs(c.body);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_EQ(a->victims.size(), 1u);
    EXPECT_EQ(a->victims["node-a"], (MetaVictims{{"v1", "v2"}, 1}));
  }
  EXPECT_EQ(EncodePreemptionResult({{"node-a", MetaVictims{{"v2"}, 0}}}),
            R"({"NodeNameToMetaVictims":{"node-a":{"NumPDBViolations":0,"Pods":[{"UID":"v2"}]}}})");
  StatusOr<PreemptionArgs> bad =
      DecodePreemptionArgs(R"({"NodeNameToMetaVictims":{"n":{"Pods":[{"UID":5}]}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a pod with a UID"), std::string::npos);
  // Past int64 a count would read back negative (and be echoed so): refused.
  StatusOr<PreemptionArgs> huge = DecodePreemptionArgs(
      R"({"NodeNameToMetaVictims":{"n":{"Pods":[],"NumPDBViolations":18446744073709551615}}})");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("NumPDBViolations"), std::string::npos)
      << huge.status().message();
  StatusOr<PreemptionArgs> top = DecodePreemptionArgs(
      R"({"NodeNameToMetaVictims":{"n":{"Pods":[],"NumPDBViolations":9223372036854775807}}})");
  ASSERT_TRUE(top.ok()) << top.status().ToString();
  EXPECT_EQ(top->victims["n"].num_pdb_violations, std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(DecodeHostPriorityList(R"([{"Host":"a","Score":9223372036854775808}])").ok());
}

}  // namespace
}  // namespace accelpool::extender
