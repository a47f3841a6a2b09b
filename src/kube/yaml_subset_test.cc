#include "kube/yaml_subset.h"

#include <gtest/gtest.h>

namespace accelpool::kube {
namespace {

using nlohmann::json;

TEST(YamlSubsetTest, KubectlStyleDocument) {
  const std::string text = R"(apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: QUJD   # base64
    server: https://127.0.0.1:6443
  name: kind-kind
contexts:
- context:
    cluster: kind-kind
    user: "kind user"
  name: 'it''s'
current-context: it's
kind: Config
preferences: {}
users:
  - name: kind user
    user:
      token: abc#notacomment
      insecure: true
list:
- a
- "b: c"
-
  nested: x
)";
  auto y = ParseYamlSubset(text);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ((*y)["clusters"][0]["cluster"]["server"], "https://127.0.0.1:6443");
  EXPECT_EQ((*y)["clusters"][0]["cluster"]["certificate-authority-data"], "QUJD");
  EXPECT_EQ((*y)["clusters"][0]["name"], "kind-kind");
  EXPECT_EQ((*y)["contexts"][0]["context"]["user"], "kind user");
  EXPECT_EQ((*y)["contexts"][0]["name"], "it's");
  EXPECT_EQ((*y)["preferences"], json::object());
  EXPECT_EQ((*y)["users"][0]["user"]["token"], "abc#notacomment");
  EXPECT_EQ((*y)["users"][0]["user"]["insecure"], true);
  EXPECT_EQ((*y)["list"], json::parse(R"(["a", "b: c", {"nested": "x"}])"));
}

TEST(YamlSubsetTest, ASequenceItemThatIsASequenceIsReadAsOne) {
  // "- - a" was read as the string "- a".
  const std::string text = R"(m:
- - a
  - b
- - - c
  - d
-   - e
    - f
- - k: v
    w: x
)";
  auto y = ParseYamlSubset(text);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ((*y)["m"],
            json::parse(R"([["a", "b"], [["c"], "d"], ["e", "f"], [{"k": "v", "w": "x"}]])"));
  auto bad = ParseYamlSubset("m:\n- - a\n   - b\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();
}

// Nesting on one line ("- - - x") and compact "key:\n- k:" chains go as
// deep as blocks do: a corrupt file is an error naming the limit, not a
// stack overflow.
TEST(YamlSubsetTest, DeepNestingWithoutIndentationIsAnError) {
  std::string items;
  for (int i = 0; i < 40000; ++i) items += "- ";
  items += "x\n";
  std::string chain = "a:\n";  // each "- k:" opens a mapping whose key holds the next list
  for (int i = 0; i < 150; ++i) chain += std::string(2 * i, ' ') + "- k:\n";
  for (const std::string& text : {items, "a:\n" + items, chain}) {
    auto y = ParseYamlSubset(text);
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(y.status().message().find("nested deeper than 100 levels"), std::string::npos)
        << y.status().message();
  }
  // Within the limit it parses.
  std::string fine;
  for (int i = 0; i < 50; ++i) fine += "- ";
  EXPECT_TRUE(ParseYamlSubset(fine + "x\n").ok());
}

TEST(YamlSubsetTest, UnsupportedConstructsAreErrorsWithLineNumbers) {
  struct Case {
    std::string text, want;
  };
  const std::vector<Case> cases = {
      {"a: |\n  text\n", "line 1"},
      {"a: &anchor x\n", "line 1"},
      {"a: *alias\n", "not supported"},
      {"a: !!str x\n", "line 1: anchors, aliases, tags"},
      {"a: 1\na: 2\n", "line 2: duplicate key \"a\""},
      {"a: b\n  c: d\n", "line 2: unexpected indentation"},
      {"just a scalar line\n", "line 1: want \"key: value\""},
      {"a: 'open\n", "unterminated"},
      {"\tkey: v\n", "tabs"},
  };
  for (const Case& c : cases) {
    auto y = ParseYamlSubset(c.text);
    ASSERT_FALSE(y.ok()) << c.text;
    EXPECT_NE(y.status().message().find(c.want), std::string::npos)
        << c.text << ": " << y.status().message();
  }
}

}  // namespace
}  // namespace accelpool::kube
