// Chunks: the unit of lower-tier storage, and their self-describing entry
// format (DESIGN §7), shared by the disk segment log and remote values.
//
// A chunk is a run of 1..chunk_pages whole pages, named by ChunkKey = the
// namespace seed plus the hash of its last page (which, being chained,
// names the whole prefix). Its payload is LAYER-MAJOR:
//   [layer][page][k|v][page_tokens][kv_heads][head_dim]
// so that one layer of the whole chunk (what attention of layer l needs)
// is one contiguous byte range, and a layer-wise load is one I/O per layer.
// gather_pages/scatter_layers convert between this and the page-first
// layout of BlockPool pages and HostTier slots.
//
// Entry = ChunkHeader (128 B) | page hashes (16 B each) | layer checksums
// (8 B each) | zero padding up to payload_offset | payload | padding up to
// entry_bytes. docs/FORMATS.md gives every byte. Layer checksums let a
// reader verify one layer without reading the rest: corrupt KV is never
// served. All functions are pure and thread-safe.
//
// Authenticated entries (kChunkFlagAuthenticated; written with a ChunkAuth,
// tiers/chunk_auth.h) carry keyed tags instead of the layer checksums:
// ChunkHeader | page hashes | layer tags (16 B each) | nonce (16 B) | entry
// tag (32 B) | padding | payload. A reader holding the secret checks the
// entry tag (authenticate_chunk_meta) and then each layer's tag as it
// lands (verify_chunk_layers); a reader with a secret refuses entries
// without one, and the reverse.
//
// Codecs (tiers/kv_codec.h): an entry records the codec of its payload in
// its header. The payload stays layer-major, each layer encoded on its own
// (kv_encode_layer), so one stored layer is still one contiguous range that
// is verified (checksums and tags are over the stored bytes) and decoded as
// it lands. A tier writes with ChunkGeometry::codec and reads every codec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/types.h"
#include "memory/device_memory.h"
#include "tiers/chunk_auth.h"
#include "codec/kv_codec.h"

namespace kvtier {

struct ChunkKey {
  PageHash ns;    // namespace seed (h_{-1})
  PageHash hash;  // hash of the chunk's last page
  bool operator==(const ChunkKey&) const = default;
};

struct ChunkKeyHasher {
  size_t operator()(const ChunkKey& k) const noexcept {
    return PageHashHasher()(k.hash) ^ (PageHashHasher()(k.ns) * 0xC2B2AE3D27D4EB4Full);
  }
};

// Geometry of the chunks of one tier.
struct ChunkGeometry {
  KVGeometry kv;
  uint32_t chunk_pages = 16;  // 256 tokens at 16 tokens per page
  KvCodec codec = KvCodec::kNone;  // how this tier encodes the payloads it writes (entries record their own)

  Status validate() const;
  // Bytes of one layer of an n-page chunk (contiguous in the payload).
  size_t layer_bytes(uint32_t n_pages) const { return size_t(n_pages) * kv.layer_slice_bytes(); }
  size_t payload_bytes(uint32_t n_pages) const { return layer_bytes(n_pages) * kv.num_layers; }
  size_t layer_offset(uint32_t n_pages, uint32_t layer) const { return layer * layer_bytes(n_pages); }
  size_t max_payload_bytes() const { return payload_bytes(chunk_pages); }
  // The same sizes as stored in an entry of codec c (c == kNone: the raw sizes).
  size_t stored_layer_bytes(uint32_t n_pages, KvCodec c) const { return kv_codec_layer_bytes(c, kv, n_pages); }
  size_t stored_payload_bytes(uint32_t n_pages, KvCodec c) const { return stored_layer_bytes(n_pages, c) * kv.num_layers; }
};

// Page-first pages → one layer-major chunk payload (the aggregation step).
void gather_pages(const KVGeometry& g, std::span<const std::byte* const> pages, std::byte* chunk);
// Layers [first, first+count) of an n-page layer-major buffer (holding only
// those layers, contiguously) → the same layers of each page-first page.
void scatter_layers(const KVGeometry& g, const std::byte* layers, uint32_t first, uint32_t count,
                    std::span<std::byte* const> pages);
// The same two moves as lists of slice copies (appended to `out`), for
// pages the CPU cannot touch: DeviceMemory::copy runs them.
void gather_copies(const KVGeometry& g, std::span<const std::byte* const> pages, std::byte* chunk,
                   std::vector<ByteCopy>& out);
void scatter_copies(const KVGeometry& g, const std::byte* layers, uint32_t first, uint32_t count,
                    std::span<std::byte* const> pages, std::vector<ByteCopy>& out);

inline constexpr uint64_t kChunkMagic = 0x314B4E484354564Bull;  // bytes "KVTCHNK1" on disk
inline constexpr uint16_t kChunkFormatVersion = 1;
inline constexpr uint32_t kChunkFlagLayerMajor = 1u;
inline constexpr uint32_t kChunkFlagAuthenticated = 2u;  // layer tags + nonce + entry tag instead of layer checksums

// The fixed head of every entry; all integers little-endian.
struct ChunkHeader {
  uint64_t magic;            //   0
  uint16_t version;          //   8
  uint16_t header_bytes;     //  10: sizeof(ChunkHeader)
  uint32_t flags;            //  12: kChunkFlagLayerMajor [| kChunkFlagAuthenticated]
  uint32_t num_pages;        //  16
  uint32_t num_layers;       //  20
  uint32_t num_kv_heads;     //  24
  uint32_t head_dim;         //  28
  uint32_t page_tokens;      //  32
  uint8_t dtype;             //  36: DType
  uint8_t codec;             //  37: KvCodec of the payload (0: none, raw)
  uint8_t reserved0[2];      //  38: zero
  uint32_t meta_bytes;       //  40: header + page hashes + layer checks (+ nonce + entry tag)
  uint32_t payload_offset;   //  44: from the start of the entry
  uint64_t payload_bytes;    //  48
  uint64_t sequence;         //  56: writer's monotonically increasing sequence number
  uint64_t ns_lo, ns_hi;     //  64: namespace seed
  uint64_t key_lo, key_hi;   //  80: hash of the last page (== last page hash below)
  uint64_t payload_checksum; //  96: checksum64 of the layer-check array (checksums or tags)
  uint64_t entry_bytes;      // 104: payload_offset + payload_bytes, rounded up to the writer's alignment
  uint64_t reserved1;        // 112: zero
  uint64_t header_checksum;  // 120: checksum64 of bytes [0,120) ‖ everything up to meta_bytes
};
static_assert(sizeof(ChunkHeader) == 128, "ChunkHeader is part of the on-disk format");

struct ChunkEntryLayout {
  uint32_t meta_bytes = 0;
  uint32_t payload_offset = 0;
  uint64_t payload_bytes = 0;
  uint64_t entry_bytes = 0;
};
// Where things go in an entry of n pages written with g.codec; payload_offset and entry_bytes are
// multiples of `align` (4096 on disk so payload and layers can be read with O_DIRECT; 1 for packed values).
// `authenticated`: the layout of an entry written with a ChunkAuth.
ChunkEntryLayout chunk_entry_layout(const ChunkGeometry& g, uint32_t n_pages, size_t align, bool authenticated = false);

uint64_t layer_checksum(const std::byte* data, size_t len, uint32_t layer);

// Writes a complete entry into `out` (size >= layout.entry_bytes). The
// payload is the RAW layer-major payload with page_hashes.size() pages,
// encoded with g.codec on the way; the key must be the last page hash.
// With `auth` the entry is authenticated (its layout is
// chunk_entry_layout(..., true)). InvalidArgument for NaN/Inf KV under a lossy codec.
Status encode_chunk_entry(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                          std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out,
                          const ChunkAuth* auth = nullptr);
// The same entry without copying the payload: writes only bytes
// [0, layout.payload_offset) into `out` (size >= payload_offset). Here
// `payload` is the STORED payload (encode_chunk_payload's output, or the raw
// payload when g.codec is kNone). The entry
// is then `out` followed by `payload` and layout.entry_bytes -
// payload_offset - payload.size() zero bytes, which lets a writer send it as
// a gather list (one remote SET) instead of assembling a copy.
Status encode_chunk_meta(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                         std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out,
                         const ChunkAuth* auth = nullptr);

// The raw layer-major payload of n pages → its stored form under g.codec
// (out.size() == g.stored_payload_bytes(n, g.codec)).
Status encode_chunk_payload(const ChunkGeometry& g, uint32_t n_pages, std::span<const std::byte> raw, std::span<std::byte> out);

// The verified metadata of an entry.
struct ChunkMeta {
  ChunkHeader header{};
  ChunkKey key;
  std::vector<PageHash> page_hashes;
  std::vector<uint64_t> layer_checksums;  // unauthenticated entries
  std::vector<LayerTag> layer_tags;       // authenticated entries
  ChunkNonce nonce{};
  EntryTag entry_tag{};

  bool authenticated() const { return (header.flags & kChunkFlagAuthenticated) != 0; }
  uint32_t num_layers() const { return header.num_layers; }
  KvCodec codec() const { return static_cast<KvCodec>(header.codec); }
};

// Bytes to read before decode_chunk_meta can succeed, from the fixed header alone (0 when it is not an entry).
size_t chunk_meta_bytes_from_header(std::span<const std::byte> first_128);
// Parses and verifies (magic, version, sizes, header checksum, geometry ==
// `expect`) the metadata at the start of `entry`. kCorruption when anything
// is off; kInvalidArgument when the geometry is valid but differs. This is
// integrity, not authenticity: authenticate_chunk_meta comes next.
Result<ChunkMeta> decode_chunk_meta(std::span<const std::byte> entry, const ChunkGeometry& expect);
// With `auth`: OK only for an authenticated entry whose entry tag verifies
// over `meta_bytes` (the first header.meta_bytes bytes of the entry).
// Without: OK only for an unauthenticated entry. Else kCorruption — a
// forged entry, or one written under another secret (or none).
Status authenticate_chunk_meta(const ChunkMeta& meta, std::span<const std::byte> meta_bytes, const ChunkAuth* auth);
// Decodes an entry held whole in one buffer (a remote value, packed or
// aligned): the metadata as decode_chunk_meta, and the buffer must hold the
// whole payload (kCorruption when it ends before). The layers are then
// verified with verify_chunk_layers over
// value.subspan(header.payload_offset, header.payload_bytes).
Result<ChunkMeta> decode_chunk_value(std::span<const std::byte> value, const ChunkGeometry& expect);
// Verifies stored layers [first, first+count) held contiguously in `layers`: their
// checksums, or for an authenticated entry their tags under `auth`
// (kCorruption without it).
Status verify_chunk_layers(const ChunkMeta& meta, const ChunkGeometry& g, uint32_t first, uint32_t count,
                           std::span<const std::byte> layers, const ChunkAuth* auth = nullptr);
// `count` verified stored layers of an entry of `codec` with n pages → raw
// layers in `out` (count * g.layer_bytes(n) bytes): a copy, or the codec's decode.
Status decode_chunk_layers(KvCodec codec, const ChunkGeometry& g, uint32_t n_pages, uint32_t count,
                           std::span<const std::byte> stored, std::span<std::byte> out);
// The same straight into the caller's pages (no staging copy): stored layer
// i, i.e. layer first_layer + i, of page p lands at pages[p] + (first_layer +
// i) * g.kv.layer_slice_bytes(); n_pages = pages.size().
Status decode_chunk_layers_to_pages(KvCodec codec, const ChunkGeometry& g, uint32_t first_layer, uint32_t count,
                                    std::span<const std::byte> stored, std::span<std::byte* const> pages);
// The mixed-entry rule: a reader whose tiers are all exact (`accept_lossy`
// false) never serves a lossy entry: kNotFound ("refused"), which callers
// count as TierStats::lossy_refused. Entries of codec none are always served.
Status accept_chunk_codec(KvCodec codec, bool accept_lossy);

}  // namespace kvtier
