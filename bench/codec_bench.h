// The KV codecs (tiers/kv_codec.h) measured two ways.
//
// measure_codec_speed: a micro-benchmark of encode and decode speed of one
// layer of an n-page chunk, against memcpy of the same raw bytes measured in
// the same run (DESIGN §9: claims are ratios). One thread; the data is
// synthetic (keys with a few outlier channels, values without).
//
// run_codec_bench (`kvtier bench codec`): one cache per codec (kKvCodecs,
// none first) with a disk tier of that codec, all on the same model and pool dtype.
// Each prompt's prefix is computed once, on the `none` cache, and the same
// KV is committed to every cache, so each codec encodes identical bytes.
// Then, with the prefix only on disk (every cache reopened on its directory,
// so no hit is served from a disk tier's open-region buffer):
//   * load time — lookup to every layer of the disk loads in place — and
//     TTFT of the new suffix, per prefix length, medians over `rounds`,
//     rounds interleaved across codecs; each as a ratio to `none`;
//   * error against `none` (the exact disk hit): max and mean |logit
//     difference| and KL(p_none ‖ p_codec) at the last prompt position, and
//     greedy agreement over `gen_tokens` tokens, over `prompts` prompts
//     whose prefix is the shortest prefix length; and, as the floor, the
//     `none` hit against a full recompute of the prompt (no cache), which
//     differs only by the f32 rounding of computing the suffix in another batch.
// The planner is given a profile in which loading always wins, and every
// hit is checked to have loaded the whole prefix from disk (lossy codecs:
// labelled lossy); anything else fails the run. Uses files under a fresh
// directory inside `disk_dir` and removes them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kvtier/types.h"
#include "codec/kv_codec.h"

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

struct CodecBenchOptions {
  std::string model = "small";              // preset or .gguf; lossy codecs need head_dim % 32 == 0
  std::string text;                         // prompt text (prompt_text.h); empty: the default for the model
  DType kv_dtype = DType::kF16;             // the pool's dtype (what compression_ratio is against)
  std::vector<uint32_t> prefixes = {4096, 16384};  // cached prefix lengths, multiples of page_tokens * chunk_pages
  uint32_t suffix_tokens = 64;              // new tokens after the prefix
  uint32_t prompts = 20;                    // error prompts (at the shortest prefix)
  uint32_t gen_tokens = 64;                 // greedy tokens compared per prompt
  int rounds = 3;                           // timed rounds (medians)
  std::string disk_dir;                     // parent of the scratch directory; empty: the system temp directory
  uint32_t threads = 0;                     // compute threads (0: all cores)
  uint64_t seed = 1;                        // prompts' random tokens

  Status validate() const;
};

// One prefix length's timings for one codec; ratios against `none` in the same run.
struct CodecTiming {
  uint32_t prefix = 0;
  double load_ms = 0, ttft_ms = 0;  // medians
  double load_ratio_vs_none = 0, ttft_ratio_vs_none = 0;
  double load_gbps = 0;  // stored (encoded) payload bytes of the prefix / load_ms: compare with the disk's raw read rate
};

// One set of outputs against a reference set, over the error prompts.
struct ErrorFigures {
  double max_abs_logit_diff = 0, mean_abs_logit_diff = 0;  // last prompt position, over the vocabulary
  double kl = 0, kl_max = 0;        // KL(p_reference ‖ p), nats: mean and max over prompts
  double top1_agreement = 0;        // share of prompts whose first token agrees
  double greedy_agreement = 0;      // share of all greedy tokens that agree, position by position
  double greedy_identical = 0;      // share of prompts whose greedy tokens are all identical
  double greedy_common_prefix = 0;  // mean length of the agreeing leading run, tokens
  // The reference's top-2 logit margin where a continuation first differed,
  // largest over prompts (0: none differed): how near a tie a flip needed.
  double greedy_flip_margin_max = 0;
};

struct CodecRow {
  KvCodec codec = KvCodec::kNone;
  double bytes_per_token = 0;          // encoded payload
  double entry_bytes_per_token = 0;    // whole disk entries (header, hashes, checks, 4 KiB alignment)
  double compression_ratio = 0;        // pool dtype bytes / encoded payload bytes, per token
  double entry_compression_ratio = 0;  // the same against entry bytes
  CodecSpeed speed;
  std::vector<CodecTiming> timings;    // one per prefix, in option order
  ErrorFigures error;                  // against the `none` disk hit (zero for `none` itself)
};

struct CodecBenchResult {
  CodecBenchOptions options;
  std::string text;  // where the prompts came from
  uint32_t error_prefix_tokens = 0;
  uint32_t chunk_pages = 0, page_tokens = 0;
  size_t raw_bytes_per_token = 0;      // the pool's
  double reference_top1_prob = 0;      // mean top softmax probability of the `none` hit: how peaked it is
  double reference_logit_std = 0;      // mean standard deviation of its last-position logits
  double reference_margin_median = 0;  // median top-2 logit margin of its greedy positions
  ErrorFigures none_vs_recompute;      // the `none` disk hit against a full recompute: the f32 rounding floor
  std::vector<CodecRow> rows;          // kKvCodecs' order: none first

  std::string to_json() const;
  std::string to_table() const;
};

Result<CodecBenchResult> run_codec_bench(const CodecBenchOptions& options, std::FILE* progress);

}  // namespace kvtier::bench
