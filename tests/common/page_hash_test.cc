#include "common/page_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>  // the plain (baseline-vector) entry points, against kvtier's run-time dispatched ones

#include <numeric>
#include <random>
#include <vector>

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

// kvtier hashes through libxxhash's run-time dispatch (AVX-512, AVX2 or SSE2 by the CPU); every
// path must give the values the plain entry points give, or entries written on one machine would
// not be found, or would fail their checks, on another. Lengths cover XXH3's short-input cases,
// its stripes and blocks, and odd tails.
TEST(PageHash, DispatchedHashesEqualThePlainOnes) {
  std::vector<unsigned char> data((size_t(1) << 20) + 67);
  std::mt19937_64 rng(11);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (size_t len : {size_t(0), size_t(1), size_t(3), size_t(16), size_t(17), size_t(128), size_t(129), size_t(240),
                     size_t(241), size_t(1000), size_t(1024), size_t(4103), size_t(65536), data.size()}) {
    SCOPED_TRACE(len);
    for (uint64_t seed : {uint64_t(0), uint64_t(0x6B7674696572ull + 3)})
      EXPECT_EQ(checksum64(data.data() + 1, len, seed), XXH3_64bits_withSeed(data.data() + 1, len, seed));
    const XXH128_hash_t plain = XXH3_128bits(data.data(), len);
    const PageHash whole = hash_bytes(HashAlgo::kXXH3_128, data.data(), len);
    EXPECT_EQ(whole, (PageHash{plain.low64, plain.high64}));
    StreamHash128 streamed;  // in uneven pieces, as the streaming callers feed it
    for (size_t at = 0, step = 1; at < len; at += step, step = step * 3 + 1)
      streamed.update(data.data() + at, std::min(step, len - at));
    EXPECT_EQ(streamed.digest(), whole);
  }
}

}  // namespace
}  // namespace kvtier
