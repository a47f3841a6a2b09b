#include "api/assignment_signature.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace accelpool::api {
namespace {

const std::string kKey1 = "abcdefghijklmnopqrstuvwxyz0123456789";
const std::string kKey2 = "ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210";
const std::string kText = R"({"node":"node-a"})";

SigningKeys Keys(const std::string& signing = "k1") {
  StatusOr<SigningKeys> k =
      ParseSigningKeys({{"signing", signing + "\n"}, {"k1", kKey1 + "\n"}, {"k2", kKey2}});
  EXPECT_TRUE(k.ok()) << k.status().message();
  return *k;
}

TEST(AssignmentSignatureTest, KnownAnswer) {
  // printf 'accelpool.io/assignment v1\nuid-1\nnode-a\n{"node":"node-a"}' |
  //   openssl dgst -sha256 -hmac <kKey1> -binary | base64 | tr '+/' '-_' | tr -d '='
  StatusOr<std::string> sig = SignAssignment(Keys(), "uid-1", "node-a", kText);
  ASSERT_TRUE(sig.ok()) << sig.status().message();
  EXPECT_EQ(*sig, "v1.k1.Gr7CKJwW4iCW-4rjAifNDZ4YCPypr5Ogk-vzQw8plbk");
  EXPECT_EQ(SignatureKeyId(*sig), "k1");
}

TEST(AssignmentSignatureTest, VerifiesOnlyTheExactAssignmentPodAndNode) {
  const SigningKeys keys = Keys();
  const std::string sig = *SignAssignment(keys, "uid-1", "node-a", kText);
  EXPECT_TRUE(VerifyAssignment(keys, "uid-1", "node-a", kText, sig).ok());

  const Status changed = VerifyAssignment(keys, "uid-1", "node-a", kText + " ", sig);
  EXPECT_EQ(changed.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(changed.message().find("changed after the extender wrote them"), std::string::npos);
  EXPECT_EQ(VerifyAssignment(keys, "uid-2", "node-a", kText, sig).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(VerifyAssignment(keys, "uid-1", "node-b", kText, sig).code(),
            StatusCode::kPermissionDenied);

  std::string flipped = sig;
  flipped.back() = flipped.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(VerifyAssignment(keys, "uid-1", "node-a", kText, flipped).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(VerifyAssignment(keys, "uid-1", "node-a", kText, sig.substr(0, sig.size() - 1)).code(),
            StatusCode::kPermissionDenied);

  const Status missing = VerifyAssignment(keys, "uid-1", "node-a", kText, "");
  EXPECT_EQ(missing.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(missing.message().find("accelpool.io/assignment-signature"), std::string::npos);
  for (const char* bad :
       {"v2.k1.abc", "v1.k1.", "v1..abc", "v1.K1.abc", "v1.k1", "garbage", "v1.signing.abc"}) {
    EXPECT_EQ(VerifyAssignment(keys, "uid-1", "node-a", kText, bad).code(),
              StatusCode::kPermissionDenied)
        << bad;
    EXPECT_EQ(SignatureKeyId(bad), "") << bad;
  }
}

TEST(AssignmentSignatureTest, AnotherKeySignsDifferentlyAndUnknownKeysAreNamed) {
  const SigningKeys k1 = Keys("k1");
  const SigningKeys k2 = Keys("k2");
  const std::string s1 = *SignAssignment(k1, "uid-1", "node-a", kText);
  const std::string s2 = *SignAssignment(k2, "uid-1", "node-a", kText);
  EXPECT_NE(s1.substr(6), s2.substr(6));
  // Rotation: both keys are in both sets, so either signature verifies.
  EXPECT_TRUE(VerifyAssignment(k2, "uid-1", "node-a", kText, s1).ok());
  EXPECT_TRUE(VerifyAssignment(k1, "uid-1", "node-a", kText, s2).ok());
  // A mac made with k2's key but labelled k1 does not verify.
  EXPECT_EQ(VerifyAssignment(k1, "uid-1", "node-a", kText, "v1.k1." + s2.substr(6)).code(),
            StatusCode::kPermissionDenied);

  SigningKeys only1 = k1;
  only1.keys.erase("k2");
  const Status unknown = VerifyAssignment(only1, "uid-1", "node-a", kText, s2);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("\"k2\""), std::string::npos);
}

TEST(AssignmentSignatureTest, SigningNeedsUidAndNode) {
  EXPECT_EQ(SignAssignment(Keys(), "", "node-a", kText).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SignAssignment(Keys(), "uid-1", "", kText).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(AssignmentSignatureTest, KeySetsAreCheckedWithAReason) {
  struct Case {
    std::map<std::string, std::string> files;
    std::string reason;
  } cases[] = {
      {{{"k1", kKey1}}, "no file \"signing\""},
      {{{"signing", "k9"}, {"k1", kKey1}}, "names key \"k9\""},
      {{{"signing", "k1"}, {"k1", "short"}}, "at least 32"},
      {{{"signing", "K 1"}, {"k1", kKey1}}, "must hold a key id"},
      {{{"signing", ""}, {"k1", kKey1}}, "must hold a key id"},
  };
  for (const Case& c : cases) {
    StatusOr<SigningKeys> k = ParseSigningKeys(c.files);
    ASSERT_FALSE(k.ok()) << c.reason;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find(c.reason), std::string::npos) << k.status().message();
  }
  // Other names (a Secret volume's ..data, upper case, too long) are not keys.
  StatusOr<SigningKeys> k = ParseSigningKeys({{"signing", " k1 \n"},
                                              {"k1", kKey1},
                                              {"..data", "x"},
                                              {"README", "x"},
                                              {std::string(33, 'a'), "x"}});
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->signing, "k1");
  EXPECT_EQ(k->keys.size(), 1u);
}

class KeyDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("accelpool-keys-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Writes the files the way kubelet lays out a Secret volume: the data in a
  // timestamped directory, "..data" a symlink to it, each key a symlink
  // through "..data".
  void WriteSecretVolume(const std::map<std::string, std::string>& files, int generation) {
    const std::string ts = "..2026_11_30_" + std::to_string(generation);
    std::filesystem::create_directories(dir_ / ts);
    for (const auto& [name, content] : files) {
      std::ofstream(dir_ / ts / name) << content;
    }
    std::filesystem::remove(dir_ / "..data_tmp");
    std::filesystem::create_directory_symlink(ts, dir_ / "..data_tmp");
    std::filesystem::rename(dir_ / "..data_tmp", dir_ / "..data");
    for (const auto& [name, content] : files) {
      if (!std::filesystem::is_symlink(dir_ / name)) {
        std::filesystem::create_symlink(std::filesystem::path("..data") / name, dir_ / name);
      }
    }
  }
  std::filesystem::path dir_;
};

TEST_F(KeyDirTest, LoadsASecretVolume) {
  WriteSecretVolume({{"signing", "k1"}, {"k1", kKey1}}, 1);
  StatusOr<SigningKeys> k = LoadSigningKeys(dir_.string());
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->signing, "k1");
  EXPECT_EQ(k->keys.at("k1"), kKey1);

  const Status missing = LoadSigningKeys((dir_ / "nope").string()).status();
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("mount the key Secret"), std::string::npos);

  std::ofstream(dir_ / "k3") << std::string(5000, 'x');
  EXPECT_EQ(LoadSigningKeys(dir_.string()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(KeyDirTest, RingFollowsRotationAndKeepsKeysWhenAReadFails) {
  WriteSecretVolume({{"signing", "k1"}, {"k1", kKey1}}, 1);
  StatusOr<std::unique_ptr<AssignmentKeyRing>> ring = AssignmentKeyRing::Open(
      dir_.string(), std::chrono::seconds(3600), std::chrono::milliseconds(0));
  ASSERT_TRUE(ring.ok()) << ring.status().message();
  const std::string old_sig = *(*ring)->Sign("uid-1", "node-a", kText);

  // The new key arrives and becomes the signing key: a signature with a key
  // id the ring does not know makes it re-read at once, not after an hour.
  WriteSecretVolume({{"signing", "k2"}, {"k1", kKey1}, {"k2", kKey2}}, 2);
  const std::string new_sig = *SignAssignment(Keys("k2"), "uid-1", "node-a", kText);
  EXPECT_TRUE((*ring)->Verify("uid-1", "node-a", kText, new_sig).ok());
  EXPECT_EQ((*ring)->SigningKeyId(), "k2");
  EXPECT_TRUE((*ring)->Verify("uid-1", "node-a", kText, old_sig).ok());
  EXPECT_EQ((*ring)->KeyIds(), (std::vector<std::string>{"k1", "k2"}));

  // A broken Secret keeps the keys read before.
  StatusOr<std::unique_ptr<AssignmentKeyRing>> fast =
      AssignmentKeyRing::Open(dir_.string(), std::chrono::seconds(0));
  ASSERT_TRUE(fast.ok());
  std::vector<std::string> reported;
  (*fast)->OnReloadError([&](const Status& st) { reported.push_back(st.message()); });
  WriteSecretVolume({{"signing", "k3"}, {"k1", kKey1}, {"k2", kKey2}}, 3);
  EXPECT_TRUE((*fast)->Verify("uid-1", "node-a", kText, old_sig).ok());
  EXPECT_EQ((*fast)->SigningKeyId(), "k2");
  EXPECT_EQ((*fast)->KeyIds(), (std::vector<std::string>{"k1", "k2"}));
  EXPECT_NE((*fast)->LastError().message().find("names key \"k3\""), std::string::npos);
  ASSERT_FALSE(reported.empty());
  EXPECT_EQ(reported.back(), (*fast)->LastError().message());

  EXPECT_FALSE(AssignmentKeyRing::Open((dir_ / "none").string()).ok());
}

}  // namespace
}  // namespace accelpool::api
