// Micro-benchmark of the KV codecs (tiers/kv_codec.h): encode and decode
// speed of one layer of an n-page chunk, against memcpy of the same raw
// bytes measured in the same run (DESIGN §9: claims are ratios). One
// thread; the data is synthetic (keys with a few outlier channels, values
// without), generated once.
#pragma once

#include <cstdint>

#include "kvtier/types.h"
#include "tiers/kv_codec.h"

namespace kvtier::bench {

struct CodecSpeed {
  size_t raw_bytes = 0;      // one layer of n pages, in the geometry's dtype
  size_t encoded_bytes = 0;  // kv_codec_layer_bytes
  double encode_gbps = 0;    // raw bytes encoded per second / 1e9 (median of rounds)
  double decode_gbps = 0;    // raw bytes produced per second / 1e9 (median of rounds)
  double memcpy_gbps = 0;    // memcpy of raw_bytes (median of rounds)
};

// InvalidArgument for a geometry the codec refuses, or rounds < 1.
Result<CodecSpeed> measure_codec_speed(KvCodec codec, const KVGeometry& g, uint32_t n_pages, int rounds);

}  // namespace kvtier::bench
