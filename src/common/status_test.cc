#include "common/status.h"

#include <gtest/gtest.h>

namespace accelpool {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd value " + std::to_string(x));
  return x / 2;
}

Status UseHalf(int x, int* out) {
  StatusOr<int> h = Half(x);
  ACCELPOOL_RETURN_IF_ERROR(h.status());
  *out = *h;
  return Status::Ok();
}

TEST(StatusTest, OkAndError) {
  EXPECT_TRUE(Status().ok());
  Status s = NotFoundError("no node n1");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no node n1");
  EXPECT_EQ(s.WithPrefix("filter").message(), "filter: no node n1");
}

TEST(StatusTest, StatusOrPropagates) {
  int v = 0;
  EXPECT_TRUE(UseHalf(8, &v).ok());
  EXPECT_EQ(v, 4);
  Status s = UseHalf(3, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd value 3");
}

TEST(StatusTest, CodesMirrorGoogleRpc) {
  EXPECT_EQ(static_cast<int>(StatusCode::kUnavailable), 14);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnauthenticated), 16);
}

}  // namespace
}  // namespace accelpool
