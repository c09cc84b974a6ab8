#include "tiers/chunk_format.h"

#include <bit>
#include <cstring>

#include "common/page_hash.h"

namespace kvtier {

static_assert(std::endian::native == std::endian::little, "the entry format is little-endian; add byte swaps first");

Status ChunkGeometry::validate() const {
  KVTIER_RETURN_IF_ERROR(kv.validate());
  if (chunk_pages == 0 || chunk_pages > 4096) return Status::InvalidArgument("chunk_pages must be in 1..4096");
  return Status::Ok();
}

namespace {

// The slice moves of gather_pages / scatter_layers, one f(dst, src, bytes) each.
template <class F>
void each_gather_slice(const KVGeometry& g, std::span<const std::byte* const> pages, std::byte* chunk, F&& f) {
  const size_t s = g.layer_slice_bytes();
  for (uint32_t l = 0; l < g.num_layers; ++l)
    for (size_t p = 0; p < pages.size(); ++p) f(chunk + (l * pages.size() + p) * s, pages[p] + l * s, s);
}

template <class F>
void each_scatter_slice(const KVGeometry& g, const std::byte* layers, uint32_t first, uint32_t count,
                        std::span<std::byte* const> pages, F&& f) {
  const size_t s = g.layer_slice_bytes();
  for (uint32_t i = 0; i < count; ++i)
    for (size_t p = 0; p < pages.size(); ++p) f(pages[p] + (first + i) * s, layers + (i * pages.size() + p) * s, s);
}

void host_copy(std::byte* dst, const std::byte* src, size_t n) { std::memcpy(dst, src, n); }

}  // namespace

void gather_pages(const KVGeometry& g, std::span<const std::byte* const> pages, std::byte* chunk) {
  each_gather_slice(g, pages, chunk, host_copy);
}

void scatter_layers(const KVGeometry& g, const std::byte* layers, uint32_t first, uint32_t count,
                    std::span<std::byte* const> pages) {
  each_scatter_slice(g, layers, first, count, pages, host_copy);
}

void gather_copies(const KVGeometry& g, std::span<const std::byte* const> pages, std::byte* chunk,
                   std::vector<ByteCopy>& out) {
  each_gather_slice(g, pages, chunk, [&](std::byte* d, const std::byte* s, size_t n) { out.push_back({d, s, n}); });
}

void scatter_copies(const KVGeometry& g, const std::byte* layers, uint32_t first, uint32_t count,
                    std::span<std::byte* const> pages, std::vector<ByteCopy>& out) {
  each_scatter_slice(g, layers, first, count, pages,
                     [&](std::byte* d, const std::byte* s, size_t n) { out.push_back({d, s, n}); });
}

ChunkEntryLayout chunk_entry_layout(const ChunkGeometry& g, uint32_t n_pages, size_t align) {
  ChunkEntryLayout out;
  out.meta_bytes = static_cast<uint32_t>(sizeof(ChunkHeader) + n_pages * 16 + g.kv.num_layers * 8);
  out.payload_offset = static_cast<uint32_t>((out.meta_bytes + align - 1) / align * align);
  out.payload_bytes = g.payload_bytes(n_pages);
  out.entry_bytes = (out.payload_offset + out.payload_bytes + align - 1) / align * align;
  return out;
}

uint64_t layer_checksum(const std::byte* data, size_t len, uint32_t layer) {
  // Seeding with the layer index makes two swapped layers fail verification.
  return checksum64(data, len, 0x6B7674696572ull + layer);
}

namespace {

uint64_t header_checksum_of(std::span<const std::byte> meta) {
  // Bytes [0,120) then everything after the header (hashes, layer checksums).
  uint64_t a = checksum64(meta.data(), offsetof(ChunkHeader, header_checksum));
  return checksum64(meta.data() + sizeof(ChunkHeader), meta.size() - sizeof(ChunkHeader), a);
}

// The entry's metadata (header, page hashes, layer checksums) into `out`,
// from layer checksums already computed; the arguments were checked.
void write_chunk_meta(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                      std::span<const uint64_t> layer_sums, uint64_t sequence, const ChunkEntryLayout& lay, std::byte* out) {
  const uint32_t n = static_cast<uint32_t>(page_hashes.size());

  ChunkHeader h{};
  h.magic = kChunkMagic;
  h.version = kChunkFormatVersion;
  h.header_bytes = sizeof(ChunkHeader);
  h.flags = kChunkFlagLayerMajor;
  h.num_pages = n;
  h.num_layers = g.kv.num_layers;
  h.num_kv_heads = g.kv.num_kv_heads;
  h.head_dim = g.kv.head_dim;
  h.page_tokens = g.kv.page_tokens;
  h.dtype = static_cast<uint8_t>(g.kv.dtype);
  h.meta_bytes = lay.meta_bytes;
  h.payload_offset = lay.payload_offset;
  h.payload_bytes = lay.payload_bytes;
  h.sequence = sequence;
  h.ns_lo = key.ns.lo;
  h.ns_hi = key.ns.hi;
  h.key_lo = key.hash.lo;
  h.key_hi = key.hash.hi;
  h.entry_bytes = lay.entry_bytes;

  std::byte* p = out;
  std::byte* hashes = p + sizeof(ChunkHeader);
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(hashes + i * 16, &page_hashes[i].lo, 8);
    std::memcpy(hashes + i * 16 + 8, &page_hashes[i].hi, 8);
  }
  std::byte* sums = hashes + n * 16;
  std::memcpy(sums, layer_sums.data(), g.kv.num_layers * 8);
  h.payload_checksum = checksum64(sums, g.kv.num_layers * 8);
  std::memcpy(p, &h, sizeof h);
  std::memset(p + lay.meta_bytes, 0, lay.payload_offset - lay.meta_bytes);
  h.header_checksum = header_checksum_of({p, lay.meta_bytes});
  std::memcpy(p + offsetof(ChunkHeader, header_checksum), &h.header_checksum, 8);
}

// Encodes the entry's metadata, and its payload too when `with_payload`.
// With the payload, each layer is copied, then checksummed from the copy
// while it is still in cache: one pass over the caller's payload, not two.
Status encode_chunk(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                    std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out,
                    bool with_payload) {
  const uint32_t n = static_cast<uint32_t>(page_hashes.size());
  if (n == 0 || n > g.chunk_pages) return Status::InvalidArgument("chunk must hold 1..chunk_pages pages");
  if (page_hashes.back() != key.hash) return Status::InvalidArgument("chunk key must be the hash of its last page");
  if (payload.size() != g.payload_bytes(n)) return Status::InvalidArgument("chunk payload size does not match its pages");
  const ChunkEntryLayout lay = chunk_entry_layout(g, n, align);
  if (out.size() < (with_payload ? lay.entry_bytes : lay.payload_offset)) return Status::InvalidArgument("entry buffer too small");
  std::byte* dst = out.data() + lay.payload_offset;
  const size_t lb = g.layer_bytes(n);
  std::vector<uint64_t> sums(g.kv.num_layers);
  for (uint32_t l = 0; l < g.kv.num_layers; ++l) {
    const std::byte* layer = payload.data() + l * lb;
    if (with_payload) layer = static_cast<const std::byte*>(std::memcpy(dst + l * lb, layer, lb));
    sums[l] = layer_checksum(layer, lb, l);
  }
  if (with_payload) std::memset(dst + payload.size(), 0, lay.entry_bytes - lay.payload_offset - payload.size());
  write_chunk_meta(g, key, page_hashes, sums, sequence, lay, out.data());
  return Status::Ok();
}

}  // namespace

Status encode_chunk_meta(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                         std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out) {
  return encode_chunk(g, key, page_hashes, payload, sequence, align, out, /*with_payload=*/false);
}

Status encode_chunk_entry(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                          std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out) {
  return encode_chunk(g, key, page_hashes, payload, sequence, align, out, /*with_payload=*/true);
}

size_t chunk_meta_bytes_from_header(std::span<const std::byte> first) {
  if (first.size() < sizeof(ChunkHeader)) return 0;
  ChunkHeader h;
  std::memcpy(&h, first.data(), sizeof h);
  if (h.magic != kChunkMagic || h.header_bytes != sizeof(ChunkHeader)) return 0;
  return h.meta_bytes;
}

Result<ChunkMeta> decode_chunk_meta(std::span<const std::byte> entry, const ChunkGeometry& expect) {
  if (entry.size() < sizeof(ChunkHeader)) return Status::Corruption("chunk entry shorter than its header");
  ChunkMeta m;
  ChunkHeader& h = m.header;
  std::memcpy(&h, entry.data(), sizeof h);
  if (h.magic != kChunkMagic) return Status::Corruption("bad chunk magic");
  if (h.version != kChunkFormatVersion) return Status::Corruption("unsupported chunk format version " + std::to_string(h.version));
  if (h.header_bytes != sizeof(ChunkHeader) || h.num_pages == 0 || h.num_pages > 4096 || h.num_layers == 0 ||
      h.num_layers > 4096)
    return Status::Corruption("chunk header sizes out of range");
  const size_t meta = sizeof(ChunkHeader) + size_t(h.num_pages) * 16 + size_t(h.num_layers) * 8;
  if (h.meta_bytes != meta) return Status::Corruption("chunk meta size mismatch");
  if (entry.size() < meta) return Status::Corruption("chunk entry truncated inside its metadata");
  if (header_checksum_of(entry.first(meta)) != h.header_checksum) return Status::Corruption("chunk header checksum mismatch");
  // From here on the header is what its writer wrote.
  KVGeometry g{h.num_layers, h.num_kv_heads, h.head_dim, static_cast<DType>(h.dtype), h.page_tokens};
  if (!(g == expect.kv)) return Status::InvalidArgument("chunk geometry differs from the tier's");
  if (h.num_pages > expect.chunk_pages || h.payload_bytes != expect.payload_bytes(h.num_pages) ||
      h.payload_offset < meta || h.entry_bytes < h.payload_offset + h.payload_bytes || (h.flags & kChunkFlagLayerMajor) == 0)
    return Status::Corruption("chunk layout fields inconsistent");
  m.key.ns = {h.ns_lo, h.ns_hi};
  m.key.hash = {h.key_lo, h.key_hi};
  m.page_hashes.resize(h.num_pages);
  const std::byte* hp = entry.data() + sizeof(ChunkHeader);
  for (uint32_t i = 0; i < h.num_pages; ++i) {
    std::memcpy(&m.page_hashes[i].lo, hp + i * 16, 8);
    std::memcpy(&m.page_hashes[i].hi, hp + i * 16 + 8, 8);
  }
  if (m.page_hashes.back() != m.key.hash) return Status::Corruption("chunk key is not its last page hash");
  m.layer_checksums.resize(h.num_layers);
  const std::byte* sp = hp + h.num_pages * 16;
  std::memcpy(m.layer_checksums.data(), sp, h.num_layers * 8);
  if (checksum64(sp, h.num_layers * 8) != h.payload_checksum) return Status::Corruption("chunk payload checksum mismatch");
  return m;
}

Result<ChunkMeta> decode_chunk_value(std::span<const std::byte> value, const ChunkGeometry& expect) {
  KVTIER_ASSIGN_OR_RETURN(ChunkMeta m, decode_chunk_meta(value, expect));
  // decode_chunk_meta bounds payload_bytes by the geometry: the sum cannot overflow.
  if (value.size() < uint64_t(m.header.payload_offset) + m.header.payload_bytes)
    return Status::Corruption("chunk value truncated inside its payload");
  return m;
}

Status verify_chunk_layers(const ChunkMeta& meta, const ChunkGeometry& g, uint32_t first, uint32_t count,
                           std::span<const std::byte> layers) {
  const uint32_t n = meta.header.num_pages;
  const size_t lb = g.layer_bytes(n);
  if (first > meta.layer_checksums.size() || count > meta.layer_checksums.size() - first || layers.size() < count * lb)
    return Status::InvalidArgument("layer range outside the chunk");
  for (uint32_t i = 0; i < count; ++i)
    if (layer_checksum(layers.data() + i * lb, lb, first + i) != meta.layer_checksums[first + i])
      return Status::Corruption("chunk layer " + std::to_string(first + i) + " checksum mismatch");
  return Status::Ok();
}

}  // namespace kvtier

#include "tiers/tier.h"

namespace kvtier {

Status resolve_get_range(const ChunkGeometry& g, uint32_t n_pages, GetOp& op) {
  const uint32_t L = g.kv.num_layers;
  if (op.num_layers == kAllLayers) {
    if (op.first_layer >= L) return Status::OutOfRange("first_layer beyond the last layer");
    op.num_layers = L - op.first_layer;
  }
  if (op.num_layers == 0 || op.first_layer >= L || op.num_layers > L - op.first_layer)
    return Status::OutOfRange("layer range outside the chunk");
  if (op.out.size() < op.num_layers * g.layer_bytes(n_pages))
    return Status::InvalidArgument("get buffer too small for the requested layers");
  return Status::Ok();
}

Status validate_put(const ChunkGeometry& g, const PutOp& op) {
  const size_t n = op.page_hashes.size();
  if (n == 0 || n > g.chunk_pages) return Status::InvalidArgument("chunk must hold 1..chunk_pages pages");
  if (op.page_hashes.back() != op.key.hash) return Status::InvalidArgument("chunk key must be the hash of its last page");
  if (op.payload.size() != g.payload_bytes(static_cast<uint32_t>(n)))
    return Status::InvalidArgument("chunk payload size does not match its pages");
  return Status::Ok();
}

}  // namespace kvtier
