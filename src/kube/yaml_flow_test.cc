#include "kube/yaml_flow.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/corpus_replay.h"
#include "kube/yaml_subset.h"

namespace accelpool::kube {
namespace {

using nlohmann::json;

TEST(YamlFlowTest, FlowCollectionsAndScalars) {
  struct Case {
    std::string name, text, want_json;
  };
  const std::vector<Case> cases = {
      {"flow mapping value", "user: {token: abc}\n", R"({"user": {"token": "abc"}})"},
      {"empty collections", "a: {}\nb: []\nc: [ ]\nd: { }\n",
       R"({"a": {}, "b": [], "c": [], "d": {}})"},
      {"nested", "clusters: [{name: x, cluster: {server: https://h:6443}}]\n",
       R"({"clusters": [{"name": "x", "cluster": {"server": "https://h:6443"}}]})"},
      {"quoted scalars and keys",
       R"(m: {"a b": 'it''s', 'c': "q\"\\\/\t\u00e9\x41"})"
       "\n",
       R"({"m": {"a b": "it's", "c": "q\"\\/\t\u00e9A"}})"},
      {"json-like",
       R"(m: {"a":"b","c":["d",true,null,1]})"
       "\n",
       R"({"m": {"a": "b", "c": ["d", true, null, "1"]}})"},
      {"plain with colons and spaces", "s: [http://a:1/x, a:b, two words , 'x, y']\n",
       R"({"s": ["http://a:1/x", "a:b", "two words", "x, y"]})"},
      {"trailing commas", "s: [a, b,]\nm: {a: 1,}\n", R"({"s": ["a", "b"], "m": {"a": "1"}})"},
      {"keys without values", "m: {a, b: , c: ~}\n", R"({"m": {"a": null, "b": null, "c": null}})"},
      {"one-entry mapping in a sequence", "s: [a: b, c]\n", R"({"s": [{"a": "b"}, "c"]})"},
      {"sequence items", "- [a, b]\n- {k: v}\n- 'q'\n- \"# not a comment\"\n",
       R"([["a", "b"], {"k": "v"}, "q", "# not a comment"])"},
      {"flow on the next line", "a:\n  {b: c}\nd: e\n", R"({"a": {"b": "c"}, "d": "e"})"},
      {"over several lines with comments", "a: [x,   # first\n    y,\n  {k: v}\n]   # done\nb: c\n",
       R"({"a": ["x", "y", {"k": "v"}], "b": "c"})"},
      {"document", "{a: [1, 2], b: {c: d}}\n", R"({"a": ["1", "2"], "b": {"c": "d"}})"},
      {"booleans", "m: {a: true, b: False, c: 'true'}\n",
       R"({"m": {"a": true, "b": false, "c": "true"}})"},
      {"quoted block values", "a: \"x # y\"   # comment\nb: 'it''s # z'\n",
       R"({"a": "x # y", "b": "it's # z"})"},
      {"apostrophe in a plain value", "a: it's # comment\n", R"({"a": "it's"})"},
      {"quoted key in a sequence mapping", "- \"a b\": c\n  d: e\n", R"([{"a b": "c", "d": "e"}])"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto y = ParseYamlSubset(c.text);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(*y, json::parse(c.want_json)) << y->dump();
  }
}

TEST(YamlFlowTest, MalformedFlowNamesLineColumnAndWhatWasExpected) {
  struct Case {
    std::string name, text;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"missing comma", "a: {b: c d: e}\n", {"line 1, column 11", "want ',' or '}'", "found ':'"}},
      {"wrong closer", "a: [b, c}\n", {"line 1, column 9", "want ',' or ']'", "found '}'"}},
      {"never closed",
       "a: [b,\n  c\n",
       {"line 2, column 4", "want ']' to close the '['", "opened at line 1, column 4",
        "end of the input"}},
      {"empty entry", "a: [b,, c]\n", {"line 1, column 7", "want a value or ']', found ','"}},
      {"leading comma", "a: {, b}\n", {"line 1, column 5", "want a key or '}'"}},
      {"text after", "a: {b: c} d\n", {"line 1, column 11", "want the end of the line"}},
      {"text after quoted", "a: \"b\" c\n", {"line 1, column 8", "quote the whole value"}},
      {"unterminated double", "a: [\"b, c]\n", {"line 1, column 5", "unterminated double"}},
      {"unterminated single", "a: 'b\n", {"line 1, column 4", "unterminated single"}},
      {"bad escape", "a: \"x\\qy\"\n", {"line 1, column 6", "unknown escape \\q"}},
      {"short unicode escape", "a: \"\\u12\"\n", {"column 5", "4 hexadecimal digits"}},
      {"surrogate escape", "a: \"\\ud800\"\n", {"no Unicode character"}},
      {"collection key", "a: {[b]: c}\n", {"line 1, column 5", "keys must be scalars"}},
      {"duplicate key", "a: {b: 1, b: 2}\n", {"line 1, column 11", "duplicate key \"b\""}},
      {"null key", "a: {~: 1}\n", {"null key"}},
      {"alias inside", "a: [*x]\n", {"line 1, column 5", "alias"}},
      {"flow then block", "{a: b}\nc: d\n", {"line 2", "either"}},
      {"indented under sequence item", "- [a]\n  b: c\n", {"line 2"}},
      {"deep nesting",
       std::string(200, '[') + std::string(200, ']') + "\n",
       {"nested deeper than 64"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto y = ParseYamlSubset(c.text);
    ASSERT_FALSE(y.ok()) << y->dump();
    EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
    for (const std::string& w : c.want) {
      EXPECT_NE(y.status().message().find(w), std::string::npos)
          << "want \"" << w << "\" in: " << y.status().message();
    }
  }
}

TEST(YamlFlowTest, ErrorAtCountsColumnsFromTheLineStart) {
  const std::vector<yaml::Line> lines = {{4, "key: [x", 7}};
  const Status st = yaml::ErrorAt(lines, {0, 5}, "what");
  EXPECT_EQ(st.message(), "line 7, column 10: what");
  yaml::Pos at{0, 5};
  auto v = yaml::ReadFlowNode(lines, at);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("line 7, column 12"), std::string::npos)
      << v.status().message();
}

// The yaml_fuzzer seeds, every truncation of them and random byte changes:
// each gives a value or an InvalidArgument error that starts with the line.
TEST(YamlFlowTest, FuzzSeedsAndTheirMutationsGiveValuesOrLineErrors) {
  std::mt19937 rng(20261130);
  int parsed = 0, rejected = 0;
  for (const std::string& text : accelpool::testing::SeedsCutAndMutated(
           ACCELPOOL_KUBE_YAML_SEEDS, rng, "{}[],:'\"#-\n \\&*|", 300)) {
    auto y = ParseYamlSubset(text);
    if (y.ok()) {
      ++parsed;
      continue;
    }
    ++rejected;
    ASSERT_EQ(y.status().code(), StatusCode::kInvalidArgument) << text;
    ASSERT_EQ(y.status().message().rfind("line ", 0), 0u) << y.status().message();
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace accelpool::kube
