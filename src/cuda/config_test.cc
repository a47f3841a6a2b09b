#include "cuda/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace accelpool::cuda {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;

struct Env {
  std::map<std::string, std::string> vars;
  std::vector<std::string> warnings;
};

const char* Lookup(void* ctx, const char* name) {
  auto* env = static_cast<Env*>(ctx);
  auto it = env->vars.find(name);
  return it == env->vars.end() ? nullptr : it->second.c_str();
}

void Collect(void* ctx, const char* message) {
  static_cast<Env*>(ctx)->warnings.emplace_back(message);
}

ShimConfig Parse(Env& env) { return ParseShimConfig(Lookup, &env, Collect, &env); }

TEST(ConfigTest, TableOfEnvironments) {
  struct Case {
    std::string name;
    std::map<std::string, std::string> vars;
    uint64_t want_dev0;
    uint64_t want_dev1;
    int want_compute;
    size_t want_warnings;
  };
  const std::vector<Case> cases = {
      {"nothing set", {}, 0, 0, 0, 0},
      {"all devices MiB",
       {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "4096"}},
       4096 * kMiB,
       4096 * kMiB,
       0,
       0},
      {"per device wins",
       {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "4096"}, {"ACCELPOOL_CUDA_MEMORY_LIMIT_1", "1024"}},
       4096 * kMiB,
       1024 * kMiB,
       0,
       0},
      {"suffix Gi", {{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "2Gi"}}, 2048 * kMiB, 0, 0, 0},
      {"HAMi alias bytes with m", {{"CUDA_DEVICE_MEMORY_LIMIT_0", "1000m"}}, 1000 * kMiB, 0, 0, 0},
      {"HAMi alias bare is bytes", {{"CUDA_DEVICE_MEMORY_LIMIT", "1048576"}}, kMiB, kMiB, 0, 0},
      {"ours beats alias",
       {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "10"}, {"CUDA_DEVICE_MEMORY_LIMIT", "20m"}},
       10 * kMiB,
       10 * kMiB,
       0,
       0},
      {"malformed memory warns once", {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "lots"}}, 0, 0, 0, 1},
      {"negative memory warns", {{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "-5"}}, 0, 0, 0, 1},
      {"zero memory warns", {{"ACCELPOOL_CUDA_MEMORY_LIMIT_0", "0"}}, 0, 0, 0, 1},
      {"overflow warns", {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "99999999999999999999"}}, 0, 0, 0, 1},
      {"compute", {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25"}}, 0, 0, 25, 0},
      {"compute out of range", {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "150"}}, 0, 0, 0, 1},
      {"compute zero is invalid here", {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "0"}}, 0, 0, 0, 1},
      {"compute garbage", {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25%"}}, 0, 0, 0, 1},
      // Blanks around a number, as a YAML block scalar leaves them, are no
      // reason to run without the limit (the memory values allow them too).
      {"compute with blanks", {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", " 25\n"}}, 0, 0, 25, 0},
      {"HAMi compute with blanks", {{"CUDA_DEVICE_SM_LIMIT", "30\r\n"}}, 0, 0, 30, 0},
      {"HAMi SM alias", {{"CUDA_DEVICE_SM_LIMIT", "30"}}, 0, 0, 30, 0},
      {"bad log level", {{"ACCELPOOL_CUDA_LOG_LEVEL", "loud"}}, 0, 0, 0, 1},
      {"relative state dir", {{"ACCELPOOL_CUDA_STATE_DIR", "tmp/x"}}, 0, 0, 0, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env env{c.vars, {}};
    ShimConfig config = Parse(env);
    EXPECT_EQ(config.memory_limit_bytes[0], c.want_dev0);
    EXPECT_EQ(config.memory_limit_bytes[1], c.want_dev1);
    EXPECT_EQ(config.compute_percent, c.want_compute);
    EXPECT_EQ(env.warnings.size(), c.want_warnings);
    for (const std::string& w : env.warnings) {
      EXPECT_NE(w.find("without this limit"), std::string::npos) << w;
    }
  }
}

// A malformed value is passed over as if unset, for memory and compute
// alike: the next variable that is set applies (a cap is safer than none),
// and the one warning names it. Memory used to fall back to HAMi's alias
// while the warning said it ran without the limit, and a malformed
// per-device value skipped ACCELPOOL_CUDA_MEMORY_LIMIT; compute ran
// without its limit although HAMi's was set.
TEST(ConfigTest, AMalformedValueIsPassedOverForTheNextOneSetAndTheWarningNamesIt) {
  struct Case {
    std::string name;
    std::map<std::string, std::string> vars;
    uint64_t want_dev0;
    uint64_t want_dev1;
    int want_compute;
    std::vector<std::string> warned;  // What each warning says is done instead.
  };
  const std::vector<Case> cases = {
      {"ours malformed, HAMi's set",
       {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "lots"}, {"CUDA_DEVICE_MEMORY_LIMIT", "4g"}},
       4096 * kMiB,
       4096 * kMiB,
       0,
       {"ignoring ACCELPOOL_CUDA_MEMORY_LIMIT=\"lots\": expected a positive number of MiB such "
        "as 4096 or 4Gi; using CUDA_DEVICE_MEMORY_LIMIT=\"4g\" instead (fix the value or unset "
        "it)"}},
      {"a device's malformed, ours for every device set",
       {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "2048"}, {"ACCELPOOL_CUDA_MEMORY_LIMIT_1", "-5"}},
       2048 * kMiB,
       2048 * kMiB,
       0,
       {"using ACCELPOOL_CUDA_MEMORY_LIMIT=\"2048\" instead"}},
      {"ours malformed, HAMi's for one device",
       {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "lots"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"}},
       1024 * kMiB,
       0,
       0,
       {"using CUDA_DEVICE_MEMORY_LIMIT[_<i>] where set, else running without this limit"}},
      {"both malformed",
       {{"ACCELPOOL_CUDA_MEMORY_LIMIT", "lots"}, {"CUDA_DEVICE_MEMORY_LIMIT", "much"}},
       0,
       0,
       0,
       {"ignoring ACCELPOOL_CUDA_MEMORY_LIMIT=\"lots\": expected a positive number of MiB such "
        "as 4096 or 4Gi; running without this limit",
        "ignoring CUDA_DEVICE_MEMORY_LIMIT=\"much\": expected a positive size such as 4096m or "
        "4g; running without this limit"}},
      {"compute malformed, HAMi's set",
       {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "150"}, {"CUDA_DEVICE_SM_LIMIT", "30"}},
       0,
       0,
       30,
       {"ignoring ACCELPOOL_CUDA_COMPUTE_LIMIT=\"150\": expected a whole percent from 1 to 100; "
        "using CUDA_DEVICE_SM_LIMIT=\"30\" instead (fix the value or unset it)"}},
      {"compute malformed alone",
       {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "25%"}},
       0,
       0,
       0,
       {"ignoring ACCELPOOL_CUDA_COMPUTE_LIMIT=\"25%\": expected a whole percent from 1 to 100; "
        "running without this limit"}},
      {"compute both malformed",
       {{"ACCELPOOL_CUDA_COMPUTE_LIMIT", "0"}, {"CUDA_DEVICE_SM_LIMIT", "half"}},
       0,
       0,
       0,
       {"ACCELPOOL_CUDA_COMPUTE_LIMIT=\"0\": expected a whole percent from 1 to 100; running "
        "without this limit",
        "CUDA_DEVICE_SM_LIMIT=\"half\": expected a whole percent from 0 to 100; running without "
        "this limit"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env env{c.vars, {}};
    ShimConfig config = Parse(env);
    EXPECT_EQ(config.memory_limit_bytes[0], c.want_dev0);
    EXPECT_EQ(config.memory_limit_bytes[1], c.want_dev1);
    EXPECT_EQ(config.compute_percent, c.want_compute);
    ASSERT_EQ(env.warnings.size(), c.warned.size());
    for (size_t i = 0; i < c.warned.size(); ++i) {
      EXPECT_NE(env.warnings[i].find(c.warned[i]), std::string::npos) << env.warnings[i];
      if (c.warned[i].find("instead") != std::string::npos) {
        EXPECT_EQ(env.warnings[i].find("running without this limit ("), std::string::npos)
            << "a warning says what is used instead, never that the limit is off";
      }
    }
  }
}

TEST(ConfigTest, DisableWinsOverLimits) {
  Env env{{{"ACCELPOOL_CUDA_DISABLE", "1"}, {"ACCELPOOL_CUDA_MEMORY_LIMIT", "100"}}, {}};
  ShimConfig config = Parse(env);
  EXPECT_TRUE(config.disabled);
  EXPECT_FALSE(config.AnyMemoryLimit());
  EXPECT_FALSE(config.ComputeLimited());
}

TEST(ConfigTest, StateDirContextReserveAndPredicates) {
  Env env{{{"ACCELPOOL_CUDA_STATE_DIR", "/var/run/accelpool/c1"},
           {"ACCELPOOL_CUDA_CONTEXT_RESERVE_MIB", "512"},
           {"ACCELPOOL_CUDA_MEMORY_LIMIT_3", "64"},
           {"ACCELPOOL_CUDA_COMPUTE_LIMIT", "100"}},
          {}};
  ShimConfig config = Parse(env);
  EXPECT_STREQ(config.state_dir, "/var/run/accelpool/c1");
  EXPECT_EQ(config.context_reserve_bytes, 512 * kMiB);
  EXPECT_TRUE(config.MemoryLimited(3));
  EXPECT_FALSE(config.MemoryLimited(0));
  EXPECT_FALSE(config.MemoryLimited(kMaxDevices));
  EXPECT_FALSE(config.ComputeLimited()) << "100% means no throttling";
}

TEST(ConfigTest, TaskPriority) {
  struct Case {
    std::string name;
    std::map<std::string, std::string> vars;
    Priority want;
    const char* warned;  // The variable the one warning names; nullptr: none.
  };
  const std::vector<Case> cases = {
      {"unset", {}, Priority::kNone, nullptr},
      {"empty is unset", {{"ACCELPOOL_CUDA_PRIORITY", ""}}, Priority::kNone, nullptr},
      {"high", {{"ACCELPOOL_CUDA_PRIORITY", "high"}}, Priority::kHigh, nullptr},
      {"low", {{"ACCELPOOL_CUDA_PRIORITY", "low"}}, Priority::kLow, nullptr},
      {"upper case",
       {{"ACCELPOOL_CUDA_PRIORITY", "HIGH"}},
       Priority::kNone,
       "ACCELPOOL_CUDA_PRIORITY"},
      {"trailing space",
       {{"ACCELPOOL_CUDA_PRIORITY", "low "}},
       Priority::kNone,
       "ACCELPOOL_CUDA_PRIORITY"},
      {"HAMi's number in ours",
       {{"ACCELPOOL_CUDA_PRIORITY", "0"}},
       Priority::kNone,
       "ACCELPOOL_CUDA_PRIORITY"},
      {"unknown word",
       {{"ACCELPOOL_CUDA_PRIORITY", "urgent"}},
       Priority::kNone,
       "ACCELPOOL_CUDA_PRIORITY"},
      {"HAMi 0 is high", {{"CUDA_TASK_PRIORITY", "0"}}, Priority::kHigh, nullptr},
      {"HAMi 1 is low", {{"CUDA_TASK_PRIORITY", "1"}}, Priority::kLow, nullptr},
      {"HAMi 2", {{"CUDA_TASK_PRIORITY", "2"}}, Priority::kNone, "CUDA_TASK_PRIORITY"},
      {"HAMi by name", {{"CUDA_TASK_PRIORITY", "high"}}, Priority::kNone, "CUDA_TASK_PRIORITY"},
      {"HAMi 01", {{"CUDA_TASK_PRIORITY", "01"}}, Priority::kNone, "CUDA_TASK_PRIORITY"},
      {"ours wins over the alias",
       {{"ACCELPOOL_CUDA_PRIORITY", "low"}, {"CUDA_TASK_PRIORITY", "0"}},
       Priority::kLow,
       nullptr},
      {"a malformed one of ours hides the alias",
       {{"ACCELPOOL_CUDA_PRIORITY", "top"}, {"CUDA_TASK_PRIORITY", "0"}},
       Priority::kNone,
       "ACCELPOOL_CUDA_PRIORITY"},
      {"disable wins",
       {{"ACCELPOOL_CUDA_DISABLE", "1"}, {"ACCELPOOL_CUDA_PRIORITY", "high"}},
       Priority::kNone,
       nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env env{c.vars, {}};
    ShimConfig config = Parse(env);
    EXPECT_EQ(config.priority, c.want);
    if (c.warned == nullptr) {
      EXPECT_TRUE(env.warnings.empty()) << env.warnings.front();
      continue;
    }
    ASSERT_EQ(env.warnings.size(), 1u);
    const std::string& w = env.warnings.front();
    EXPECT_EQ(w.rfind(std::string("ignoring ") + c.warned + "=\"", 0), 0u) << w;
    EXPECT_NE(w.find("running without task priority (fix the value or unset it)"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find(c.warned == std::string("CUDA_TASK_PRIORITY") ? "0 (high) or 1 (low)"
                                                                   : "high or low"),
              std::string::npos)
        << w;
  }
  // The device plugin's limits file carries it like any other variable.
  LimitsFile f;
  const char text[] = "ACCELPOOL_CUDA_MEMORY_LIMIT=1024\nACCELPOOL_CUDA_PRIORITY=low\n";
  std::memcpy(f.text, text, sizeof(text) - 1);
  ParseLimitsFile(&f, sizeof(text) - 1);
  EXPECT_EQ(ParseShimConfig(&LimitsFileLookup, &f, nullptr, nullptr).priority, Priority::kLow);
}

// The plugin lists the container's devices in grant order; a process maps
// its CUDA ordinals to those indices by UUID, a MIG instance's included.
TEST(ConfigTest, DeviceUuidsNumberTheContainersDevices) {
  Env env;
  env.vars["ACCELPOOL_CUDA_DEVICE_UUIDS"] =
      "GPU-aaaaaaaa-0000-0000-0000-000000000001, MIG-bbbbbbbb-0000-0000-0000-000000000002";
  ShimConfig c = Parse(env);
  EXPECT_TRUE(env.warnings.empty());
  ASSERT_EQ(c.device_uuid_count, 2);
  EXPECT_EQ(c.DeviceIndexOf("GPU-aaaaaaaa-0000-0000-0000-000000000001"), 0);
  EXPECT_EQ(c.DeviceIndexOf("GPU-AAAAAAAA-0000-0000-0000-000000000001"), 0) << "hex in any case";
  EXPECT_EQ(c.DeviceIndexOf("GPU-bbbbbbbb-0000-0000-0000-000000000002"), 1)
      << "cuDeviceGetUuid gives a MIG instance's bytes, without the MIG- prefix";
  EXPECT_EQ(c.DeviceIndexOf("MIG-bbbbbbbb-0000-0000-0000-000000000002"), 1);
  EXPECT_EQ(c.DeviceIndexOf("GPU-cccccccc-0000-0000-0000-000000000003"), -1);

  const std::string too_long(80, 'x');
  for (const char* bad : {"GPU-a,,GPU-b", "GPU-a,", ",", too_long.c_str()}) {
    SCOPED_TRACE(bad);
    Env e;
    e.vars["ACCELPOOL_CUDA_DEVICE_UUIDS"] = bad;
    ShimConfig b = Parse(e);
    EXPECT_EQ(b.device_uuid_count, 0);
    ASSERT_EQ(e.warnings.size(), 1u);
    EXPECT_NE(e.warnings[0].find("ACCELPOOL_CUDA_DEVICE_UUIDS"), std::string::npos);
  }
  std::string seventeen;
  for (int i = 0; i < 17; ++i) {
    seventeen += (i == 0 ? "GPU-" : ",GPU-") + std::to_string(i);
  }
  Env many;
  many.vars["ACCELPOOL_CUDA_DEVICE_UUIDS"] = seventeen;
  EXPECT_EQ(Parse(many).device_uuid_count, 0);
  EXPECT_EQ(many.warnings.size(), 1u);
}

TEST(ConfigTest, ParseMemoryBytesUnits) {
  struct Case {
    const char* text;
    bool bare_is_mib;
    std::optional<uint64_t> want;
  };
  const Case cases[] = {
      {"1", true, kMiB},
      {"1", false, 1},
      {"1k", false, 1024},
      {"1K", true, 1024},
      {"3M", false, 3 * kMiB},
      {"1GB", true, 1ULL << 30},
      {" 7 ", true, 7 * kMiB},
      {"", true, std::nullopt},
      {"1T", true, std::nullopt},
      {"1Gx", true, std::nullopt},
      {"0x10", true, std::nullopt},
      // Line ends of a file written on Windows, and tabs.
      {"1024\r", true, 1024 * kMiB},
      {"4Gi\r\n", true, 4096 * kMiB},
      {"\t7\t", true, 7 * kMiB},
      {"1 0", true, std::nullopt},
      {"\r", true, std::nullopt},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(ParseMemoryBytes(c.text, c.bare_is_mib), c.want);
  }
}

// A limits file with CRLF line ends: every value used to end in "\r", and
// the memory cap and compute share were refused as malformed and off.
TEST(ConfigTest, ALimitsFileWithCrlfLineEndsKeepsEveryLimit) {
  LimitsFile f;
  const char text[] =
      "ACCELPOOL_CUDA_MEMORY_LIMIT=1024\r\nACCELPOOL_CUDA_MEMORY_LIMIT_1=2Gi\r\n"
      "ACCELPOOL_CUDA_COMPUTE_LIMIT=25\r\nACCELPOOL_CUDA_STATE_DIR=/var/run/accelpool/c1\r\n"
      "ACCELPOOL_CUDA_PRIORITY=low\r\n";
  std::memcpy(f.text, text, sizeof(text) - 1);
  ASSERT_EQ(ParseLimitsFile(&f, sizeof(text) - 1), 5);
  std::vector<std::string> warnings;
  ShimConfig c = ParseShimConfig(
      &LimitsFileLookup, &f,
      [](void* ctx, const char* line) {
        static_cast<std::vector<std::string>*>(ctx)->push_back(line);
      },
      &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(c.memory_limit_bytes[0], 1024 * kMiB);
  EXPECT_EQ(c.memory_limit_bytes[1], 2048 * kMiB);
  EXPECT_EQ(c.compute_percent, 25);
  EXPECT_STREQ(c.state_dir, "/var/run/accelpool/c1");
  EXPECT_EQ(c.priority, Priority::kLow);
}

TEST(ConfigTest, LimitsFileLinesBecomeALookup) {
  LimitsFile f;
  const char text[] =
      "ACCELPOOL_CUDA_MEMORY_LIMIT_0=1024\n\nno equals\n=novalue\n"
      "ACCELPOOL_CUDA_COMPUTE_LIMIT=25\nACCELPOOL_CUDA_COMPUTE_LIMIT=30";
  std::memcpy(f.text, text, sizeof(text) - 1);
  EXPECT_EQ(ParseLimitsFile(&f, sizeof(text) - 1), 3);
  EXPECT_STREQ(LimitsFileLookup(&f, "ACCELPOOL_CUDA_MEMORY_LIMIT_0"), "1024");
  EXPECT_STREQ(LimitsFileLookup(&f, "ACCELPOOL_CUDA_COMPUTE_LIMIT"), "30") << "the last one wins";
  EXPECT_EQ(LimitsFileLookup(&f, "ACCELPOOL_CUDA_DISABLE"), nullptr);
  ShimConfig c = ParseShimConfig(&LimitsFileLookup, &f, nullptr, nullptr);
  EXPECT_EQ(c.memory_limit_bytes[0], 1024ULL << 20);
  EXPECT_EQ(c.compute_percent, 30);

  // Bounded: at most kMaxEntries entries and kMaxBytes bytes are read.
  LimitsFile big;
  std::string many;
  for (int i = 0; i < 100; ++i) {
    many += "K" + std::to_string(i) + "=v\n";
  }
  std::memcpy(big.text, many.data(), std::min(many.size(), LimitsFile::kMaxBytes));
  EXPECT_EQ(ParseLimitsFile(&big, many.size()), LimitsFile::kMaxEntries);
  EXPECT_EQ(LimitsFileLookup(&big, "K99"), nullptr);
}

}  // namespace
}  // namespace accelpool::cuda
