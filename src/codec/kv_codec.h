// KV codecs: lossy compression of one layer of a chunk for the lower tiers.
//
// A codec turns one LAYER of an n-page chunk — the raw bytes
//   [page][k|v][page_tokens][num_kv_heads][head_dim] of g.dtype
// (g.layer_slice_bytes() * n_pages bytes, see tiers/chunk_format.h) — into
// its encoded form and back. `none` is the identity; `q8` and `q4` are
// lossy (kv_codec_lossy) and need head_dim % 32 == 0 (kv_codec_check), as
// do k16v8 and k8v4 (below); f16 takes any head_dim.
// All functions are pure and thread-safe; the caller owns every buffer.
// Encoded bytes are part of the on-disk and on-wire formats: the enum values
// and the layouts below must not change without a format version bump.
//
// Notation: R = num_kv_heads * head_dim (values of one K or V row of a
// token), T = n_pages * page_tokens (tokens of the layer slice),
// N = 2 * T * R (values of the layer). f16 = IEEE binary16, little-endian;
// all roundings are to nearest, ties to even.
//
// q8 (q8_0 of ggml, scales separated from the quants): the N values are
// taken in raw order, blocks of 32 consecutive values (a block never crosses
// a head, as 32 | head_dim). Block b has amax = max |x|, scale
// d = f16(amax / 127) and quants q[i] = clamp(round(x[i] / d), -127, 127);
// it decodes as q[i] * d. Encoded layout, N/32 * 34 bytes (8.5 bits/value):
//   [N/32 f16 scales, block order][N int8 quants, raw value order]
//
// q4 (4.5 bits/value; keys per channel, values per token, as KIVI does —
// real keys have outlier channels that would blow up a per-token scale):
// the layer is two sections, K then V, each N/2 values of T rows of R:
//   section = [T*R/32 f16 scales][T*R/2 bytes of nibbles, row (token) order]
// Row t (t = page * page_tokens + token) of a section is one token's K (or
// V) row. Its nibbles: R/32 runs of 16 bytes; byte j of run r holds value
// r*32+j in the low nibble and r*32+j+16 in the high one, each stored as
// q + 8 (q in [-8, 7]). Scales:
//  * V rows, and the last T % 32 K rows ("tail"): per token, 32 values
//    along the row: row t's run r uses scale entry t*R/32 + r.
//  * K rows of group g = [32g, 32g+32), for g < T/32: per channel, 32
//    tokens: channel c of those rows uses scale entry g*R + c (the group's R
//    scales take the place of its 32 rows' per-token scales).
// A group of values (block or channel group) has m = its value of largest
// magnitude (the positive one on a tie), d = f16(m / -8) and
// q = clamp(round(x / d), -8, 7); it decodes as q * d. Section size
// T*R*9/16 bytes, so the layer is N*9/16 bytes.
//
// k16v8 and k8v4 (mixed precision: keys keep more bits than values). On a
// trained model a key's rounding error moves attention about 25x as much as
// the same error in a value (docs/PERF.md, issue 32), so bits spent on keys
// buy more than bits spent on values. Both are two sections, K then V, each
// of T rows of R values in row (token) order, each section in one of:
//   f16: [T*R f16]                                            (k16v8's keys)
//   q8:  [T*R/32 f16 scales][T*R int8], blocks of 32 along the row, as q8
//        (k16v8's values, k8v4's keys)
//   q4:  q4's per-token section, as q4's V section            (k8v4's values)
// k16v8 is 12.25 bits/value (2.6x smaller than f32, 1.3x than f16); k8v4
// 6.5 bits/value (2.5x smaller than f16).
//
// f16: two f16 sections, K then V (16 bits/value, any head_dim): what most
// engines keep their KV cache in. It halves an f32 pool's entries (the
// server's default pool) at f16 rounding; on an f16 pool it is a copy of the
// same size. It is labelled lossy like every codec but none, since from f32
// or bf16 it rounds.
//
// Error bounds (per value, before the output dtype's own rounding), with d
// the f16 scale of the value's group and amax its largest magnitude:
// q8 |x - x'| <= |d|/2 + amax*2^-10 + 2^-18; q4 |x - x'| <= |d| + amax*2^-9
// + 2^-22 (the last two terms cover the f16 rounding of d, the absolute one
// only matters where d is an f16 subnormal). A mixed codec's section obeys
// its kind's bound; an f16 section: |x - x'| <= |x|*2^-11 + 2^-25. All-zero
// groups decode to exact zeros. f16 output saturates at +-65504: a q8 scale rounded up to f16
// could otherwise push a block's largest value just past the f16 range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "kvtier/types.h"

namespace kvtier {

// Stored in entries: the values are part of the format.
enum class KvCodec : uint8_t { kNone = 0, kQ8 = 1, kQ4 = 2, kK8V4 = 3, kK16V8 = 4, kF16 = 5 };
// Every codec, by bits per value: the choices of the codec options and benches.
inline constexpr KvCodec kKvCodecs[] = {KvCodec::kNone, KvCodec::kF16,  KvCodec::kK16V8,
                                        KvCodec::kQ8,   KvCodec::kK8V4, KvCodec::kQ4};

std::string_view kv_codec_name(KvCodec c);              // "none" | "f16" | "q8" | "q4" | "k8v4" | "k16v8"
std::string kv_codec_choices();                         // "none, f16, k16v8, q8, k8v4, q4"
Result<KvCodec> parse_kv_codec(std::string_view name);  // InvalidArgument naming the bad value and the choices
inline constexpr bool kv_codec_lossy(KvCodec c) { return c != KvCodec::kNone; }

// Encoded bytes of one layer of an n-page chunk; kNone: the raw size. Only
// meaningful for a geometry kv_codec_check accepts.
size_t kv_codec_layer_bytes(KvCodec c, const KVGeometry& g, uint32_t n_pages);

// OK when g is valid and c can encode it (lossy codecs: head_dim % 32 == 0);
// InvalidArgument saying why otherwise.
Status kv_codec_check(KvCodec c, const KVGeometry& g);

// raw.size() == g.layer_slice_bytes() * n_pages and out.size() ==
// kv_codec_layer_bytes(c, g, n_pages), else InvalidArgument. A NaN or Inf in
// raw, or a value too large for an f16 scale (|x| > 65504*127 for q8,
// > 65504*8 for q4) or, in an f16 section, for an f16 (|x| >= 65520), is
// InvalidArgument; `out` is then unspecified.
Status kv_encode_layer(KvCodec c, const KVGeometry& g, uint32_t n_pages, std::span<const std::byte> raw,
                       std::span<std::byte> out);

// enc.size() == kv_codec_layer_bytes(c, g, n_pages) and raw.size() ==
// g.layer_slice_bytes() * n_pages, else InvalidArgument. Any enc bytes are
// safe to decode (never out of bounds, no UB); forged scales may give Inf or
// NaN values. Integrity is the entry checksum's job, not the codec's.
Status kv_decode_layer(KvCodec c, const KVGeometry& g, uint32_t n_pages, std::span<const std::byte> enc,
                       std::span<std::byte> raw);

// kv_decode_layer into pages.size() separate page slices: page p's part of
// the layer ([k|v][page_tokens][num_kv_heads][head_dim], g.layer_slice_bytes()
// bytes) is written at pages[p], so a load decodes straight into the pool's
// pages with no staging copy. The slices must not overlap; the same bytes as
// kv_decode_layer land in them. enc.size() == kv_codec_layer_bytes(c, g,
// pages.size()) and pages non-empty, else InvalidArgument.
Status kv_decode_layer_pages(KvCodec c, const KVGeometry& g, std::span<const std::byte> enc,
                             std::span<std::byte* const> pages);

}  // namespace kvtier
