// Region files of the disk tier (docs/FORMATS.md §2) as pure functions over
// bytes: the 64-byte region header, what a header says about a file found in
// the tier's directory, and the scan of the entry log behind it. DiskTier's
// restart and the disk fuzzer call them; nothing here does I/O. All
// functions are thread-safe.
//
// Contract of check_region_header: a file is this tier's only when magic,
// format version, region id, geometry and chunk_pages match and its region
// size is one a writer of ours could have used. A file that merely sits in
// the directory (another geometry, another format version, an impossible
// region size, not a region at all) is kForeign:
// never served and never removed. Only a file that is ours but whose header
// did not reach the disk intact is kTorn (the tier removes it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tiers/chunk_format.h"

namespace kvtier {

inline constexpr uint64_t kRegionMagic = 0x314E474552545653ull;  // bytes "SVTREGN1" on disk
inline constexpr uint16_t kRegionFormatVersion = 1;
inline constexpr size_t kRegionHeaderBlock = 4096;  // the header occupies the first 4096 bytes
// Regions written with another region size are read when their size is at
// most max(the tier's region_bytes, this): it bounds the memory a restart
// spends on one region, whatever a header claims.
inline constexpr uint64_t kMaxForeignRegionBytes = uint64_t(1) << 30;

// The head of every region file; all integers little-endian.
struct RegionHeader {
  uint64_t magic;         //  0
  uint16_t version;       //  8
  uint16_t header_bytes;  // 10: sizeof(RegionHeader)
  uint32_t region_id;     // 12
  uint64_t region_bytes;  // 16
  uint32_t num_layers;    // 24
  uint32_t num_kv_heads;  // 28
  uint32_t head_dim;      // 32
  uint32_t page_tokens;   // 36
  uint8_t dtype;          // 40
  uint8_t reserved0[3];   // 41
  uint32_t chunk_pages;   // 44
  uint64_t reserved1;     // 48
  uint64_t checksum;      // 56: checksum64 of bytes [0,56)
};
static_assert(sizeof(RegionHeader) == 64, "RegionHeader is part of the on-disk format");

// The header of region `id` of a tier with geometry `g` and regions of `region_bytes`.
RegionHeader make_region_header(const ChunkGeometry& g, uint32_t id, uint64_t region_bytes);

enum class RegionKind : uint8_t {
  kOurs,     // scan its entries
  kTorn,     // ours, but the header block is missing, cut short or corrupt: nothing in it can be trusted
  kForeign,  // not this tier's: skip it and leave it alone
};

struct RegionHeaderCheck {
  RegionKind kind = RegionKind::kForeign;
  uint64_t region_bytes = 0;  // kOurs: the header's region size: reads stop there
  std::string reason;         // why not kOurs
};

// Classifies region file `id` from its first bytes (`head`: the first
// min(file size, kRegionHeaderBlock) bytes) against the tier's geometry and
// region size.
RegionHeaderCheck check_region_header(std::span<const std::byte> head, uint32_t id, const ChunkGeometry& g,
                                      uint64_t tier_region_bytes);

// One entry found by a scan, verified as far as the scan was asked to.
struct ScannedEntry {
  uint64_t offset = 0;  // of the entry in the region
  ChunkKey key;
  uint32_t num_pages = 0;
  uint32_t payload_offset = 0;
  uint64_t sequence = 0;
  KvCodec codec = KvCodec::kNone;
  std::vector<uint64_t> layer_checksums;
  std::shared_ptr<const ChunkMeta> auth_meta;  // an authenticated entry's tags and nonce; null when unauthenticated
};

struct RegionScan {
  std::vector<ScannedEntry> entries;
  uint64_t end = kRegionHeaderBlock;  // where the log stops (the next append would go here)
  uint64_t dropped_corrupt = 0;       // entries whose header or payload did not verify
  uint64_t dropped_torn = 0;          // entries cut short by the end of the bytes
  uint64_t dropped_forged = 0;        // entries that failed authentication (authenticate_chunk_meta, layer tags)
};

// Scans the entry log of `region` (the region's bytes from offset 0, header
// block included, at most its region size): entries back to back from
// kRegionHeaderBlock, each 4096-aligned with exactly the layout the writer
// gives `g`, up to the first all-zero header, the first entry whose header
// does not verify (its length cannot be trusted) or the end of the bytes.
// With `verify_payloads`, every layer checksum is checked too and a bad
// entry is dropped while the scan continues. Each entry must authenticate
// as authenticate_chunk_meta says under `auth` (the tier secret, or none);
// one that does not is dropped (dropped_forged) and the scan continues.
RegionScan scan_region_entries(std::span<const std::byte> region, const ChunkGeometry& g, bool verify_payloads,
                               const ChunkAuth* auth = nullptr);

}  // namespace kvtier
