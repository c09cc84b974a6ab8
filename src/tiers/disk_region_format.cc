#include "tiers/disk_region_format.h"

#include <algorithm>
#include <cstring>

#include "common/page_hash.h"

namespace kvtier {
namespace {

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

RegionHeaderCheck verdict(RegionKind kind, std::string reason) { return {kind, 0, std::move(reason)}; }

// The header is ours and intact: does it describe this tier's regions?
RegionHeaderCheck check_fields(const RegionHeader& rh, uint32_t id, const ChunkGeometry& g, uint64_t tier_region_bytes) {
  if (rh.region_id != id)
    return verdict(RegionKind::kForeign, "its header names region " + std::to_string(rh.region_id));
  const KVGeometry kv{rh.num_layers, rh.num_kv_heads, rh.head_dim, static_cast<DType>(rh.dtype), rh.page_tokens};
  if (!(kv == g.kv) || rh.chunk_pages != g.chunk_pages) return verdict(RegionKind::kForeign, "written for another geometry");
  // A tier may reopen with another region size and keep its regions, but a
  // size no writer of ours could have used is not ours.
  const uint64_t most = std::max<uint64_t>(tier_region_bytes, kMaxForeignRegionBytes);
  if (rh.region_bytes < 2 * kRegionHeaderBlock || rh.region_bytes % kRegionHeaderBlock != 0 || rh.region_bytes > most)
    return verdict(RegionKind::kForeign, "region size " + std::to_string(rh.region_bytes) + " out of range");
  return {RegionKind::kOurs, rh.region_bytes, {}};
}

}  // namespace

RegionHeader make_region_header(const ChunkGeometry& g, uint32_t id, uint64_t region_bytes) {
  RegionHeader rh{};
  rh.magic = kRegionMagic;
  rh.version = kRegionFormatVersion;
  rh.header_bytes = sizeof(RegionHeader);
  rh.region_id = id;
  rh.region_bytes = region_bytes;
  rh.num_layers = g.kv.num_layers;
  rh.num_kv_heads = g.kv.num_kv_heads;
  rh.head_dim = g.kv.head_dim;
  rh.page_tokens = g.kv.page_tokens;
  rh.dtype = static_cast<uint8_t>(g.kv.dtype);
  rh.chunk_pages = g.chunk_pages;
  rh.checksum = checksum64(&rh, offsetof(RegionHeader, checksum));
  return rh;
}

RegionHeaderCheck check_region_header(std::span<const std::byte> head, uint32_t id, const ChunkGeometry& g,
                                      uint64_t tier_region_bytes) {
  // Killed before the header reached the disk: the file is empty or zeros.
  if (all_zero(head.first(std::min(head.size(), sizeof(RegionHeader)))))
    return verdict(RegionKind::kTorn, "no region header");
  uint64_t magic = 0;
  if (head.size() >= sizeof magic) std::memcpy(&magic, head.data(), sizeof magic);
  if (magic != kRegionMagic) return verdict(RegionKind::kForeign, "not a region file");
  if (head.size() < sizeof(RegionHeader)) return verdict(RegionKind::kTorn, "region header cut short");
  RegionHeader rh;
  std::memcpy(&rh, head.data(), sizeof rh);
  // Another format version may lay out (and checksum) its header differently.
  if (rh.version != kRegionFormatVersion || rh.header_bytes != sizeof(RegionHeader))
    return verdict(RegionKind::kForeign, "region format version " + std::to_string(rh.version));
  if (rh.checksum != checksum64(&rh, offsetof(RegionHeader, checksum)))
    return verdict(RegionKind::kTorn, "region header checksum mismatch");
  if (head.size() < kRegionHeaderBlock) return verdict(RegionKind::kTorn, "region header block cut short");
  return check_fields(rh, id, g, tier_region_bytes);
}

RegionScan scan_region_entries(std::span<const std::byte> region, const ChunkGeometry& g, bool verify_payloads,
                               const ChunkAuth* auth) {
  RegionScan scan;
  uint64_t off = kRegionHeaderBlock;
  while (off <= region.size() && region.size() - off >= sizeof(ChunkHeader)) {
    const std::span<const std::byte> rest = region.subspan(off);
    const size_t meta = chunk_meta_bytes_from_header(rest);
    if (meta == 0) {
      // Zeros mean the clean end of the log; anything else is a torn or corrupt header.
      if (!all_zero(rest.first(sizeof(ChunkHeader)))) ++scan.dropped_corrupt;
      break;
    }
    if (meta > rest.size()) {
      ++scan.dropped_torn;
      break;
    }
    auto m = decode_chunk_meta(rest, g);
    if (!m.ok()) {  // lengths past a bad header cannot be trusted: stop here
      ++scan.dropped_corrupt;
      break;
    }
    const ChunkHeader& h = m->header;
    ChunkGeometry written = g;  // the layout its writer gave it, in its own codec
    written.codec = m->codec();
    const ChunkEntryLayout lay = chunk_entry_layout(written, h.num_pages, kRegionHeaderBlock, m->authenticated());
    if (h.payload_offset != lay.payload_offset || h.entry_bytes != lay.entry_bytes) {  // not what the writer makes
      ++scan.dropped_corrupt;
      break;
    }
    if (h.entry_bytes > rest.size()) {
      ++scan.dropped_torn;
      break;
    }
    const uint64_t entry_bytes = h.entry_bytes;
    if (!authenticate_chunk_meta(*m, rest, auth).ok()) {
      ++scan.dropped_forged;  // its lengths verified: the scan goes on past it
    } else if (verify_payloads &&
               !verify_chunk_layers(*m, g, 0, g.kv.num_layers, rest.subspan(h.payload_offset, h.payload_bytes), auth).ok()) {
      ++(m->authenticated() ? scan.dropped_forged : scan.dropped_corrupt);
    } else {
      ScannedEntry e{off, m->key, h.num_pages, h.payload_offset, h.sequence, m->codec(), std::move(m->layer_checksums), nullptr};
      if (m->authenticated()) e.auth_meta = std::make_shared<const ChunkMeta>(std::move(*m));
      scan.entries.push_back(std::move(e));
    }
    off += entry_bytes;
  }
  scan.end = off;
  return scan;
}

}  // namespace kvtier
