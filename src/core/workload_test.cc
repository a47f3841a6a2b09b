#include "core/workload.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace accelpool::core {
namespace {

TaskShape Gpu(int32_t count, int32_t compute, int64_t cpu, int64_t mem) {
  TaskShape t;
  t.count = count;
  t.compute = compute;
  t.cpu_milli = cpu;
  t.host_memory_mib = mem;
  return t;
}

TEST(WorkloadLearnerTest, OffersShapesByTheirShareOfArrivals) {
  // The example of workload.h.
  WorkloadLearner l(WorkloadLearnerOptions{.window = 1000, .max_shapes = 8, .min_arrivals = 10});
  for (int i = 0; i < 60; ++i) l.Observe(Gpu(1, 1000, 4000, 16384));
  for (int i = 0; i < 40; ++i) l.Observe(Gpu(1, 500, 2000, 8192));
  std::vector<TaskShape> s = l.Shapes();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].compute, 1000);
  EXPECT_EQ(s[0].cpu_milli, 4000);
  EXPECT_DOUBLE_EQ(s[0].weight, 60);
  EXPECT_EQ(s[1].compute, 500);
  EXPECT_EQ(s[1].host_memory_mib, 8192);
  EXPECT_DOUBLE_EQ(s[1].weight, 40);
  EXPECT_EQ(l.arrivals(), 100u);
  EXPECT_EQ(l.distinct(), 2u);
}

TEST(WorkloadLearnerTest, NothingUntilEnoughArrivals) {
  WorkloadLearner l(WorkloadLearnerOptions{.window = 100, .max_shapes = 8, .min_arrivals = 5});
  for (int i = 0; i < 4; ++i) l.Observe(Gpu(1, 1000, 0, 0));
  EXPECT_TRUE(l.Shapes().empty());
  l.Observe(Gpu(1, 1000, 0, 0));
  EXPECT_EQ(l.Shapes().size(), 1u);
}

TEST(WorkloadLearnerTest, OldArrivalsLeaveTheWindow) {
  WorkloadLearner l(WorkloadLearnerOptions{.window = 10, .max_shapes = 8, .min_arrivals = 1});
  for (int i = 0; i < 10; ++i) l.Observe(Gpu(8, 1000, 0, 0));
  for (int i = 0; i < 10; ++i) l.Observe(Gpu(1, 250, 0, 0));
  std::vector<TaskShape> s = l.Shapes();
  ASSERT_EQ(s.size(), 1u);  // the 8-GPU shape has left entirely
  EXPECT_EQ(s[0].count, 1);
  EXPECT_DOUBLE_EQ(s[0].weight, 10);
  EXPECT_EQ(l.arrivals(), 10u);
  EXPECT_EQ(l.observed(), 20u);
  EXPECT_EQ(l.distinct(), 1u);
}

TEST(WorkloadLearnerTest, KeepsTheMostFrequentShapesOnly) {
  WorkloadLearner l(WorkloadLearnerOptions{.window = 1000, .max_shapes = 2, .min_arrivals = 1});
  for (int k = 1; k <= 4; ++k) {
    for (int i = 0; i < k; ++i) l.Observe(Gpu(k, 1000, 0, 0));
  }
  std::vector<TaskShape> s = l.Shapes();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].count, 4);
  EXPECT_EQ(s[1].count, 3);
}

TEST(WorkloadLearnerTest, ARestoredWindowOffersWhatTheOriginalDid) {
  WorkloadLearner a(WorkloadLearnerOptions{.window = 6, .max_shapes = 8, .min_arrivals = 1});
  for (int i = 0; i < 5; ++i) a.Observe(Gpu(8, 1000, 0, 0));
  for (int i = 0; i < 4; ++i) a.Observe(Gpu(1, 300, 2000, 4096));
  std::vector<TaskShape> arrivals = a.Arrivals();
  ASSERT_EQ(arrivals.size(), 6u);  // oldest first: two 8-GPU, then four shared
  EXPECT_EQ(arrivals.front().count, 8);
  EXPECT_EQ(arrivals.back().compute, 300);
  EXPECT_EQ(arrivals.back().host_memory_mib, 4096);

  WorkloadLearner b(WorkloadLearnerOptions{.window = 6, .max_shapes = 8, .min_arrivals = 1});
  b.Observe(Gpu(2, 1000, 0, 0));  // replaced, not added to
  b.Restore(arrivals, a.observed());
  EXPECT_EQ(b.Shapes(), a.Shapes());
  EXPECT_EQ(b.observed(), 9u);
  // It goes on as the original would: the oldest arrival leaves first.
  a.Observe(Gpu(1, 300, 2000, 4096));
  b.Observe(Gpu(1, 300, 2000, 4096));
  EXPECT_EQ(b.Shapes(), a.Shapes());

  // A smaller window keeps the newest arrivals only.
  WorkloadLearner c(WorkloadLearnerOptions{.window = 4, .max_shapes = 8, .min_arrivals = 1});
  c.Restore(arrivals, 0);
  ASSERT_EQ(c.Shapes().size(), 1u);
  EXPECT_EQ(c.Shapes()[0].compute, 300);
  EXPECT_EQ(c.observed(), 4u);  // never fewer than it holds
}

TEST(ShapeOfRequestTest, WholeSharedAndDevicelessPods) {
  DeviceRequest whole;
  whole.vendor = Vendor::kNvidia;
  whole.count = 2;
  whole.model_include = {"H100", "H200"};
  PodRequest pod;
  pod.containers = {whole};
  pod.host = HostResources{16000, 65536};
  TaskShape t = ShapeOfRequest(pod);
  EXPECT_EQ(t.count, 2);
  EXPECT_EQ(t.compute, kComputeWhole);
  EXPECT_EQ(t.model, "H100|H200");
  EXPECT_EQ(t.cpu_milli, 16000);
  EXPECT_EQ(t.host_memory_mib, 65536);

  DeviceRequest share;
  share.vendor = Vendor::kNvidia;
  share.count = 1;
  share.memory_mib = 4096;
  share.compute = 250;
  DeviceRequest init = share;
  init.kind = ContainerKind::kInit;
  init.count = 3;
  pod.containers = {init, share};
  t = ShapeOfRequest(pod);
  EXPECT_EQ(t.count, 1);  // the long-running devices, not the init container's
  EXPECT_EQ(t.compute, 250);
  EXPECT_EQ(t.memory_mib, 4096);
  EXPECT_EQ(t.model, "");

  pod.containers.clear();
  t = ShapeOfRequest(pod);
  EXPECT_EQ(t.count, 0);
  EXPECT_EQ(t.compute, 0);
  EXPECT_EQ(t.cpu_milli, 16000);

  // MIG instances are their own pool: a pod of MIG instances asks nothing of
  // the whole and shared GPUs; beside a shared GPU, only the share counts.
  DeviceRequest mig;
  mig.vendor = Vendor::kNvidia;
  mig.count = 2;
  mig.partition = "1g.18gb";
  pod.containers = {mig};
  t = ShapeOfRequest(pod);
  EXPECT_EQ(t.count, 0);
  EXPECT_EQ(t.cpu_milli, 16000);
  mig.container = "side";
  pod.containers = {mig, share};
  t = ShapeOfRequest(pod);
  EXPECT_EQ(t.count, 1);
  EXPECT_EQ(t.compute, 250);
}

}  // namespace
}  // namespace accelpool::core
