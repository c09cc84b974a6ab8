#include "codec/kv_codec.h"

#include <cpuid.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/kv_codec_kernels.h"

namespace kvtier {

namespace {

constexpr size_t kBlock = 32;      // values per block / tokens per key channel group
constexpr size_t kScaleBytes = 2;  // one f16

size_t layer_values(const KVGeometry& g, uint32_t n_pages) {
  return size_t(n_pages) * 2 * g.page_tokens * g.num_kv_heads * g.head_dim;
}

Status check_sizes(KvCodec c, const KVGeometry& g, uint32_t n_pages, size_t raw_size, size_t enc_size) {
  KVTIER_RETURN_IF_ERROR(kv_codec_check(c, g));
  if (n_pages == 0) return Status::InvalidArgument("kv codec: n_pages must be at least 1");
  const size_t want_raw = g.layer_slice_bytes() * n_pages;
  const size_t want_enc = kv_codec_layer_bytes(c, g, n_pages);
  if (raw_size != want_raw || enc_size != want_enc) {
    return Status::InvalidArgument("kv codec " + std::string(kv_codec_name(c)) + ": buffers of " +
                                   std::to_string(raw_size) + " raw / " + std::to_string(enc_size) +
                                   " encoded bytes, expected " + std::to_string(want_raw) + " / " +
                                   std::to_string(want_enc));
  }
  return Status::Ok();
}

// Where the rows of one section (K or V) live: page p's slice of the layer,
// [k|v][page_tokens][R], starts at pages[p] (contiguous in a raw layer slice,
// or each in its own pool page when decoding in place).
template <class Byte>  // std::byte or const std::byte
struct SectionRows {
  std::span<Byte* const> pages;
  size_t row_bytes;   // R * elem size
  uint32_t page_tokens;
  uint32_t kv;        // 0 = K, 1 = V
  Byte* row(size_t t) const {
    const size_t page = t / page_tokens, tok = t % page_tokens;
    return pages[page] + (size_t(kv) * page_tokens + tok) * row_bytes;
  }
};

// The page slices of a contiguous raw layer slice.
template <class Byte>
std::vector<Byte*> slices_of(Byte* raw, const KVGeometry& g, uint32_t n_pages) {
  std::vector<Byte*> pages(n_pages);
  for (uint32_t p = 0; p < n_pages; ++p) pages[p] = raw + size_t(p) * g.layer_slice_bytes();
  return pages;
}

// How one section of a sectioned codec (q4, k8v4, k16v8, f16) stores its rows (kv_codec.h).
enum class Section : uint8_t { kF16, kQ8, kQ4, kQ4KeyChannels };

struct Sections {
  Section k, v;
};

Sections sections_of(KvCodec c, detail::Q4Keys keys) {
  switch (c) {
    case KvCodec::kK8V4: return {Section::kQ8, Section::kQ4};
    case KvCodec::kK16V8: return {Section::kF16, Section::kQ8};
    case KvCodec::kF16: return {Section::kF16, Section::kF16};
    default: return {keys == detail::Q4Keys::kKeyChannels ? Section::kQ4KeyChannels : Section::kQ4, Section::kQ4};
  }
}

// A section's bytes: its scales (none for f16), then its quants (or halves).
size_t section_scale_bytes(Section s, size_t values) { return s == Section::kF16 ? 0 : values / kBlock * kScaleBytes; }

size_t section_quant_bytes(Section s, size_t values) {
  switch (s) {
    case Section::kF16: return values * 2;
    case Section::kQ8: return values;
    default: return values / 2;
  }
}

size_t section_bytes(Section s, size_t values) { return section_scale_bytes(s, values) + section_quant_bytes(s, values); }

constexpr size_t kConvertRun = 256;  // values converted through the stack at a time

// n dtype values -> f16 bits; false when one is NaN/Inf or past f16's range.
bool to_f16(const detail::KvCodecKernels& k, DType dt, const std::byte* in, size_t n, std::byte* out) {
  float f[kConvertRun];
  uint16_t h[kConvertRun];
  bool finite = true;
  for (size_t i = 0; i < n; i += kConvertRun) {
    const size_t m = std::min(kConvertRun, n - i);
    if (dt == DType::kF16) {
      std::memcpy(h, in + i * 2, m * 2);
    } else {
      if (dt == DType::kF32) {
        std::memcpy(f, in + i * 4, m * 4);
      } else {
        for (size_t j = 0; j < m; ++j) {
          uint16_t b;
          std::memcpy(&b, in + (i + j) * 2, 2);
          const uint32_t u = detail::bf16_to_f32_bits(b);
          std::memcpy(&f[j], &u, 4);
        }
      }
      k.f32_to_f16(f, m, h);
    }
    for (size_t j = 0; j < m; ++j) finite &= (h[j] & 0x7c00) != 0x7c00;
    std::memcpy(out + i * 2, h, m * 2);
  }
  return finite;
}

// n f16 bits -> dtype values (bf16 as the kernels round it).
void from_f16(const detail::KvCodecKernels& k, DType dt, const std::byte* in, size_t n, std::byte* out) {
  if (dt == DType::kF16) {
    std::memcpy(out, in, n * 2);
    return;
  }
  float f[kConvertRun];
  uint16_t h[kConvertRun];
  for (size_t i = 0; i < n; i += kConvertRun) {
    const size_t m = std::min(kConvertRun, n - i);
    std::memcpy(h, in + i * 2, m * 2);
    k.f16_to_f32(h, m, f);
    if (dt == DType::kF32) {
      std::memcpy(out + i * 4, f, m * 4);
      continue;
    }
    for (size_t j = 0; j < m; ++j) {
      uint32_t u;
      std::memcpy(&u, &f[j], 4);
      const uint16_t b = detail::f32_bits_to_bf16(u);
      std::memcpy(out + (i + j) * 2, &b, 2);
    }
  }
}

// `run` rows from row t, per token (every kind but the key channel groups).
bool encode_rows(const detail::KvCodecKernels& k, DType dt, Section s, const std::byte* in, size_t t, size_t run,
                 size_t row_values, std::byte* scales, std::byte* quants) {
  const size_t blocks = run * row_values / kBlock;
  std::byte* sc = scales + t * row_values / kBlock * kScaleBytes;
  std::byte* q = quants + section_quant_bytes(s, t * row_values);
  switch (s) {
    case Section::kF16: return to_f16(k, dt, in, run * row_values, q);
    case Section::kQ8: return k.q8_encode(dt, in, blocks, sc, q);
    default: return k.q4_encode(dt, in, blocks, sc, q);
  }
}

void decode_rows(const detail::KvCodecKernels& k, DType dt, Section s, const std::byte* scales,
                 const std::byte* quants, size_t t, size_t run, size_t row_values, std::byte* out) {
  const size_t blocks = run * row_values / kBlock;
  const std::byte* sc = scales + t * row_values / kBlock * kScaleBytes;
  const std::byte* q = quants + section_quant_bytes(s, t * row_values);
  switch (s) {
    case Section::kF16: from_f16(k, dt, q, run * row_values, out); return;
    case Section::kQ8: k.q8_decode(dt, sc, q, blocks, out); return;
    default: k.q4_decode(dt, sc, q, blocks, out); return;
  }
}

// One section: T rows of R values. Key channel groups first (q4's keys),
// then per-token rows, a page's run of rows at a time.
bool encode_section(const detail::KvCodecKernels& k, DType dt, const SectionRows<const std::byte>& rows, size_t tokens,
                    size_t row_values, Section s, std::byte* enc) {
  std::byte* scales = enc;
  std::byte* quants = enc + section_scale_bytes(s, tokens * row_values);
  const size_t groups = s == Section::kQ4KeyChannels ? tokens / kBlock : 0;
  for (size_t grp = 0; grp < groups; ++grp) {
    const std::byte* group_rows[kBlock];
    for (size_t i = 0; i < kBlock; ++i) group_rows[i] = rows.row(grp * kBlock + i);
    if (!k.q4_encode_channels(dt, group_rows, row_values, scales + grp * row_values * kScaleBytes,
                              quants + grp * kBlock * row_values / 2))
      return false;
  }
  const Section per_token = s == Section::kQ4KeyChannels ? Section::kQ4 : s;
  for (size_t t = groups * kBlock; t < tokens;) {
    const size_t run = std::min<size_t>(rows.page_tokens - t % rows.page_tokens, tokens - t);
    if (!encode_rows(k, dt, per_token, rows.row(t), t, run, row_values, scales, quants)) return false;
    t += run;
  }
  return true;
}

void decode_section(const detail::KvCodecKernels& k, DType dt, const SectionRows<std::byte>& rows, size_t tokens,
                    size_t row_values, Section s, const std::byte* enc) {
  const std::byte* scales = enc;
  const std::byte* quants = enc + section_scale_bytes(s, tokens * row_values);
  const size_t groups = s == Section::kQ4KeyChannels ? tokens / kBlock : 0;
  for (size_t grp = 0; grp < groups; ++grp) {
    std::byte* group_rows[kBlock];
    for (size_t i = 0; i < kBlock; ++i) group_rows[i] = rows.row(grp * kBlock + i);
    k.q4_decode_channels(dt, scales + grp * row_values * kScaleBytes, quants + grp * kBlock * row_values / 2,
                         row_values, group_rows);
  }
  const Section per_token = s == Section::kQ4KeyChannels ? Section::kQ4 : s;
  for (size_t t = groups * kBlock; t < tokens;) {
    const size_t run = std::min<size_t>(rows.page_tokens - t % rows.page_tokens, tokens - t);
    decode_rows(k, dt, per_token, scales, quants, t, run, row_values, rows.row(t));
    t += run;
  }
}

Status refuse_input(KvCodec c) {
  return Status::InvalidArgument("kv codec " + std::string(kv_codec_name(c)) +
                                 ": input holds NaN/Inf or a value too large for an f16 scale");
}

}  // namespace

std::string_view kv_codec_name(KvCodec c) {
  switch (c) {
    case KvCodec::kNone: return "none";
    case KvCodec::kQ8: return "q8";
    case KvCodec::kQ4: return "q4";
    case KvCodec::kK8V4: return "k8v4";
    case KvCodec::kK16V8: return "k16v8";
    case KvCodec::kF16: return "f16";
  }
  return "unknown";
}

std::string kv_codec_choices() {
  std::string out;
  for (KvCodec c : kKvCodecs) out += (out.empty() ? "" : ", ") + std::string(kv_codec_name(c));
  return out;
}

Result<KvCodec> parse_kv_codec(std::string_view name) {
  for (KvCodec c : kKvCodecs) {
    if (name == kv_codec_name(c)) return c;
  }
  return Status::InvalidArgument("unknown KV codec '" + std::string(name) + "' (expected one of " +
                                 kv_codec_choices() + ")");
}

size_t kv_codec_layer_bytes(KvCodec c, const KVGeometry& g, uint32_t n_pages) {
  const size_t values = layer_values(g, n_pages);
  switch (c) {
    case KvCodec::kNone: return g.layer_slice_bytes() * n_pages;
    case KvCodec::kQ8: return section_bytes(Section::kQ8, values);  // one section in raw order
    case KvCodec::kQ4:
    case KvCodec::kK8V4:
    case KvCodec::kK16V8:
    case KvCodec::kF16: {
      const Sections s = sections_of(c, detail::Q4Keys::kKeyChannels);
      return section_bytes(s.k, values / 2) + section_bytes(s.v, values / 2);
    }
  }
  return 0;
}

Status kv_codec_check(KvCodec c, const KVGeometry& g) {
  KVTIER_RETURN_IF_ERROR(g.validate());
  switch (c) {
    case KvCodec::kNone:
    case KvCodec::kF16: return Status::Ok();  // no blocks: any head_dim
    case KvCodec::kQ8:
    case KvCodec::kQ4:
    case KvCodec::kK8V4:
    case KvCodec::kK16V8:
      if (g.head_dim % kBlock != 0) {
        return Status::InvalidArgument("kv codec " + std::string(kv_codec_name(c)) +
                                       " needs head_dim to be a multiple of 32 (blocks of 32 values along "
                                       "head_dim); head_dim is " + std::to_string(g.head_dim));
      }
      return Status::Ok();
  }
  return Status::InvalidArgument("unknown KV codec value " + std::to_string(int(c)));
}

Status kv_encode_layer(KvCodec c, const KVGeometry& g, uint32_t n_pages, std::span<const std::byte> raw,
                       std::span<std::byte> out) {
  return detail::encode_layer_with(detail::best_kernels(), c, g, n_pages, raw, out);
}

Status kv_decode_layer(KvCodec c, const KVGeometry& g, uint32_t n_pages, std::span<const std::byte> enc,
                       std::span<std::byte> raw) {
  return detail::decode_layer_with(detail::best_kernels(), c, g, n_pages, enc, raw);
}

Status kv_decode_layer_pages(KvCodec c, const KVGeometry& g, std::span<const std::byte> enc,
                             std::span<std::byte* const> pages) {
  return detail::decode_pages_with(detail::best_kernels(), c, g, enc, pages);
}

namespace detail {

namespace {
// The CPU runs the native (AVX2 + F16C) kernels: CPUID, not the build machine.
bool cpu_has_avx2_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
}  // namespace

// The CPU is asked first: building the native table runs AVX2 code (on a CPU without it, every
// codec call died of SIGILL before the scalar table could be chosen).
const KvCodecKernels* native_kernels() {
  static const KvCodecKernels* native = cpu_has_avx2_f16c() ? native_kernels_unchecked() : nullptr;
  return native;
}

const KvCodecKernels& best_kernels() {
  static const KvCodecKernels& best = native_kernels() != nullptr ? *native_kernels() : scalar_kernels();
  return best;
}

Status encode_layer_with(const KvCodecKernels& k, KvCodec c, const KVGeometry& g, uint32_t n_pages,
                         std::span<const std::byte> raw, std::span<std::byte> out, Q4Keys keys) {
  KVTIER_RETURN_IF_ERROR(check_sizes(c, g, n_pages, raw.size(), out.size()));
  const size_t values = layer_values(g, n_pages);
  switch (c) {
    case KvCodec::kNone:
      if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
      return Status::Ok();
    case KvCodec::kQ8: {
      const size_t blocks = values / kBlock;
      if (!k.q8_encode(g.dtype, raw.data(), blocks, out.data(), out.data() + blocks * kScaleBytes))
        return refuse_input(c);
      return Status::Ok();
    }
    case KvCodec::kQ4:
    case KvCodec::kK8V4:
    case KvCodec::kK16V8:
    case KvCodec::kF16: {
      const size_t tokens = size_t(n_pages) * g.page_tokens, row_values = size_t(g.num_kv_heads) * g.head_dim;
      const Sections s = sections_of(c, keys);
      const std::vector<const std::byte*> pages = slices_of(raw.data(), g, n_pages);
      std::byte* enc = out.data();
      for (uint32_t kv = 0; kv < 2; ++kv) {
        const SectionRows<const std::byte> rows{pages, row_values * g.elem_bytes(), g.page_tokens, kv};
        const Section section = kv == 0 ? s.k : s.v;
        if (!encode_section(k, g.dtype, rows, tokens, row_values, section, enc)) return refuse_input(c);
        enc += section_bytes(section, tokens * row_values);
      }
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown KV codec value " + std::to_string(int(c)));
}

Status decode_layer_with(const KvCodecKernels& k, KvCodec c, const KVGeometry& g, uint32_t n_pages,
                         std::span<const std::byte> enc, std::span<std::byte> raw, Q4Keys keys) {
  KVTIER_RETURN_IF_ERROR(check_sizes(c, g, n_pages, raw.size(), enc.size()));
  const std::vector<std::byte*> pages = slices_of(raw.data(), g, n_pages);
  return decode_pages_with(k, c, g, enc, pages, keys);
}

Status decode_pages_with(const KvCodecKernels& k, KvCodec c, const KVGeometry& g, std::span<const std::byte> enc,
                         std::span<std::byte* const> pages, Q4Keys keys) {
  const uint32_t n_pages = static_cast<uint32_t>(pages.size());
  KVTIER_RETURN_IF_ERROR(check_sizes(c, g, n_pages, g.layer_slice_bytes() * n_pages, enc.size()));
  const size_t slice = g.layer_slice_bytes();
  switch (c) {
    case KvCodec::kNone:
      for (uint32_t p = 0; p < n_pages; ++p) std::memcpy(pages[p], enc.data() + p * slice, slice);
      return Status::Ok();
    case KvCodec::kQ8: {  // blocks in raw order: a page's blocks are one run
      const size_t blocks = layer_values(g, n_pages) / kBlock, page_blocks = blocks / n_pages;
      for (uint32_t p = 0; p < n_pages; ++p)
        k.q8_decode(g.dtype, enc.data() + p * page_blocks * kScaleBytes,
                    enc.data() + blocks * kScaleBytes + p * page_blocks * kBlock, page_blocks, pages[p]);
      return Status::Ok();
    }
    case KvCodec::kQ4:
    case KvCodec::kK8V4:
    case KvCodec::kK16V8:
    case KvCodec::kF16: {
      const size_t tokens = size_t(n_pages) * g.page_tokens, row_values = size_t(g.num_kv_heads) * g.head_dim;
      const Sections s = sections_of(c, keys);
      const std::byte* section_enc = enc.data();
      for (uint32_t kv = 0; kv < 2; ++kv) {
        const SectionRows<std::byte> rows{pages, row_values * g.elem_bytes(), g.page_tokens, kv};
        const Section section = kv == 0 ? s.k : s.v;
        decode_section(k, g.dtype, rows, tokens, row_values, section, section_enc);
        section_enc += section_bytes(section, tokens * row_values);
      }
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown KV codec value " + std::to_string(int(c)));
}

}  // namespace detail

}  // namespace kvtier
