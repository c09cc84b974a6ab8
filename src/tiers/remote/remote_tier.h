// RemoteTier: a chunk store in Redis (standalone or Redis Cluster), shared by
// every serving instance that points at it — one instance's prefill is
// another's remote hit.
//
// Keys are `kvtier:<format version>:<namespace hex>:<chunk hash hex>`; values
// are chunk entries (tiers/chunk_format.h) packed with align=1, so a value
// that is corrupt, truncated, foreign (another key's entry, another
// geometry) or not ours at all fails verification: the get is kCorruption,
// the key is deleted and counted, and nothing wrong is ever served.
// With a tier secret (options.auth) keys are `kvtier:<version>:a:<keyed
// name>` (ChunkAuth::key_name: they do not reveal the prompt) and every
// entry is authenticated: one that fails (forged, unauthenticated, another
// secret's) is deleted and counted in forged_entries, never served.
// Every batched call is one pipelined round trip per node: exists_prefix
// sends one EXISTS per chunk of the prompt at once; get_batch/put_batch send
// all GETs/SETs at once (SET ... PX ttl when a TTL is set). Layer-range gets
// read only the entry's metadata and the requested layers (GETRANGE).
// Redis's own `maxmemory` with an eviction policy is the capacity limit.
//
// Failures (refused, timeout, reset mid-transfer, AUTH) give the op a Status
// and make the tier unreachable: every call fails fast (gets/puts with
// kUnavailable, exists_prefix with 0, so requests recompute) until the
// tier's own prober thread gets an answer to a PING. It tries once per
// backoff window, doubling with each failure (backoff_initial ..
// backoff_max, on `clock`), so a hung server costs the serving path one
// timeout per episode, not one per window (callers run on the engine's
// thread). An OOM reply to a SET pauses writes only, for the same doubling
// windows: what Redis holds is still read (degraded() true, readable() true).
//
// Thread safety: all methods are thread-safe; calls borrow one of
// `pool_size` connection sessions (one per concurrent caller). Ownership:
// the tier owns its client; buffers in ops are the caller's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "tiers/remote/redis_client.h"
#include "tiers/tier.h"

namespace kvtier {

struct RemoteTierOptions {
  ChunkGeometry geometry;
  RedisClientOptions redis;                  // seeds, password, timeouts, pool, cluster mode
  std::chrono::milliseconds ttl{0};          // 0: entries never expire (Redis eviction decides)
  bool refresh_ttl_on_hit = true;            // a hit extends the entry's TTL (recency)
  bool range_reads = true;                   // layer-range gets use GETRANGE (else GET the whole value)
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
  const Clock* clock = &Clock::system();      // the backoff windows' time (tests: a ManualClock)
  size_t max_batch_bytes = size_t(64) << 20;  // a batch bigger than this goes in several pipelines
  std::shared_ptr<const ChunkAuth> auth;      // tier secret: authenticated entries, keyed names; null: none
  // Entries are written with geometry.codec; lossy entries (any instance's)
  // are served only with accept_lossy, else refused and counted (lossy_refused).
  bool accept_lossy = false;

  Status validate() const;

  // Parses `redis://[[user]:password@]host:port[,host:port...][/?opt=v&...]`.
  // Options: connect_timeout_ms, timeout_ms (per command), ttl_s or ttl_ms,
  // pool (sessions), cluster=auto|on|off, range_reads=0|1, backoff_ms,
  // backoff_max_ms. `rediss://` and tls=1 are refused (TLS is not supported).
  // The geometry is the caller's.
  static Result<RemoteTierOptions> from_url(std::string_view url, const ChunkGeometry& geometry);
};

// Remote-only counters, beyond TierStats.
struct RemoteTierStats {
  uint64_t oom_errors = 0;        // Redis refused a write (maxmemory with noeviction)
  uint64_t reply_errors = 0;      // other error replies
  RedisClientStats client;
};

class RemoteTier final : public Tier {
 public:
  // Validates options and tries to connect; a server that is down is not an
  // error here (the tier starts degraded and recovers when it comes up).
  static Result<std::unique_ptr<RemoteTier>> create(const RemoteTierOptions& options);
  ~RemoteTier() override;

  TierKind kind() const override { return TierKind::kRemote; }
  const ChunkGeometry& geometry() const override { return options_.geometry; }
  void put_batch(std::span<PutOp> ops) override;
  void get_batch(std::span<GetOp> ops) override;
  size_t exists_prefix(const PageHash& ns, std::span<const PageHash> chunk_keys) override;
  size_t exists_first(const PageHash& ns, std::span<const PageHash> chunk_keys) override;
  Status erase(const ChunkKey& key) override;
  Status flush() override { return Status::Ok(); }  // durability is Redis's configuration
  TierStats stats() const override;
  bool degraded() const override;  // unreachable, or writes paused by an OOM reply
  bool readable() const override { return !unreachable(); }

  RemoteTierStats remote_stats() const;
  // The Redis key of a chunk (tests, tools).
  std::string key_of(const ChunkKey& key) const;
  RedisClient& client() { return *client_; }
  const RemoteTierOptions& options() const { return options_; }

  // A quick link measurement for the planner: round trip of a tiny command and
  // the bandwidth of pipelined GETs of `bytes` (written under a scratch key and deleted).
  struct LinkFigures {
    double latency_s = 0;
    double bytes_per_s = 0;
  };
  Result<LinkFigures> measure_link(size_t bytes = kMaxProbeBytes);
  // The largest value the tier reads: a whole chunk entry, or a link probe of at most the larger
  // of kMaxProbeBytes and an entry; the longest reply it takes from Redis is that and its RESP
  // header (RedisClientOptions::max_reply_bytes).
  static constexpr size_t kMaxProbeBytes = size_t(8) << 20;
  static size_t largest_value_bytes(const RemoteTierOptions& options);
  static size_t max_reply_bytes(const RemoteTierOptions& options);

 private:
  explicit RemoteTier(const RemoteTierOptions& o, std::unique_ptr<RedisClient> c);
  bool unreachable() const { return down_.load(std::memory_order_acquire); }
  // OK to go on, or kUnavailable while unreachable; a write also kNoSpace while writes are paused.
  Status admit();
  Status admit_write();
  // A call's transport outcome: a failure makes the tier unreachable (the prober takes it from
  // there), a success clears that.
  void note_result(const Status& transport);
  void note_oom(bool oom);  // a SET pipeline's outcome: an OOM pauses writes, a success resumes them
  int64_t backoff_ns(uint32_t failures) const;  // the window after that many failures in a row
  void probe_loop();
  // Which keys exist, in one round trip (all false while degraded or on a transport error).
  std::vector<bool> exist(const PageHash& ns, std::span<const PageHash> chunk_keys);
  // One pipeline of SETs: put_batch sends a batch in pipelines of at most max_batch_bytes of entries.
  struct SetPipeline;
  // The end of the pipeline that starts at valid[begin] (at least one entry).
  size_t pipeline_end(std::span<PutOp* const> valid, size_t begin) const;
  // The SET commands of `ops`; an op whose entry cannot be encoded carries the failure and gets none.
  void build_sets(std::span<PutOp* const> ops, SetPipeline& p);
  // Each op's outcome from its command's reply; true when Redis answered out of memory.
  bool settle_sets(std::span<PutOp* const> ops, SetPipeline& p);
  void get_whole(std::span<GetOp*> ops);
  void get_ranges(std::span<GetOp*> ops);
  // Decodes and authenticates the entry (whole value or its metadata) of op.key; drops and counts a bad one.
  Result<ChunkMeta> check_entry(const ChunkKey& key, std::span<const std::byte> entry, bool whole);
  // op.key's checked entry from a GET (whole) or a metadata GETRANGE reply, op's
  // layer range resolved against it; nullopt with op.status set otherwise (a miss
  // counted, a bad entry dropped).
  std::optional<ChunkMeta> open_entry(GetOp& op, const struct redisReply* r, bool whole);
  // Applies the mixed-entry rule (counted), verifies the stored layers of
  // op's range and decodes them into op.out; drops and counts a bad entry.
  Status take_layers(GetOp& op, const ChunkMeta& meta, std::span<const std::byte> stored);
  void drop_corrupt(const ChunkKey& key, bool forged = false);

  RemoteTierOptions options_;
  std::unique_ptr<RedisClient> client_;
  std::string ttl_ms_;  // decimal, for SET PX / PEXPIRE
  std::string key_prefix_;  // "kvtier:<format version>:<layout>:" (key_of)

  using Clock = std::chrono::steady_clock;
  int64_t clock_ns() const;                     // options_.clock's now
  std::atomic<bool> down_{false};               // unreachable: only an answer clears it
  std::atomic<int64_t> next_probe_ns_{0};       // on options_.clock: when the prober tries again
  std::atomic<uint32_t> consecutive_failures_{0};
  std::atomic<int64_t> writes_paused_until_ns_{0};  // on options_.clock; an OOM reply's window
  std::atomic<uint32_t> consecutive_ooms_{0};
  mutable std::mutex mu_;       // last_error_, and the prober's wait
  std::condition_variable cv_;  // wakes the prober: down, or stopping
  std::string last_error_;
  bool stop_ = false;
  std::thread prober_;
  std::atomic<uint64_t> sequence_{0};

  struct Counters {
    std::atomic<uint64_t> hits{0}, misses{0}, puts{0}, bytes_put{0}, checksum_failures{0}, io_errors{0},
        fast_fails{0}, episodes{0}, oom{0}, reply_errors{0}, forged{0}, lossy_refused{0};
  };
  mutable Counters counters_;
};

}  // namespace kvtier
