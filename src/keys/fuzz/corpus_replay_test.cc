// Runs the key_state fuzz entry point over its seeds (and their prefixes), so
// the normal test suite walks the paths the fuzzer starts from.
#include "common/corpus_replay.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "keys/fuzz/fuzz_entry.h"
#include "keys/key_rotation.h"

namespace accelpool::keys::fuzz {
namespace {

TEST(KeyStateSeedsTest, EverySeedIsReadAndCheckedAndEveryPrefixRejected) {
  const accelpool::testing::ReplayedSeeds s = accelpool::testing::ReplayCorpus(
      std::filesystem::path(ACCELPOOL_KEYS_CORPUS_DIR) / "key_state", &FuzzKeyState, 11);
  EXPECT_EQ(s.files, 7);
  EXPECT_EQ(s.accepted, 5) << "steady, added, switched, odd_shapes and condition_types; broken "
                              "and not_base64 are refused";
  EXPECT_EQ(s.prefixes_accepted, 0);
}

// What the seeds read as: the state accelpool-keys acts on.
RotationState Seed(const std::string& name) {
  std::ifstream in(std::filesystem::path(ACCELPOOL_KEYS_CORPUS_DIR) / "key_state" / name);
  const nlohmann::json doc = nlohmann::json::parse(in);
  StatusOr<RotationState> s = StateFromSecret(doc.at("secret"), name);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  AddNodes(*s, doc.value("nodes", std::vector<nlohmann::json>()), doc.value("whole", false),
           doc.value("skip_not_ready", false));
  KeepNodesWithPlugin(*s, doc.value("plugin_pods", std::vector<nlohmann::json>()));
  AddPods(*s, doc.value("pods", std::vector<nlohmann::json>()));
  return *s;
}

TEST(KeyStateSeedsTest, SeedsReadAsTheStateTheyDescribe) {
  RotationState steady = Seed("steady.json");
  EXPECT_EQ(steady.phase, RotationPhase::kSteady);
  EXPECT_EQ(steady.node_keys.size(), 2u) << "cpu-1 has no accelpool inventory";
  EXPECT_TRUE(steady.unreported.empty());

  RotationState added = Seed("added.json");
  EXPECT_EQ(added.phase, RotationPhase::kAdded);
  EXPECT_EQ(added.newest, "k2");
  // gpu-3 is not Ready, and waited for all the same; gpu-gone's plugin pod
  // has ended, so its report is stale and not waited for.
  EXPECT_EQ(added.NodesWithout("k2"), (std::vector<std::string>{"gpu-2", "gpu-3"}));
  EXPECT_EQ(added.not_ready, std::vector<std::string>{"gpu-3"});
  EXPECT_EQ(added.no_plugin, std::vector<std::string>{"gpu-gone"});
  EXPECT_EQ(added.unreported, std::vector<std::string>{"gpu-old"});

  RotationState switched = Seed("switched.json");
  EXPECT_EQ(switched.phase, RotationPhase::kSwitched);
  EXPECT_EQ(switched.switched_at, "2026-12-01T03:01:02Z");
  EXPECT_EQ(switched.pods_with_old_keys, std::vector<std::string>{"ml/waiting (key k1, node gpu-1)"})
      << "admitted, deleting, unsigned, k2-signed and forged pods do not hold k1";

  // Conditions whose fields have other types: read as absent, never thrown
  // on; a Ready status that is not a string counts as Ready (the node is
  // waited for).
  RotationState odd = Seed("condition_types.json");
  EXPECT_EQ(odd.phase, RotationPhase::kAdded);
  EXPECT_EQ(odd.NodesWithout("k2"), (std::vector<std::string>{"gpu-2", "gpu-4"}))
      << "gpu-3 is not Ready: not waited for (skip_not_ready)";
  EXPECT_EQ(odd.not_ready, std::vector<std::string>{"gpu-3"});

  for (const char* bad : {"broken.json", "not_base64.json"}) {
    std::ifstream in(std::filesystem::path(ACCELPOOL_KEYS_CORPUS_DIR) / "key_state" / bad);
    const nlohmann::json doc = nlohmann::json::parse(in);
    StatusOr<RotationState> s = StateFromSecret(doc.at("secret"), "secret x/y");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("secret x/y"), std::string::npos) << s.status().message();
  }
}

}  // namespace
}  // namespace accelpool::keys::fuzz
