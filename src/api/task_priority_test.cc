#include "api/task_priority.h"

#include <gtest/gtest.h>

namespace accelpool::api {
namespace {

using nlohmann::json;

TEST(HighPriorityNamespacesTest, NobodyByDefault) {
  EXPECT_FALSE(HighPriorityNamespaces().Allows("default"));
  EXPECT_TRUE(HighPriorityNamespaces().Nobody());
  StatusOr<HighPriorityNamespaces> none = HighPriorityNamespaces::Parse("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->Nobody());
  EXPECT_FALSE(none->Allows("default"));
  EXPECT_FALSE(none->Allows(""));
  EXPECT_EQ(none->ToString(), "");
}

TEST(HighPriorityNamespacesTest, OnlyTheNamedNamespaces) {
  StatusOr<HighPriorityNamespaces> l = HighPriorityNamespaces::Parse("online,team-b");
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_TRUE(l->Allows("online"));
  EXPECT_TRUE(l->Allows("team-b"));
  EXPECT_FALSE(l->Allows("team-a"));
  EXPECT_FALSE(l->Allows("onl"));
  EXPECT_FALSE(l->Allows(""));
  EXPECT_FALSE(l->Everyone());
  EXPECT_EQ(l->ToString(), "online,team-b");
}

TEST(HighPriorityNamespacesTest, AStarIsEveryNamespace) {
  StatusOr<HighPriorityNamespaces> all = HighPriorityNamespaces::Parse("*");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Everyone());
  EXPECT_TRUE(all->Allows("anything"));
  EXPECT_EQ(all->ToString(), "*");
}

TEST(HighPriorityNamespacesTest, MalformedListsAreRefusedWithTheFlag) {
  for (const char* bad :
       {",", "a,", ",a", "a,,b", "Team", "a b", "-a", "a-", "*,a", "a,*", "ns/x"}) {
    StatusOr<HighPriorityNamespaces> l = HighPriorityNamespaces::Parse(bad, "--flag");
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(l.status().message().rfind("--flag: ", 0), 0u) << l.status().message();
  }
  EXPECT_FALSE(HighPriorityNamespaces::Parse(std::string(64, 'a')).ok());
  EXPECT_TRUE(HighPriorityNamespaces::Parse(std::string(63, 'a')).ok());
}

TEST(HighPriorityNamespacesTest, HighPriorityContainersOfAPod) {
  const json pod = {
      {"spec",
       {{"containers",
         {{{"name", "main"}, {"resources", {{"limits", {{"nvidia.com/priority", "0"}}}}}},
          {{"name", "low"}, {"resources", {{"limits", {{"nvidia.com/priority", "1"}}}}}},
          {{"name", "unset"}, {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}}},
        {"initContainers",
         {{{"name", "side"}, {"resources", {{"requests", {{"nvidia.com/priority", 0}}}}}}}}}}};
  EXPECT_EQ(HighPriorityContainers(pod), (std::set<std::string>{"main", "side"}));
  EXPECT_TRUE(HighPriorityContainers(json::array()).empty());
  EXPECT_TRUE(HighPriorityContainers(json{{"spec", {{"containers", "x"}}}}).empty());
}

}  // namespace
}  // namespace accelpool::api
