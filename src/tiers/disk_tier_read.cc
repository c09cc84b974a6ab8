// DiskTier's read path: batched io_uring reads of whole layers, each unit
// verified as soon as its reads complete (the rest of the tier: disk_tier.cc).
#include <algorithm>
#include <cstring>
#include <string>

#include "tiers/disk_tier.h"
#include "tiers/disk_tier_region.h"

namespace kvtier {

namespace {

// Verified stored layers [first, first + count) of the op's range, sitting
// in one of the tier's buffers -> the caller's pages when it gave them
// (decoded in place, no staging copy), else `out`.
Status place_layers(GetOp& op, const ChunkGeometry& g, uint32_t n_pages, KvCodec codec, uint32_t first, uint32_t count,
                    std::span<const std::byte> stored) {
  if (op.pages.size() == n_pages) {
    op.placed = true;
    return decode_chunk_layers_to_pages(codec, g, op.first_layer + first, count, stored, op.pages);
  }
  return decode_chunk_layers(codec, g, n_pages, count, stored, op.out.subspan(first * g.layer_bytes(n_pages)));
}

}  // namespace

// One get_batch's reads from the region files. A read unit is a run of whole
// layers of one chunk, read by one or more I/Os and verified as soon as its
// last I/O completes, while the reads of later units are in flight. A chunk's
// first failure (I/O error or bad checksum) decides its outcome. Where the
// caller asked for layers as they land (GetOp::on_ready), every unit is one
// layer, encoded layers are decoded unit by unit, the reads are issued layer
// by layer across the chunks, and each chunk's ready layers are reported in
// order. Filled under the tier's lock (add_*), run without it.
class DiskTier::ReadBatch {
 public:
  struct Pending {
    GetOp* op;
    Loc loc;                      // a copy: the entry may leave the index while it is read
    File* file = nullptr;         // taken under the lock
    std::span<std::byte> bounce;  // used unless the read goes straight into `out` (add)
    uint64_t bounce_start = 0;    // file offset of bounce[0]
    size_t bounce_len = 0;        // bytes read into `bounce` (0: none)
    size_t skip = 0;              // bytes before the wanted range inside `bounce`
    uint32_t units_left = 0;
    int outcome = -1;        // 0 ok, 1 io error, 2 corrupt; -1 not yet
    bool layer_units = false;  // one unit per layer, each placed when it is verified
    std::vector<char> ready;   // per layer of the op, with on_ready: verified and placed
    uint32_t reported = 0;     // layers reported through on_ready
  };

  explicit ReadBatch(const DiskTierOptions& o) : o_(o) {}

  // The op's layers, `lb` stored bytes each from file offset `off`: straight
  // into `out` when raw, O_DIRECT-aligned and the caller gave no pages; else
  // through a bounce buffer, from which they are placed into the pages (one
  // copy either way, and this one measured faster: docs/PERF.md, "Streamed disk loads").
  void add(GetOp& op, const Loc& loc, uint64_t off, size_t lb) {
    const bool direct = loc.codec == KvCodec::kNone && op.pages.size() != loc.num_pages && off % kIoAlign == 0 &&
                        lb % kIoAlign == 0 && reinterpret_cast<uintptr_t>(op.out.data()) % kIoAlign == 0;
    if (direct) add_direct(op, loc, off, lb);
    else add_bounced(op, loc, off, op.num_layers * lb);
  }
  bool empty() const { return pending_.empty(); }
  std::vector<Pending>& pending() { return pending_; }

  // Bounce buffers are slices of one arena kept per thread and reused
  // (faulting in fresh pages for every chunk of every layer cost as much as
  // reading it), in whole huge pages (AlignedBuffer::for_io).
  void place_bounces() {
    thread_local AlignedBuffer tl_bounce;
    if (tl_bounce.size() < bounce_bytes_) tl_bounce = AlignedBuffer::for_io(bounce_bytes_);
    size_t used = 0;
    for (uint32_t c = 0; c < pending_.size(); ++c) {
      Pending& p = pending_[c];
      if (p.bounce_len == 0) continue;
      p.bounce = tl_bounce.span().subspan(used, p.bounce_len);
      used += p.bounce_len;
      const size_t lb = o_.geometry.stored_layer_bytes(p.loc.num_pages, p.loc.codec);
      p.layer_units = p.op->on_ready && p.skip == 0 && lb % kIoAlign == 0;
      if (!p.layer_units) {
        add_unit(c, 0, p.op->num_layers, p.bounce_start, p.bounce.data(), p.bounce.size());
        continue;
      }
      for (uint32_t l = 0; l < p.op->num_layers; ++l) add_unit(c, l, 1, p.bounce_start + l * lb, p.bounce.data() + l * lb, lb);
    }
  }

  // Every read on `q` (null: each fails with `qst`), with read_waves waves in
  // flight (never fewer than 8 reads nor more than queue_depth), so that what
  // one wave read is verified while the next is read.
  void run(IoQueue* q, const Status& qst) {
    order_by_layer();
    reported_.assign(io_.size(), 0);
    if (q) {
      const size_t per_wave = (io_.size() + o_.read_waves - 1) / o_.read_waves;
      const auto inflight = static_cast<uint32_t>(std::min<size_t>(o_.queue_depth, std::max<size_t>(8, per_wave)));
      (void)q->run_notify(io_, [this](size_t k) { complete(k); }, inflight);
    } else {
      for (IoOp& op : io_) op.status = qst;
    }
    for (size_t k = 0; k < io_.size(); ++k)  // ops the queue gave up on without reporting them
      if (!reported_[k]) {
        if (io_[k].status.ok()) io_[k].status = Status::IOError("DiskTier: read not completed");
        complete(k);
      }
  }

 private:
  struct Unit {
    uint32_t chunk = 0, first_layer = 0, num_layers = 0;  // layers relative to the op's first_layer
    uint32_t io_left = 0;
  };

  // Reads layer by layer across the chunks, so that the first layers land first.
  void order_by_layer() {
    std::vector<size_t> order(io_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return units_[io_unit_[a]].first_layer < units_[io_unit_[b]].first_layer; });
    std::vector<IoOp> io;
    std::vector<uint32_t> io_unit;
    for (size_t k : order) {
      io.push_back(io_[k]);
      io_unit.push_back(io_unit_[k]);
    }
    io_.swap(io);
    io_unit_.swap(io_unit);
  }

  // A raw chunk whose range and `out` are O_DIRECT-aligned: read straight
  // into `out`, in units of whole layers of at most io_block_bytes.
  void add_direct(GetOp& op, const Loc& loc, uint64_t off, size_t lb) {
    const uint32_t c = add_pending(op, loc);
    const uint32_t per_unit = op.on_ready ? 1 : static_cast<uint32_t>(std::max<size_t>(1, o_.io_block_bytes / lb));
    for (uint32_t l = 0; l < op.num_layers; l += per_unit) {
      const uint32_t n = std::min(per_unit, op.num_layers - l);
      add_unit(c, l, n, off + l * lb, op.out.data() + l * lb, n * lb);
    }
  }
  // Any other chunk (encoded ones always): one unit through an aligned bounce
  // buffer, which place_bounces() gives it; then decoded into the caller's pages or `out`.
  void add_bounced(GetOp& op, const Loc& loc, uint64_t off, size_t len) {
    Pending& p = pending_[add_pending(op, loc)];
    p.bounce_start = align_down(off);
    p.skip = off - p.bounce_start;
    p.bounce_len = align_up(off + len) - p.bounce_start;
    bounce_bytes_ += p.bounce_len;
  }
  uint32_t add_pending(GetOp& op, const Loc& loc) {
    pending_.push_back(Pending{.op = &op, .loc = loc, .file = loc.region->file.get()});
    if (op.on_ready) pending_.back().ready.assign(op.num_layers, 0);
    return static_cast<uint32_t>(pending_.size() - 1);
  }
  // Reads of at most io_block_bytes (many huge reads in flight overrun the
  // device queue and io_uring falls back to blocking workers), cut at layer
  // boundaries so that each unit can be verified on its own.
  void add_unit(uint32_t chunk, uint32_t first_layer, uint32_t num_layers, uint64_t off, std::byte* buf, size_t len) {
    const uint32_t u = static_cast<uint32_t>(units_.size());
    units_.push_back({chunk, first_layer, num_layers, 0});
    for (size_t done = 0; done < len; done += o_.io_block_bytes) {
      io_.push_back({IoKind::kRead, pending_[chunk].file, off + done, buf + done, std::min(o_.io_block_bytes, len - done)});
      io_unit_.push_back(u);
      ++units_[u].io_left;
    }
    ++pending_[chunk].units_left;
  }
  void complete(size_t k) {
    reported_[k] = 1;
    Unit& u = units_[io_unit_[k]];
    Pending& p = pending_[u.chunk];
    if (!io_[k].status.ok() && p.outcome < 0) {
      p.op->status = io_[k].status;
      p.outcome = 1;
    }
    if (--u.io_left == 0) settle(u);
  }
  // A unit's reads are all in: verify its layers; a layer unit is placed at
  // once, else the chunk's last unit places them all.
  void settle(const Unit& u) {
    Pending& p = pending_[u.chunk];
    if (p.outcome < 0) verify(p, u);
    if (p.outcome < 0 && p.layer_units) place(p, u.first_layer, u.num_layers);
    const bool placed_now = p.bounce.empty() || p.layer_units;  // in `out`, or decoded just above
    if (p.outcome < 0 && placed_now) report(p, u.first_layer, u.num_layers);
    if (--p.units_left > 0 || p.outcome >= 0) return;
    p.outcome = 0;
    if (placed_now) return;
    place(p, 0, p.op->num_layers);
    if (p.outcome == 0) report(p, 0, p.op->num_layers);
  }
  void verify(Pending& p, const Unit& u) {
    const ChunkGeometry& g = o_.geometry;
    GetOp& op = *p.op;
    const size_t lb = g.stored_layer_bytes(p.loc.num_pages, p.loc.codec);
    const std::byte* base = p.bounce.empty() ? op.out.data() : p.bounce.data() + p.skip;
    if (p.loc.auth_meta) {  // keyed layer tags (tier secret)
      op.status = verify_chunk_layers(*p.loc.auth_meta, g, op.first_layer + u.first_layer, u.num_layers,
                                      {base + u.first_layer * lb, u.num_layers * lb}, o_.auth.get());
      if (!op.status.ok()) p.outcome = 2;
      return;
    }
    for (uint32_t l = u.first_layer; l < u.first_layer + u.num_layers && p.outcome < 0; ++l)
      if (layer_checksum(base + l * lb, lb, op.first_layer + l) != p.loc.layer_sums[op.first_layer + l]) {
        op.status = Status::Corruption("chunk layer " + std::to_string(op.first_layer + l) + " checksum mismatch");
        p.outcome = 2;
      }
  }
  // Verified layers [first, first + count) of a bounced read -> the caller's pages or `out`.
  void place(Pending& p, uint32_t first, uint32_t count) {
    const ChunkGeometry& g = o_.geometry;
    const size_t lb = g.stored_layer_bytes(p.loc.num_pages, p.loc.codec);
    p.op->status = place_layers(*p.op, g, p.loc.num_pages, p.loc.codec, first, count,
                                {p.bounce.data() + p.skip + first * lb, count * lb});
    if (!p.op->status.ok()) p.outcome = 2;
  }
  // Layers [first, first + count) are ready: report the op's ready run when it grew.
  void report(Pending& p, uint32_t first, uint32_t count) {
    if (p.ready.empty()) return;
    std::fill_n(p.ready.begin() + first, count, 1);
    const uint32_t before = p.reported;
    while (p.reported < p.ready.size() && p.ready[p.reported]) ++p.reported;
    if (p.reported > before) p.op->on_ready(p.op->first_layer + p.reported, p.op->placed);
  }

  const DiskTierOptions& o_;
  std::vector<Pending> pending_;
  std::vector<Unit> units_;
  std::vector<IoOp> io_;
  std::vector<uint32_t> io_unit_;  // unit of each I/O
  std::vector<char> reported_;     // per I/O: its completion was handled
  size_t bounce_bytes_ = 0;
};

void DiskTier::get_batch(std::span<GetOp> ops) {
  const ChunkGeometry& g = options_.geometry;
  ReadBatch batch(options_);
  std::vector<GetOp*> from_memory;  // placed under the lock, reported after it
  {
    std::lock_guard lock(mu_);
    for (GetOp& op : ops) {
      auto it = index_.find(op.key);
      if (it == index_.end()) {
        ++stats_.misses;
        op.status = Status::NotFound("DiskTier: chunk not present");
        continue;
      }
      const Loc& loc = it->second;
      op.num_pages = loc.num_pages;
      op.codec = loc.codec;
      op.status = accept_chunk_codec(loc.codec, options_.accept_lossy);
      if (!op.status.ok()) {
        ++stats_.lossy_refused;
        continue;
      }
      op.status = resolve_get_range(g, loc.num_pages, op);
      if (!op.status.ok()) continue;
      const size_t lb = g.stored_layer_bytes(loc.num_pages, loc.codec);
      const uint64_t off = loc.offset + loc.payload_offset + op.first_layer * lb;
      const size_t len = op.num_layers * lb;
      reclaim_order_.touch(loc.region->id, ++tick_);
      if (loc.region->buffer >= 0) {  // still in a region buffer (maybe not on disk yet): serve from memory
        op.status = place_layers(op, g, loc.num_pages, loc.codec, 0, op.num_layers, {buffers_[loc.region->buffer].data() + off, len});
        if (op.status.ok()) ++stats_.hits;
        if (op.status.ok() && op.on_ready) from_memory.push_back(&op);
        continue;
      }
      batch.add(op, loc, off, lb);
    }
  }
  for (GetOp* op : from_memory) op->on_ready(op->first_layer + op->num_layers, op->placed);
  if (batch.empty()) return;
  batch.place_bounces();
  Status qst;
  auto q = acquire_queue(qst);
  batch.run(q.get(), qst);
  if (q) release_queue(std::move(q));
  std::lock_guard lock(mu_);
  for (ReadBatch::Pending& p : batch.pending()) {
    if (p.outcome == 0) {
      ++stats_.hits;
    } else if (p.outcome == 1) {
      count_io_error_locked(p.op->status);
      // A region file cut short under the tier fails this entry's every read, and while it is
      // indexed it is never stored again: it goes. (An I/O error on a whole file keeps it.)
      const uint64_t end = p.loc.offset + p.loc.payload_offset + g.stored_payload_bytes(p.loc.num_pages, p.loc.codec);
      const Result<uint64_t> size = p.loc.region->file->size();
      if (size.ok() && *size < end) drop_locked(p.op->key, p.loc.region.get());
    } else {
      ++(p.loc.auth_meta ? stats_.forged_entries : stats_.checksum_failures);
      drop_locked(p.op->key, p.loc.region.get());
    }
  }
}

}  // namespace kvtier
