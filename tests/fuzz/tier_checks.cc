// Fuzz checks and seeds of the two tier formats: disk region files and
// remote chunk values. One small geometry (2 layers, 2-page chunks) keeps
// seeds small enough for libFuzzer's default input length.
#include <algorithm>
#include <cstring>

#include "common/page_hash.h"
#include "fuzz_checks.h"
#include "tiers/chunk_format.h"
#include "tiers/disk_region_format.h"

namespace kvtier::fuzzing {
namespace {

ChunkGeometry fuzz_geometry() {
  return ChunkGeometry{KVGeometry{.num_layers = 2, .num_kv_heads = 1, .head_dim = 4, .dtype = DType::kF32, .page_tokens = 2}, 2};
}
constexpr uint64_t kFuzzRegionBytes = kRegionHeaderBlock + 4 * 8192;  // the tier's region size: 4 full entries

std::span<const std::byte> as_bytes(Input data) { return {reinterpret_cast<const std::byte*>(data.data()), data.size()}; }

// A chunk of `pages` pages whose hashes and payload derive from `seed`.
struct SeedChunk {
  ChunkKey key;
  std::vector<PageHash> hashes;
  std::vector<std::byte> payload;
};

SeedChunk seed_chunk(const ChunkGeometry& g, uint32_t pages, uint64_t seed) {
  SeedChunk c;
  PageHash prev = hash_bytes(HashAlgo::kXXH3_128, &seed, sizeof seed);
  c.key.ns = prev;
  for (uint32_t p = 0; p < pages; ++p) {
    prev = hash_bytes(HashAlgo::kXXH3_128, &prev, sizeof prev);
    c.hashes.push_back(prev);
  }
  c.key.hash = c.hashes.back();
  c.payload.resize(g.payload_bytes(pages));
  for (size_t i = 0; i < c.payload.size(); ++i) c.payload[i] = std::byte(uint8_t(seed * 31 + i * 7));
  return c;
}

std::vector<uint8_t> encoded(const ChunkGeometry& g, const SeedChunk& c, uint64_t sequence, size_t align) {
  const auto lay = chunk_entry_layout(g, uint32_t(c.hashes.size()), align);
  std::vector<uint8_t> out(lay.entry_bytes);
  (void)encode_chunk_entry(g, c.key, c.hashes, c.payload, sequence, align, {reinterpret_cast<std::byte*>(out.data()), out.size()});
  return out;
}

// Region 0 of the fuzz tier holding `chunks` entries of `pages` pages.
std::vector<uint8_t> region_image(uint32_t chunks, uint32_t pages) {
  const ChunkGeometry g = fuzz_geometry();
  std::vector<uint8_t> out(kRegionHeaderBlock, 0);
  const RegionHeader rh = make_region_header(g, 0, kFuzzRegionBytes);
  std::memcpy(out.data(), &rh, sizeof rh);
  for (uint32_t i = 0; i < chunks; ++i) {
    const auto e = encoded(g, seed_chunk(g, pages, 100 + i), i + 1, kRegionHeaderBlock);
    out.insert(out.end(), e.begin(), e.end());
  }
  return out;
}

// The scan's promises: entries in order, aligned, inside the bytes, each
// decodable and verified again from where the scan says it is.
std::string check_scan(std::span<const std::byte> region, const ChunkGeometry& g, const RegionScan& scan) {
  uint64_t next = kRegionHeaderBlock;
  for (const ScannedEntry& e : scan.entries) {
    const auto lay = chunk_entry_layout(g, e.num_pages, kRegionHeaderBlock);
    if (e.offset < next || e.offset % kRegionHeaderBlock) return "entry out of order or unaligned";
    if (e.num_pages == 0 || e.num_pages > g.chunk_pages) return "entry page count out of range";
    if (e.offset + lay.entry_bytes > region.size()) return "entry runs past the region bytes";
    if (e.layer_checksums.size() != g.kv.num_layers || e.payload_offset != lay.payload_offset) return "entry metadata inconsistent";
    auto m = decode_chunk_meta(region.subspan(e.offset), g);
    if (!m.ok() || !(m->key == e.key)) return "a scanned entry does not decode again";
    if (!verify_chunk_layers(*m, g, 0, g.kv.num_layers, region.subspan(e.offset + e.payload_offset, m->header.payload_bytes)).ok())
      return "a scanned entry does not verify";
    next = e.offset + lay.entry_bytes;
  }
  if (scan.end < next || scan.end > std::max<uint64_t>(region.size(), kRegionHeaderBlock)) return "scan end out of range";
  return {};
}

// The input with every checksum made right: the region header's and, for
// each 4096-aligned chunk header whose sizes are self-consistent, its payload
// and header checksums. A crafted file can do this as easily; the fuzzer
// cannot, so without it the parsers' logic behind the checksums would stay
// unexplored.
std::vector<uint8_t> with_checksums_fixed(Input data, size_t first_entry, size_t stride) {
  std::vector<uint8_t> b(data.begin(), data.end());
  if (first_entry > 0 && b.size() >= sizeof(RegionHeader)) {
    const uint64_t sum = checksum64(b.data(), offsetof(RegionHeader, checksum));
    std::memcpy(b.data() + offsetof(RegionHeader, checksum), &sum, sizeof sum);
  }
  for (size_t off = first_entry; off < b.size() && b.size() - off >= sizeof(ChunkHeader); off += stride) {
    ChunkHeader h;
    std::memcpy(&h, b.data() + off, sizeof h);
    const uint64_t meta = sizeof(ChunkHeader) + uint64_t(h.num_pages) * 16 + uint64_t(h.num_layers) * 8;
    if (h.magic != kChunkMagic || h.meta_bytes != meta || meta > b.size() - off) continue;
    uint8_t* p = b.data() + off;
    h.payload_checksum = checksum64(p + sizeof(ChunkHeader) + size_t(h.num_pages) * 16, size_t(h.num_layers) * 8);
    std::memcpy(p, &h, sizeof h);
    const uint64_t head = checksum64(p, offsetof(ChunkHeader, header_checksum));
    h.header_checksum = checksum64(p + sizeof(ChunkHeader), meta - sizeof(ChunkHeader), head);
    std::memcpy(p + offsetof(ChunkHeader, header_checksum), &h.header_checksum, 8);
  }
  return b;
}

std::string check_disk_region_once(Input data) {
  const ChunkGeometry g = fuzz_geometry();
  const auto bytes = as_bytes(data);
  const RegionHeaderCheck c = check_region_header(bytes.first(std::min(bytes.size(), kRegionHeaderBlock)), 0, g, kFuzzRegionBytes);
  if (c.kind != RegionKind::kOurs && c.reason.empty()) return "a region refused without a reason";
  uint64_t limit = std::min<uint64_t>(bytes.size(), kFuzzRegionBytes);
  if (c.kind == RegionKind::kOurs) {
    if (c.region_bytes < 2 * kRegionHeaderBlock || c.region_bytes % kRegionHeaderBlock ||
        c.region_bytes > std::max<uint64_t>(kFuzzRegionBytes, kMaxForeignRegionBytes))
      return "accepted a region size out of range";
    limit = std::min<uint64_t>(bytes.size(), c.region_bytes);
  }
  // The entry scan runs whatever the header said: it must hold on any bytes.
  const auto region = bytes.first(limit);
  return check_scan(region, g, scan_region_entries(region, g, /*verify_payloads=*/true));
}

std::string check_chunk_value_once(Input data) {
  const ChunkGeometry g = fuzz_geometry();
  const auto value = as_bytes(data);
  auto m = decode_chunk_value(value, g);
  if (!m.ok()) return m.status().message().empty() ? "a value refused without a message" : "";
  const ChunkHeader& h = m->header;
  if (h.num_pages == 0 || h.num_pages > g.chunk_pages || m->page_hashes.size() != h.num_pages ||
      (m->authenticated() ? m->layer_tags.size() : m->layer_checksums.size()) != g.kv.num_layers ||
      !(m->page_hashes.back() == m->key.hash))
    return "decoded metadata inconsistent";
  if (uint64_t(h.payload_offset) + h.payload_bytes > value.size() || h.payload_bytes != g.payload_bytes(h.num_pages))
    return "decoded payload range outside the value";
  const auto payload = value.subspan(h.payload_offset, h.payload_bytes);
  if (!verify_chunk_layers(*m, g, 0, g.kv.num_layers, payload).ok()) return {};  // refused: fine
  // Verified: scattering to pages and gathering back gives the same bytes.
  std::vector<std::vector<std::byte>> pages(h.num_pages, std::vector<std::byte>(g.kv.page_bytes()));
  std::vector<std::byte*> dst;
  std::vector<const std::byte*> src;
  for (auto& p : pages) dst.push_back(p.data()), src.push_back(p.data());
  scatter_layers(g.kv, payload.data(), 0, g.kv.num_layers, dst);
  std::vector<std::byte> back(payload.size());
  gather_pages(g.kv, src, back.data());
  if (!std::equal(back.begin(), back.end(), payload.begin())) return "scatter/gather round trip differs";
  return {};
}

}  // namespace

// Each check runs on the input as it is, then with its checksums made right.
std::string check_disk_region(Input data) {
  if (auto why = check_disk_region_once(data); !why.empty()) return why;
  return check_disk_region_once(with_checksums_fixed(data, kRegionHeaderBlock, kRegionHeaderBlock));
}

std::string check_chunk_value(Input data) {
  if (auto why = check_chunk_value_once(data); !why.empty()) return why;
  return check_chunk_value_once(with_checksums_fixed(data, 0, SIZE_MAX));
}

size_t disk_region_entries(Input data) {
  const ChunkGeometry g = fuzz_geometry();
  const auto bytes = as_bytes(data);
  const auto c = check_region_header(bytes.first(std::min(bytes.size(), kRegionHeaderBlock)), 0, g, kFuzzRegionBytes);
  if (c.kind != RegionKind::kOurs) return 0;
  return scan_region_entries(bytes.first(std::min<uint64_t>(bytes.size(), c.region_bytes)), g, true).entries.size();
}

bool chunk_value_verifies(Input data) {
  const ChunkGeometry g = fuzz_geometry();
  const auto value = as_bytes(data);
  auto m = decode_chunk_value(value, g);
  return m.ok() && verify_chunk_layers(*m, g, 0, g.kv.num_layers, value.subspan(m->header.payload_offset, m->header.payload_bytes)).ok();
}

std::vector<std::vector<uint8_t>> disk_region_seeds() {
  std::vector<std::vector<uint8_t>> out = {region_image(0, 1), region_image(1, 1), region_image(2, 2), region_image(4, 2)};
  auto torn = region_image(3, 2);
  torn.erase(torn.end() - std::min<std::ptrdiff_t>(5000, std::ssize(torn)), torn.end());  // the last entry cut short
  out.push_back(torn);
  return out;
}

std::vector<std::vector<uint8_t>> chunk_value_seeds() {
  const ChunkGeometry g = fuzz_geometry();
  return {encoded(g, seed_chunk(g, 1, 1), 1, 1), encoded(g, seed_chunk(g, 2, 2), 7, 1), encoded(g, seed_chunk(g, 2, 3), 9, 4096)};
}

}  // namespace kvtier::fuzzing
