#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/page_hash.h"

namespace kvtier {
namespace {

Namespace test_ns() { return Namespace{PageHash{1, 2}, "adapter", "salt"}; }

std::vector<TokenId> iota_tokens(size_t n) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

// Fixed vectors: these values must never change without a format version bump,
// since page hashes name entries on disk and in Redis.
TEST(PageHash, TestVectorsXXH3) {
  PageHash seed = namespace_seed(test_ns(), HashAlgo::kXXH3_128);
  std::vector<PageHash> h;
  hash_pages(HashAlgo::kXXH3_128, seed, iota_tokens(32), 16, h);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(seed.to_hex(), "91ed130ab4769378dbd4c40905d7c3ff");
  EXPECT_EQ(h[0].to_hex(), "611284947b489d27038f135343c24da5");
  EXPECT_EQ(h[1].to_hex(), "dc5891283bed4237cfa0b191c49cefdd");
}

TEST(PageHash, TestVectorsSHA256) {
  PageHash seed = namespace_seed(test_ns(), HashAlgo::kSHA256);
  std::vector<PageHash> h;
  hash_pages(HashAlgo::kSHA256, seed, iota_tokens(32), 16, h);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(seed.to_hex(), "6ff232bc4cd46f9a67bd84698d95f234");
  EXPECT_EQ(h[0].to_hex(), "b46f3b12d5238afbaac02a17822b84bf");
  EXPECT_EQ(h[1].to_hex(), "15a03d27045850fe37ff65b7efd1be6f");
}

TEST(PageHash, ChainedAndPartialPageIgnored) {
  for (HashAlgo a : {HashAlgo::kXXH3_128, HashAlgo::kSHA256}) {
    PageHash seed = namespace_seed(test_ns(), a);
    auto toks = iota_tokens(37);
    std::vector<PageHash> h;
    hash_pages(a, seed, toks, 16, h);
    ASSERT_EQ(h.size(), 2u);
    EXPECT_EQ(h[0], hash_page(a, seed, std::span(toks).subspan(0, 16)));
    EXPECT_EQ(h[1], hash_page(a, h[0], std::span(toks).subspan(16, 16)));
  }
}

TEST(PageHash, SamePageAtDifferentPositionsDiffers) {
  std::vector<TokenId> toks(64, 7);  // four identical pages
  std::vector<PageHash> h;
  hash_pages(HashAlgo::kXXH3_128, namespace_seed(test_ns(), HashAlgo::kXXH3_128), toks, 16, h);
  ASSERT_EQ(h.size(), 4u);
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(h[i], h[j]);
}

TEST(PageHash, NamespacesDiffer) {
  Namespace a = test_ns(), b = test_ns(), c = test_ns();
  b.cache_salt = "other";
  c.adapter_id = "";
  auto sa = namespace_seed(a, HashAlgo::kXXH3_128);
  EXPECT_NE(sa, namespace_seed(b, HashAlgo::kXXH3_128));
  EXPECT_NE(sa, namespace_seed(c, HashAlgo::kXXH3_128));
  // Field boundaries are length-prefixed: moving a byte between fields changes the seed.
  Namespace d{PageHash{1, 2}, "adapters", "alt"};
  EXPECT_NE(sa, namespace_seed(d, HashAlgo::kXXH3_128));
}

// A tenant is its own namespace; without one the seed is the pinned one above.
TEST(PageHash, TenantsDifferAndNoTenantKeepsTheSeed) {
  Namespace a = test_ns(), b = test_ns(), c = test_ns();
  b.tenant = "acme";
  c.tenant = "globex";
  const PageHash sa = namespace_seed(a, HashAlgo::kXXH3_128);
  EXPECT_EQ(sa.to_hex(), "91ed130ab4769378dbd4c40905d7c3ff");
  EXPECT_NE(sa, namespace_seed(b, HashAlgo::kXXH3_128));
  EXPECT_NE(namespace_seed(b, HashAlgo::kXXH3_128), namespace_seed(c, HashAlgo::kXXH3_128));
  // A salt cannot spell a tenant: the tenant's field is tagged and length-prefixed.
  Namespace forged = test_ns();
  forged.cache_salt = std::string("salt\0tenant", 11) + std::string("\x04\0\0\0\0\0\0\0", 8) + "acme";
  EXPECT_NE(namespace_seed(forged, HashAlgo::kXXH3_128), namespace_seed(b, HashAlgo::kXXH3_128));
  Namespace same_salt_other_tenant = b;
  same_salt_other_tenant.tenant = "acme2";
  EXPECT_NE(namespace_seed(same_salt_other_tenant, HashAlgo::kSHA256), namespace_seed(b, HashAlgo::kSHA256));
}

}  // namespace
}  // namespace kvtier
