#include "codec/kv_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codec/kv_codec_kernels.h"

namespace kvtier {
namespace {

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr KvCodec kLossy[] = {KvCodec::kQ8, KvCodec::kQ4, KvCodec::kK8V4, KvCodec::kK16V8, KvCodec::kF16};

KVGeometry geometry(DType dt, uint32_t heads = 2, uint32_t head_dim = 64, uint32_t page_tokens = 16) {
  KVGeometry g;
  g.num_layers = 2;
  g.num_kv_heads = heads;
  g.head_dim = head_dim;
  g.dtype = dt;
  g.page_tokens = page_tokens;
  return g;
}

uint16_t to_bf16(float f) {  // truncation is enough to make test inputs
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

std::vector<float> from_raw(std::span<const std::byte> raw, DType dt);

// Values in raw order <-> raw bytes of a dtype. Inputs are first rounded
// to the dtype, so `values` afterwards holds exactly what the codec sees.
std::vector<std::byte> to_raw(std::vector<float>& values, DType dt) {
  std::vector<std::byte> raw(values.size() * dtype_size(dt));
  if (dt == DType::kF32) {
    std::memcpy(raw.data(), values.data(), raw.size());
    return raw;
  }
  std::vector<uint16_t> halves(values.size());
  if (dt == DType::kF16) {
    detail::scalar_kernels().f32_to_f16(values.data(), values.size(), halves.data());
  } else {
    for (size_t i = 0; i < values.size(); ++i) halves[i] = to_bf16(values[i]);
  }
  std::memcpy(raw.data(), halves.data(), raw.size());
  values = from_raw(raw, dt);
  return raw;
}

std::vector<float> from_raw(std::span<const std::byte> raw, DType dt) {
  std::vector<float> values(raw.size() / dtype_size(dt));
  if (dt == DType::kF32) {
    std::memcpy(values.data(), raw.data(), raw.size());
    return values;
  }
  std::vector<uint16_t> halves(values.size());
  std::memcpy(halves.data(), raw.data(), raw.size());
  if (dt == DType::kF16) {
    detail::scalar_kernels().f16_to_f32(halves.data(), halves.size(), values.data());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t u = uint32_t(halves[i]) << 16;
      std::memcpy(&values[i], &u, 4);
    }
  }
  return values;
}

size_t layer_values(const KVGeometry& g, uint32_t n_pages) {
  return size_t(n_pages) * 2 * g.page_tokens * g.num_kv_heads * g.head_dim;
}

// Random values whose magnitude varies from block to block (1e-3 .. 1e3).
std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  std::vector<float> values(n);
  for (size_t b = 0; b < n; b += 32) {
    const float magnitude = std::pow(10.0f, exponent(rng));
    for (size_t i = b; i < std::min(n, b + 32); ++i) values[i] = normal(rng) * magnitude;
  }
  return values;
}

// The largest magnitude of the group (block or key channel group) each value
// belongs to, following the layouts of kv_codec.h.
std::vector<float> group_amax(KvCodec c, const KVGeometry& g, uint32_t n_pages, const std::vector<float>& x) {
  std::vector<float> amax(x.size(), 0.0f);
  const size_t row = size_t(g.num_kv_heads) * g.head_dim, tokens = size_t(n_pages) * g.page_tokens;
  auto index = [&](size_t kv, size_t t, size_t ch) {
    return ((t / g.page_tokens * 2 + kv) * g.page_tokens + t % g.page_tokens) * row + ch;
  };
  for (size_t b = 0; b < x.size(); b += 32) {  // per-token blocks everywhere first
    float m = 0;
    for (size_t i = b; i < b + 32; ++i) m = std::max(m, std::fabs(x[i]));
    for (size_t i = b; i < b + 32; ++i) amax[i] = m;
  }
  if (c != KvCodec::kQ4) return amax;
  for (size_t grp = 0; grp < tokens / 32; ++grp) {  // then key channel groups
    for (size_t ch = 0; ch < row; ++ch) {
      float m = 0;
      for (size_t t = grp * 32; t < grp * 32 + 32; ++t) m = std::max(m, std::fabs(x[index(0, t, ch)]));
      for (size_t t = grp * 32; t < grp * 32 + 32; ++t) amax[index(0, t, ch)] = m;
    }
  }
  return amax;
}

double output_rounding(DType dt) { return dt == DType::kF32 ? 0.0 : dt == DType::kF16 ? 0x1p-11 : 0x1p-8; }

// How value i (raw order) is stored: the mixed codecs keep K and V at different precisions.
enum class Kind { kF16, kQ8, kQ4 };
Kind kind_of(KvCodec c, const KVGeometry& g, size_t i) {
  const bool key = i / (size_t(g.page_tokens) * g.num_kv_heads * g.head_dim) % 2 == 0;
  switch (c) {
    case KvCodec::kQ8: return Kind::kQ8;
    case KvCodec::kK8V4: return key ? Kind::kQ8 : Kind::kQ4;
    case KvCodec::kK16V8: return key ? Kind::kF16 : Kind::kQ8;
    case KvCodec::kF16: return Kind::kF16;
    default: return Kind::kQ4;
  }
}

// Every decoded value is within the header's bound of its input.
void expect_within_bound(KvCodec c, const KVGeometry& g, uint32_t n_pages, const std::vector<float>& x,
                         const std::vector<float>& y) {
  const auto amax = group_amax(c, g, n_pages, x);
  size_t failures = 0;
  for (size_t i = 0; i < x.size() && failures < 5; ++i) {
    const double a = amax[i];
    const Kind kind = kind_of(c, g, i);
    const double quant = kind == Kind::kF16  ? std::fabs(x[i]) * 0x1p-11 + 0x1p-25
                         : kind == Kind::kQ8 ? a / 254 + a * 0x1p-10 + 0x1p-18
                                             : a / 8 + a * 0x1p-9 + 0x1p-22;
    const double bound = quant + (std::fabs(x[i]) + quant) * output_rounding(g.dtype) + 0x1p-24;
    if (!(std::fabs(double(x[i]) - y[i]) <= bound)) {
      ++failures;
      ADD_FAILURE() << kv_codec_name(c) << " " << dtype_name(g.dtype) << " value " << i << ": " << x[i] << " -> "
                    << y[i] << " (group amax " << a << ", bound " << bound << ")";
    }
  }
}

struct RoundTrip {
  std::vector<float> input, output;
  std::vector<std::byte> encoded;
};

RoundTrip round_trip(KvCodec c, const KVGeometry& g, uint32_t n_pages, std::vector<float> values,
                     const detail::KvCodecKernels& kernels = detail::best_kernels(),
                     detail::Q4Keys keys = detail::Q4Keys::kKeyChannels) {
  RoundTrip r;
  const auto raw = to_raw(values, g.dtype);
  r.input = values;
  r.encoded.resize(kv_codec_layer_bytes(c, g, n_pages));
  Status st = detail::encode_layer_with(kernels, c, g, n_pages, raw, r.encoded, keys);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<std::byte> decoded(raw.size());
  st = detail::decode_layer_with(kernels, c, g, n_pages, r.encoded, decoded, keys);
  EXPECT_TRUE(st.ok()) << st.to_string();
  r.output = from_raw(decoded, g.dtype);
  return r;
}

TEST(KvCodec, NamesRoundTripAndBadNamesAreRefused) {
  for (KvCodec c : kKvCodecs) {
    auto parsed = parse_kv_codec(kv_codec_name(c));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_EQ(kv_codec_name(KvCodec::kQ8), "q8");
  auto bad = parse_kv_codec("q5");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().is(StatusCode::kInvalidArgument));
  EXPECT_NE(bad.status().message().find("'q5'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("none, f16, k16v8, q8, k8v4, q4"), std::string::npos);
  EXPECT_FALSE(kv_codec_lossy(KvCodec::kNone));
  for (KvCodec c : kLossy) EXPECT_TRUE(kv_codec_lossy(c)) << kv_codec_name(c);
}

TEST(KvCodec, CheckRefusesGeometriesItCannotEncode) {
  const KVGeometry odd = geometry(DType::kF16, 4, 80);
  EXPECT_TRUE(kv_codec_check(KvCodec::kNone, odd).ok());
  EXPECT_TRUE(kv_codec_check(KvCodec::kF16, odd).ok());  // no blocks
  for (KvCodec c : kLossy) {
    if (c == KvCodec::kF16) continue;
    const Status st = kv_codec_check(c, odd);
    EXPECT_TRUE(st.is(StatusCode::kInvalidArgument));
    EXPECT_NE(st.message().find("head_dim"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("80"), std::string::npos) << st.message();
    EXPECT_TRUE(kv_codec_check(c, geometry(DType::kF16, 4, 96)).ok());
  }
  KVGeometry invalid = geometry(DType::kF16);
  invalid.num_layers = 0;
  for (KvCodec c : kKvCodecs) EXPECT_FALSE(kv_codec_check(c, invalid).ok());
  std::vector<std::byte> raw(odd.layer_slice_bytes()), enc(kv_codec_layer_bytes(KvCodec::kQ8, odd, 1));
  EXPECT_TRUE(kv_encode_layer(KvCodec::kQ8, odd, 1, raw, enc).is(StatusCode::kInvalidArgument));
}

TEST(KvCodec, EncodedSizes) {
  const KVGeometry g = geometry(DType::kF16, 8, 128);
  for (uint32_t n : {1u, 5u, 16u}) {
    const size_t raw = g.layer_slice_bytes() * n, values = layer_values(g, n);
    EXPECT_EQ(kv_codec_layer_bytes(KvCodec::kNone, g, n), raw);
    EXPECT_EQ(kv_codec_layer_bytes(KvCodec::kQ8, g, n), values / 32 * 34);
    EXPECT_EQ(kv_codec_layer_bytes(KvCodec::kQ4, g, n), values / 32 * 18);
    EXPECT_GE(double(raw) / kv_codec_layer_bytes(KvCodec::kQ8, g, n), 1.85);
    EXPECT_GE(double(raw) / kv_codec_layer_bytes(KvCodec::kQ4, g, n), 3.4);
    EXPECT_EQ(kv_codec_layer_bytes(KvCodec::kK8V4, g, n), values / 2 / 32 * (34 + 18));  // K as q8, V as q4
    EXPECT_EQ(kv_codec_layer_bytes(KvCodec::kK16V8, g, n), values / 2 * 2 + values / 2 / 32 * 34);  // K f16, V q8
  }
  // k16v8 keeps keys as f16 whatever the pool's dtype: from f32 it is 2.6x smaller; f16 halves f32.
  const KVGeometry f32 = geometry(DType::kF32, 8, 128);
  EXPECT_GE(double(f32.layer_slice_bytes()) / kv_codec_layer_bytes(KvCodec::kK16V8, f32, 1), 2.6);
  EXPECT_EQ(kv_codec_layer_bytes(KvCodec::kF16, f32, 3), f32.layer_slice_bytes() * 3 / 2);
  EXPECT_EQ(kv_codec_layer_bytes(KvCodec::kF16, g, 3), g.layer_slice_bytes() * 3);
  // Wrong buffer sizes are refused, both ways.
  std::vector<std::byte> raw(g.layer_slice_bytes()), enc(kv_codec_layer_bytes(KvCodec::kQ8, g, 1) - 1);
  EXPECT_TRUE(kv_encode_layer(KvCodec::kQ8, g, 1, raw, enc).is(StatusCode::kInvalidArgument));
  EXPECT_TRUE(kv_decode_layer(KvCodec::kQ8, g, 1, enc, raw).is(StatusCode::kInvalidArgument));
  EXPECT_TRUE(kv_encode_layer(KvCodec::kQ8, g, 2, raw, enc).is(StatusCode::kInvalidArgument));
}

TEST(KvCodec, NoneIsExact) {
  const KVGeometry g = geometry(DType::kBF16);
  const auto r = round_trip(KvCodec::kNone, g, 3, random_values(layer_values(g, 3), 1));
  EXPECT_EQ(r.input, r.output);
}

TEST(KvCodec, F16IsExactOnAnF16PoolAndTakesAnyHeadDim) {
  const KVGeometry g = geometry(DType::kF16, 4, 80);
  auto r = round_trip(KvCodec::kF16, g, 3, random_values(layer_values(g, 3), 2));
  EXPECT_EQ(r.input, r.output);
  const KVGeometry f32 = geometry(DType::kF32, 4, 80);
  r = round_trip(KvCodec::kF16, f32, 3, random_values(layer_values(f32, 3), 2));
  EXPECT_NE(r.input, r.output);  // f32 is rounded
  expect_within_bound(KvCodec::kF16, f32, 3, r.input, r.output);
}

TEST(KvCodec, RoundTripWithinBound) {
  uint32_t seed = 10;
  for (KvCodec c : kLossy) {
    for (DType dt : kDTypes) {
      // 1 page: only K tail rows; 3 pages (48 tokens): a key group and a tail; page_tokens 8 and 64 too.
      for (auto [n, page_tokens] : {std::pair{1u, 16u}, {3u, 16u}, {4u, 16u}, {5u, 8u}, {1u, 64u}}) {
        const KVGeometry g = geometry(dt, 2, 64, page_tokens);
        const auto r = round_trip(c, g, n, random_values(layer_values(g, n), ++seed));
        expect_within_bound(c, g, n, r.input, r.output);
      }
    }
  }
}

TEST(KvCodec, DecodingIntoSeparatePagesGivesTheSameBytes) {
  for (KvCodec c : kKvCodecs) {
    for (DType dt : kDTypes) {
      for (auto [n, page_tokens] : {std::pair{1u, 16u}, {3u, 16u}, {5u, 8u}}) {  // 3 x 16: a key channel group and a tail
        const KVGeometry g = geometry(dt, 2, 64, page_tokens);
        auto values = random_values(layer_values(g, n), n * 7 + page_tokens);
        const auto raw = to_raw(values, dt);
        std::vector<std::byte> enc(kv_codec_layer_bytes(c, g, n)), contiguous(raw.size());
        ASSERT_TRUE(kv_encode_layer(c, g, n, raw, enc).ok());
        ASSERT_TRUE(kv_decode_layer(c, g, n, enc, contiguous).ok());
        // Pages in reverse order inside one buffer, with a guard between them.
        const size_t slice = g.layer_slice_bytes(), stride = slice + 64;
        std::vector<std::byte> buf(n * stride, std::byte{0xA5});
        std::vector<std::byte*> pages(n);
        for (uint32_t p = 0; p < n; ++p) pages[p] = buf.data() + (n - 1 - p) * stride;
        ASSERT_TRUE(kv_decode_layer_pages(c, g, enc, pages).ok());
        for (uint32_t p = 0; p < n; ++p) {
          EXPECT_EQ(std::memcmp(pages[p], contiguous.data() + p * slice, slice), 0)
              << kv_codec_name(c) << " " << dtype_name(dt) << " page " << p;
          for (size_t i = slice; i < stride; ++i) ASSERT_EQ(pages[p][i], std::byte{0xA5}) << "wrote past a page";
        }
      }
    }
  }
  const KVGeometry g = geometry(DType::kF16);
  std::vector<std::byte> enc(kv_codec_layer_bytes(KvCodec::kQ8, g, 2));
  std::vector<std::byte*> none;
  EXPECT_TRUE(kv_decode_layer_pages(KvCodec::kQ8, g, enc, none).is(StatusCode::kInvalidArgument));
  std::vector<std::byte> page(g.layer_slice_bytes());
  std::vector<std::byte*> one{page.data()};
  EXPECT_TRUE(kv_decode_layer_pages(KvCodec::kQ8, g, enc, one).is(StatusCode::kInvalidArgument));  // 2 pages' bytes
}

TEST(KvCodec, AllZeroBlocksDecodeToExactZeros) {
  for (KvCodec c : kLossy) {
    for (DType dt : kDTypes) {
      const KVGeometry g = geometry(dt);
      const uint32_t n = 2;
      std::vector<float> values(layer_values(g, n), 0.0f);
      auto r = round_trip(c, g, n, values);
      for (float v : r.output) ASSERT_EQ(std::signbit(v) ? 1 : 0, 0) << "a -0 or non-zero";
      for (float v : r.output) ASSERT_EQ(v, 0.0f);
      // Zero halves among random ones: page 1's V is zero.
      values = random_values(values.size(), 3);
      const size_t row_block = size_t(g.page_tokens) * g.num_kv_heads * g.head_dim;
      std::fill(values.begin() + 3 * row_block, values.end(), -0.0f);
      r = round_trip(c, g, n, values);
      for (size_t i = 3 * row_block; i < values.size(); ++i) ASSERT_EQ(r.output[i], 0.0f);
    }
  }
}

TEST(KvCodec, OneHugeOutlierPerBlockStaysWithinBound) {
  for (KvCodec c : kLossy) {
    for (DType dt : kDTypes) {
      const KVGeometry g = geometry(dt);
      const uint32_t n = 2;
      std::vector<float> values = random_values(layer_values(g, n), 7);
      for (float& v : values) v *= 1e-3f;
      // q4 scales reach 4e5/8; k16v8's keys and f16's values are f16 values.
      const float huge = dt == DType::kF16 || c == KvCodec::kK16V8 || c == KvCodec::kF16 ? 65504.0f : 4e5f;
      for (size_t b = 0; b < values.size(); b += 32) values[b + (b / 32) % 32] = (b / 32) % 2 ? huge : -huge;
      const auto r = round_trip(c, g, n, values);
      for (float v : r.output) ASSERT_TRUE(std::isfinite(v));
      expect_within_bound(c, g, n, r.input, r.output);
    }
  }
}

TEST(KvCodec, NonFiniteAndOversizedInputsAreRefused) {
  const float bad_values[] = {NAN, INFINITY, -INFINITY};
  for (KvCodec c : kLossy) {
    for (DType dt : kDTypes) {
      const KVGeometry g = geometry(dt);
      const uint32_t n = 3;
      std::mt19937 rng(5);
      for (float bad : bad_values) {
        for (int trial = 0; trial < 4; ++trial) {
          std::vector<float> values = random_values(layer_values(g, n), trial);
          auto raw = to_raw(values, dt);
          const size_t at = rng() % values.size();
          values[at] = bad;
          const auto poisoned = to_raw(values, dt);
          std::vector<std::byte> enc(kv_codec_layer_bytes(c, g, n));
          for (const auto* k : {&detail::scalar_kernels(), detail::native_kernels()}) {
            if (k == nullptr) continue;
            const Status st = detail::encode_layer_with(*k, c, g, n, poisoned, enc);
            EXPECT_TRUE(st.is(StatusCode::kInvalidArgument)) << k->name << " " << st.to_string();
          }
          EXPECT_TRUE(kv_encode_layer(c, g, n, raw, enc).ok());
        }
      }
    }
    // Too large for an f16 scale (f32 and bf16 only).
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const KVGeometry g = geometry(dt);
      std::vector<float> values(layer_values(g, 1), 1.0f);
      values[40] = 1e30f;
      const auto raw = to_raw(values, dt);
      std::vector<std::byte> enc(kv_codec_layer_bytes(c, g, 1));
      EXPECT_TRUE(kv_encode_layer(c, g, 1, raw, enc).is(StatusCode::kInvalidArgument));
    }
  }
}

TEST(KvCodec, RandomEncodedBytesDecodeSafely) {
  std::mt19937 rng(99);
  for (KvCodec c : kLossy) {
    for (DType dt : kDTypes) {
      for (uint32_t n : {1u, 2u, 3u}) {
        const KVGeometry g = geometry(dt);
        std::vector<std::byte> enc(kv_codec_layer_bytes(c, g, n)), raw(g.layer_slice_bytes() * n);
        for (auto& b : enc) b = std::byte(rng());
        for (const auto* k : {&detail::scalar_kernels(), detail::native_kernels()}) {
          if (k != nullptr) {
            EXPECT_TRUE(detail::decode_layer_with(*k, c, g, n, enc, raw).ok());
          }
        }
      }
    }
  }
}

// A damaged q8 entry may hold a quant of -128, which an encoder never writes: decoded into an
// f16 pool with a scale near the limit, both tables clamp it to -65504 (the native one wrote -Inf:
// it checked the scale against 127 only).
TEST(KvCodec, AQuantOfMinus128DecodesTheSameOnEveryTable) {
  const detail::KvCodecKernels* native = detail::native_kernels();
  if (native == nullptr) GTEST_SKIP() << "no native codec kernels on this CPU";
  KVGeometry g;
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.head_dim = 32;
  g.dtype = DType::kF16;
  g.page_tokens = 1;
  std::vector<std::byte> enc(kv_codec_layer_bytes(KvCodec::kQ8, g, 1), std::byte{0});
  const uint16_t scale = 0x6007;  // 515.5: 127 of it fit in f16, 128 do not
  std::memcpy(enc.data(), &scale, 2);
  enc[4] = std::byte(0x80);  // block 0's first quant: -128
  enc[5] = std::byte(0x7f);
  std::vector<std::byte> a(g.layer_slice_bytes()), b(g.layer_slice_bytes());
  ASSERT_TRUE(detail::decode_layer_with(detail::scalar_kernels(), KvCodec::kQ8, g, 1, enc, a).ok());
  ASSERT_TRUE(detail::decode_layer_with(*native, KvCodec::kQ8, g, 1, enc, b).ok());
  uint16_t first = 0;
  std::memcpy(&first, a.data(), 2);
  EXPECT_EQ(first, 0xfbffu) << "-65504";
  EXPECT_EQ(a, b);
}

// Every entry of the native table is its own code, not the scalar one: the
// bit-for-bit test below cannot tell them apart when they are the same
// function (as they were while GCC merged the two files' make_kernels).
TEST(KvCodec, NativeAndScalarTablesAreDistinct) {
  const auto* native = detail::native_kernels();
  if (native == nullptr) GTEST_SKIP() << "no native kernels in this build";
  const auto& scalar = detail::scalar_kernels();
  const auto as_void = [](auto f) { return reinterpret_cast<const void*>(f); };
  EXPECT_NE(as_void(native->q8_encode), as_void(scalar.q8_encode));
  EXPECT_NE(as_void(native->q8_decode), as_void(scalar.q8_decode));
  EXPECT_NE(as_void(native->q4_encode), as_void(scalar.q4_encode));
  EXPECT_NE(as_void(native->q4_decode), as_void(scalar.q4_decode));
  EXPECT_NE(as_void(native->q4_encode_channels), as_void(scalar.q4_encode_channels));
  EXPECT_NE(as_void(native->q4_decode_channels), as_void(scalar.q4_decode_channels));
  EXPECT_NE(as_void(native->f32_to_f16), as_void(scalar.f32_to_f16));
  EXPECT_NE(as_void(native->f16_to_f32), as_void(scalar.f16_to_f32));
}

TEST(KvCodec, NativeKernelsMatchScalarBitForBit) {
  const auto* native = detail::native_kernels();
  if (native == nullptr) GTEST_SKIP() << "no native kernels in this build";
  EXPECT_EQ(&detail::best_kernels(), native);
  const auto& scalar = detail::scalar_kernels();
  // Conversions: every f16, and f32 across the f16 range (subnormal, normal, overflow, NaN).
  std::vector<uint16_t> halves(65536), back_a(65536), back_b(65536);
  for (uint32_t i = 0; i < 65536; ++i) halves[i] = uint16_t(i);
  std::vector<float> fa(65536), fb(65536);
  scalar.f16_to_f32(halves.data(), halves.size(), fa.data());
  native->f16_to_f32(halves.data(), halves.size(), fb.data());
  ASSERT_EQ(std::memcmp(fa.data(), fb.data(), fa.size() * 4), 0);
  std::mt19937 rng(3);
  std::vector<float> floats(1 << 18);
  for (auto& f : floats) {
    const uint32_t bits = (rng() & 0x80000000u) | ((0x60u + rng() % 0x30u) << 23) | (rng() & 0x7FFFFFu);
    std::memcpy(&f, &bits, 4);
  }
  floats[0] = NAN, floats[1] = INFINITY, floats[2] = 65519.99f, floats[3] = 65520.0f;
  std::vector<uint16_t> ha(floats.size()), hb(floats.size());
  scalar.f32_to_f16(floats.data(), floats.size(), ha.data());
  native->f32_to_f16(floats.data(), floats.size(), hb.data());
  ASSERT_EQ(ha, hb);
  // Whole codecs, on ordinary, tiny (f16-subnormal scales) and random encoded data.
  uint32_t seed = 40;
  for (KvCodec c : kLossy) {
    for (DType dt : kDTypes) {
      // Shapes whose block counts are and are not multiples of the kernels' batch of 8.
      struct Shape { uint32_t n, heads, head_dim, page_tokens; };
      for (const Shape& shape : {Shape{3, 2, 64, 16}, Shape{2, 2, 64, 32}, Shape{1, 1, 32, 3}, Shape{7, 1, 32, 5}}) {
        const uint32_t n = shape.n;
        const KVGeometry g = geometry(dt, shape.heads, shape.head_dim, shape.page_tokens);
        auto values = random_values(layer_values(g, n), ++seed);
        for (size_t i = 0; i < values.size() / 4; ++i) values[i] *= 1e-4f;   // f16-subnormal scales
        for (size_t i = values.size() / 2; i < values.size(); i += 37) values[i] = 65504.0f;  // saturating f16 output
        const auto a = round_trip(c, g, n, values, scalar), b = round_trip(c, g, n, values, *native);
        ASSERT_EQ(a.encoded, b.encoded) << kv_codec_name(c) << " " << dtype_name(dt);
        ASSERT_EQ(std::memcmp(a.output.data(), b.output.data(), a.output.size() * 4), 0);
        std::vector<std::byte> enc(a.encoded.size()), ra(g.layer_slice_bytes() * n), rb(ra.size());
        for (auto& byte : enc) byte = std::byte(rng());
        ASSERT_TRUE(detail::decode_layer_with(scalar, c, g, n, enc, ra).ok());
        ASSERT_TRUE(detail::decode_layer_with(*native, c, g, n, enc, rb).ok());
        ASSERT_EQ(ra, rb) << "random encoded bytes, " << kv_codec_name(c) << " " << dtype_name(dt);
      }
    }
  }
}

// Keys like a real model's: most channels small, a few outlier channels
// large with a per-channel offset; values without outliers.
std::vector<float> realistic_layer(const KVGeometry& g, uint32_t n_pages, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t row = size_t(g.num_kv_heads) * g.head_dim;
  std::vector<float> channel_mean(row), channel_scale(row);
  for (size_t ch = 0; ch < row; ++ch) {
    const bool outlier = ch % g.head_dim < 4;  // 4 outlier channels per head
    channel_mean[ch] = outlier ? (ch % 2 ? 12.0f : -9.0f) : 0.3f * normal(rng);
    channel_scale[ch] = outlier ? 3.0f : 0.5f + 0.5f * std::fabs(normal(rng));
  }
  std::vector<float> values(layer_values(g, n_pages));
  for (size_t i = 0; i < values.size(); ++i) {
    const bool is_key = (i / (g.page_tokens * row)) % 2 == 0;
    const size_t ch = i % row;
    values[i] = is_key ? channel_mean[ch] + channel_scale[ch] * normal(rng) : normal(rng);
  }
  return values;
}

struct HalfErrors {
  double k = 0, v = 0;           // RMS relative error: ||x - x'|| / ||x|| over K (V)
  double k_normal_channels = 0;  // the same over K's non-outlier channels only
};

HalfErrors measure(const KVGeometry& g, uint32_t n, const RoundTrip& r) {
  const size_t row = size_t(g.num_kv_heads) * g.head_dim;
  double err[3] = {}, norm[3] = {};
  for (size_t i = 0; i < r.input.size(); ++i) {
    const bool is_key = (i / (g.page_tokens * row)) % 2 == 0;
    const double e = double(r.input[i]) - r.output[i], x = r.input[i];
    const int bucket = is_key ? 0 : 1;
    err[bucket] += e * e, norm[bucket] += x * x;
    if (is_key && i % row % g.head_dim >= 4) err[2] += e * e, norm[2] += x * x;
  }
  (void)n;
  return {std::sqrt(err[0] / norm[0]), std::sqrt(err[1] / norm[1]), std::sqrt(err[2] / norm[2])};
}

TEST(KvCodec, Q4KeyChannelGroupsBeatTokenBlocksOnKeysWithOutliers) {
  const KVGeometry g = geometry(DType::kF16, 8, 128);
  const uint32_t n = 16;
  const auto values = realistic_layer(g, n, 2024);
  const auto& k = detail::best_kernels();
  const auto chosen = measure(g, n, round_trip(KvCodec::kQ4, g, n, values, k, detail::Q4Keys::kKeyChannels));
  const auto blocks = measure(g, n, round_trip(KvCodec::kQ4, g, n, values, k, detail::Q4Keys::kTokenBlocks));
  const auto q8 = measure(g, n, round_trip(KvCodec::kQ8, g, n, values));
  std::printf("RMS relative error (K | K normal channels | V):\n"
              "  q8                  %.4f | %.4f | %.4f\n"
              "  q4 key channels     %.4f | %.4f | %.4f\n"
              "  q4 token blocks     %.4f | %.4f | %.4f\n",
              q8.k, q8.k_normal_channels, q8.v, chosen.k, chosen.k_normal_channels, chosen.v, blocks.k,
              blocks.k_normal_channels, blocks.v);
  EXPECT_LT(chosen.k, blocks.k);
  EXPECT_LT(chosen.k_normal_channels, blocks.k_normal_channels);
  EXPECT_EQ(chosen.v, blocks.v);  // V is per token in both
  EXPECT_LT(q8.k, 0.01);
}

}  // namespace
}  // namespace kvtier
