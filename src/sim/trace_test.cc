#include "sim/trace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace accelpool::sim {
namespace {

TEST(ParseNodeCsvTest, ReadsColumnsByName) {
  StatusOr<std::vector<TraceNode>> n = ParseNodeCsv(
      "model,sn,gpu,cpu_milli,memory_mib\nV100M16,node-a,4,96000,393216\n,node-cpu,0,64000,1024\n",
      "nodes.csv");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(n->size(), 2u);
  EXPECT_EQ((*n)[0].name, "node-a");
  EXPECT_EQ((*n)[0].gpus, 4);
  EXPECT_EQ((*n)[0].cpu_milli, 96000);
  EXPECT_EQ((*n)[0].memory_mib, 393216);
  EXPECT_EQ((*n)[0].model, "V100M16");
  EXPECT_EQ((*n)[1].model, "");
}

TEST(ParsePodCsvTest, ReadsFullAndShortSchemas) {
  const std::string full =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p0,12000,16384,1,460,V100M16|V100M32,LS,Running,10,250,10\n"
      "p1,4000,8192,0,0,,BE,Pending,20,30,\n";
  StatusOr<std::vector<TracePod>> p = ParsePodCsv(full, "pods.csv");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].gpu_milli, 460);
  EXPECT_EQ((*p)[0].gpu_models, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_TRUE((*p)[0].has_times);
  EXPECT_EQ((*p)[0].deletion_time, 250);
  EXPECT_EQ(PodGpuMilli((*p)[0]), 460);
  EXPECT_TRUE((*p)[1].gpu_models.empty());

  StatusOr<std::vector<TracePod>> s =
      ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,8,1000\n", "m.csv");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE((*s)[0].has_times);
  EXPECT_EQ(PodGpuMilli((*s)[0]), 8000);
}

// A pod deleted before it was created is a broken row, not a pod that stays
// for ever: it is refused with its line.
TEST(ParsePodCsvTest, DeletionBeforeCreationIsRefusedWithTheRow) {
  const std::string head =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "p0,1000,1024,1,500,10,20\n";
  StatusOr<std::vector<TracePod>> bad = ParsePodCsv(head + "p1,1000,1024,1,500,30,29\n", "t.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("deletion_time 29 is before creation_time 30"),
            std::string::npos)
      << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("t.csv"), std::string::npos) << bad.status().ToString();
  StatusOr<std::vector<TracePod>> good =
      ParsePodCsv(head + "p1,1000,1024,1,500,30,\np2,1000,1024,1,500,40,40\n", "t.csv");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ((*good)[1].deletion_time, 0);
  EXPECT_EQ((*good)[2].deletion_time, 40);
}

// Exports quote fields (Python's csv.QUOTE_NONNUMERIC, spreadsheets) and
// start with a byte-order mark: the quotes come off, commas inside them stay,
// the mark is no part of the first column's name. A quote left open or
// escaped inside a field is refused with the line.
TEST(ParsePodCsvTest, QuotedFieldsAndAByteOrderMarkAreRead) {
  StatusOr<std::vector<TracePod>> p = ParsePodCsv(
      "\xEF\xBB\xBF\"name\",\"cpu_milli\",memory_mib,num_gpu,gpu_milli,gpu_spec\r\n"
      "\"p0\",6000,12288,1,460,\"V100M16|V100M32\"\r\n"
      "p1,1000,1024,0,0,\"\"\n",
      "pods.csv");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].name, "p0");
  EXPECT_EQ((*p)[0].gpu_models, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_TRUE((*p)[1].gpu_models.empty());
  StatusOr<std::vector<TraceNode>> n =
      ParseNodeCsv("\xEF\xBB\xBFsn,gpu,cpu_milli,memory_mib,model\nnode-a,4,96000,393216,V100M16\n",
                   "nodes.csv");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ((*n)[0].name, "node-a");
  for (const char* bad : {"p0,6000,12288,1,460,\"V100M16\n", "p0,6000,12288,1,460,\"a\"\"b\"\n",
                          "p0,6000,12288,1,460,a\"b\n"}) {
    SCOPED_TRACE(bad);
    StatusOr<std::vector<TracePod>> q = ParsePodCsv(
        std::string("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n") + bad, "pods.csv");
    ASSERT_FALSE(q.ok());
    EXPECT_NE(q.status().message().find("pods.csv:2: a quote"), std::string::npos)
        << q.status().message();
  }
}

TEST(ParsePodCsvTest, MalformedLinesNameFileLineAndProblem) {
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  struct Case {
    std::string body;
    std::string want;  // substring of the message
  };
  const std::vector<Case> cases = {
      {"p0,1000,1024,1,1000\np1,abc,1024,1,1000\n",
       "pods.csv:3: column cpu_milli is \"abc\", not an integer"},
      {"p0,1000,1024,1\n", "pods.csv:2: has 4 fields, the header has 5"},
      {"p0,1000,1024,1,1500\n", "pods.csv:2: column gpu_milli is 1500, outside 0..1000"},
      {"p0,1000,-5,1,100\n", "pods.csv:2: column memory_mib is -5, outside"},
      {"p0,1000,1024,2,500\n", "pods.csv:2: a share below 1000 milli-GPU with num_gpu 2"},
      {"p0,1000,1024,1,0\n", "pods.csv:2: num_gpu is 1 but gpu_milli is 0"},
      {",1000,1024,1,100\n", "pods.csv:2: column name (pod name) is empty"},
      {"\n\np0,1000,1024,x,100\n", "pods.csv:4: column num_gpu"},
      // Past int64_t, as an integer or as a float: a range error, never a
      // conversion of a double no int64_t holds.
      {"p0,1e300,1024,1,100\n", "pods.csv:2: column cpu_milli is 1e300, outside 0.."},
      {"p0,1000,-9.3e18,1,100\n", "pods.csv:2: column memory_mib is -9.3e18, outside 0.."},
      {"p0,99999999999999999999,1024,1,100\n",
       "pods.csv:2: column cpu_milli is 99999999999999999999, outside 0.."},
      {"p0,1000,1024,1,1e3.5\n", "pods.csv:2: column gpu_milli is \"1e3.5\", not an integer"},
  };
  for (const Case& c : cases) {
    StatusOr<std::vector<TracePod>> p = ParsePodCsv(header + c.body, "pods.csv");
    ASSERT_FALSE(p.ok()) << c.body;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.want), std::string::npos)
        << "got: " << p.status().message() << "\nwant: " << c.want;
  }
}

TEST(ParsePodCsvTest, IntegralFloatsAreWholeNumbers) {
  StatusOr<std::vector<TracePod>> p =
      ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,2.5e3,1024.0,1,1e3\n", "f.csv");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[0].cpu_milli, 2500);
  EXPECT_EQ((*p)[0].memory_mib, 1024);
  EXPECT_EQ((*p)[0].gpu_milli, 1000);
}

// Whole numbers are read exactly: a float that a double would round to an
// integer is not one.
TEST(ParsePodCsvTest, InexactFloatsAreNotIntegers) {
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  for (const char* bad : {"999.9999999999999999", "1.00000000000000001", "0.5", "1e-1", "100e-3",
                          "1.25e1", ".", "-", "1e", "1.0.0", "+5", " 5x"}) {
    SCOPED_TRACE(bad);
    StatusOr<std::vector<TracePod>> p =
        ParsePodCsv(header + "p0,1000,1024,1," + bad + "\n", "pods.csv");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("pods.csv:2: column gpu_milli is \""), std::string::npos)
        << p.status().message();
    EXPECT_NE(p.status().message().find("not an integer"), std::string::npos)
        << p.status().message();
  }
  struct Good {
    const char* text;
    int64_t want;
  };
  for (const Good& g : std::vector<Good>{{"1000", 1000},
                                         {"1000.", 1000},
                                         {"1000.000", 1000},
                                         {"0001000", 1000},
                                         {"1e3", 1000},
                                         {"1E+3", 1000},
                                         {"10000e-1", 1000},
                                         {"0.1e4", 1000},
                                         {"0", 0},
                                         {"0.0", 0},
                                         {"-0", 0}}) {
    SCOPED_TRACE(g.text);
    StatusOr<std::vector<TracePod>> p =
        ParsePodCsv(header + "p0,1000,1024,1," + g.text + "\n", "pods.csv");
    if (g.want == 0) {  // num_gpu 1 with gpu_milli 0 is refused for another reason
      ASSERT_FALSE(p.ok());
      EXPECT_NE(p.status().message().find("gpu_milli is 0"), std::string::npos)
          << p.status().message();
      continue;
    }
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ((*p)[0].gpu_milli, g.want);
  }
  // The edges of a column's range and of int64_t, exactly.
  StatusOr<std::vector<TraceNode>> n = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model\nn0,1099511627776.0,1099511627776,1,T4\n", "n.csv");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ((*n)[0].cpu_milli, int64_t{1} << 40);
  n = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn0,1099511627777,1024,1,T4\n", "n.csv");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("outside 0..1099511627776"), std::string::npos)
      << n.status().message();
  n = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn0,9223372036854775808,1024,1,T4\n",
                   "n.csv");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("outside"), std::string::npos) << n.status().message();
}

// A header naming a column twice is refused with the column, not read from
// whichever came last.
TEST(ParsePodCsvTest, DuplicateColumnsAreRefused) {
  StatusOr<std::vector<TracePod>> p = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_milli\np0,1000,1024,1,500,1000\n",
      "pods.csv");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find(
                "pods.csv:1: header names column \"gpu_milli\" twice (fields 5 and 6)"),
            std::string::npos)
      << p.status().message();
  // Also a column the parser does not read, and across a trimmed blank.
  EXPECT_FALSE(ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos, qos\n", "p.csv").ok());
  StatusOr<std::vector<TraceNode>> n =
      ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model,sn\nn0,1,1,1,T4,n1\n", "n.csv");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("column \"sn\" twice"), std::string::npos)
      << n.status().message();
  // Unnamed columns (an exported index) are never read: several are fine.
  p = ParsePodCsv(",name,cpu_milli,memory_mib,num_gpu,gpu_milli,\n0,p0,1000,1024,1,500,\n",
                  "pods.csv");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[0].gpu_milli, 500);
}

TEST(ParseCsvTest, HeaderProblems) {
  StatusOr<std::vector<TracePod>> empty = ParsePodCsv("", "e.csv");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("e.csv: the file is empty"), std::string::npos);
  StatusOr<std::vector<TraceNode>> missing = ParseNodeCsv("sn,cpu_milli,gpu,model\n", "n.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("n.csv:1: header has no column \"memory_mib\""),
            std::string::npos);
  StatusOr<std::vector<TraceNode>> no_model =
      ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,2,\n", "n.csv");
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find("n.csv:2: node has 2 GPUs but an empty model"),
            std::string::npos);
}

TEST(LoadCsvTest, MissingFileSaysWhichPath) {
  StatusOr<std::vector<TracePod>> p = LoadPodCsv("no/such/file.csv");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("no/such/file.csv"), std::string::npos);
}

// A directory opens as a stream and reads as nothing: it is named as a
// directory, not reported as an empty file.
TEST(LoadCsvTest, ADirectoryIsNamedAsOne) {
  const std::string dir = ACCELPOOL_SIM_TESTDATA;
  StatusOr<std::vector<TracePod>> p = LoadPodCsv(dir);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find(dir + " is a directory; give the CSV file in it"),
            std::string::npos)
      << p.status().message();
  EXPECT_EQ(p.status().message().find("empty"), std::string::npos) << p.status().message();
  StatusOr<std::vector<TraceNode>> n = LoadNodeCsv(dir);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("is a directory"), std::string::npos);
}

// A column the schema does not name is not read: a warning names it, so a
// "gpu_type" written for "gpu_spec" does not drop the model restrictions
// without a word.
TEST(ParsePodCsvTest, UnknownColumnsAreNamedInAWarning) {
  std::vector<std::string> warnings;
  StatusOr<std::vector<TracePod>> p = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_type,owner\np0,1000,1024,1,500,T4,me\n",
      "pods.csv", &warnings);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE((*p)[0].gpu_models.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("pods.csv: columns \"gpu_type\", \"owner\" not read"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("gpu_spec"), std::string::npos) << warnings[0];
  // The schema's own columns, optional ones included, warn of nothing.
  warnings.clear();
  p = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\np0,1000,1024,1,500,T4,LS,Running,1,2,1\n",
      "pods.csv", &warnings);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  StatusOr<std::vector<TraceNode>> n = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model,zone\nn0,64000,262144,2,T4,a\n", "nodes.csv", &warnings);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("nodes.csv: column \"zone\" not read"), std::string::npos)
      << warnings[0];
}

}  // namespace
}  // namespace accelpool::sim
