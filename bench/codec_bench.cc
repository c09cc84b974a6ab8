#include "codec_bench.h"

#include "scratch_dir.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "prompt_text.h"
#include <vector>

#include "common/stats.h"
#include "engine/gguf.h"
#include "engine/sampler.h"
#include "logit_compare.h"
#include "prompt_text.h"
#include "runtime/cached_prefill.h"
#include "runtime/calibration.h"
#include "runtime/runtime.h"
#include "tiers/chunk_format.h"

namespace kvtier::bench {

namespace {

using SteadyClock = std::chrono::steady_clock;

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
  const auto t0 = SteadyClock::now();
  work();
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
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

// ---------------------------------------------------------------------------
// `kvtier bench codec`

namespace {

constexpr size_t kDisk = static_cast<size_t>(TierKind::kDisk);
constexpr size_t kDiskAlign = 4096;  // disk entries are O_DIRECT-aligned (tiers/chunk_format.h)

double ms_since(SteadyClock::time_point t0) { return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count(); }

// The runtime's page and chunk sizes, so the bench's caches match a server's.
uint32_t page_tokens() {
  const RuntimeOptions defaults;
  return defaults.page_tokens;
}
uint32_t chunk_pages() {
  const RuntimeOptions defaults;
  return defaults.chunk_pages;
}

// A preset (synthetic weights, the runtime's default seed) or a GGUF file; shared by every codec's engine.
Result<std::shared_ptr<const engine::Model>> load_model(const std::string& name) {
  auto preset = engine::model_preset(name);
  const RuntimeOptions defaults;
  if (preset.ok()) return engine::Model::synthetic(*preset, defaults.model_seed);
  std::error_code ec;
  if (std::filesystem::exists(name, ec)) return engine::load_gguf(name);
  return Status::InvalidArgument("bench codec: model '" + name + "' is neither a preset nor an existing GGUF file");
}

// One cache whose disk tier writes `codec`, and an engine on its pool.
// The engine is declared last: it goes before the cache whose pool it uses.
struct CodecStack {
  KvCodec codec = KvCodec::kNone;
  std::filesystem::path dir;  // its disk tier's directory
  std::shared_ptr<const engine::Model> model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<engine::Forward> engine;
};

// Loading always beats recomputing: the bench measures loads, not the planner's choice.
CostProfile always_load_profile() {
  CostProfile p;
  p.gemm_flops_per_s = p.attn_flops_per_s = 1e6;
  p.link(TierKind::kHost) = {0, 1e12};
  p.link(TierKind::kDisk) = {0, 1e12};
  p.source = "bench codec: loading always wins";
  return p;
}

Result<CodecStack> make_stack(KvCodec codec, std::shared_ptr<const engine::Model> model, const CodecBenchOptions& o,
                              const std::filesystem::path& dir) {
  const KVGeometry geo = model->config().kv_geometry(o.kv_dtype, page_tokens());
  if (Status ok = kv_codec_check(codec, geo); !ok.ok()) return Status::InvalidArgument("bench codec: " + ok.message());
  const size_t bpt = geo.bytes_per_token();
  const uint32_t longest = *std::max_element(o.prefixes.begin(), o.prefixes.end());
  const uint32_t shortest = *std::min_element(o.prefixes.begin(), o.prefixes.end());
  uint64_t stored_tokens = uint64_t(o.prompts) * shortest;
  for (uint32_t p : o.prefixes) stored_tokens += p;
  KVCacheOptions co;
  co.geometry = geo;
  co.chunk_pages = chunk_pages();
  // A committed prefix beside a request's pages (prompt and greedy tokens), with room to spare.
  co.device_bytes = (2 * (size_t(longest) + o.suffix_tokens + o.gen_tokens) + 2048) * bpt;
  co.host_bytes = 0;  // every hit reads the disk
  co.disk_dir = dir.string();
  // Every prefix stays on disk for the whole run (entries are at most raw size plus alignment).
  co.disk_bytes = stored_tokens * bpt * 5 / 4 + (size_t(256) << 20);
  co.disk_codec = codec;
  co.model_cost = model_cost(model->config(), geo);
  co.profile = always_load_profile();
  CodecStack st;
  st.codec = codec;
  st.dir = dir;
  st.model = model;
  KVTIER_ASSIGN_OR_RETURN(st.cache, KVCache::create(co));
  engine::EngineOptions eo;
  eo.threads = o.threads;
  KVTIER_ASSIGN_OR_RETURN(st.engine, engine::create_forward(std::move(model), st.cache->pool(), eo));
  return st;
}

std::vector<TokenId> prompt_tokens(const PromptText& text, uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  return text.draw(rng, uint32_t(n));
}

// One request's outcome: TTFT, the last prompt position's logits, the greedy
// tokens (the first included) and each one's top-2 logit margin.
struct Outcome {
  double ms = 0;
  std::vector<float> logits;
  std::vector<TokenId> greedy;
  std::vector<double> margins;
  LeaseReport report;
};

// Appends the greedy tokens from the prompt's last `logits` on to `out`, `count` in all.
Status decode_greedy(CodecStack& s, CacheLease& lease, engine::SequenceKV& kv, std::span<const float> logits,
                     uint32_t count, Outcome& out) {
  TokenId token = engine::argmax(logits);
  out.greedy.push_back(token);
  out.margins.push_back(top2_margin(logits));
  while (out.greedy.size() < count) {
    KVTIER_RETURN_IF_ERROR(s.cache->grow(lease, kv.num_tokens + 1));
    kv.pages = lease.pages();
    engine::SequenceKV* seqs[] = {&kv};
    KVTIER_ASSIGN_OR_RETURN(engine::Logits next, s.engine->decode(seqs, std::span(&token, 1)));
    token = engine::argmax(next.last());
    out.greedy.push_back(token);
    out.margins.push_back(top2_margin(next.last()));
  }
  return Status::Ok();
}

// Commits `tokens` to `dst` with the KV of `src_pages` of `src` (same geometry; host-addressable pools).
Status commit_copy(CodecStack& dst, const Namespace& ns, std::span<const TokenId> tokens, const BlockPool& src,
                   std::span<const PageId> src_pages) {
  KVTIER_ASSIGN_OR_RETURN(CacheLease lease, dst.cache->fresh(ns, tokens.size()));
  BlockPool& pool = dst.cache->pool();
  const size_t bytes = pool.geometry().page_bytes();
  for (size_t i = 0; i < lease.pages().size(); ++i)
    std::memcpy(pool.page(lease.pages()[i]), src.page(src_pages[i]), bytes);
  return dst.cache->commit(lease, tokens);
}

// Closes the stack and opens it again on its disk directory (a restart): a
// disk tier serves the entries of its open region from that region's memory
// buffer, flushed or not, so without this some "disk" hits (all of them, for
// a codec whose entries fit one region) would be memory reads.
Status reopen(CodecStack& s, const CodecBenchOptions& o) {
  const KvCodec codec = s.codec;
  const std::filesystem::path dir = s.dir;
  std::shared_ptr<const engine::Model> model = s.model;
  s.engine.reset();  // before the cache whose pool it uses
  s.cache.reset();   // the disk tier writes what it holds and closes
  KVTIER_ASSIGN_OR_RETURN(s, make_stack(codec, std::move(model), o, dir));
  return Status::Ok();
}

// The reference: the whole prompt computed without the cache on the `none`
// stack, and `gen` greedy tokens. Its first `prefix` tokens are then
// committed there and, copied page by page, to every other stack, so each
// codec encodes the same KV; every stack is then reopened, leaving them on disk only.
Result<Outcome> reference_and_seed(std::vector<CodecStack>& stacks, const Namespace& ns, std::span<const TokenId> prompt,
                                   uint32_t prefix, uint32_t gen, const CodecBenchOptions& o) {
  CodecStack& none = stacks.front();
  const auto t0 = SteadyClock::now();
  KVTIER_ASSIGN_OR_RETURN(CacheLease lease, none.cache->fresh(ns, prompt.size()));
  engine::SequenceKV kv;
  KVTIER_ASSIGN_OR_RETURN(engine::Logits logits, cached_prefill(*none.engine, *none.cache, lease, kv, prompt));
  Outcome ref;
  ref.ms = ms_since(t0);
  ref.logits.assign(logits.last().begin(), logits.last().end());
  KVTIER_RETURN_IF_ERROR(decode_greedy(none, lease, kv, logits.last(), gen, ref));
  const auto prefix_tokens = prompt.first(prefix);
  for (size_t i = 1; i < stacks.size(); ++i)
    KVTIER_RETURN_IF_ERROR(commit_copy(stacks[i], ns, prefix_tokens, none.cache->pool(), lease.pages()));
  KVTIER_RETURN_IF_ERROR(none.cache->commit(lease, prefix_tokens));
  for (CodecStack& s : stacks) KVTIER_RETURN_IF_ERROR(s.cache->flush());  // drains the disk stores first
  for (CodecStack& s : stacks) KVTIER_RETURN_IF_ERROR(reopen(s, o));
  return ref;
}

// The whole prefix came from disk (not recomputed, no load failed), labelled lossy exactly when the codec is.
Status check_disk_hit(KvCodec codec, const LeaseReport& r, uint32_t prefix) {
  const std::string what = "bench codec: " + std::string(kv_codec_name(codec)) + " hit of a " +
                           std::to_string(prefix) + "-token prefix ";
  if (r.reused_tokens_by_tier[kDisk] != prefix || r.reused_tokens() != prefix)
    return Status::Internal(what + "reused " + std::to_string(r.reused_tokens_by_tier[kDisk]) + " tokens from disk and " +
                            std::to_string(r.reused_tokens()) + " in all (a miss, a recompute or a failed load)");
  const uint32_t lossy = kv_codec_lossy(codec) ? prefix : 0;
  if (r.lossy_tokens != lossy)
    return Status::Internal(what + "labelled " + std::to_string(r.lossy_tokens) + " tokens lossy, expected " +
                            std::to_string(lossy));
  return Status::Ok();
}

// The prefix only on disk, loaded: lookup until every layer of every load is in place; nothing is computed.
Result<double> timed_load(CodecStack& s, const Namespace& ns, std::span<const TokenId> prompt, uint32_t prefix) {
  KVTIER_RETURN_IF_ERROR(s.cache->flush());
  const auto t0 = SteadyClock::now();
  KVTIER_ASSIGN_OR_RETURN(CacheLookup look, s.cache->lookup(ns, prompt));
  const Plan plan = s.cache->plan(look);
  KVTIER_ASSIGN_OR_RETURN(CacheLease lease, s.cache->apply(std::move(look), plan));
  for (uint32_t l = 0; l < s.cache->geometry().num_layers; ++l) KVTIER_RETURN_IF_ERROR(lease.wait_layer(LayerIdx(l)));
  lease.wait_all();  // every load finished, not only its last layer published (the report's lossy count needs it)
  const double ms = ms_since(t0);
  const LeaseReport report = lease.report();
  s.cache->release(lease);
  KVTIER_RETURN_IF_ERROR(check_disk_hit(s.codec, report, prefix));
  return ms;
}

// The prefix only on disk, the whole prompt requested: TTFT (lookup to the
// first token, loads overlapping compute layer by layer), then greedy tokens.
Result<Outcome> disk_hit(CodecStack& s, const Namespace& ns, std::span<const TokenId> prompt, uint32_t prefix,
                         uint32_t gen) {
  KVTIER_RETURN_IF_ERROR(s.cache->flush());
  const auto t0 = SteadyClock::now();
  KVTIER_ASSIGN_OR_RETURN(CacheLookup look, s.cache->lookup(ns, prompt));
  const Plan plan = s.cache->plan(look);
  KVTIER_ASSIGN_OR_RETURN(CacheLease lease, s.cache->apply(std::move(look), plan));
  engine::SequenceKV kv;
  KVTIER_ASSIGN_OR_RETURN(engine::Logits logits, cached_prefill(*s.engine, *s.cache, lease, kv, prompt));
  Outcome out;
  out.ms = ms_since(t0);
  out.logits.assign(logits.last().begin(), logits.last().end());
  KVTIER_RETURN_IF_ERROR(decode_greedy(s, lease, kv, logits.last(), gen, out));
  lease.wait_all();
  out.report = lease.report();
  s.cache->release(lease);
  KVTIER_RETURN_IF_ERROR(check_disk_hit(s.codec, out.report, prefix));
  return out;
}

Namespace bench_namespace(const engine::Model& model, const std::string& salt) {
  return Namespace{model.fingerprint(), "", "bench-codec-" + salt};
}

// Sizes from the formats, and encode/decode speed against memcpy.
Status measure_sizes_and_speeds(CodecBenchResult& res, const KVGeometry& g, std::FILE* progress) {
  const uint32_t chunk = chunk_pages();
  const double chunk_tokens = double(chunk) * g.page_tokens;
  const uint32_t speed_pages = 4096 / g.page_tokens;  // one layer of a 4096-token prefix: past the L2 cache
  for (KvCodec codec : kKvCodecs) {
    CodecRow row;
    row.codec = codec;
    const ChunkGeometry cg{g, chunk, codec};
    row.bytes_per_token = double(cg.stored_payload_bytes(chunk, codec)) / chunk_tokens;
    row.entry_bytes_per_token = double(chunk_entry_layout(cg, chunk, kDiskAlign).entry_bytes) / chunk_tokens;
    row.compression_ratio = double(res.raw_bytes_per_token) / row.bytes_per_token;
    KVTIER_ASSIGN_OR_RETURN(row.speed, measure_codec_speed(codec, g, speed_pages, std::max(5, res.options.rounds)));
    if (progress)
      std::fprintf(progress, "bench codec: %-5s %.1f bytes/token (%.2fx), encode %.2f / decode %.2f / memcpy %.2f GB/s\n",
                   std::string(kv_codec_name(codec)).c_str(), row.bytes_per_token, row.compression_ratio,
                   row.speed.encode_gbps, row.speed.decode_gbps, row.speed.memcpy_gbps);
    res.rows.push_back(row);
  }
  for (CodecRow& row : res.rows) row.entry_compression_ratio = double(res.raw_bytes_per_token) / row.entry_bytes_per_token;
  return Status::Ok();
}

// Load time and TTFT per prefix length and codec; rounds interleave the codecs, after one warm-up round.
Status measure_timings(std::vector<CodecStack>& stacks, const engine::Model& model, const PromptText& text,
                       CodecBenchResult& res, std::FILE* progress) {
  const CodecBenchOptions& o = res.options;
  for (uint32_t prefix : o.prefixes) {
    const Namespace ns = bench_namespace(model, "time-" + std::to_string(prefix));
    const auto prompt = prompt_tokens(text, o.seed * 7919 + prefix, size_t(prefix) + o.suffix_tokens);
    if (progress) std::fprintf(progress, "bench codec: computing a %u-token prefix once for every codec...\n", prefix);
    KVTIER_RETURN_IF_ERROR(reference_and_seed(stacks, ns, prompt, prefix, 1, o).status());
    std::vector<std::vector<double>> load(stacks.size()), ttft(stacks.size());
    for (int round = 0; round <= o.rounds; ++round)
      for (size_t c = 0; c < stacks.size(); ++c) {
        KVTIER_ASSIGN_OR_RETURN(double load_ms, timed_load(stacks[c], ns, prompt, prefix));
        KVTIER_ASSIGN_OR_RETURN(Outcome hit, disk_hit(stacks[c], ns, prompt, prefix, 1));
        if (round == 0) continue;  // warm-up: scratch buffers, worker threads
        load[c].push_back(load_ms);
        ttft[c].push_back(hit.ms);
      }
    for (size_t c = 0; c < stacks.size(); ++c) {
      CodecTiming t{.prefix = prefix, .load_ms = median(load[c]), .ttft_ms = median(ttft[c])};
      const CodecTiming& none = c == 0 ? t : res.rows[0].timings.back();
      t.load_ratio_vs_none = none.load_ms > 0 ? t.load_ms / none.load_ms : 0;
      t.load_gbps = t.load_ms > 0 ? res.rows[c].bytes_per_token * prefix / (t.load_ms * 1e6) : 0;
      t.ttft_ratio_vs_none = none.ttft_ms > 0 ? t.ttft_ms / none.ttft_ms : 0;
      res.rows[c].timings.push_back(t);
      if (progress)
        std::fprintf(progress, "bench codec: %-4s prefix %6u: load %8.1f ms (%.2fx none), TTFT %8.1f ms (%.2fx none)\n",
                     std::string(kv_codec_name(stacks[c].codec)).c_str(), prefix, t.load_ms, t.load_ratio_vs_none,
                     t.ttft_ms, t.ttft_ratio_vs_none);
    }
  }
  return Status::Ok();
}

// Running sums of one set of outputs against a reference set.
struct ErrorSums {
  double max_abs = 0, sum_abs = 0, kl_sum = 0, kl_max = 0, flip_margin_max = 0;
  uint64_t logits = 0, greedy_same = 0, greedy_total = 0, common_prefix = 0;
  uint32_t prompts = 0, top1_same = 0, identical = 0;

  void add(const Outcome& ref, const Outcome& got) {
    for (size_t i = 0; i < ref.logits.size(); ++i) {
      const double diff = std::fabs(double(ref.logits[i]) - double(got.logits[i]));
      max_abs = std::max(max_abs, diff);
      sum_abs += diff;
    }
    logits += ref.logits.size();
    const double kl = kl_divergence(ref.logits, got.logits);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    ++prompts;
    top1_same += ref.greedy.front() == got.greedy.front();
    greedy_same += same_positions(ref.greedy, got.greedy);
    greedy_total += ref.greedy.size();
    identical += ref.greedy == got.greedy;
    const size_t run = common_prefix_length(ref.greedy, got.greedy);
    common_prefix += run;
    if (run < ref.margins.size()) flip_margin_max = std::max(flip_margin_max, ref.margins[run]);
  }
  ErrorFigures figures() const {
    ErrorFigures f;
    f.max_abs_logit_diff = max_abs;
    f.mean_abs_logit_diff = logits ? sum_abs / double(logits) : 0;
    f.kl = prompts ? kl_sum / prompts : 0;
    f.kl_max = kl_max;
    f.top1_agreement = prompts ? double(top1_same) / prompts : 0;
    f.greedy_agreement = greedy_total ? double(greedy_same) / double(greedy_total) : 0;
    f.greedy_identical = prompts ? double(identical) / prompts : 0;
    f.greedy_common_prefix = prompts ? double(common_prefix) / prompts : 0;
    f.greedy_flip_margin_max = flip_margin_max;
    return f;
  }
};

double logit_std(std::span<const float> logits) {
  double sum = 0, sum_sq = 0;
  for (float v : logits) sum += v, sum_sq += double(v) * v;
  const double mean = sum / double(logits.size());
  return std::sqrt(std::max(0.0, sum_sq / double(logits.size()) - mean * mean));
}

// Every codec's disk hit against the `none` hit, and that against a full
// recompute, over the error prompts (at the shortest prefix).
Status measure_errors(std::vector<CodecStack>& stacks, const engine::Model& model, const PromptText& text,
                      CodecBenchResult& res, std::FILE* progress) {
  const CodecBenchOptions& o = res.options;
  const uint32_t prefix = res.error_prefix_tokens;
  std::vector<ErrorSums> sums(stacks.size());
  ErrorSums floor;
  std::vector<double> margins;  // the `none` hit's, at every greedy position
  for (uint32_t i = 0; i < o.prompts; ++i) {
    const Namespace ns = bench_namespace(model, "error-" + std::to_string(i));
    const auto prompt = prompt_tokens(text, o.seed * 104729 + i, size_t(prefix) + o.suffix_tokens);
    KVTIER_ASSIGN_OR_RETURN(Outcome recompute, reference_and_seed(stacks, ns, prompt, prefix, o.gen_tokens, o));
    std::vector<Outcome> hits;
    for (CodecStack& s : stacks) {
      KVTIER_ASSIGN_OR_RETURN(Outcome hit, disk_hit(s, ns, prompt, prefix, o.gen_tokens));
      hits.push_back(std::move(hit));
    }
    floor.add(recompute, hits[0]);
    for (size_t c = 0; c < stacks.size(); ++c) sums[c].add(hits[0], hits[c]);
    res.reference_top1_prob += top_probability(hits[0].logits) / o.prompts;
    margins.insert(margins.end(), hits[0].margins.begin(), hits[0].margins.end());
    res.reference_logit_std += logit_std(hits[0].logits) / o.prompts;
    if (progress) {
      std::fprintf(progress, "bench codec: error prompt %u/%u:", i + 1, o.prompts);
      for (size_t c = 1; c < stacks.size(); ++c)
        std::fprintf(progress, " %s KL %.2e, greedy agreement %.3f;", std::string(kv_codec_name(stacks[c].codec)).c_str(),
                     sums[c].kl_sum / sums[c].prompts, double(sums[c].greedy_same) / double(sums[c].greedy_total));
      std::fprintf(progress, " none vs recompute max |dlogit| %.1e\n", floor.max_abs);
    }
  }
  for (size_t c = 0; c < stacks.size(); ++c) res.rows[c].error = sums[c].figures();
  res.none_vs_recompute = floor.figures();
  res.reference_margin_median = median(margins);
  return Status::Ok();
}

}  // namespace

Status CodecBenchOptions::validate() const {
  const uint32_t chunk_tokens = page_tokens() * chunk_pages();
  if (model.empty()) return Status::InvalidArgument("bench codec: --model is required");
  if (prefixes.empty()) return Status::InvalidArgument("bench codec: --prefixes needs at least one length");
  for (uint32_t p : prefixes)
    if (p == 0 || p % chunk_tokens != 0)
      return Status::InvalidArgument("bench codec: prefix lengths must be positive multiples of " +
                                     std::to_string(chunk_tokens) + " tokens (whole disk chunks), got " +
                                     std::to_string(p));
  if (suffix_tokens == 0 || prompts == 0 || gen_tokens == 0 || rounds < 1)
    return Status::InvalidArgument("bench codec: suffix tokens, prompts, gen tokens and rounds must be >= 1");
  return Status::Ok();
}

Result<CodecBenchResult> run_codec_bench(const CodecBenchOptions& o, std::FILE* progress) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const engine::Model> model, load_model(o.model));
  const uint32_t longest = *std::max_element(o.prefixes.begin(), o.prefixes.end());
  if (uint64_t(longest) + o.suffix_tokens + o.gen_tokens > model->config().max_context)
    return Status::InvalidArgument("bench codec: the longest prefix, suffix and gen tokens exceed the model's context of " +
                                   std::to_string(model->config().max_context));
  ScratchDir dir(o.disk_dir, "codec");
  KVTIER_RETURN_IF_ERROR(dir.create());
  std::vector<CodecStack> stacks;  // declared after `dir`: closed before it is removed
  for (KvCodec codec : kKvCodecs) {
    const std::string name(kv_codec_name(codec));
    if (progress) std::fprintf(progress, "bench codec: cache with a %s disk tier under %s\n", name.c_str(), dir.path().c_str());
    KVTIER_ASSIGN_OR_RETURN(CodecStack stack, make_stack(codec, model, o, dir.path() / name));
    stacks.push_back(std::move(stack));
  }
  CodecBenchResult res;
  res.options = o;
  res.error_prefix_tokens = *std::min_element(o.prefixes.begin(), o.prefixes.end());
  const KVGeometry& geo = stacks.front().cache->geometry();
  res.page_tokens = geo.page_tokens;
  res.chunk_pages = chunk_pages();
  res.raw_bytes_per_token = geo.bytes_per_token();
  KVTIER_RETURN_IF_ERROR(measure_sizes_and_speeds(res, geo, progress));
  KVTIER_ASSIGN_OR_RETURN(const PromptText text, PromptText::open(*model, o.text));
  res.text = text.source();
  KVTIER_RETURN_IF_ERROR(measure_timings(stacks, *model, text, res, progress));
  KVTIER_RETURN_IF_ERROR(measure_errors(stacks, *model, text, res, progress));
  return res;
}

namespace {

void add_error_figures(const ErrorFigures& e, const std::string& prefix, nlohmann::json& j) {
  j[prefix + "max_abs_logit_diff"] = e.max_abs_logit_diff;
  j[prefix + "mean_abs_logit_diff"] = e.mean_abs_logit_diff;
  j[prefix + "kl"] = e.kl;
  j[prefix + "kl_max"] = e.kl_max;
  j[prefix + "top1_agreement"] = e.top1_agreement;
  j[prefix + "greedy_agreement"] = e.greedy_agreement;
  j[prefix + "greedy_identical_prompts"] = e.greedy_identical;
  j[prefix + "greedy_common_prefix_tokens"] = e.greedy_common_prefix;
  j[prefix + "greedy_flip_margin_max"] = e.greedy_flip_margin_max;
}

}  // namespace

std::string CodecBenchResult::to_json() const {
  nlohmann::json j;
  j["bench"] = "codec";
  j["model"] = options.model;
  j["text"] = text;
  j["kv_dtype"] = std::string(dtype_name(options.kv_dtype));
  j["page_tokens"] = page_tokens;
  j["chunk_pages"] = chunk_pages;
  j["raw_bytes_per_token"] = raw_bytes_per_token;
  j["prefixes"] = options.prefixes;
  j["suffix_tokens"] = options.suffix_tokens;
  j["rounds"] = options.rounds;
  j["prompts"] = options.prompts;
  j["gen_tokens"] = options.gen_tokens;
  j["error_prefix_tokens"] = error_prefix_tokens;
  j["error_reference"] = "the none disk hit";
  j["reference_top1_prob"] = reference_top1_prob;
  j["reference_logit_std"] = reference_logit_std;
  j["reference_margin_median"] = reference_margin_median;
  add_error_figures(none_vs_recompute, "none_vs_recompute_", j);
  j["threads"] = options.threads;
  j["seed"] = options.seed;
  for (const CodecRow& r : rows) {
    nlohmann::json row = {{"codec", std::string(kv_codec_name(r.codec))},
                          {"bytes_per_token", r.bytes_per_token},
                          {"compression_ratio", r.compression_ratio},
                          {"entry_bytes_per_token", r.entry_bytes_per_token},
                          {"entry_compression_ratio", r.entry_compression_ratio},
                          {"encode_gbps", r.speed.encode_gbps},
                          {"decode_gbps", r.speed.decode_gbps},
                          {"memcpy_gbps", r.speed.memcpy_gbps}};
    for (const CodecTiming& t : r.timings) {
      const std::string n = std::to_string(t.prefix);
      row["load_ms_" + n] = t.load_ms;
      row["load_ratio_vs_none_" + n] = t.load_ratio_vs_none;
      row["load_gbps_" + n] = t.load_gbps;
      row["ttft_ms_" + n] = t.ttft_ms;
      row["ttft_ratio_vs_none_" + n] = t.ttft_ratio_vs_none;
    }
    add_error_figures(r.error, "", row);
    j["codecs"].push_back(row);
  }
  return j.dump(2);
}

std::string CodecBenchResult::to_table() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "model %s, %s pool (%zu bytes/token); medians of %d rounds; error vs none: %u prompts at %u + %u tokens, "
                "%u greedy tokens\n",
                options.model.c_str(), std::string(dtype_name(options.kv_dtype)).c_str(), raw_bytes_per_token,
                options.rounds, options.prompts, error_prefix_tokens, options.suffix_tokens, options.gen_tokens);
  std::string out = buf;
  out += "codec  ratio  enc GB/s  dec GB/s  memcpy  ";
  for (uint32_t p : options.prefixes) {
    std::snprintf(buf, sizeof buf, "load@%-6u (vs none)  ttft@%-6u (vs none)  ", p, p);
    out += buf;
  }
  out += "max|dlogit|  mean|dlogit|        KL  greedy  identical\n";
  for (const CodecRow& r : rows) {
    std::snprintf(buf, sizeof buf, "%-5s  %5.2f  %8.2f  %8.2f  %6.2f  ", std::string(kv_codec_name(r.codec)).c_str(),
                  r.compression_ratio, r.speed.encode_gbps, r.speed.decode_gbps, r.speed.memcpy_gbps);
    out += buf;
    for (const CodecTiming& t : r.timings) {
      std::snprintf(buf, sizeof buf, "%8.1f ms (%5.2f)  %8.1f ms (%5.2f)  ", t.load_ms, t.load_ratio_vs_none, t.ttft_ms,
                    t.ttft_ratio_vs_none);
      out += buf;
    }
    std::snprintf(buf, sizeof buf, "%11.4f  %12.5f  %8.2e  %6.3f  %9.2f\n", r.error.max_abs_logit_diff,
                  r.error.mean_abs_logit_diff, r.error.kl, r.error.greedy_agreement, r.error.greedy_identical);
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "errors are against the none disk hit; none against a full recompute: max|dlogit| %.2e, KL %.2e, "
                "greedy %.3f (f32 rounding)\n",
                none_vs_recompute.max_abs_logit_diff, none_vs_recompute.kl, none_vs_recompute.greedy_agreement);
  out += buf;
  return out;
}

}  // namespace kvtier::bench
