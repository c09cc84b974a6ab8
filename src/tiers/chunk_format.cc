#include "tiers/chunk_format.h"

#include <bit>
#include <cstring>
#include <optional>
#include <vector>

#include "common/page_hash.h"

namespace kvtier {

static_assert(std::endian::native == std::endian::little, "the entry format is little-endian; add byte swaps first");

Status ChunkGeometry::validate() const {
  KVTIER_RETURN_IF_ERROR(kv.validate());
  if (chunk_pages == 0 || chunk_pages > 4096) return Status::InvalidArgument("chunk_pages must be in 1..4096");
  return kv_codec_check(codec, kv);
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

ChunkEntryLayout chunk_entry_layout(const ChunkGeometry& g, uint32_t n_pages, size_t align, bool authenticated) {
  ChunkEntryLayout out;
  const size_t checks = authenticated ? g.kv.num_layers * kChunkLayerTagBytes + kChunkNonceBytes + kChunkEntryTagBytes
                                      : g.kv.num_layers * 8;
  out.meta_bytes = static_cast<uint32_t>(sizeof(ChunkHeader) + n_pages * 16 + checks);
  out.payload_offset = static_cast<uint32_t>((out.meta_bytes + align - 1) / align * align);
  out.payload_bytes = g.stored_payload_bytes(n_pages, g.codec);
  out.entry_bytes = (out.payload_offset + out.payload_bytes + align - 1) / align * align;
  return out;
}

uint64_t layer_checksum(const std::byte* data, size_t len, uint32_t layer) {
  // Seeding with the layer index makes two swapped layers fail verification.
  return checksum64(data, len, 0x6B7674696572ull + layer);
}

namespace {

uint64_t header_checksum_of(std::span<const std::byte> meta) {
  // Bytes [0,120) then everything after the header (hashes, layer checks, nonce, entry tag).
  uint64_t a = checksum64(meta.data(), offsetof(ChunkHeader, header_checksum));
  return checksum64(meta.data() + sizeof(ChunkHeader), meta.size() - sizeof(ChunkHeader), a);
}

// The entry tag covers the metadata but its own bytes and header_checksum.
EntryTag entry_tag_of(const ChunkAuth& auth, std::span<const std::byte> meta) {
  const std::span<const std::byte> parts[] = {
      meta.first(offsetof(ChunkHeader, header_checksum)),
      meta.subspan(sizeof(ChunkHeader), meta.size() - sizeof(ChunkHeader) - kChunkEntryTagBytes)};
  return auth.entry_tag(parts);
}

ChunkHeader make_header(const ChunkGeometry& g, const ChunkKey& key, uint32_t n, uint64_t sequence,
                        const ChunkEntryLayout& lay, bool authenticated) {
  ChunkHeader h{};
  h.magic = kChunkMagic;
  h.version = kChunkFormatVersion;
  h.header_bytes = sizeof(ChunkHeader);
  h.flags = kChunkFlagLayerMajor | (authenticated ? kChunkFlagAuthenticated : 0u);
  h.num_pages = n;
  h.num_layers = g.kv.num_layers;
  h.num_kv_heads = g.kv.num_kv_heads;
  h.head_dim = g.kv.head_dim;
  h.page_tokens = g.kv.page_tokens;
  h.dtype = static_cast<uint8_t>(g.kv.dtype);
  h.codec = static_cast<uint8_t>(g.codec);
  h.meta_bytes = lay.meta_bytes;
  h.payload_offset = lay.payload_offset;
  h.payload_bytes = lay.payload_bytes;
  h.sequence = sequence;
  h.ns_lo = key.ns.lo;
  h.ns_hi = key.ns.hi;
  h.key_lo = key.hash.lo;
  h.key_hi = key.hash.hi;
  h.entry_bytes = lay.entry_bytes;
  return h;
}

// The entry's metadata into `out`, from the layer checks already computed
// (8-byte checksums, or 16-byte tags when `auth`); the arguments were checked.
void write_chunk_meta(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                      std::span<const std::byte> checks, uint64_t sequence, const ChunkEntryLayout& lay, std::byte* out,
                      const ChunkAuth* auth, const ChunkNonce& nonce) {
  const uint32_t n = static_cast<uint32_t>(page_hashes.size());
  ChunkHeader h = make_header(g, key, n, sequence, lay, auth != nullptr);
  std::byte* hashes = out + sizeof(ChunkHeader);
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(hashes + i * 16, &page_hashes[i].lo, 8);
    std::memcpy(hashes + i * 16 + 8, &page_hashes[i].hi, 8);
  }
  std::byte* sums = hashes + n * 16;
  std::memcpy(sums, checks.data(), checks.size());
  h.payload_checksum = checksum64(sums, checks.size());
  std::memcpy(out, &h, sizeof h);
  std::memset(out + lay.meta_bytes, 0, lay.payload_offset - lay.meta_bytes);
  const std::span<std::byte> meta(out, lay.meta_bytes);
  if (auth) {
    std::memcpy(sums + checks.size(), nonce.data(), nonce.size());
    const EntryTag tag = entry_tag_of(*auth, meta);
    std::memcpy(out + lay.meta_bytes - tag.size(), tag.data(), tag.size());
  }
  h.header_checksum = header_checksum_of(meta);
  std::memcpy(out + offsetof(ChunkHeader, header_checksum), &h.header_checksum, 8);
}

// Appends layer `l`'s check (checksum, or tag under `tagger`) to `checks`.
Status append_layer_check(const std::byte* layer, size_t len, uint32_t l, ChunkAuth::LayerTagger* tagger,
                          std::vector<std::byte>& checks) {
  if (!tagger) {
    const uint64_t sum = layer_checksum(layer, len, l);
    const auto* b = reinterpret_cast<const std::byte*>(&sum);
    checks.insert(checks.end(), b, b + sizeof sum);
    return Status::Ok();
  }
  KVTIER_ASSIGN_OR_RETURN(LayerTag t, tagger->tag(l, {layer, len}));
  const auto* b = reinterpret_cast<const std::byte*>(t.data());
  checks.insert(checks.end(), b, b + t.size());
  return Status::Ok();
}

// Encodes the entry's metadata, and its payload too when `with_payload`.
// With the payload, each layer is copied (or encoded), then checksummed (or
// tagged) from the copy while it is still in cache: one pass over the
// caller's payload, not two. With the payload it is raw; without, stored.
Status encode_chunk(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                    std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out,
                    bool with_payload, const ChunkAuth* auth) {
  const uint32_t n = static_cast<uint32_t>(page_hashes.size());
  if (n == 0 || n > g.chunk_pages) return Status::InvalidArgument("chunk must hold 1..chunk_pages pages");
  if (page_hashes.back() != key.hash) return Status::InvalidArgument("chunk key must be the hash of its last page");
  const size_t raw_lb = g.layer_bytes(n), lb = g.stored_layer_bytes(n, g.codec);
  if (payload.size() != (with_payload ? raw_lb : lb) * g.kv.num_layers)
    return Status::InvalidArgument("chunk payload size does not match its pages");
  const ChunkEntryLayout lay = chunk_entry_layout(g, n, align, auth != nullptr);
  if (out.size() < (with_payload ? lay.entry_bytes : lay.payload_offset)) return Status::InvalidArgument("entry buffer too small");
  ChunkNonce nonce{};
  std::optional<ChunkAuth::LayerTagger> tagger;
  if (auth) {
    KVTIER_ASSIGN_OR_RETURN(nonce, ChunkAuth::new_nonce());
    KVTIER_ASSIGN_OR_RETURN(auto t, auth->layer_tagger(key.ns, key.hash, nonce));
    tagger.emplace(std::move(t));
  }
  std::byte* dst = out.data() + lay.payload_offset;
  std::vector<std::byte> checks;
  checks.reserve(g.kv.num_layers * kChunkLayerTagBytes);
  for (uint32_t l = 0; l < g.kv.num_layers; ++l) {
    const std::byte* layer = payload.data() + l * (with_payload ? raw_lb : lb);
    if (with_payload && g.codec == KvCodec::kNone) {
      layer = static_cast<const std::byte*>(std::memcpy(dst + l * lb, layer, lb));
    } else if (with_payload) {
      KVTIER_RETURN_IF_ERROR(kv_encode_layer(g.codec, g.kv, n, {layer, raw_lb}, {dst + l * lb, lb}));
      layer = dst + l * lb;
    }
    KVTIER_RETURN_IF_ERROR(append_layer_check(layer, lb, l, tagger ? &*tagger : nullptr, checks));
  }
  if (with_payload) std::memset(dst + lay.payload_bytes, 0, lay.entry_bytes - lay.payload_offset - lay.payload_bytes);
  write_chunk_meta(g, key, page_hashes, checks, sequence, lay, out.data(), auth, nonce);
  return Status::Ok();
}

}  // namespace

Status encode_chunk_meta(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                         std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out,
                         const ChunkAuth* auth) {
  return encode_chunk(g, key, page_hashes, payload, sequence, align, out, /*with_payload=*/false, auth);
}

Status encode_chunk_entry(const ChunkGeometry& g, const ChunkKey& key, std::span<const PageHash> page_hashes,
                          std::span<const std::byte> payload, uint64_t sequence, size_t align, std::span<std::byte> out,
                          const ChunkAuth* auth) {
  return encode_chunk(g, key, page_hashes, payload, sequence, align, out, /*with_payload=*/true, auth);
}

Status encode_chunk_payload(const ChunkGeometry& g, uint32_t n, std::span<const std::byte> raw, std::span<std::byte> out) {
  const size_t raw_lb = g.layer_bytes(n), lb = g.stored_layer_bytes(n, g.codec);
  if (raw.size() != raw_lb * g.kv.num_layers || out.size() != lb * g.kv.num_layers)
    return Status::InvalidArgument("encode_chunk_payload: buffer sizes do not match the chunk");
  if (g.codec == KvCodec::kNone) {
    std::memcpy(out.data(), raw.data(), raw.size());
    return Status::Ok();
  }
  for (uint32_t l = 0; l < g.kv.num_layers; ++l)
    KVTIER_RETURN_IF_ERROR(kv_encode_layer(g.codec, g.kv, n, raw.subspan(l * raw_lb, raw_lb), out.subspan(l * lb, lb)));
  return Status::Ok();
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
  const bool authenticated = (h.flags & kChunkFlagAuthenticated) != 0;
  const size_t checks = authenticated ? size_t(h.num_layers) * kChunkLayerTagBytes : size_t(h.num_layers) * 8;
  const size_t meta = sizeof(ChunkHeader) + size_t(h.num_pages) * 16 + checks +
                      (authenticated ? kChunkNonceBytes + kChunkEntryTagBytes : 0);
  if (h.meta_bytes != meta) return Status::Corruption("chunk meta size mismatch");
  if (entry.size() < meta) return Status::Corruption("chunk entry truncated inside its metadata");
  if (header_checksum_of(entry.first(meta)) != h.header_checksum) return Status::Corruption("chunk header checksum mismatch");
  // From here on the header is what its writer wrote.
  KVGeometry g{h.num_layers, h.num_kv_heads, h.head_dim, static_cast<DType>(h.dtype), h.page_tokens};
  if (!(g == expect.kv)) return Status::InvalidArgument("chunk geometry differs from the tier's");
  const auto codec = static_cast<KvCodec>(h.codec);
  if (!kv_codec_check(codec, g).ok() || h.reserved0[0] != 0 || h.reserved0[1] != 0)
    return Status::Corruption("chunk codec unknown or unusable for its geometry");
  if (h.num_pages > expect.chunk_pages || h.payload_bytes != expect.stored_payload_bytes(h.num_pages, codec) ||
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
  const std::byte* sp = hp + h.num_pages * 16;
  if (checksum64(sp, checks) != h.payload_checksum) return Status::Corruption("chunk payload checksum mismatch");
  if (!authenticated) {
    m.layer_checksums.resize(h.num_layers);
    std::memcpy(m.layer_checksums.data(), sp, checks);
    return m;
  }
  m.layer_tags.resize(h.num_layers);
  std::memcpy(m.layer_tags.data(), sp, checks);
  std::memcpy(m.nonce.data(), sp + checks, kChunkNonceBytes);
  std::memcpy(m.entry_tag.data(), sp + checks + kChunkNonceBytes, kChunkEntryTagBytes);
  return m;
}

Status authenticate_chunk_meta(const ChunkMeta& meta, std::span<const std::byte> meta_bytes, const ChunkAuth* auth) {
  if (!auth)
    return meta.authenticated() ? Status::Corruption("chunk entry is authenticated with a tier secret this reader does not hold")
                                : Status::Ok();
  if (!meta.authenticated()) return Status::Corruption("chunk entry is not authenticated (written without the tier secret)");
  if (meta_bytes.size() < meta.header.meta_bytes) return Status::InvalidArgument("authenticate: metadata bytes missing");
  const EntryTag want = entry_tag_of(*auth, meta_bytes.first(meta.header.meta_bytes));
  if (!tags_equal(want, meta.entry_tag))
    return Status::Corruption("chunk entry tag mismatch (forged, or written under another tier secret)");
  return Status::Ok();
}

Result<ChunkMeta> decode_chunk_value(std::span<const std::byte> value, const ChunkGeometry& expect) {
  KVTIER_ASSIGN_OR_RETURN(ChunkMeta m, decode_chunk_meta(value, expect));
  // decode_chunk_meta bounds payload_bytes by the geometry: the sum cannot overflow.
  if (value.size() < uint64_t(m.header.payload_offset) + m.header.payload_bytes)
    return Status::Corruption("chunk value truncated inside its payload");
  return m;
}

Status verify_chunk_layers(const ChunkMeta& meta, const ChunkGeometry& g, uint32_t first, uint32_t count,
                           std::span<const std::byte> layers, const ChunkAuth* auth) {
  const uint32_t n = meta.header.num_pages;
  const size_t lb = g.stored_layer_bytes(n, meta.codec());
  const size_t L = meta.authenticated() ? meta.layer_tags.size() : meta.layer_checksums.size();
  if (first > L || count > L - first || layers.size() < count * lb) return Status::InvalidArgument("layer range outside the chunk");
  if (auth && !meta.authenticated()) return Status::Corruption("chunk entry is not authenticated (written without the tier secret)");
  if (meta.authenticated()) {
    if (!auth) return Status::Corruption("chunk entry is authenticated with a tier secret this reader does not hold");
    KVTIER_ASSIGN_OR_RETURN(auto tagger, auth->layer_tagger(meta.key.ns, meta.key.hash, meta.nonce));
    for (uint32_t i = 0; i < count; ++i) {
      KVTIER_ASSIGN_OR_RETURN(LayerTag t, tagger.tag(first + i, layers.subspan(i * lb, lb)));
      if (!tags_equal(t, meta.layer_tags[first + i]))
        return Status::Corruption("chunk layer " + std::to_string(first + i) + " tag mismatch (forged or corrupt)");
    }
    return Status::Ok();
  }
  for (uint32_t i = 0; i < count; ++i)
    if (layer_checksum(layers.data() + i * lb, lb, first + i) != meta.layer_checksums[first + i])
      return Status::Corruption("chunk layer " + std::to_string(first + i) + " checksum mismatch");
  return Status::Ok();
}

Status decode_chunk_layers(KvCodec codec, const ChunkGeometry& g, uint32_t n, uint32_t count,
                           std::span<const std::byte> stored, std::span<std::byte> out) {
  const size_t raw_lb = g.layer_bytes(n), lb = g.stored_layer_bytes(n, codec);
  if (stored.size() < count * lb || out.size() < count * raw_lb)
    return Status::InvalidArgument("decode_chunk_layers: buffers smaller than the layers");
  if (codec == KvCodec::kNone) {
    std::memcpy(out.data(), stored.data(), count * lb);
    return Status::Ok();
  }
  for (uint32_t i = 0; i < count; ++i)
    KVTIER_RETURN_IF_ERROR(kv_decode_layer(codec, g.kv, n, stored.subspan(i * lb, lb), out.subspan(i * raw_lb, raw_lb)));
  return Status::Ok();
}

Status decode_chunk_layers_to_pages(KvCodec codec, const ChunkGeometry& g, uint32_t first_layer, uint32_t count,
                                    std::span<const std::byte> stored, std::span<std::byte* const> pages) {
  const uint32_t n = static_cast<uint32_t>(pages.size());
  const size_t lb = g.stored_layer_bytes(n, codec), slice = g.kv.layer_slice_bytes();
  if (n == 0 || first_layer + count > g.kv.num_layers || stored.size() < count * lb)
    return Status::InvalidArgument("decode_chunk_layers_to_pages: no pages, layers past the last, or too few bytes");
  std::vector<std::byte*> layer(n);
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t p = 0; p < n; ++p) layer[p] = pages[p] + size_t(first_layer + i) * slice;
    KVTIER_RETURN_IF_ERROR(kv_decode_layer_pages(codec, g.kv, stored.subspan(i * lb, lb), layer));
  }
  return Status::Ok();
}

Status accept_chunk_codec(KvCodec codec, bool accept_lossy) {
  if (!kv_codec_lossy(codec) || accept_lossy) return Status::Ok();
  return Status::NotFound(std::string("lossy entry (codec ") + std::string(kv_codec_name(codec)) +
                          ") refused: every codec of this cache is none, so it serves exact KV only");
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
