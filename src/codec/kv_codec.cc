#include "codec/kv_codec.h"

#include <cpuid.h>

#include <algorithm>
#include <cstring>
#include <string>

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

// Where the rows of one q4 section (K or V) live in the raw layer slice.
template <class Byte>  // std::byte or const std::byte
struct SectionRows {
  Byte* raw;          // start of the layer slice
  size_t row_bytes;   // R * elem size
  uint32_t page_tokens;
  uint32_t kv;        // 0 = K, 1 = V
  Byte* row(size_t t) const {
    const size_t page = t / page_tokens, tok = t % page_tokens;
    return raw + ((page * 2 + kv) * page_tokens + tok) * row_bytes;
  }
};

// One q4 section: T rows of R values. Key channel groups first (when asked),
// then per-token blocks, a page's run of rows at a time.
bool q4_encode_section(const detail::KvCodecKernels& k, DType dt, const SectionRows<const std::byte>& rows, size_t tokens,
                       size_t row_values, bool channel_groups, std::byte* enc) {
  std::byte* scales = enc;
  std::byte* nibbles = enc + tokens * row_values / kBlock * kScaleBytes;
  const size_t groups = channel_groups ? tokens / kBlock : 0;
  for (size_t grp = 0; grp < groups; ++grp) {
    const std::byte* group_rows[kBlock];
    for (size_t i = 0; i < kBlock; ++i) group_rows[i] = rows.row(grp * kBlock + i);
    if (!k.q4_encode_channels(dt, group_rows, row_values, scales + grp * row_values * kScaleBytes,
                              nibbles + grp * kBlock * row_values / 2))
      return false;
  }
  for (size_t t = groups * kBlock; t < tokens;) {
    const size_t run = std::min<size_t>(rows.page_tokens - t % rows.page_tokens, tokens - t);
    if (!k.q4_encode(dt, rows.row(t), run * row_values / kBlock, scales + t * row_values / kBlock * kScaleBytes,
                     nibbles + t * row_values / 2))
      return false;
    t += run;
  }
  return true;
}

void q4_decode_section(const detail::KvCodecKernels& k, DType dt, const SectionRows<std::byte>& rows, size_t tokens,
                       size_t row_values, bool channel_groups, const std::byte* enc) {
  const std::byte* scales = enc;
  const std::byte* nibbles = enc + tokens * row_values / kBlock * kScaleBytes;
  const size_t groups = channel_groups ? tokens / kBlock : 0;
  for (size_t grp = 0; grp < groups; ++grp) {
    std::byte* group_rows[kBlock];
    for (size_t i = 0; i < kBlock; ++i) group_rows[i] = rows.row(grp * kBlock + i);
    k.q4_decode_channels(dt, scales + grp * row_values * kScaleBytes, nibbles + grp * kBlock * row_values / 2,
                         row_values, group_rows);
  }
  for (size_t t = groups * kBlock; t < tokens;) {
    const size_t run = std::min<size_t>(rows.page_tokens - t % rows.page_tokens, tokens - t);
    k.q4_decode(dt, scales + t * row_values / kBlock * kScaleBytes, nibbles + t * row_values / 2,
                run * row_values / kBlock, rows.row(t));
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
  }
  return "unknown";
}

Result<KvCodec> parse_kv_codec(std::string_view name) {
  for (KvCodec c : {KvCodec::kNone, KvCodec::kQ8, KvCodec::kQ4}) {
    if (name == kv_codec_name(c)) return c;
  }
  return Status::InvalidArgument("unknown KV codec '" + std::string(name) + "' (expected none, q8 or q4)");
}

size_t kv_codec_layer_bytes(KvCodec c, const KVGeometry& g, uint32_t n_pages) {
  const size_t values = layer_values(g, n_pages);
  switch (c) {
    case KvCodec::kNone: return g.layer_slice_bytes() * n_pages;
    case KvCodec::kQ8: return values / kBlock * (kScaleBytes + kBlock);
    case KvCodec::kQ4: return values / kBlock * (kScaleBytes + kBlock / 2);
  }
  return 0;
}

Status kv_codec_check(KvCodec c, const KVGeometry& g) {
  KVTIER_RETURN_IF_ERROR(g.validate());
  switch (c) {
    case KvCodec::kNone: return Status::Ok();
    case KvCodec::kQ8:
    case KvCodec::kQ4:
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

namespace detail {

namespace {
// The CPU runs the native (AVX2 + F16C) kernels: CPUID, not the build machine.
bool cpu_has_avx2_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
}  // namespace

const KvCodecKernels& best_kernels() {
  static const KvCodecKernels& best =
      native_kernels() != nullptr && cpu_has_avx2_f16c() ? *native_kernels() : scalar_kernels();
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
    case KvCodec::kQ4: {
      const size_t tokens = size_t(n_pages) * g.page_tokens, row_values = size_t(g.num_kv_heads) * g.head_dim;
      const size_t section_bytes = out.size() / 2;
      for (uint32_t kv = 0; kv < 2; ++kv) {
        const SectionRows<const std::byte> rows{raw.data(), row_values * g.elem_bytes(), g.page_tokens, kv};
        const bool channels = kv == 0 && keys == Q4Keys::kKeyChannels;
        if (!q4_encode_section(k, g.dtype, rows, tokens, row_values, channels, out.data() + kv * section_bytes))
          return refuse_input(c);
      }
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown KV codec value " + std::to_string(int(c)));
}

Status decode_layer_with(const KvCodecKernels& k, KvCodec c, const KVGeometry& g, uint32_t n_pages,
                         std::span<const std::byte> enc, std::span<std::byte> raw, Q4Keys keys) {
  KVTIER_RETURN_IF_ERROR(check_sizes(c, g, n_pages, raw.size(), enc.size()));
  const size_t values = layer_values(g, n_pages);
  switch (c) {
    case KvCodec::kNone:
      if (!enc.empty()) std::memcpy(raw.data(), enc.data(), enc.size());
      return Status::Ok();
    case KvCodec::kQ8: {
      const size_t blocks = values / kBlock;
      k.q8_decode(g.dtype, enc.data(), enc.data() + blocks * kScaleBytes, blocks, raw.data());
      return Status::Ok();
    }
    case KvCodec::kQ4: {
      const size_t tokens = size_t(n_pages) * g.page_tokens, row_values = size_t(g.num_kv_heads) * g.head_dim;
      const size_t section_bytes = enc.size() / 2;
      for (uint32_t kv = 0; kv < 2; ++kv) {
        const SectionRows<std::byte> rows{raw.data(), row_values * g.elem_bytes(), g.page_tokens, kv};
        const bool channels = kv == 0 && keys == Q4Keys::kKeyChannels;
        q4_decode_section(k, g.dtype, rows, tokens, row_values, channels, enc.data() + kv * section_bytes);
      }
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown KV codec value " + std::to_string(int(c)));
}

}  // namespace detail

}  // namespace kvtier
