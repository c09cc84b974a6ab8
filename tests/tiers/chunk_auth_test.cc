// Authenticated chunk entries (tiers/chunk_auth.h): what a holder of the
// tier secret accepts, and that nothing else passes — entries without a
// tag, under another secret, or with any byte changed.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/secrets.h"

#include <fstream>

#include "tier_test_util.h"

namespace kvtier {
namespace {

using namespace testing_util;

std::shared_ptr<const ChunkAuth> auth_of(std::string_view secret) {
  auto a = ChunkAuth::create(secret);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  return a.ok() ? *a : nullptr;
}

std::vector<std::byte> encode(const ChunkGeometry& g, const TestChunk& c, const ChunkAuth* auth, size_t align = 1) {
  const auto lay = chunk_entry_layout(g, uint32_t(c.hashes.size()), align, auth != nullptr);
  std::vector<std::byte> entry(lay.entry_bytes);
  EXPECT_TRUE(encode_chunk_entry(g, c.key, c.hashes, c.payload, 1, align, entry, auth).ok());
  return entry;
}

// The whole read path of a tier: integrity, authenticity, then every layer.
Status read_entry(std::span<const std::byte> entry, const ChunkGeometry& g, const ChunkAuth* auth) {
  KVTIER_ASSIGN_OR_RETURN(ChunkMeta m, decode_chunk_value(entry, g));
  KVTIER_RETURN_IF_ERROR(authenticate_chunk_meta(m, entry, auth));
  return verify_chunk_layers(m, g, 0, m.num_layers(), entry.subspan(m.header.payload_offset, m.header.payload_bytes), auth);
}

constexpr std::string_view kSecret = "correct horse battery staple";

TEST(ChunkAuth, AuthenticatedRoundTripAndLayout) {
  auto g = small_geometry();
  auto auth = auth_of(kSecret);
  auto c = make_chunk(g, test_ns(1), 3, 3);
  const auto lay = chunk_entry_layout(g, 3, 1, true);
  EXPECT_EQ(lay.meta_bytes, 128u + 3 * 16 + 4 * 16 + 16 + 32);
  for (size_t align : {size_t(1), size_t(4096)}) {
    auto entry = encode(g, c, auth.get(), align);
    EXPECT_TRUE(read_entry(entry, g, auth.get()).ok());
    auto m = decode_chunk_meta(entry, g).value();
    EXPECT_TRUE(m.authenticated());
    EXPECT_TRUE(std::equal(c.payload.begin(), c.payload.end(), entry.begin() + m.header.payload_offset));
    // One layer verifies by itself, as it lands.
    const size_t lb = g.layer_bytes(3);
    EXPECT_TRUE(verify_chunk_layers(m, g, 2, 1, std::span(entry).subspan(m.header.payload_offset + 2 * lb, lb), auth.get()).ok());
    EXPECT_EQ(verify_chunk_layers(m, g, 1, 1, std::span(entry).subspan(m.header.payload_offset + 2 * lb, lb), auth.get()).code(),
              StatusCode::kCorruption);
  }
  // Meta-only encoding is the prefix of a whole entry up to the nonce: both verify.
  std::vector<std::byte> meta(lay.payload_offset);
  ASSERT_TRUE(encode_chunk_meta(g, c.key, c.hashes, c.payload, 1, 1, meta, auth.get()).ok());
  meta.insert(meta.end(), c.payload.begin(), c.payload.end());
  EXPECT_TRUE(read_entry(meta, g, auth.get()).ok());
}

TEST(ChunkAuth, OnlyTheSameSecretAccepts) {
  auto g = small_geometry();
  auto a = auth_of(kSecret), a2 = auth_of(kSecret), b = auth_of("another secret of enough bytes");
  auto c = make_chunk(g, test_ns(2), 4);
  auto signed_a = encode(g, c, a.get());
  auto plain = encode(g, c, nullptr);
  EXPECT_TRUE(read_entry(signed_a, g, a2.get()).ok());  // same secret, another instance
  EXPECT_EQ(read_entry(signed_a, g, b.get()).code(), StatusCode::kCorruption);
  EXPECT_EQ(read_entry(signed_a, g, nullptr).code(), StatusCode::kCorruption);
  EXPECT_EQ(read_entry(plain, g, a.get()).code(), StatusCode::kCorruption);  // a well-formed entry without a tag
  EXPECT_TRUE(read_entry(plain, g, nullptr).ok());
  // Key names: deterministic per secret, different across secrets, not the hashes themselves.
  EXPECT_EQ(a->key_name(c.key.ns, c.key.hash), a2->key_name(c.key.ns, c.key.hash));
  EXPECT_NE(a->key_name(c.key.ns, c.key.hash), b->key_name(c.key.ns, c.key.hash));
  EXPECT_EQ(a->key_name(c.key.ns, c.key.hash).find(c.key.hash.to_hex().substr(0, 8)), std::string::npos);
  EXPECT_EQ(ChunkAuth::create("short").status().code(), StatusCode::kInvalidArgument);
}

TEST(ChunkAuth, EveryTamperedByteIsDetected) {
  auto g = small_geometry();
  auto auth = auth_of(kSecret);
  auto c = make_chunk(g, test_ns(3), 5, 2);
  const auto entry = encode(g, c, auth.get());
  ASSERT_TRUE(read_entry(entry, g, auth.get()).ok());
  for (size_t i = 0; i < entry.size(); ++i) {
    for (std::byte flip : {std::byte{0x01}, std::byte{0x80}}) {
      auto bad = entry;
      bad[i] ^= flip;
      EXPECT_FALSE(read_entry(bad, g, auth.get()).ok()) << "tampering with byte " << i << " went unnoticed";
    }
  }
  // A forger who rewrites the payload and recomputes every unkeyed checksum still fails.
  auto forged_chunk = c;
  forged_chunk.payload[7] ^= std::byte{0x10};
  EXPECT_EQ(read_entry(encode(g, forged_chunk, nullptr), g, auth.get()).code(), StatusCode::kCorruption);
}

TEST(ChunkAuth, SecretFileIsReadWithoutItsTrailingNewline) {
  TempDir dir;
  const std::string path = dir.path() + "/secret";
  std::ofstream(path) << "0123456789abcdef0123\n";
  auto s = read_tier_secret(path);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(**s, "0123456789abcdef0123");
  std::ofstream(path) << "tooshort\n";
  auto bad = read_tier_secret(path);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("tooshort"), std::string::npos);  // the contents never reach a message
  EXPECT_EQ(read_tier_secret(dir.path() + "/missing").status().code(), StatusCode::kInvalidArgument);
}

// Without a file the secret comes from KVTIER_TIER_SECRET; neither: none.
TEST(ChunkAuth, SecretFromTheEnvironment) {
  set_secret_lookup([](const char* name) -> const char* { return std::getenv(name); });  // as the executable's main() does
  ::unsetenv(kTierSecretEnv);
  auto none = read_tier_secret("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ::setenv(kTierSecretEnv, "from-the-environment-0123", 1);
  auto env = read_tier_secret("");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(**env, "from-the-environment-0123");
  ::setenv(kTierSecretEnv, "short", 1);
  auto bad = read_tier_secret("");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(kTierSecretEnv), std::string::npos);
  EXPECT_EQ(bad.status().message().find("short "), std::string::npos);
  ::unsetenv(kTierSecretEnv);
}

}  // namespace
}  // namespace kvtier
