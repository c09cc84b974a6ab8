#include "codec_bench.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/stats.h"

namespace kvtier::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Synthetic layer in raw order: keys with 4 outlier channels per head, values N(0, 1).
std::vector<float> synthetic_layer(const KVGeometry& g, uint32_t n_pages) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t row = size_t(g.num_kv_heads) * g.head_dim;
  std::vector<float> values(size_t(n_pages) * 2 * g.page_tokens * row);
  for (size_t i = 0; i < values.size(); ++i) {
    const bool is_key = (i / (g.page_tokens * row)) % 2 == 0;
    const bool outlier = is_key && i % row % g.head_dim < 4;
    values[i] = outlier ? 10.0f + 3.0f * normal(rng) : normal(rng);
  }
  return values;
}

std::vector<std::byte> to_dtype(const std::vector<float>& values, DType dt) {
  std::vector<std::byte> raw(values.size() * dtype_size(dt));
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    if (dt == DType::kF32) {
      std::memcpy(raw.data() + 4 * i, &bits, 4);
      continue;
    }
    // f16 via a (positive, normal-range) rebias; bf16 by truncation: the bench only needs plausible values.
    uint16_t half = uint16_t(bits >> 16);
    if (dt == DType::kF16) {
      const uint32_t mag = bits & 0x7FFFFFFFu;
      half = uint16_t(((bits >> 16) & 0x8000u) | (mag < 0x38800000u ? 0u : (mag - 0x38000000u) >> 13));
    }
    std::memcpy(raw.data() + 2 * i, &half, 2);
  }
  return raw;
}

template <class F>
double gbps(size_t bytes, F&& work) {
  const auto t0 = Clock::now();
  work();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return seconds > 0 ? double(bytes) / seconds / 1e9 : 0;
}

}  // namespace

Result<CodecSpeed> measure_codec_speed(KvCodec codec, const KVGeometry& g, uint32_t n_pages, int rounds) {
  KVTIER_RETURN_IF_ERROR(kv_codec_check(codec, g));
  if (rounds < 1 || n_pages < 1) return Status::InvalidArgument("codec bench: rounds and n_pages must be >= 1");
  CodecSpeed speed;
  const std::vector<std::byte> raw = to_dtype(synthetic_layer(g, n_pages), g.dtype);
  speed.raw_bytes = raw.size();
  speed.encoded_bytes = kv_codec_layer_bytes(codec, g, n_pages);
  std::vector<std::byte> encoded(speed.encoded_bytes), decoded(raw.size()), copy(raw.size());
  KVTIER_RETURN_IF_ERROR(kv_encode_layer(codec, g, n_pages, raw, encoded));  // warm up, and check the data
  KVTIER_RETURN_IF_ERROR(kv_decode_layer(codec, g, n_pages, encoded, decoded));
  std::vector<double> enc_runs, dec_runs, copy_runs;
  Status failed;
  for (int r = 0; r < rounds; ++r) {
    enc_runs.push_back(gbps(raw.size(), [&] { failed = kv_encode_layer(codec, g, n_pages, raw, encoded); }));
    dec_runs.push_back(gbps(raw.size(), [&] { failed = kv_decode_layer(codec, g, n_pages, encoded, decoded); }));
    copy_runs.push_back(gbps(raw.size(), [&] { std::memcpy(copy.data(), raw.data(), raw.size()); }));
    KVTIER_RETURN_IF_ERROR(failed);
  }
  speed.encode_gbps = median(enc_runs);
  speed.decode_gbps = median(dec_runs);
  speed.memcpy_gbps = median(copy_runs);
  return speed;
}

}  // namespace kvtier::bench
