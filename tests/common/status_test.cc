#include <gtest/gtest.h>

#include <cerrno>

#include "kvtier/status.h"
#include "kvtier/types.h"

namespace kvtier {
namespace {

Result<int> half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> quarter(int x) {
  KVTIER_ASSIGN_OR_RETURN(int h, half(x));
  return half(h);
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Status::NotFound("page");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NotFound: page");
  EXPECT_EQ(Status::FromErrno(ENOSPC, "write").code(), StatusCode::kNoSpace);
  EXPECT_EQ(Status::FromErrno(EIO, "read").code(), StatusCode::kIOError);
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_FALSE(quarter(6).ok());
  EXPECT_EQ(quarter(6).status().message(), "odd");
}

TEST(StrongId, InvalidByDefault) {
  PageId p;
  EXPECT_FALSE(p.valid());
  EXPECT_TRUE(PageId(3).valid());
  EXPECT_LT(PageId(1), PageId(2));
}

TEST(KVGeometry, Sizes) {
  KVGeometry g{.num_layers = 8, .num_kv_heads = 4, .head_dim = 64, .dtype = DType::kF16, .page_tokens = 16};
  ASSERT_TRUE(g.validate().ok());
  EXPECT_EQ(g.token_kv_half_bytes(), 4u * 64 * 2);
  EXPECT_EQ(g.bytes_per_token(), 2u * 4 * 64 * 2 * 8);
  EXPECT_EQ(g.page_bytes(), 8u * 2 * 16 * 4 * 64 * 2);
  EXPECT_EQ(g.layer_offset(3), 3 * g.layer_slice_bytes());
  EXPECT_FALSE(KVGeometry{}.validate().ok());
  EXPECT_FALSE(parse_dtype("f8").ok());
}

}  // namespace
}  // namespace kvtier
