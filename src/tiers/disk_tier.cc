#include "tiers/disk_tier.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

#include "common/page_hash.h"
#include "tiers/disk_region_format.h"
#include "tiers/disk_tier_region.h"

namespace kvtier {

std::string region_file_name(uint32_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "region-%08x.kvr", id);
  return name;
}

Status DiskTierOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  if (dir.empty()) return Status::InvalidArgument("DiskTier: dir is empty");
  if (region_bytes == 0 || region_bytes % kIoAlign) return Status::InvalidArgument("DiskTier: region_bytes must be a positive multiple of 4096");
  if (chunks_per_region() == 0) return Status::InvalidArgument("DiskTier: " + region_too_small());
  if (max_regions() < 2)
    return Status::InvalidArgument("DiskTier: capacity must hold at least 2 regions of " + std::to_string(region_bytes) +
                                   " bytes (cache.disk_region, --disk-region)");
  if (queue_depth == 0 || queue_depth > 4096) return Status::InvalidArgument("DiskTier: queue_depth must be in 1..4096");
  if (io_block_bytes == 0 || io_block_bytes % kIoAlign) return Status::InvalidArgument("DiskTier: io_block_bytes must be a multiple of 4096");
  if (read_waves == 0) return Status::InvalidArgument("DiskTier: read_waves must be positive");
  if (write_stretch_bytes == 0 || write_stretch_bytes % kIoAlign)
    return Status::InvalidArgument("DiskTier: write_stretch_bytes must be a positive multiple of 4096");
  if (retry_after < Clock::duration::zero() || retry_max < retry_after)
    return Status::InvalidArgument("DiskTier: retry_after must be at least zero and at most retry_max");
  return Status::Ok();
}

size_t DiskTierOptions::full_chunk_entry_bytes() const {
  return chunk_entry_layout(geometry, geometry.chunk_pages, kIoAlign, auth != nullptr).entry_bytes;
}

uint32_t DiskTierOptions::chunks_per_region() const {
  const size_t entry = full_chunk_entry_bytes();
  return region_bytes < kRegionHeaderBlock + entry ? 0 : static_cast<uint32_t>((region_bytes - kRegionHeaderBlock) / entry);
}

size_t DiskTierOptions::min_region_bytes() const { return kRegionHeaderBlock + full_chunk_entry_bytes(); }

std::string DiskTierOptions::region_too_small() const {
  if (chunks_per_region() > 0) return {};
  return "a disk region of " + std::to_string(region_bytes) + " bytes cannot hold one chunk entry of the model (" +
         std::to_string(full_chunk_entry_bytes()) + " bytes): give --disk-region (cache.disk_region) at least " +
         std::to_string((min_region_bytes() + (1 << 20) - 1) >> 20) + "MiB";
}

uint32_t DiskTierOptions::max_regions() const {
  return region_bytes == 0 ? 0 : static_cast<uint32_t>(std::min<size_t>(capacity_bytes / region_bytes, UINT32_MAX));
}

Result<std::unique_ptr<DiskTier>> DiskTier::create(const DiskTierOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  // Every region file stays open while the tier lives (reads need no open()).
  KVTIER_RETURN_IF_ERROR(reserve_open_files(
      o.max_regions() + 1, "the disk tier at " + o.dir + " (one file per region: capacity " +
                               std::to_string(o.capacity_bytes) + " B / regions of " + std::to_string(o.region_bytes) +
                               " B; larger regions or a smaller capacity keep fewer)"));
  std::unique_ptr<DiskTier> t(new DiskTier(o));
  KVTIER_RETURN_IF_ERROR(t->fs_->create_dirs(o.dir));
  KVTIER_ASSIGN_OR_RETURN(t->dir_lock_, t->fs_->lock_dir(o.dir));
  KVTIER_RETURN_IF_ERROR(t->open_existing());
  return t;
}

DiskTier::DiskTier(const DiskTierOptions& o)
    : options_(o),
      fs_(o.fs ? o.fs : &FileSystem::posix()),
      max_regions_(o.max_regions()),
      reclaim_order_(o.reclaim),
      backoff_(o.retry_after) {
  stats_.capacity_bytes = uint64_t(max_regions_) * o.region_bytes;
  writer_ = std::thread([this] { writer_loop(); });
}

DiskTier::~DiskTier() {
  {
    Lock lock(mu_);
    if (active_ && !failed()) submit_locked(false, options_.sync_writes);  // best effort: keep what was accepted
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();  // the writer drains its queue before it stops
  for (const std::string& path : doomed_) (void)fs_->remove(path);  // a region file made as the tier degraded
}

std::string DiskTier::region_path(RegionId id) const { return options_.dir + "/" + region_file_name(id.value()); }

bool DiskTier::direct_io_in_effect() const {
  std::lock_guard lock(mu_);
  return direct_in_effect_;
}

// ---- writes ----

// The caller that met `s` returns it; failures of the writer thread are kept
// in failure_ for the next put or flush.
void DiskTier::count_io_error_locked(const Status& s) {
  ++stats_.io_errors;
  if (!failed()) stats_.last_error = s.to_string();
}

void DiskTier::fail_locked(const Status& s) {
  count_io_error_locked(s);  // the failure that degrades it
  ++stats_.degraded_episodes;
  const bool retry = backoff_ > Clock::duration::zero();
  retry_at_.store(retry ? (options_.clock->now() + backoff_).time_since_epoch().count()
                        : std::numeric_limits<Clock::duration::rep>::max(),
                  std::memory_order_release);
  backoff_ = std::min(2 * backoff_, options_.retry_max);
  failed_.store(true, std::memory_order_release);
  drop_unwritten_locked();
}

bool DiskTier::degraded() const {
  return failed() && options_.clock->now().time_since_epoch().count() < retry_at_.load(std::memory_order_acquire);
}

// What the failure left is let go: the active region's unwritten tail and the buffers of regions
// whose writes failed (each region keeps what reached its file; drop_unwritten_locked took the
// rest out of the index). The next put opens a new region.
void DiskTier::recover_locked() {
  if (degraded() || opening_ || jobs_done_ < jobs_submitted_) return;
  for (auto& [id, r] : regions_) {
    if (r->buffer < 0) continue;
    buffer_busy_[r->buffer] = false;
    r->buffer = -1;
    r->used = r->written;
  }
  active_.reset();
  cursor_ = submitted_ = 0;
  failure_ = Status::Ok();
  failed_.store(false, std::memory_order_release);
  cv_.notify_all();
}

// The failure the writer met, once; afterwards a degraded tier says kUnavailable.
Status DiskTier::take_failure_locked() {
  if (!failure_.ok()) return std::exchange(failure_, Status::Ok());
  if (!failed()) return Status::Ok();
  ++stats_.fast_fails;
  return Status::Unavailable("DiskTier: degraded after a write failure");
}

// After a failure nothing more is written: entries not (entirely) on disk
// leave the index so that they are never served.
void DiskTier::drop_unwritten_locked() {
  for (auto it = index_.begin(); it != index_.end();) {
    const Loc& l = it->second;
    if (l.region->buffer >= 0 && l.offset + entry_bytes(l) > l.region->written) it = erase_entry_locked(it);
    else ++it;
  }
}

std::unique_ptr<IoQueue> DiskTier::acquire_queue(Status& st) {
  {
    std::lock_guard lock(qmu_);
    if (!queues_.empty()) {
      auto q = std::move(queues_.back());
      queues_.pop_back();
      return q;
    }
  }
  auto q = fs_->create_queue(options_.queue_depth);
  if (!q.ok()) {
    st = q.status();
    return nullptr;
  }
  return std::move(q).value();
}

void DiskTier::release_queue(std::unique_ptr<IoQueue> q) {
  if (!q->reusable()) return;  // the ring itself failed: dropped, the next read makes a new one
  std::lock_guard lock(qmu_);
  queues_.push_back(std::move(q));
}

// Hands [submitted_, cursor_) of the active region to the writer.
void DiskTier::submit_locked(bool seal, bool sync) {
  if (!active_ || (cursor_ == submitted_ && !seal && !sync)) return;
  jobs_.push_back(WriteJob{active_, submitted_, cursor_, sync, seal, {}});
  ++jobs_submitted_;
  submitted_ = cursor_;
  cv_.notify_all();
}

Status DiskTier::wait_writes_locked(Lock& lock) {
  const uint64_t target = jobs_submitted_;
  cv_.wait(lock, [&] { return jobs_done_ >= target; });
  return take_failure_locked();
}

void DiskTier::writer_loop() {
  std::unique_ptr<IoQueue> q;
  Lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop_ and nothing left to write
    // Everything queued goes out as one io_uring batch (bounded by the two
    // region buffers), so the queue stays full across stretches.
    std::vector<WriteJob> batch;
    while (!jobs_.empty()) {
      batch.push_back(std::move(jobs_.front()));
      jobs_.pop_front();
    }
    const bool skip = failed();  // after a failure nothing more is written
    lock.unlock();
    if (skip) {
      for (WriteJob& j : batch) j.status = Status::Unavailable("DiskTier: degraded after a write failure");
    } else {
      write_jobs(batch, q);
    }
    lock.lock();
    apply_jobs_locked(batch);
    jobs_done_ += batch.size();
    cv_.notify_all();
  }
}

// Runs outside the lock: the ranges are final (callers only append past them).
void DiskTier::write_jobs(std::vector<WriteJob>& jobs, std::unique_ptr<IoQueue>& q) {
  Status st;
  if (!q) {
    auto made = fs_->create_queue(options_.queue_depth);
    if (made.ok()) q = std::move(made).value();
    else st = made.status();
  }
  std::vector<IoOp> ops;
  std::vector<size_t> first(jobs.size() + 1);
  for (size_t i = 0; i < jobs.size(); ++i) {
    first[i] = ops.size();
    WriteJob& j = jobs[i];
    std::byte* base = buffers_[j.region->buffer].data();
    // Ops end at io_block_bytes boundaries of the file, not io_block_bytes
    // after the stretch's start: on the development VM, regions written by
    // ops that straddled those boundaries read back ~25% slower (docs/PERF.md).
    for (uint64_t off = j.begin, end; off < j.end; off = end) {
      end = std::min<uint64_t>(j.end, align_down(off + options_.io_block_bytes, options_.io_block_bytes));
      ops.push_back({IoKind::kWrite, j.region->file.get(), off, base + off, end - off});
    }
  }
  first[jobs.size()] = ops.size();
  if (st.ok() && !ops.empty()) (void)q->run(ops);
  if (q && !q->reusable()) q.reset();  // the ring itself failed: the next jobs get a new one
  for (size_t i = 0; i < jobs.size(); ++i) {
    WriteJob& j = jobs[i];
    j.status = st;
    for (size_t k = first[i]; k < first[i + 1] && j.status.ok(); ++k) j.status = ops[k].status;
    if (j.status.ok() && j.sync) j.status = j.region->file->sync();
  }
}

void DiskTier::apply_jobs_locked(std::vector<WriteJob>& jobs) {
  for (WriteJob& j : jobs) {
    Region& r = *j.region;
    if (!j.status.ok() || failed()) {
      if (!failed()) {
        failure_ = j.status;
        fail_locked(j.status);
      }
      continue;
    }
    backoff_ = options_.retry_after;  // a write landed: the next failure starts a new run
    r.written = std::max(r.written, j.end);
    if (j.seal) {  // every byte is in the file now: its buffer can take the next region
      buffer_busy_[r.buffer] = false;
      r.buffer = -1;
    }
  }
}

void DiskTier::drop_locked(const ChunkKey& key, const Region* expected) {
  auto it = index_.find(key);
  if (it == index_.end() || (expected && it->second.region.get() != expected)) return;
  erase_entry_locked(it);
}

// True when the key is held in a form this tier serves. An entry it refuses (lossy, written before
// a restart with an exact codec) is dropped here, so that the exact copy being put replaces it
// rather than being discarded as a duplicate; the newer copy also wins at the next restart.
bool DiskTier::holds_servable_locked(const ChunkKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  if (accept_chunk_codec(it->second.codec, options_.accept_lossy).ok()) return true;
  erase_entry_locked(it);
  return false;
}

void DiskTier::add_entry_locked(const ChunkKey& key, Loc loc) {
  const uint64_t bytes = entry_bytes(loc);
  if (!index_.emplace(key, std::move(loc)).second) return;  // held already: counted once
  ns_bytes_[key.ns] += bytes;
  report_chunk(KvEventKind::kStored, key);
}

DiskTier::Index::iterator DiskTier::erase_entry_locked(Index::iterator it) {
  report_chunk(KvEventKind::kRemoved, it->first);
  auto ns = ns_bytes_.find(it->first.ns);
  ns->second -= std::min(ns->second, entry_bytes(it->second));
  if (ns->second == 0) ns_bytes_.erase(ns);
  return index_.erase(it);
}

// The entry's own size: a tier reopened with another codec holds entries of both.
uint64_t DiskTier::entry_bytes(const Loc& l) const {
  ChunkGeometry g = options_.geometry;
  g.codec = l.codec;
  return chunk_entry_layout(g, l.num_pages, kIoAlign, l.auth_meta != nullptr).entry_bytes;
}

std::vector<PageHash> DiskTier::held_chunks() const {
  std::lock_guard lk(mu_);
  std::vector<PageHash> out;
  out.reserve(index_.size());
  for (const auto& [key, loc] : index_) out.push_back(key.hash);
  return out;
}

uint64_t DiskTier::namespace_bytes(std::span<const PageHash> ns) const {
  std::lock_guard lk(mu_);
  uint64_t bytes = 0;
  for (const PageHash& h : ns)
    if (auto it = ns_bytes_.find(h); it != ns_bytes_.end()) bytes += it->second;
  return bytes;
}

// Oldest regions first. A tenant's namespaces (one per cache_salt) are looked up in a set: a scan
// of the list for every key of every region cost keys × salts, under the tier's lock, on the
// scheduler's thread (argued by a review: seconds per commit with thousands of salts).
uint64_t DiskTier::trim_namespaces(std::span<const PageHash> ns, uint64_t keep_bytes) {
  std::lock_guard lk(mu_);
  const std::unordered_set<PageHash, PageHashHasher> mine(ns.begin(), ns.end());
  uint64_t bytes = 0, pages = 0;
  for (const PageHash& h : mine)
    if (auto it = ns_bytes_.find(h); it != ns_bytes_.end()) bytes += it->second;
  for (auto r = regions_.begin(); r != regions_.end() && bytes > keep_bytes; ++r)
    for (const ChunkKey& k : r->second->keys) {
      if (bytes <= keep_bytes) break;
      if (!mine.contains(k.ns)) continue;
      auto it = index_.find(k);
      if (it == index_.end() || it->second.region != r->second) continue;
      bytes -= std::min(bytes, entry_bytes(it->second));
      pages += it->second.num_pages;
      erase_entry_locked(it);
    }
  return pages;
}

size_t DiskTier::retain(std::span<const ChunkKey> keys, Clock::time_point until, double max_share) {
  std::lock_guard lk(mu_);
  const auto cap = static_cast<uint32_t>(max_share * max_regions_);
  size_t n = 0;
  for (; n < keys.size(); ++n) {
    auto it = index_.find(keys[n]);
    if (it == index_.end()) break;
    stats_.retain_yields += reclaim_order_.retain(it->second.region->id, until, cap, options_.clock->now());
  }
  // The rest may still be on its way (a write-through put not yet made): held when it lands. Bounded.
  pending_hold_cap_ = cap;
  if (pending_holds_.size() + (keys.size() - n) > kMaxPendingHolds) pending_holds_.clear();
  for (size_t k = n; k < keys.size(); ++k) pending_holds_[keys[k]] = until;
  return n;
}

// Reclaims regions, oldest first, until a new region fits the capacity beside
// the others, counted in bytes (regions kept from a run with larger regions
// count as what they are, not as one region of today's size).
void DiskTier::make_room_for_region_locked() {
  const uint64_t capacity = uint64_t(max_regions_) * options_.region_bytes;
  while (regions_bytes_ + options_.region_bytes > capacity && reclaim_one_locked()) {
  }
}

// Whether a region was reclaimed (none: only the active one is left).
bool DiskTier::reclaim_one_locked() {
  const auto victim_id =
      reclaim_order_.victim(active_ ? std::optional(active_->id) : std::nullopt, options_.clock->now());
  if (!victim_id) return false;
  const std::shared_ptr<Region> victim = regions_.at(*victim_id);
  reclaim_order_.remove(victim->id);
  // Entries leave the index before the space can be reused. A write still in
  // flight keeps the file open and lands in the unlinked file, harmlessly.
  for (const ChunkKey& k : victim->keys) {
    auto it = index_.find(k);
    if (it != index_.end() && it->second.region == victim) {
      erase_entry_locked(it);
      ++stats_.evictions;
    }
  }
  regions_bytes_ -= victim->size;
  regions_.erase(victim->id);
  doomed_.push_back(region_path(RegionId(victim->id)));  // ids are never reused: removed later, unlocked
  dir_dirty_ = true;
  return true;
}

void DiskTier::remove_doomed(Lock& lock) {
  if (doomed_.empty()) return;
  std::vector<std::string> doomed = std::exchange(doomed_, {});
  lock.unlock();
  std::vector<Status> failed;
  for (const std::string& path : doomed)
    if (Status st = fs_->remove(path); !st.ok()) failed.push_back(std::move(st));
  lock.lock();
  // A file that cannot be removed (immutable, a read-only remount) keeps its space: counted and
  // kept as the last error, where it went unnoticed while the directory outgrew the capacity.
  for (const Status& st : failed) count_io_error_locked(st);
}

// A new region's file under the next free id: a name that exists (a file the
// scan skipped, a symlink, another process's) is never opened, the id skipped.
Result<std::pair<std::unique_ptr<File>, uint32_t>> DiskTier::create_region_file(uint32_t next) {
  constexpr int kTries = 64;
  for (int i = 0; i < kTries && next != UINT32_MAX; ++i) {
    const std::string path = region_path(RegionId(next++));
    auto f = fs_->open(path, {.create = true, .exclusive = true, .direct = options_.direct_io});
    if (f.ok()) return std::pair{std::move(f).value(), next};
    if (f.status().code() != StatusCode::kFailedPrecondition) return f.status();
  }
  return Status::FailedPrecondition("DiskTier: no free region name in " + options_.dir + " (ids used up, or " +
                                    std::to_string(kTries) + " names in a row taken by files not this tier's)");
}

// Needs a free region buffer. The file system's calls (removing reclaimed regions, creating the
// new file) run without the lock: a stalled disk (frozen, hung) held every lookup and stats call
// behind them. Other puts wait for opening_; only this caller moves next_region_ meanwhile.
Status DiskTier::open_region(Lock& lock) {
  make_room_for_region_locked();
  opening_ = true;
  remove_doomed(lock);
  const uint32_t first = next_region_;
  lock.unlock();
  auto created = create_region_file(first);
  lock.lock();
  opening_ = false;
  cv_.notify_all();
  if (!created.ok()) return created.status();
  auto [f, next] = std::move(created).value();
  next_region_ = next;
  const uint32_t id = next - 1;
  if (failed()) {  // the writer failed meanwhile: nothing more is written
    doomed_.push_back(region_path(RegionId(id)));
    return Status::Unavailable("DiskTier: degraded after a write failure");
  }
  const int b = buffer_busy_[0] ? 1 : 0;  // only an opener takes a buffer: one is still free
  dir_dirty_ = true;
  if (buffers_[b].empty()) buffers_[b] = AlignedBuffer(options_.region_bytes);
  auto r = std::make_shared<Region>();
  r->id = id;
  r->size = options_.region_bytes;
  r->file = std::move(f);
  reclaim_order_.add(id, ++tick_);
  r->buffer = b;
  buffer_busy_[b] = true;
  direct_in_effect_ = r->file->direct();
  const RegionHeader rh = make_region_header(options_.geometry, id, options_.region_bytes);
  std::memset(buffers_[b].data(), 0, kRegionHeaderBlock);
  std::memcpy(buffers_[b].data(), &rh, sizeof rh);
  cursor_ = kRegionHeaderBlock;
  submitted_ = 0;
  active_ = r;
  regions_bytes_ += r->size;
  regions_.emplace(id, std::move(r));
  return Status::Ok();
}

void DiskTier::seal_locked() {
  submit_locked(true, options_.sync_writes);
  active_->used = cursor_;
  active_.reset();
}

Status DiskTier::put_locked(const PutOp& op, Lock& lock) {
  KVTIER_RETURN_IF_ERROR(validate_put(options_.geometry, op));
  ++stats_.puts;
  if (holds_servable_locked(op.key)) return Status::Ok();
  if (failed() && failure_.ok()) recover_locked();  // the failure was reported: try again once its wait is over
  KVTIER_RETURN_IF_ERROR(take_failure_locked());
  const uint32_t n = static_cast<uint32_t>(op.page_hashes.size());
  const ChunkEntryLayout lay = chunk_entry_layout(options_.geometry, n, kIoAlign, options_.auth != nullptr);
  for (;;) {  // other callers may seal or open regions while this one waits for a buffer
    if (active_ && cursor_ + lay.entry_bytes > options_.region_bytes) seal_locked();
    if (active_) break;
    // A free buffer first: when both are busy the writer is a whole region
    // behind, and the caller waits for the device (bounded memory).
    cv_.wait(lock, [&] { return failed() || active_ || (!opening_ && (!buffer_busy_[0] || !buffer_busy_[1])); });
    if (failed()) return take_failure_locked();  // the writer failed while we waited
    if (active_) continue;
    Status st = open_region(lock);
    if (failed()) return take_failure_locked();  // the writer failed while the file was made
    if (!st.ok()) {
      fail_locked(st);
      return st;
    }
  }
  // The wait above let go of the lock: another put of the same key may have landed it meanwhile
  // (two commits of one prefix); a second copy took space, and its bytes were counted twice.
  if (holds_servable_locked(op.key)) return Status::Ok();
  std::byte* at = buffers_[active_->buffer].data() + cursor_;
  KVTIER_RETURN_IF_ERROR(encode_chunk_entry(options_.geometry, op.key, op.page_hashes, op.payload, next_sequence_++, kIoAlign,
                                            {at, lay.entry_bytes}, options_.auth.get()));
  Loc loc{active_, cursor_, n, lay.payload_offset, options_.geometry.codec, {}, nullptr};
  if (options_.auth) {
    KVTIER_ASSIGN_OR_RETURN(ChunkMeta m, decode_chunk_meta({at, lay.meta_bytes}, options_.geometry));
    loc.auth_meta = std::make_shared<const ChunkMeta>(std::move(m));
  } else {
    loc.layer_sums.resize(options_.geometry.kv.num_layers);
    std::memcpy(loc.layer_sums.data(), at + sizeof(ChunkHeader) + n * 16, loc.layer_sums.size() * 8);
  }
  add_entry_locked(op.key, std::move(loc));
  active_->keys.push_back(op.key);
  if (auto hold = pending_holds_.find(op.key); hold != pending_holds_.end()) {  // retained before it landed
    stats_.retain_yields += reclaim_order_.retain(active_->id, hold->second, pending_hold_cap_, options_.clock->now());
    pending_holds_.erase(hold);
  }
  cursor_ += lay.entry_bytes;
  active_->used = cursor_;
  if (cursor_ - submitted_ >= options_.write_stretch_bytes) submit_locked(false, false);
  return Status::Ok();
}

void DiskTier::put_batch(std::span<PutOp> ops) {
  Lock lock(mu_);
  for (PutOp& op : ops) op.status = put_locked(op, lock);
}

Status DiskTier::flush() {
  Lock lock(mu_);
  KVTIER_RETURN_IF_ERROR(take_failure_locked());
  submit_locked(false, options_.sync_writes);
  KVTIER_RETURN_IF_ERROR(wait_writes_locked(lock));
  // A region file created or removed since the last flush: its directory entry is made durable too.
  if (!options_.sync_writes || !std::exchange(dir_dirty_, false)) return Status::Ok();
  lock.unlock();
  Status s = fs_->sync_dir(options_.dir);
  if (!s.ok()) {
    lock.lock();
    dir_dirty_ = true;
  }
  return s;
}

size_t DiskTier::exists_prefix(const PageHash& ns, std::span<const PageHash> keys) {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (; n < keys.size(); ++n) {
    auto it = index_.find(ChunkKey{ns, keys[n]});
    if (it == index_.end()) break;
    if (!accept_chunk_codec(it->second.codec, options_.accept_lossy).ok()) {
      ++stats_.lossy_refused;
      break;
    }
  }
  return n;
}

Status DiskTier::erase(const ChunkKey& key) {
  std::lock_guard lock(mu_);
  drop_locked(key, nullptr);
  return Status::Ok();
}

Result<std::pair<RegionId, uint64_t>> DiskTier::locate(const ChunkKey& key) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return Status::NotFound("DiskTier: chunk not present");
  return std::pair{RegionId(it->second.region->id), it->second.offset};
}

TierStats DiskTier::stats() const {
  std::lock_guard lock(mu_);
  TierStats s = stats_;
  s.entries = index_.size();
  s.skipped_files = open_report_.skipped_regions;
  s.bytes = 0;
  for (const auto& [id, r] : regions_) s.bytes += r->used;
  s.retained_bytes = reclaim_order_.held(options_.clock->now()) * options_.region_bytes;
  return s;
}

}  // namespace kvtier
