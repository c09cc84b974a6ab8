#include <gtest/gtest.h>

#include "tier_test_util.h"

namespace kvtier {
namespace {

using namespace testing_util;

TEST(ChunkFormat, EncodeDecodeRoundTripAndLayout) {
  auto g = small_geometry();
  auto c = make_chunk(g, test_ns(1), 7, 3);
  auto lay = chunk_entry_layout(g, 3, 4096);
  EXPECT_EQ(lay.meta_bytes, 128u + 3 * 16 + 4 * 8);
  EXPECT_EQ(lay.payload_offset, 4096u);
  EXPECT_EQ(lay.entry_bytes % 4096, 0u);
  std::vector<std::byte> entry(lay.entry_bytes);
  ASSERT_TRUE(encode_chunk_entry(g, c.key, c.hashes, c.payload, 42, 4096, entry).ok());
  EXPECT_EQ(std::memcmp(entry.data(), "KVTCHNK1", 8), 0);
  auto m = decode_chunk_meta(entry, g);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->key, c.key);
  EXPECT_EQ(m->page_hashes, c.hashes);
  EXPECT_EQ(m->header.sequence, 42u);
  EXPECT_TRUE(verify_chunk_layers(*m, g, 0, 4, {entry.data() + lay.payload_offset, c.payload.size()}).ok());
  EXPECT_TRUE(std::equal(c.payload.begin(), c.payload.end(), entry.begin() + lay.payload_offset));
  // Packed (align 1) values for network stores.
  auto packed = chunk_entry_layout(g, 3, 1);
  EXPECT_EQ(packed.payload_offset, packed.meta_bytes);
  EXPECT_EQ(packed.entry_bytes, packed.meta_bytes + c.payload.size());
}

TEST(ChunkFormat, MetaOnlyEncodingIsTheEntryPrefix) {
  // A gather-list writer sends encode_chunk_meta's bytes, then the payload:
  // that must be byte for byte the entry encode_chunk_entry builds.
  auto g = small_geometry();
  auto c = make_chunk(g, test_ns(2), 9, 2);
  for (size_t align : {size_t(1), size_t(4096)}) {
    auto lay = chunk_entry_layout(g, 2, align);
    std::vector<std::byte> entry(lay.entry_bytes), meta(lay.payload_offset, std::byte{0x5A});
    ASSERT_TRUE(encode_chunk_entry(g, c.key, c.hashes, c.payload, 5, align, entry).ok());
    ASSERT_TRUE(encode_chunk_meta(g, c.key, c.hashes, c.payload, 5, align, meta).ok());
    EXPECT_TRUE(std::equal(meta.begin(), meta.end(), entry.begin())) << "align " << align;
    std::vector<std::byte> short_meta(lay.payload_offset - 1);
    EXPECT_FALSE(encode_chunk_meta(g, c.key, c.hashes, c.payload, 5, align, short_meta).ok());
  }
}

TEST(ChunkFormat, EveryMetadataByteIsCovered) {
  auto g = small_geometry();
  auto c = make_chunk(g, test_ns(1), 8, 2);
  auto lay = chunk_entry_layout(g, 2, 1);
  std::vector<std::byte> entry(lay.entry_bytes);
  ASSERT_TRUE(encode_chunk_entry(g, c.key, c.hashes, c.payload, 1, 1, entry).ok());
  for (size_t i = 0; i < lay.meta_bytes; ++i) {
    auto bad = entry;
    bad[i] ^= std::byte{0x01};
    auto m = decode_chunk_meta(bad, g);
    EXPECT_FALSE(m.ok()) << "flipping metadata byte " << i << " went unnoticed";
  }
  // A payload flip is caught by exactly the layer it lands in.
  auto m = decode_chunk_meta(entry, g).value();
  auto bad = entry;
  const size_t lb = g.layer_bytes(2);
  bad[lay.payload_offset + 2 * lb + 5] ^= std::byte{0x80};
  std::span<const std::byte> pl(bad.data() + lay.payload_offset, c.payload.size());
  EXPECT_TRUE(verify_chunk_layers(m, g, 0, 2, pl).ok());
  EXPECT_EQ(verify_chunk_layers(m, g, 2, 1, pl.subspan(2 * lb)).code(), StatusCode::kCorruption);
  // Another geometry is refused, not misread.
  auto other = g;
  other.kv.head_dim = 16;
  EXPECT_EQ(decode_chunk_meta(entry, other).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChunkFormat, GatherScatterAreInverse) {
  auto g = small_geometry();
  const uint32_t n = 3;
  std::vector<std::vector<std::byte>> pages(n, std::vector<std::byte>(g.kv.page_bytes()));
  for (uint32_t p = 0; p < n; ++p)
    for (size_t i = 0; i < pages[p].size(); ++i) pages[p][i] = std::byte(uint8_t(p * 37 + i * 11));
  std::vector<const std::byte*> src;
  for (auto& p : pages) src.push_back(p.data());
  std::vector<std::byte> chunk(g.payload_bytes(n));
  gather_pages(g.kv, src, chunk.data());
  // Layer l of page p sits at (l * n + p) * slice: layer-major.
  const size_t s = g.kv.layer_slice_bytes();
  EXPECT_EQ(std::memcmp(chunk.data() + (2 * n + 1) * s, pages[1].data() + 2 * s, s), 0);
  std::vector<std::vector<std::byte>> back(n, std::vector<std::byte>(g.kv.page_bytes()));
  std::vector<std::byte*> dst;
  for (auto& p : back) dst.push_back(p.data());
  scatter_layers(g.kv, chunk.data(), 0, 2, dst);
  scatter_layers(g.kv, chunk.data() + 2 * g.layer_bytes(n), 2, 2, dst);
  EXPECT_EQ(back, pages);
}

}  // namespace
}  // namespace kvtier
