// A KVCache + Engine rig on the tiny model with every local tier, and a
// request driver that mirrors the runtime: lookup → plan → apply →
// cached_prefill → greedy decode → commit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "runtime/cached_prefill.h"
#include "runtime/calibration.h"
#include "tiers/host_tier.h"

namespace kvtier::testing {

struct RigOptions {
  DType dtype = DType::kF32;
  uint32_t device_pages = 256;
  uint32_t host_pages = 256;
  uint32_t chunk_pages = 4;
  bool disk = true;
  bool fast_links = true;  // planner always prefers loading
  double disk_bytes_per_s = 1e12;  // the planner's disk link
  size_t region_bytes = size_t(1) << 20;
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  bool store_tails = true;
  MemoryBackend device = MemoryBackend::kCpu;  // kCuda: pool and engine on the GPU (tests/cuda)
  FileSystem* disk_fs = nullptr;               // fault injection under the disk tier
  std::shared_ptr<Tier> remote;                // a remote chunk store (same geometry)
  KvCodec disk_codec = KvCodec::kNone;
  KvCodec remote_codec = KvCodec::kNone;       // must be the remote's geometry codec
  KvCodec host_codec = KvCodec::kNone;
  std::string disk_dir;                        // empty: a fresh directory of the rig's own (removed after)
  bool layerwise = true;
  std::shared_ptr<const engine::Model> model;  // null: the tiny preset, seed 3
  const Clock* clock = &Clock::system();       // retention hints expire by it
  double max_retained_share = 0.5;
};

struct Outcome {
  std::vector<float> logits;    // last prompt position
  std::vector<TokenId> tokens;  // greedy continuation
  LeaseReport report;
  Plan plan;
};

class CacheRig {
 public:
  explicit CacheRig(RigOptions o = {}) : o_(o) {
    model_ = o.model ? o.model : *engine::Model::synthetic(*engine::model_preset("tiny"), 3);
    const engine::ModelConfig* cfg = &model_->config();
    const KVGeometry g = cfg->kv_geometry(o.dtype, 16);
    static int counter = 0;
    own_dir_ = o.disk_dir.empty();
    dir_ = own_dir_ ? std::filesystem::temp_directory_path() /
                          ("kvtier-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++))
                    : std::filesystem::path(o.disk_dir);
    if (own_dir_) std::filesystem::remove_all(dir_);
    KVCacheOptions co;
    co.geometry = g;
    co.chunk_pages = o.chunk_pages;
    co.device_bytes = size_t(o.device_pages) * g.page_bytes();
    co.host_bytes = size_t(o.host_pages) * g.page_bytes();
    if (o.disk) {
      co.disk_dir = dir_.string();
      co.disk_region_bytes = o.region_bytes;
      co.disk_bytes = size_t(16) << 20;
    }
    co.model_cost = model_cost(*cfg, g);
    co.write_policy = o.write_policy;
    co.store_tails = o.store_tails;
    co.disk_fs = o.disk_fs;
    co.remote = o.remote;
    co.disk_codec = o.disk_codec;
    co.remote_codec = o.remote_codec;
    co.host_codec = o.host_codec;
    co.layerwise = o.layerwise;
    co.device = o.device;
    co.clock = o.clock;
    co.max_retained_share = o.max_retained_share;
    co.profile.gemm_flops_per_s = o.fast_links ? 1e6 : 1e12;
    co.profile.attn_flops_per_s = o.fast_links ? 1e6 : 1e12;
    co.profile.link(TierKind::kHost) = {0, 1e12};
    co.profile.link(TierKind::kDisk) = {0, o.disk_bytes_per_s};
    co.profile.link(TierKind::kRemote) = {0, 1e12};
    auto c = KVCache::create(co);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    cache = std::move(*c);
    auto e = engine::create_forward(model_, cache->pool());
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    engine = std::move(*e);
  }
  ~CacheRig() {
    engine.reset();
    cache.reset();
    std::error_code ec;
    if (own_dir_) std::filesystem::remove_all(dir_, ec);
  }

  // Full recompute with no cache involved: the reference.
  Outcome reference(std::span<const TokenId> prompt, int steps) {
    auto lease = cache->fresh(ns, prompt.size());
    EXPECT_TRUE(lease.ok()) << lease.status().to_string();
    return drive(*lease, prompt, steps, /*commit=*/false);
  }

  // Through the cache; commits the sequence's pages afterwards.
  Outcome cached(std::span<const TokenId> prompt, int steps, bool commit = true) {
    auto look = cache->lookup(ns, prompt);
    EXPECT_TRUE(look.ok()) << look.status().to_string();
    Plan plan = cache->plan(*look);
    auto lease = cache->apply(std::move(*look), plan);
    EXPECT_TRUE(lease.ok()) << lease.status().to_string();
    Outcome out = drive(*lease, prompt, steps, commit);
    out.plan = plan;
    return out;
  }

  Outcome drive(CacheLease& lease, std::span<const TokenId> prompt, int steps, bool commit) {
    Outcome out;
    engine::SequenceKV kv;
    auto lg = cached_prefill(*engine, *cache, lease, kv, prompt);
    EXPECT_TRUE(lg.ok()) << lg.status().to_string();
    if (!lg.ok()) return out;
    out.report = lease.report();
    out.logits.assign(lg->last().begin(), lg->last().end());
    std::vector<TokenId> all(prompt.begin(), prompt.end());
    TokenId t = engine::argmax(lg->last());
    for (int i = 0; i < steps; ++i) {
      out.tokens.push_back(t);
      all.push_back(t);
      EXPECT_TRUE(cache->grow(lease, kv.num_tokens + 1).ok());
      kv.pages = lease.pages();
      engine::SequenceKV* seqs[] = {&kv};
      auto d = engine->decode(seqs, std::span(&t, 1));
      EXPECT_TRUE(d.ok()) << d.status().to_string();
      t = engine::argmax(d->last());
    }
    if (commit) {
      EXPECT_TRUE(cache->commit(lease, std::span(all).first(kv.num_tokens)).ok());
    } else {
      cache->release(lease);
    }
    return out;
  }

  static std::vector<TokenId> random_tokens(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<TokenId> t(n);
    for (auto& x : t) x = static_cast<TokenId>(rng() % 512);
    return t;
  }

  RigOptions o_;
  std::shared_ptr<const engine::Model> model_;
  std::filesystem::path dir_;
  bool own_dir_ = true;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<engine::Forward> engine;
  Namespace ns{PageHash{1, 2}, "", ""};
};

// A remote chunk store (a HostTier underneath) whose gets of layers past the
// first (a whole chunk's get among them) wait until open() is called or `hold`
// has passed (close() holds them back again): loads from it finish when a
// test says so, not by timing.
class HeldUpperLayersTier final : public Tier {
 public:
  HeldUpperLayersTier(const ChunkGeometry& g, std::chrono::milliseconds hold)
      : inner_(HostTier::create({.geometry = g, .capacity_bytes = 64 * g.payload_bytes(g.chunk_pages)}).value()),
        hold_(hold) {}
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  TierKind kind() const override { return TierKind::kRemote; }
  const ChunkGeometry& geometry() const override { return inner_->geometry(); }
  void put_batch(std::span<PutOp> ops) override { inner_->put_batch(ops); }
  void get_batch(std::span<GetOp> ops) override {
    const bool upper = std::any_of(ops.begin(), ops.end(), [](const GetOp& op) {
      return op.first_layer > 0 || op.num_layers > 1;
    });
    if (upper) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, hold_, [&] { return open_; });
    }
    inner_->get_batch(ops);
  }
  size_t exists_prefix(const PageHash& ns, std::span<const PageHash> keys) override {
    return inner_->exists_prefix(ns, keys);
  }
  Status erase(const ChunkKey& key) override { return inner_->erase(key); }
  Status flush() override { return inner_->flush(); }
  TierStats stats() const override { return inner_->stats(); }
  bool degraded() const override { return false; }

 private:
  std::unique_ptr<HostTier> inner_;
  std::chrono::milliseconds hold_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Flips one byte in every 4 KiB of each region file's payload area (past
// the first 8 KiB), so every chunk on disk fails its checksum.
inline void corrupt_region_files(const std::filesystem::path& dir) {
  for (auto& f : std::filesystem::directory_iterator(dir)) {
    if (!f.is_regular_file()) continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = std::filesystem::file_size(f.path());
    for (uint64_t off = 8192; off < size; off += 4096) {
      io.seekp(static_cast<std::streamoff>(off));
      io.put(char(0x5A));
    }
  }
}

// Cached once (`steps` tokens generated), then only on disk (device and
// host flushed); returns the recompute's outcome, the reference.
inline Outcome only_on_disk(CacheRig& rig, std::span<const TokenId> prompt, int steps = 8) {
  Outcome ref = rig.reference(prompt, steps);
  rig.cached(prompt, steps);
  EXPECT_TRUE(rig.cache->drain().ok());
  EXPECT_TRUE(rig.cache->flush().ok());
  EXPECT_EQ(rig.cache->stats().index.pages, 0u);
  return ref;
}

inline void expect_same(const Outcome& got, const Outcome& ref, double rel) {
  ASSERT_EQ(got.tokens, ref.tokens);
  ASSERT_EQ(got.logits.size(), ref.logits.size());
  double scale = 0, diff = 0;
  for (size_t i = 0; i < ref.logits.size(); ++i) {
    scale = std::max(scale, double(std::fabs(ref.logits[i])));
    diff = std::max(diff, double(std::fabs(got.logits[i] - ref.logits[i])));
  }
  EXPECT_LE(diff, rel * scale) << "max |Δlogit| " << diff << " vs scale " << scale;
}

}  // namespace kvtier::testing
