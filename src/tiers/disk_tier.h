// DiskTier: chunks on local NVMe as a segment log (CacheLib Navy style).
//
// Chunks are encoded (tiers/chunk_format.h, 4096-aligned) and appended to an
// in-memory region buffer that becomes its own region file
// (`region-XXXXXXXX.kvr`, default 64 MiB). Writes overlap filling: each
// time `write_stretch_bytes` more of the active buffer are filled, that
// aligned stretch is handed to the tier's writer thread, which writes it
// with O_DIRECT through io_uring while callers keep appending. Two region
// buffers alternate (the next region fills while the last stretches of the
// previous one are still being written); a put waits only when both are
// busy, which bounds the writes in flight to two regions' worth. Reads are
// batched io_uring reads of exactly the requested layers, straight into the
// caller's buffer when it is 4096-aligned, verified against per-layer
// checksums before they are reported OK. An in-memory index maps ChunkKey →
// (region, offset, pages). Sealed region files are immutable.
//
// Capacity is a hard limit of whole regions (capacity_bytes / region_bytes,
// the active one included). When a new region is needed and none is free,
// one whole region is reclaimed (FIFO by default, LRU by last read): its
// entries leave the index first, then its file is deleted. Readers that
// already hold the region keep a valid descriptor to the unlinked file, so
// a concurrent read never sees reused space. Every region file stays open
// while the tier lives: create() makes room for that many open files
// (reserve_open_files, io/file_system.h) or refuses the capacity, naming
// the process's limit.
//
// Durability: an entry is on disk once the stretch holding it is written;
// flush() waits for every accepted put (and fdatasyncs when sync_writes, as
// does the end of every region). Opening an existing directory rebuilds
// the index by scanning every region file; entries with a bad checksum or a
// torn tail are dropped and counted (stats().checksum_failures,
// open_report()). Each region file is read up to region_bytes at most; one
// that is not this tier's (another geometry, format version or region size,
// or not a region at all) is skipped, counted (open_report().skipped_regions)
// and left alone: the tier still opens and serves its own regions. A write failure (ENOSPC, EIO, short write, unwritable
// directory), in the caller or in the writer thread, makes the tier
// degraded: every entry whose bytes did not reach the file leaves the index
// (it is never served), the next put or flush returns the failure, later
// ones fail fast with kUnavailable, and gets keep serving what is on disk.
// After retry_after (doubled with each failure in a row, up to retry_max)
// degraded() turns false and the next put tries again in a new region: a
// disk that filled up and has room again takes writes without a restart,
// one still failing degrades the tier again at that region's first write.
//
// Thread safety: all methods are thread-safe; reads of written regions run
// concurrently, outside the tier's lock. Ownership: the tier owns its files,
// buffers and writer thread (joined by the destructor after writing what
// was accepted); `fs` (when set) must outlive it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "io/aligned_buffer.h"
#include "io/file_system.h"
#include "tiers/disk_region_format.h"
#include "tiers/region_reclaim.h"
#include "tiers/tier.h"

namespace kvtier {

struct DiskTierOptions {
  ChunkGeometry geometry;
  std::string dir;                          // created when missing
  size_t region_bytes = size_t(64) << 20;   // multiple of 4096; must hold the largest chunk entry
  size_t capacity_bytes = size_t(1) << 30;  // hard limit; at least 2 regions
  uint32_t queue_depth = 32;                // io_uring depth per I/O batch
  bool direct_io = true;                    // O_DIRECT (falls back to buffered where unsupported)
  EvictionOrder reclaim = EvictionOrder::kFifo;
  bool sync_writes = true;                  // fdatasync after each region write
  bool verify_on_open = true;               // verify every payload checksum when reopening
  size_t io_block_bytes = size_t(1) << 20;  // largest single read/write op; multiple of 4096
  // The active region is handed to the writer each time this many more bytes
  // are filled (multiple of 4096): small enough that the device starts early,
  // large enough to keep io_uring's queue full.
  size_t write_stretch_bytes = size_t(8) << 20;
  // A get_batch issues its reads in about this many waves (at most
  // ceil(reads / read_waves) in flight, never fewer than 8 nor more than
  // queue_depth), so that what one wave read is verified while the next is
  // in flight: devices that complete everything queued at once (seen on the
  // development VM) otherwise leave the whole checksum pass after the I/O.
  // 1: everything at once.
  uint32_t read_waves = 4;
  FileSystem* fs = nullptr;                 // nullptr: FileSystem::posix()
  const Clock* clock = &Clock::system();    // retention holds expire by it (retain()); must outlive the tier
  // Tier secret: entries are written authenticated and only authenticated
  // entries that verify under it are served (restart drops the rest, counted
  // in forged_entries); null: plain checksummed entries.
  std::shared_ptr<const ChunkAuth> auth;
  // Entries are written with geometry.codec. Lossy entries (of any codec)
  // are served only with accept_lossy; without it they are refused as
  // absent and counted (TierStats::lossy_refused), also after a restart.
  bool accept_lossy = false;
  // How long a degraded tier waits before it tries writing again (doubled with each failure in a
  // row, up to retry_max); zero: degraded until reopened. Read on `clock`.
  Clock::duration retry_after = std::chrono::seconds(10);
  Clock::duration retry_max = std::chrono::minutes(5);

  Status validate() const;
  // How the log holds full chunks (entries are appended in order and never
  // straddle regions): the regions of the capacity, the bytes of one full
  // chunk's entry, and how many of them fill a region. The replay's
  // payload-less disk tier is sized by these.
  uint32_t max_regions() const;
  size_t full_chunk_entry_bytes() const;
  uint32_t chunks_per_region() const;
  size_t min_region_bytes() const;  // the smallest region_bytes that holds one full chunk entry
  // Why region_bytes cannot hold a full chunk entry, with the size that would (empty when it can).
  std::string region_too_small() const;
};

// What reopening a directory found.
struct DiskOpenReport {
  uint32_t regions = 0;
  uint64_t entries = 0;
  uint64_t dropped_corrupt = 0;  // bad header or payload checksum
  uint64_t dropped_forged = 0;   // failed authentication under the tier secret (or authenticated without one)
  uint64_t dropped_torn = 0;     // entry or region header cut short
  // Region files left alone: not this tier's (another geometry, format
  // version or region size, or not a region file) or unreadable. They are
  // never served, never removed, and new regions are numbered past them.
  uint64_t skipped_regions = 0;
};

class DiskTier final : public Tier {
 public:
  static Result<std::unique_ptr<DiskTier>> create(const DiskTierOptions& options);
  ~DiskTier() override;

  TierKind kind() const override { return TierKind::kDisk; }
  const ChunkGeometry& geometry() const override { return options_.geometry; }
  void put_batch(std::span<PutOp> ops) override;
  void get_batch(std::span<GetOp> ops) override;
  size_t exists_prefix(const PageHash& ns, std::span<const PageHash> chunk_keys) override;
  Status erase(const ChunkKey& key) override;
  // Writes the buffered tail of the active region, waits until every
  // accepted put is on disk (and synced when sync_writes, with the directory
  // when a region file was created or removed since the last flush).
  Status flush() override;
  TierStats stats() const override;
  bool reports_layers() const override { return true; }
  // Failed and still waiting to try again (retry_after): callers store nothing here meanwhile.
  bool degraded() const override;
  bool readable() const override { return true; }  // degraded stops writes only: gets serve what is on disk
  // A region holding a retained entry is skipped by reclaim while the hold
  // lasts (tiers/region_reclaim.h says why skipped, not rewritten forward).
  // Keys past the leading run held now are held when their put lands.
  size_t retain(std::span<const ChunkKey> keys, Clock::time_point until, double max_share) override;
  // An entry's bytes are its encoded size in the log. Trimming drops the
  // oldest entries first (region order, then write order) from the index;
  // their space returns when reclaim takes their region, as for any entry
  // the log has superseded. As with erase(), nothing is written: reopening
  // the directory finds what the log still holds (the cache trims again).
  uint64_t namespace_bytes(std::span<const PageHash> ns) const override;
  // The hash of every chunk in the index.
  std::vector<PageHash> held_chunks() const override;
  uint64_t trim_namespaces(std::span<const PageHash> ns, uint64_t keep_bytes) override;

  const DiskOpenReport& open_report() const { return open_report_; }
  // The region file path of a region id (tests corrupt files through it).
  std::string region_path(RegionId id) const;
  // Where a chunk lives (tests); NotFound when absent.
  Result<std::pair<RegionId, uint64_t>> locate(const ChunkKey& key) const;
  // True when the data files use O_DIRECT.
  bool direct_io_in_effect() const;

 private:
  struct Region;
  struct Loc {
    std::shared_ptr<Region> region;
    uint64_t offset = 0;  // of the entry inside the region file
    uint32_t num_pages = 0;
    uint32_t payload_offset = 0;
    KvCodec codec = KvCodec::kNone;              // of the stored payload
    std::vector<uint64_t> layer_sums;            // unauthenticated entries
    std::shared_ptr<const ChunkMeta> auth_meta;  // authenticated entries: layer tags and nonce
  };
  using Index = std::unordered_map<ChunkKey, Loc, ChunkKeyHasher>;
  class ReadBatch;  // one get_batch's reads from the region files (disk_tier_read.cc)
  // One range of a region buffer for the writer thread.
  struct WriteJob {
    std::shared_ptr<Region> region;
    uint64_t begin = 0, end = 0;  // aligned byte range of the region
    bool sync = false;            // fdatasync once the range is written
    bool seal = false;            // the region's last write: its buffer is free afterwards
    Status status;                // filled by the writer
  };
  using Lock = std::unique_lock<std::mutex>;

  explicit DiskTier(const DiskTierOptions& o);
  Status open_existing();
  bool scan_region(uint32_t id, const std::string& path);
  Result<size_t> read_for_scan(File& file, size_t have, size_t want);
  void index_region(uint32_t id, uint64_t size, std::shared_ptr<File> file, RegionScan& scan);
  Status put_locked(const PutOp& op, Lock& lock);
  void seal_locked();
  // A new region's file, from id `first` on: the file and the id after the one it took. Called
  // without the lock (a stalled file system holds only the opener).
  Result<std::pair<std::unique_ptr<File>, uint32_t>> create_region_file(uint32_t first);
  // Opens the next region; lets go of the lock for the file system's calls (opening_ meanwhile).
  Status open_region(Lock& lock);
  // Removes the files of reclaimed regions (doomed_), without the lock; counts failures under it.
  void remove_doomed(Lock& lock);
  void submit_locked(bool seal, bool sync);
  Status wait_writes_locked(Lock& lock);
  void writer_loop();
  void write_jobs(std::vector<WriteJob>& jobs, std::unique_ptr<IoQueue>& q);
  void apply_jobs_locked(std::vector<WriteJob>& jobs);
  bool reclaim_one_locked();
  void make_room_for_region_locked();
  void drop_locked(const ChunkKey& key, const Region* expected);
  // Held in a form this tier serves; a refused (lossy) entry of the key is dropped.
  bool holds_servable_locked(const ChunkKey& key);
  // Every index insert and erase goes through these two (they keep ns_bytes_).
  void add_entry_locked(const ChunkKey& key, Loc loc);
  Index::iterator erase_entry_locked(Index::iterator it);
  uint64_t entry_bytes(const Loc& loc) const;
  void drop_unwritten_locked();
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void fail_locked(const Status& s);
  // Leaves the failed state once its wait is over and no write is in flight.
  void recover_locked();
  // Counts an I/O failure; it is the last error unless the tier is already degraded (that one stays).
  void count_io_error_locked(const Status& s);
  Status take_failure_locked();
  std::unique_ptr<IoQueue> acquire_queue(Status& st);
  void release_queue(std::unique_ptr<IoQueue> q);

  DiskTierOptions options_;
  FileSystem* fs_;
  std::unique_ptr<DirLock> dir_lock_;  // the directory is this tier's alone while it lives
  uint32_t max_regions_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // writer work, write completions, free buffers
  Index index_;
  std::unordered_map<PageHash, uint64_t, PageHashHasher> ns_bytes_;  // entry bytes per namespace (no zeros)
  std::map<uint32_t, std::shared_ptr<Region>> regions_;  // by id (= age)
  uint64_t regions_bytes_ = 0;                             // their sizes: at most the capacity
  std::shared_ptr<Region> active_;
  AlignedBuffer buffers_[2];  // region buffers; Region::buffer names the one a region's bytes are in
  bool buffer_busy_[2] = {false, false};
  uint64_t cursor_ = 0;     // bytes of the active buffer in use
  uint64_t submitted_ = 0;  // bytes of the active buffer handed to the writer
  uint32_t next_region_ = 0;
  bool opening_ = false;               // a put is creating the next region's file, without the lock
  std::vector<std::string> doomed_;    // files of reclaimed regions, removed without the lock
  bool dir_dirty_ = false;  // a region file created or removed since the directory was last synced
  uint64_t next_sequence_ = 1;
  uint64_t tick_ = 0;
  RegionReclaimOrder reclaim_order_;  // which region is reclaimed next (tiers/region_reclaim.h)
  // retain() of chunks not here yet: held when their put lands (at most kMaxPendingHolds, then forgotten).
  static constexpr size_t kMaxPendingHolds = 4096;
  std::unordered_map<ChunkKey, Clock::time_point, ChunkKeyHasher> pending_holds_;
  uint32_t pending_hold_cap_ = 0;
  TierStats stats_;
  DiskOpenReport open_report_;
  std::atomic<bool> failed_{false};             // a write failed; nothing more is written until recovery
  std::atomic<Clock::duration::rep> retry_at_{0};// failed: when writes are tried again (options_.clock's ticks)
  Clock::duration backoff_;                     // the wait after the next failure
  Status failure_;  // a failure not yet returned to a caller
  bool direct_in_effect_ = false;
  AlignedBuffer scan_buf_;  // region contents while reopening (open_existing only)

  std::deque<WriteJob> jobs_;  // waiting for the writer, in submission order
  uint64_t jobs_submitted_ = 0, jobs_done_ = 0;
  bool stop_ = false;

  std::mutex qmu_;
  std::vector<std::unique_ptr<IoQueue>> queues_;
  std::thread writer_;  // last: started once everything above exists
};

}  // namespace kvtier
