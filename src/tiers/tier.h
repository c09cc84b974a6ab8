// Tier: the one interface of every chunk store below device memory
// (HostTier, DiskTier, later RemoteTier), in the spirit of RocksDB's
// SecondaryCache: a store of chunks keyed by ChunkKey, with batched calls so
// that a disk or network tier can turn a batch into one round of I/O.
//
// Contracts:
//  * put stores a copy of a layer-major payload (tiers/chunk_format.h) of
//    1..chunk_pages pages; putting a key that exists is a no-op success.
//    A full tier evicts by its own policy or fails with kNoSpace; capacity
//    is a hard limit.
//  * get copies layers [first_layer, first_layer+num_layers) of a chunk,
//    layer-major and contiguous, into the caller's buffer. Bytes are
//    verified before they are reported OK: a checksum failure is
//    kCorruption (the entry is dropped and counted), never wrong bytes.
//    A missing key is kNotFound.
//  * exists_prefix(ns, keys) is the number of leading keys present — the
//    question a prefix lookup asks a lower tier in one round trip.
//    exists_first(ns, keys) is the index of the first key present
//    (keys.size(): none) — the longest of a prompt's candidate tail chunks,
//    asked longest first.
//  * Codecs: put encodes with geometry().codec; get returns raw (decoded)
//    layers and reports the entry's codec. A tier that is not allowed lossy
//    entries (accept_lossy off) treats one as absent: kNotFound, counted in
//    lossy_refused (accept_chunk_codec, tiers/chunk_format.h).
//  * degraded() is true after a failure that makes the tier unreliable for
//    writes (ENOSPC, EIO, a lost connection); callers then store nothing more
//    in it until it turns false again (each tier's backoff). readable()
//    says whether its gets may still be asked: not for a degraded remote tier
//    (its calls fail fast), yes for a disk tier, whose written entries stay
//    good (each get verifies what it reads); a miss is recomputed.
// Thread safety: every method is thread-safe (transfer workers call them
// concurrently). Ownership: tiers copy what they are given; buffers in ops
// are the caller's and are not retained after the call returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tiers/chunk_format.h"
#include "tiers/kv_events.h"

namespace kvtier {

inline constexpr uint32_t kAllLayers = 0xFFFFFFFFu;

struct PutOp {
  ChunkKey key;
  std::span<const PageHash> page_hashes;  // the chunk's pages, in order; back() == key.hash
  std::span<const std::byte> payload;     // layer-major, ChunkGeometry::payload_bytes(page_hashes.size())
  Status status;                          // out
};

struct GetOp {
  ChunkKey key;
  uint32_t first_layer = 0;
  uint32_t num_layers = kAllLayers;  // kAllLayers: through the last layer
  std::span<std::byte> out;          // >= num_layers * layer_bytes(num_pages)
  Status status;                     // out
  uint32_t num_pages = 0;            // out: pages in the chunk
  KvCodec codec = KvCodec::kNone;    // out: the entry's codec (lossy: the layers are an approximation)
  // In: the pages the caller expects (0: chunk_pages). A tier that reads a
  // layer range at offsets (Redis) lays them out for it: a prompt's tail is a
  // short chunk, and a wrong guess costs a second round trip for the whole value.
  uint32_t expect_pages = 0;
  // In (optional): the caller's pages, page p's layer l at pages[p] + l *
  // layer_slice_bytes. A tier whose layers pass through its own buffer (an
  // encoded entry decoded, a region buffer, a bounce buffer) writes them
  // there directly when the chunk has pages.size() pages, skipping the copy
  // through `out`, and sets `placed`; `out` is then not written.
  std::span<std::byte* const> pages;
  bool placed = false;  // out
  // In (optional): a tier that reads in rounds reports the op's layers as
  // they become ready, verified: on_ready(end, placed) says layers
  // [first_layer, end) are in the caller's `pages` (placed) or in `out`. Called
  // on the thread of get_batch, before it returns, never under a tier's lock,
  // with increasing ends. A tier need not call it; whatever it did not report
  // is settled by `status` when get_batch returns.
  std::function<void(uint32_t end_layer, bool placed)> on_ready;

  // The out fields of `from`, an op a tier filled for this one (ChunkStore asks a copy).
  void take_outputs(const GetOp& from) {
    status = from.status;
    num_pages = from.num_pages;
    codec = from.codec;
    placed = from.placed;
  }
};

struct TierStats {
  uint64_t capacity_bytes = 0;
  uint64_t bytes = 0;    // bytes held (disk: whole regions in use)
  uint64_t entries = 0;  // chunks held
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t puts = 0;
  uint64_t checksum_failures = 0;  // entries dropped because their bytes did not verify
  uint64_t forged_entries = 0;     // entries dropped because they failed authentication (tier secret)
  uint64_t lossy_refused = 0;      // lossy entries not served because this cache serves exact KV only
  uint64_t evictions = 0;          // chunks dropped to make room
  uint64_t io_errors = 0;
  uint64_t degraded_episodes = 0;  // healthy → degraded transitions
  uint64_t fast_fails = 0;         // calls refused at once while degraded
  std::string last_error;       // the last I/O failure (the one that degraded the tier, for a disk), or empty
  uint64_t skipped_files = 0;  // disk: files in the directory left alone as not this tier's (DiskOpenReport)
  uint64_t retained_bytes = 0;  // held back from reclaim by retention hints (disk: whole regions)
  uint64_t retain_yields = 0;   // holds let go early to stay within the retained share
};

enum class EvictionOrder : uint8_t { kFifo = 0, kLru = 1 };

class Tier {
 public:
  virtual ~Tier() = default;
  Tier(const Tier&) = delete;
  Tier& operator=(const Tier&) = delete;

  virtual TierKind kind() const = 0;
  virtual const ChunkGeometry& geometry() const = 0;

  // Batched forms: every op gets its own status.
  virtual void put_batch(std::span<PutOp> ops) = 0;
  virtual void get_batch(std::span<GetOp> ops) = 0;
  virtual size_t exists_prefix(const PageHash& ns, std::span<const PageHash> chunk_keys) = 0;
  // One exists_prefix per key by default; a networked tier asks them in one round trip.
  virtual size_t exists_first(const PageHash& ns, std::span<const PageHash> chunk_keys) {
    size_t i = 0;
    while (i < chunk_keys.size() && exists_prefix(ns, chunk_keys.subspan(i, 1)) == 0) ++i;
    return i;
  }
  // Drops one chunk (OK when absent).
  virtual Status erase(const ChunkKey& key) = 0;
  // Makes every accepted put durable (no-op for volatile tiers).
  virtual Status flush() = 0;
  virtual TierStats stats() const = 0;
  virtual bool degraded() const = 0;
  virtual bool readable() const { return !degraded(); }
  // True when get_batch reports an op's layers as they land (GetOp::on_ready):
  // a caller may then ask for many layers in one call without delaying the first.
  virtual bool reports_layers() const { return false; }
  // Retention hint (KVCache::retain): the leading run of `keys` this tier
  // holds stays until `until` (by its own clock), within `max_share` of its
  // capacity (past it the earliest hold yields). Returns that run's length.
  // A tier that cannot hold entries back retains nothing (0).
  virtual size_t retain(std::span<const ChunkKey> keys, Clock::time_point until, double max_share) {
    (void)keys, (void)until, (void)max_share;
    return 0;
  }

  // What a tenant's quota counts in this tier (KVCache::set_tenant_quotas): the
  // bytes its entries of the namespaces `ns` take (0 where the tier does not
  // count them), and dropping the oldest of those entries until they take at
  // most keep_bytes (returns the pages dropped; 0 where it cannot).
  virtual uint64_t namespace_bytes(std::span<const PageHash> ns) const {
    (void)ns;
    return 0;
  }
  virtual uint64_t trim_namespaces(std::span<const PageHash> ns, uint64_t keep_bytes) {
    (void)ns, (void)keep_bytes;
    return 0;
  }

  // Single-op conveniences over the batched forms.
  Status put(const ChunkKey& key, std::span<const PageHash> page_hashes, std::span<const std::byte> payload) {
    PutOp op{key, page_hashes, payload, {}};
    put_batch({&op, 1});
    return op.status;
  }
  // Whole chunk; returns its page count.
  Result<uint32_t> get(const ChunkKey& key, std::span<std::byte> out) {
    return get_layers(key, 0, kAllLayers, out);
  }
  Result<uint32_t> get_layers(const ChunkKey& key, uint32_t first_layer, uint32_t num_layers, std::span<std::byte> out) {
    GetOp op{.key = key, .first_layer = first_layer, .num_layers = num_layers, .out = out};
    get_batch({&op, 1});
    if (!op.status.ok()) return op.status;
    return op.num_pages;
  }
  bool exists(const ChunkKey& key) { return exists_prefix(key.ns, {&key.hash, 1}) == 1; }

  // Chunk events (tiers/kv_events.h): from now on the tier reports each
  // chunk it stores and each it drops (reclaim, trim, erase, corrupt or
  // forged) to `log` while the log is active. Set before the tier is shared
  // with other threads (null: none).
  void set_event_log(std::shared_ptr<KvEventLog> log) { events_ = std::move(log); }
  // The hashes of the chunks this tier holds that it can list (a snapshot's
  // `disk`; a tier that cannot list, as a shared remote store, gives none).
  virtual std::vector<PageHash> held_chunks() const { return {}; }

 protected:
  Tier() = default;
  // Reports one chunk event (stored or removed) of this tier.
  void report_chunk(KvEventKind what, const ChunkKey& key) const {
    if (events_ && events_->active()) events_->append(KvEvent{what, kind(), kind(), KvEventUnit::kChunk, key.hash});
  }

 private:
  std::shared_ptr<KvEventLog> events_;
};

// Validates a get op against a chunk of n pages; resolves kAllLayers. Shared by implementations.
Status resolve_get_range(const ChunkGeometry& g, uint32_t n_pages, GetOp& op);
// Validates a put op (page count, key, payload size). Shared by implementations.
Status validate_put(const ChunkGeometry& g, const PutOp& op);

}  // namespace kvtier
