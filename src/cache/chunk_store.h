// ChunkStore: kvtier's host, disk and remote tiers as a key-value store of KV
// chunks, for an engine that keeps its own device cache and prefix index and
// wants kvtier only below it (the shape of SGLang's HiCache storage backends
// and LMCache's storage backends): batch exists — how many leading keys are
// held —, batch get into the caller's host buffers, batch set from them.
//
// Keys are ChunkKeys (a namespace seed and a content hash; KVCache::chunk_keys
// gives kvtier's own). A payload is one layer-major chunk of 1..chunk_pages
// pages (tiers/chunk_format.h: [layer][page][k|v][token][kv_head][head_dim]).
// Reads try the tiers fastest first (host, disk, remote) and return verified
// bytes only (a corrupt entry is dropped by its tier and read from the next);
// writes go to every tier (write-through). Capacities are the tiers' hard
// limits: a full host tier evicts its least recently used chunks.
//
// Thread safety: every method is thread-safe (the tiers are). Ownership: the
// store owns its host and disk tiers and shares the remote tier.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tiers/tier.h"
#include "tiers/tier_factory.h"

namespace kvtier {

// The tiers as TierConfig names them (tiers/tier_factory.h: host_bytes,
// disk_dir, remote_url, ...), built by the tier factory.
struct ChunkStoreOptions : TierConfig {
  ChunkGeometry geometry;
  std::shared_ptr<Tier> remote;         // a remote built by the caller instead of remote_url's (same ChunkGeometry)

  // At least one tier; the tiers' own options are validated when they are made.
  Status validate() const;
};

struct ChunkStoreStats {
  uint64_t exists_calls = 0, exists_keys = 0, exists_hits = 0;
  uint64_t gets = 0, get_hits_by_tier[kNumTiers] = {}, get_misses = 0;
  uint64_t sets = 0, set_failures = 0;  // a failure: no tier accepted the chunk
  TierStats tiers[kNumTiers];           // of each present tier
  bool present[kNumTiers] = {};
};

class ChunkStore {
 public:
  static Result<std::unique_ptr<ChunkStore>> create(const ChunkStoreOptions& options);
  ~ChunkStore();
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  const ChunkGeometry& geometry() const { return options_.geometry; }
  // The number of leading `keys` (chunk hashes under `ns`) that some tier holds.
  size_t exists(const PageHash& ns, std::span<const PageHash> keys);
  // Each op reads its chunk from the fastest tier that holds a valid copy;
  // op.status is OK, or the last tier's error (NotFound when none holds it).
  void get(std::span<GetOp> ops);
  // Each op is stored in every tier; op.status is OK when at least one tier
  // holds the chunk afterwards, else the last tier's error.
  void set(std::span<PutOp> ops);
  // Makes accepted sets durable (disk).
  Status flush();
  ChunkStoreStats stats() const;

 private:
  explicit ChunkStore(const ChunkStoreOptions& o) : options_(o) {}
  // Present tiers, fastest first: those that can be read (reading) or written (not degraded).
  std::vector<Tier*> tiers(bool reading) const;

  ChunkStoreOptions options_;
  std::unique_ptr<Tier> host_;
  std::shared_ptr<Tier> disk_;
  std::shared_ptr<Tier> remote_;
  mutable std::mutex mu_;  // guards stats_
  ChunkStoreStats stats_;
};

}  // namespace kvtier
