// Engine: the reference Llama forward pass on the CPU, reading and writing KV
// in BlockPool pages through a per-sequence page table.
//
// The engine owns no cache policy: the caller allocates pages from the pool,
// fills SequenceKV::pages so that they cover every position a call touches,
// and decides what to keep. prefill() computes only positions >= start_pos and
// attends over the KV already in the pages for positions < start_pos (loaded
// from a cache tier, or computed earlier); a per-layer hook lets the caller
// block layer l until its KV has arrived. decode() advances several sequences
// by one token in one batch. Projections and the MLP run through OpenBLAS
// sgemm; attention is a paged online-softmax kernel (engine/attention.h).
//
// Thread safety: an Engine is used by one thread at a time (it owns scratch
// buffers and a worker pool). The Model is shared read-only. The engine
// reads and writes page bytes only; it never allocates, refs or frees pages.
// Pages it writes (positions >= start_pos, or the decode position) must not be
// shared with another sequence: a partially filled shared page must be copied
// by the caller first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/model.h"
#include "memory/block_pool.h"

namespace kvtier::engine {

// The page table of one sequence: page i holds positions [i * P, (i + 1) * P).
struct SequenceKV {
  std::vector<PageId> pages;
  uint32_t num_tokens = 0;  // positions [0, num_tokens) hold valid KV
};

// Called before layer l is computed; a non-OK status aborts the call.
using LayerHook = std::function<Status(LayerIdx)>;

// Selective recompute over reused KV (CacheBlend, EuroSys'25). The caller
// has put, in the pages, KV for some positions past start_pos that was
// computed in another context (a document segment cached on its own, moved
// to its position here with move_kv). Layers below check_layer are computed
// for every position. At check_layer, K and V are computed for every
// position and compared with the reused KV; the reused positions whose KV
// deviates most (recompute_ratio of them), and every position not reused,
// are computed through the remaining layers and their fresh KV replaces the
// reused rows; the other reused rows keep the reused KV. recompute_ratio = 1
// computes exactly what a plain prefill computes. The result is approximate
// (lossy) below 1: callers must label it and must not cache it as exact KV.
struct BlendOptions {
  // One flag per position in [start_pos, tokens.size()): 1 when the pages
  // hold reused KV for it (read from check_layer on; layer_hook(l) must have
  // put layer l in place). The last position must be 0 (it yields logits).
  std::span<const uint8_t> reused;
  uint32_t check_layer = 1;       // < the model's layers
  float recompute_ratio = 0.15f;  // in [0, 1]
  uint64_t random_seed = 0;       // benchmarks: choose the recomputed positions at random (0: by deviation)
  uint32_t recomputed = 0;        // out: reused positions recomputed from check_layer on

  Status validate(uint32_t num_layers, size_t positions) const;
};

struct PrefillOptions {
  bool all_logits = false;  // logits of every computed position, not only the last
  LayerHook layer_hook;
  BlendOptions* blend = nullptr;  // selective recompute (CPU engine; not with all_logits)
};

// Rows of logits, row-major [rows][vocab].
struct Logits {
  uint32_t rows = 0;
  uint32_t vocab = 0;
  std::vector<float> data;

  std::span<const float> row(uint32_t i) const { return {data.data() + size_t(i) * vocab, vocab}; }
  std::span<const float> last() const { return row(rows - 1); }
};

struct EngineOptions {
  uint32_t threads = 0;  // workers for GEMMs, attention and elementwise work; 0: hardware concurrency
  // OpenBLAS's own threads (a process-wide setting). 1 (the default): the
  // engine splits each GEMM across its workers itself, so no OpenBLAS thread
  // spin-waits between calls on cores that attention and transfer workers
  // need. >1: OpenBLAS threads each GEMM instead. 0: same as threads.
  uint32_t blas_threads = 1;
  uint32_t prefill_chunk = 1024;  // tokens per pass through a layer (bounds scratch memory)
  // Quantized weights (engine/matmul.h): false (the default) quantizes activations per block and
  // uses integer dot products, as llama.cpp does; true dequantizes weight panels and multiplies
  // in f32 — the reference the quantized path is measured against (slower). F32 weights ignore it.
  bool exact_weights = false;

  Status validate() const;
};

// Where prefill time went (seconds, accumulated until reset).
struct EngineProfile {
  double prefill_seconds = 0;
  double attention_seconds = 0;  // inside prefill
  double decode_seconds = 0;
  double decode_attention_seconds = 0;  // inside decode
  uint64_t prefill_tokens = 0;
  uint64_t decode_tokens = 0;
  double prefill_flops = 0;  // model FLOPs done by prefill (matrices + causal attention + logits)
};

// The forward pass as its callers (runtime, calibration, benches) see it:
// the CPU Engine below, or an accelerator engine (src/cuda) whose factory is
// registered at start-up. Contracts are Engine's, stated below.
class Forward {
 public:
  virtual ~Forward() = default;
  virtual Result<Logits> prefill(SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                                 const PrefillOptions& options = {}) = 0;
  virtual Result<Logits> decode(std::span<SequenceKV* const> seqs, std::span<const TokenId> tokens) = 0;
  virtual const Model& model() const = 0;
  virtual const KVGeometry& geometry() const = 0;
  virtual const EngineProfile& profile() const = 0;
  virtual void reset_profile() = 0;
  // Whether prefill implements PrefillOptions::blend (selective recompute).
  virtual bool supports_blend() const { return false; }
  // Whether the KV a decode step writes is bit for bit the KV a prefill of the same tokens writes
  // (and so a sequence's generated tokens may be cached as they were decoded, and a preempted
  // sequence recomputed by prefill goes on as it would have).
  virtual bool decode_matches_prefill() const { return false; }

  // Positions the page table can hold.
  uint32_t capacity(const SequenceKV& seq) const { return uint32_t(seq.pages.size()) * geometry().page_tokens; }
  // Pages needed to hold n positions.
  uint32_t pages_for(uint32_t n_tokens) const {
    return (n_tokens + geometry().page_tokens - 1) / geometry().page_tokens;
  }
};

// The engine for `pool`'s memory: the CPU Engine for host memory, the
// registered accelerator engine for device memory (Unavailable when none is
// linked in). Registration is thread-safe; the last one wins.
using ForwardFactory = Result<std::unique_ptr<Forward>> (*)(std::shared_ptr<const Model> model, BlockPool& pool,
                                                            const EngineOptions& options);
void register_accelerator_engine(ForwardFactory factory);
Result<std::unique_ptr<Forward>> create_forward(std::shared_ptr<const Model> model, BlockPool& pool,
                                                const EngineOptions& options = {});

// Copies the K and V of positions [src_pos, src_pos + n) at `layer` from the
// `src` page table to positions [dst_pos, dst_pos + n) of the `dst` table,
// turning each key by (dst_pos - src_pos) with the model's RoPE (rotations
// compose, so K(p) turned by d equals K(p + d) up to rounding); values are
// copied unchanged. Source and destination pages must not overlap. Any thread.
Status move_kv(const ModelConfig& config, BlockPool& pool, LayerIdx layer, std::span<const PageId> src,
               uint32_t src_pos, std::span<const PageId> dst, uint32_t dst_pos, uint32_t n);

// Whether the engine's kernels can run a model of this shape (whatever the CPU): Unimplemented
// with the reason where not. Engine::create checks it; `kvtier model info` too.
Status check_engine_supports(const ModelConfig& config);

class Engine final : public Forward {
 public:
  // The pool's geometry must be model.config().kv_geometry(dtype, page_tokens)
  // for some KV dtype and page size; it must outlive the engine.
  static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const Model> model, BlockPool& pool,
                                                const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // `tokens` is the whole prompt, positions [0, tokens.size()); positions
  // [start_pos, tokens.size()) are computed and their KV written. Requires
  // start_pos < tokens.size(), start_pos <= seq.num_tokens and pages covering
  // tokens.size() positions. On success seq.num_tokens = tokens.size(); on
  // failure seq.num_tokens = min(seq.num_tokens, start_pos). Returns the last
  // position's logits, or every computed position's with all_logits.
  // With options.blend, positions past start_pos are computed selectively (BlendOptions).
  Result<Logits> prefill(SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                         const PrefillOptions& options = {}) override;

  // Feeds tokens[i] at position seqs[i]->num_tokens of each sequence (pages
  // must cover it), returns one row of logits per sequence and advances each
  // num_tokens by one. Sequences must be distinct.
  Result<Logits> decode(std::span<SequenceKV* const> seqs, std::span<const TokenId> tokens) override;

  const Model& model() const override { return *model_; }
  const KVGeometry& geometry() const override { return geometry_; }
  const EngineProfile& profile() const override { return profile_; }
  void reset_profile() override { profile_ = {}; }
  bool supports_blend() const override { return true; }
  // Attention rounds a row alike in both (attention.h); the matrices do where every part of every
  // weight matrix is multiplied by integer or F16 dot products (matmul.h), not by BLAS (F32 parts,
  // EngineOptions::exact_weights).
  bool decode_matches_prefill() const override { return batch_invariant_; }

 private:
  struct Impl;
  Engine(std::shared_ptr<const Model> model, BlockPool& pool, const EngineOptions& options);
  Result<Logits> prefill_blend(SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                               const PrefillOptions& options);
  std::vector<double> check_deviation(SequenceKV& seq, const BlendOptions& blend, uint32_t start_pos);

  std::shared_ptr<const Model> model_;
  BlockPool& pool_;
  KVGeometry geometry_;
  EngineOptions options_;
  EngineProfile profile_;
  std::unique_ptr<Impl> impl_;
  bool batch_invariant_ = false;  // decode_matches_prefill()
};

}  // namespace kvtier::engine
