#include "transfer/transfer_engine.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "io/aligned_buffer.h"
#include "transfer/layer_arrivals.h"

namespace kvtier {
namespace transfer_detail {

struct BatchState {
  uint64_t id = 0;
  TransferBatch batch;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<uint32_t> layer_pending;  // fetch shards not yet past each layer
  uint32_t tasks_pending = 0;
  std::atomic<bool> cancelled{false};
  TransferResult result;
  Status first_fetch_error;
  Status first_error;
  std::shared_ptr<LayerArrivals> arrivals;  // stamped per layer when the submitter records (layer_arrivals.h)

  void publish(uint32_t l0, uint32_t l1) {
    std::lock_guard lock(mu);
    for (uint32_t l = l0; l < l1; ++l) --layer_pending[l];
    cv.notify_all();
  }
  void set(std::vector<Status>& v, size_t i, Status s, bool fetch) {
    std::lock_guard lock(mu);
    if (!s.ok()) {
      if (fetch && first_fetch_error.ok()) first_fetch_error = s;
      if (first_error.ok()) first_error = s;
    }
    v[i] = std::move(s);
  }
};

}  // namespace transfer_detail

using transfer_detail::BatchState;

struct TransferEngine::Task {
  std::shared_ptr<BatchState> state;
  bool fetch = true;
  std::vector<size_t> copies, loads, stores;
};

// ---- handle ----

TransferHandle& TransferHandle::operator=(TransferHandle&& o) noexcept {
  if (this != &o) {
    if (state_) {
      cancel();
      (void)wait_all();
    }
    state_ = std::move(o.state_);
  }
  return *this;
}

TransferHandle::~TransferHandle() {
  if (!state_) return;
  cancel();
  (void)wait_all();
}

uint64_t TransferHandle::id() const { return state_ ? state_->id : 0; }

Status TransferHandle::wait_layer(LayerIdx l) {
  if (!state_) return Status::FailedPrecondition("empty TransferHandle");
  std::unique_lock lock(state_->mu);
  if (l.value() >= state_->layer_pending.size()) return Status::OutOfRange("layer beyond the model");
  state_->cv.wait(lock, [&] { return state_->layer_pending[l.value()] == 0; });
  return state_->first_fetch_error;
}

Status TransferHandle::wait_all() {
  if (!state_) return Status::FailedPrecondition("empty TransferHandle");
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->tasks_pending == 0; });
  return state_->first_error;
}

bool TransferHandle::done() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->tasks_pending == 0;
}

void TransferHandle::cancel() {
  if (state_) state_->cancelled.store(true, std::memory_order_release);
}

TransferResult TransferHandle::result() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mu);
  return state_->result;
}

// ---- engine ----

Status TransferEngineOptions::validate() const {
  if (workers > 256) return Status::InvalidArgument("TransferEngine: workers must be in 0..256");
  if (!pool && !host) return Status::InvalidArgument("TransferEngine: needs a BlockPool or a HostTier");
  if (pool && host && !(pool->geometry() == host->geometry().kv))
    return Status::InvalidArgument("TransferEngine: pool and host geometries differ");
  for (Tier* t : tiers) {
    if (!t) continue;
    const KVGeometry& g = pool ? pool->geometry() : host->geometry().kv;
    if (!(t->geometry().kv == g)) return Status::InvalidArgument("TransferEngine: a tier's geometry differs from the pool's");
  }
  return Status::Ok();
}

Result<std::unique_ptr<TransferEngine>> TransferEngine::create(const TransferEngineOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  return std::unique_ptr<TransferEngine>(new TransferEngine(o));
}

TransferEngine::TransferEngine(const TransferEngineOptions& o) : options_(o) {
  geometry_ = o.pool ? o.pool->geometry() : o.host->geometry().kv;
  chunk_geometry_ = o.host ? o.host->geometry() : ChunkGeometry{geometry_, 4096};
  for (Tier* t : o.tiers)
    if (t) chunk_geometry_.chunk_pages = std::min(chunk_geometry_.chunk_pages, t->geometry().chunk_pages);
  for (uint32_t i = 0; i < o.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

TransferEngine::~TransferEngine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // Queued work is cancelled (it finishes instantly); running work completes its step.
    for (auto& t : fetch_queue_) t->state->cancelled.store(true);
    for (auto& t : store_queue_) t->state->cancelled.store(true);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

Status TransferEngine::check_loc(const PageLoc& loc) const {
  if (loc.tier == TierKind::kDevice) {
    if (!options_.pool || !options_.pool->contains(PageId(loc.index))) return Status::InvalidArgument("TransferEngine: bad pool page");
  } else if (loc.tier == TierKind::kHost) {
    if (!options_.host || !options_.host->contains(SlotId(loc.index))) return Status::InvalidArgument("TransferEngine: bad host slot");
  } else {
    return Status::InvalidArgument("TransferEngine: pages live in the pool or the host arena only");
  }
  return Status::Ok();
}

namespace {

// A worker's reusable buffer: page-aligned for O_DIRECT, and pinned beside
// an accelerator so that the device's copies reach it directly (falls back
// to plain memory, which the device copies more slowly, if pinning fails).
struct Scratch {
  AlignedBuffer plain;
  std::unique_ptr<DeviceMemory> pinned;
  std::byte* get(size_t bytes, bool pin) {
    if (pin && (!pinned || pinned->size() < bytes)) {
      auto m = DeviceMemory::allocate(bytes, DeviceMemoryOptions{.alignment = kIoAlign, .pinned = true});
      if (m.ok()) pinned = std::move(*m);
    }
    if (pin && pinned && pinned->size() >= bytes) return pinned->data();
    if (plain.size() < bytes) plain = AlignedBuffer::for_io(bytes);
    return plain.data();
  }
};

}  // namespace

bool TransferEngine::pool_on_device() const { return options_.pool && !options_.pool->memory().host_accessible(); }

Status TransferEngine::move_bytes(std::span<const ByteCopy> copies) const {
  if (options_.pool) return options_.pool->memory().copy(copies);  // memcpy, or an accelerator's copies
  return copy_host(copies);  // host slots only
}

bool TransferEngine::encoded(const PageLoc& loc) const {
  return loc.tier == TierKind::kHost && options_.host && options_.host->codec() != KvCodec::kNone;
}

bool TransferEngine::any_encoded(std::span<const PageLoc> locs) const {
  return std::any_of(locs.begin(), locs.end(), [&](const PageLoc& l) { return encoded(l); });
}

Status TransferEngine::copy_pages(const TransferBatch& b, std::span<const size_t> which, uint32_t l0, uint32_t l1,
                                  std::vector<ByteCopy>& copies) const {
  const size_t slice = geometry_.layer_slice_bytes();
  copies.clear();  // page-first: a layer range of a page is contiguous
  for (size_t i : which) {
    const CopyMove& c = b.copies[i];
    if (encoded(c.src) || encoded(c.dst)) {
      KVTIER_RETURN_IF_ERROR(copy_encoded(c, l0, l1));
      continue;
    }
    copies.push_back({page_ptr(c.dst) + l0 * slice, page_ptr(c.src) + l0 * slice, (l1 - l0) * slice});
  }
  return move_bytes(copies);
}

Status TransferEngine::copy_encoded(const CopyMove& c, uint32_t l0, uint32_t l1) const {
  const bool to_host = encoded(c.dst);
  const PageLoc& page = to_host ? c.src : c.dst;
  if (page.tier != TierKind::kDevice) return Status::InvalidArgument("TransferEngine: host-to-host copies are not supported");
  const size_t off = l0 * geometry_.layer_slice_bytes(), len = (l1 - l0) * geometry_.layer_slice_bytes();
  // Beside an accelerator the page is staged in host memory; else the codec works on it in place.
  thread_local Scratch tl_page;
  std::byte* raw = pool_on_device() ? tl_page.get(geometry_.page_bytes(), true) : page_ptr(page);
  if (to_host) {
    if (raw != page_ptr(page)) KVTIER_RETURN_IF_ERROR(move_bytes(std::array{ByteCopy{raw + off, page_ptr(page) + off, len}}));
    return options_.host->store_layers(SlotId(c.dst.index), l0, l1 - l0, raw);
  }
  KVTIER_RETURN_IF_ERROR(options_.host->load_layers(SlotId(c.src.index), l0, l1 - l0, raw));
  if (raw != page_ptr(page)) return move_bytes(std::array{ByteCopy{page_ptr(page) + off, raw + off, len}});
  return Status::Ok();
}

Status TransferEngine::scatter_load(const LoadMove& m, const std::byte* layers, uint32_t l0, uint32_t l1,
                                    std::span<std::byte* const> dst, std::vector<ByteCopy>& copies) const {
  copies.clear();
  if (!any_encoded(m.dst)) {
    scatter_copies(geometry_, layers, l0, l1 - l0, dst, copies);
    return move_bytes(copies);
  }
  // Into encoded host slots: each page's layers are assembled raw, then encoded.
  const size_t slice = geometry_.layer_slice_bytes(), n = m.dst.size();
  thread_local std::vector<std::byte> raw;
  raw.resize(geometry_.page_bytes());
  for (size_t p = 0; p < n; ++p) {
    for (uint32_t i = 0; i < l1 - l0; ++i) {
      const std::byte* from = layers + (size_t(i) * n + p) * slice;
      if (encoded(m.dst[p])) std::memcpy(raw.data() + (l0 + i) * slice, from, slice);
      else copies.push_back({dst[p] + (l0 + i) * slice, from, slice});
    }
    if (encoded(m.dst[p])) KVTIER_RETURN_IF_ERROR(options_.host->store_layers(SlotId(m.dst[p].index), l0, l1 - l0, raw.data()));
  }
  return move_bytes(copies);
}

std::byte* TransferEngine::page_ptr(const PageLoc& loc) const {
  return loc.tier == TierKind::kDevice ? options_.pool->page(PageId(loc.index)) : options_.host->slot(SlotId(loc.index));
}

Result<TransferHandle> TransferEngine::submit(TransferBatch batch) {
  auto tier_of = [&](TierKind k) -> Tier* { return options_.tiers[static_cast<size_t>(k)]; };
  for (const auto& c : batch.copies) {
    KVTIER_RETURN_IF_ERROR(check_loc(c.src));
    KVTIER_RETURN_IF_ERROR(check_loc(c.dst));
  }
  for (const auto& l : batch.loads) {
    if (!tier_of(l.from)) return Status::InvalidArgument("TransferEngine: load from a tier the engine does not have");
    if (l.dst.empty() || l.dst.size() > tier_of(l.from)->geometry().chunk_pages) return Status::InvalidArgument("TransferEngine: bad load size");
    for (const auto& d : l.dst) KVTIER_RETURN_IF_ERROR(check_loc(d));
  }
  for (const auto& s : batch.stores) {
    if (!tier_of(s.to)) return Status::InvalidArgument("TransferEngine: store to a tier the engine does not have");
    if (s.src.empty() || s.src.size() != s.page_hashes.size()) return Status::InvalidArgument("TransferEngine: store pages and hashes differ");
    for (const auto& d : s.src) KVTIER_RETURN_IF_ERROR(check_loc(d));
  }
  auto st = std::make_shared<BatchState>();
  st->batch = std::move(batch);
  const auto& b = st->batch;
  if (!b.copies.empty() || !b.loads.empty()) st->arrivals = ScopedLayerArrivals::current();
  st->result.copies.resize(b.copies.size());
  st->result.loads.resize(b.loads.size());
  st->result.load_codecs.resize(b.loads.size());
  st->result.stores.resize(b.stores.size());
  // Shard fetch work and store work over the workers (one shard of each when inline).
  const size_t nw = std::max<size_t>(1, workers_.size());
  const size_t fetch_items = b.copies.size() + b.loads.size();
  const size_t fshards = std::min(nw, fetch_items), sshards = std::min(nw, b.stores.size());
  std::vector<std::unique_ptr<Task>> tasks;
  for (size_t i = 0; i < fshards; ++i) tasks.push_back(std::make_unique<Task>(Task{st, true, {}, {}, {}}));
  for (size_t i = 0; i < b.copies.size(); ++i) tasks[i % fshards]->copies.push_back(i);
  for (size_t i = 0; i < b.loads.size(); ++i) tasks[(b.copies.size() + i) % fshards]->loads.push_back(i);
  for (size_t i = 0; i < sshards; ++i) tasks.push_back(std::make_unique<Task>(Task{st, false, {}, {}, {}}));
  for (size_t i = 0; i < b.stores.size(); ++i) tasks[fshards + i % sshards]->stores.push_back(i);
  st->layer_pending.assign(geometry_.num_layers, static_cast<uint32_t>(fshards));
  st->tasks_pending = static_cast<uint32_t>(tasks.size());
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Status::Unavailable("TransferEngine: shutting down");
    st->id = st->result.id = next_id_++;
    if (tasks.empty()) completions_.push_back(st->result);
    if (!workers_.empty())
      for (auto& t : tasks) (t->fetch ? fetch_queue_ : store_queue_).push_back(std::move(t));
  }
  if (workers_.empty()) {
    // Inline: fetch tasks come first in `tasks`, as workers would take them.
    for (auto& t : tasks) {
      if (t->fetch) run_fetch(*t);
      else run_store(*t);
      finish_task(*t);
    }
    return TransferHandle(st);
  }
  cv_.notify_all();
  return TransferHandle(st);
}

std::vector<TransferResult> TransferEngine::poll_completions() {
  std::lock_guard lock(mu_);
  return std::exchange(completions_, {});
}

void TransferEngine::worker_loop() {
  for (;;) {
    std::unique_ptr<Task> t;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !fetch_queue_.empty() || !store_queue_.empty(); });
      if (!fetch_queue_.empty()) {  // loads before stores
        t = std::move(fetch_queue_.front());
        fetch_queue_.pop_front();
      } else if (!store_queue_.empty()) {
        t = std::move(store_queue_.front());
        store_queue_.pop_front();
      } else {
        return;  // stopping and drained
      }
    }
    if (t->fetch) run_fetch(*t);
    else run_store(*t);
    finish_task(*t);
  }
}

// A fetch task's loads, index-aligned with Task::loads: where each one's
// layers are staged, its destination pages, and whether it failed.
struct TransferEngine::FetchLoads {
  std::vector<std::span<std::byte>> staging;  // one layer group of the load
  std::vector<std::vector<std::byte*>> dst;
  std::vector<bool> direct;  // a tier may write the load's layers straight into its pages
  std::vector<bool> failed;
};

TransferEngine::FetchLoads TransferEngine::prepare_loads(const Task& t, uint32_t group) const {
  const auto& b = t.state->batch;
  const size_t slice = geometry_.layer_slice_bytes();
  FetchLoads f;
  f.failed.assign(t.loads.size(), false);
  // Staging for one layer group of each load (aligned so disk reads can go
  // straight in). Kept per worker and reused: faulting fresh pages in costs
  // more than the I/O itself (measured: 10x slower whole-chunk loads in a VM).
  thread_local Scratch tl_staging;
  size_t need = 0;
  for (size_t i : t.loads) need += align_up(group * size_t(b.loads[i].dst.size()) * slice);
  std::byte* const base = tl_staging.get(need, pool_on_device());
  for (size_t i = 0, off = 0; i < t.loads.size(); ++i) {
    const LoadMove& m = b.loads[t.loads[i]];
    const size_t len = group * size_t(m.dst.size()) * slice;
    f.staging.push_back({base + off, len});
    off += align_up(len);
    f.dst.emplace_back();
    for (const auto& d : m.dst) f.dst.back().push_back(page_ptr(d));
    f.direct.push_back(!pool_on_device() && !any_encoded(m.dst));
  }
  return f;
}

// Cancelled before layer l0: every move not yet failed is marked cancelled and layers [l0, L) are released.
void TransferEngine::cancel_fetch(Task& t, const FetchLoads& f, uint32_t l0) {
  BatchState& st = *t.state;
  for (size_t i : t.copies) st.set(st.result.copies, i, Status::Cancelled("transfer cancelled"), true);
  for (size_t j = 0; j < t.loads.size(); ++j)
    if (!f.failed[j]) st.set(st.result.loads, t.loads[j], Status::Cancelled("transfer cancelled"), true);
  std::lock_guard lock(st.mu);
  st.result.cancelled = true;
  for (uint32_t l = l0; l < geometry_.num_layers; ++l) --st.layer_pending[l];
  st.cv.notify_all();
}

// Layers [r.l0, r.l1) of the task's loads from tier `k`, in one batched call
// (a disk tier makes it one stream of I/O), then into their pages. A tier
// that reports layers as they land (GetOp::on_ready) has them moved into
// their pages at once, and published at once when `k` is the round's last
// tier with loads (the copies and earlier tiers' loads are done by then).
void TransferEngine::load_layers(Task& t, FetchLoads& f, TierKind k, Round& r, std::vector<ByteCopy>& copies) {
  BatchState& st = *t.state;
  const auto& b = st.batch;
  std::vector<GetOp> ops;
  std::vector<size_t> which;
  for (size_t j = 0; j < t.loads.size(); ++j) {
    const LoadMove& m = b.loads[t.loads[j]];
    if (f.failed[j] || m.from != k) continue;
    ops.push_back(GetOp{.key = m.key,
                        .first_layer = r.l0,
                        .num_layers = r.l1 - r.l0,
                        .out = f.staging[j],
                        .expect_pages = uint32_t(m.dst.size()),
                        .pages = f.direct[j] ? std::span<std::byte* const>(f.dst[j]) : std::span<std::byte* const>()});
    which.push_back(j);
  }
  if (ops.empty()) return;
  const bool last = std::none_of(t.loads.begin(), t.loads.end(), [&](size_t i) { return b.loads[i].from > k; });
  std::vector<uint32_t> ready(ops.size(), r.l0);  // per op: layers in their pages
  uint32_t marked = r.l0;                          // layers stamped as arrived from `k`
  // Layers [ready[o], end) of op o are in `out` (or placed): into their pages.
  auto settle = [&](size_t o, uint32_t end, bool placed) {
    const size_t j = which[o];
    if (ops[o].num_pages != f.dst[j].size()) return Status::InvalidArgument("TransferEngine: chunk page count differs from the load's");
    const size_t from = size_t(ready[o] - r.l0) * f.dst[j].size() * geometry_.layer_slice_bytes();
    Status s = placed ? Status::Ok() : scatter_load(b.loads[t.loads[j]], f.staging[j].data() + from, ready[o], end, f.dst[j], copies);
    if (s.ok()) ready[o] = end;
    return s;
  };
  auto advance = [&](bool publish) {
    const uint32_t lo = *std::min_element(ready.begin(), ready.end());
    if (st.arrivals && lo > marked) st.arrivals->mark(k, marked, lo);
    marked = std::max(marked, lo);
    if (!publish || lo <= r.published) return;
    st.publish(r.published, lo);
    r.published = lo;
  };
  for (size_t o = 0; o < ops.size() && options_.load_mode == LoadMode::kLayerMajor; ++o)
    ops[o].on_ready = [&, o](uint32_t end, bool placed) {
      if (end <= ready[o] || !settle(o, end, placed).ok()) return;  // a failure is settled when the call returns
      advance(last);
    };
  options_.tiers[static_cast<size_t>(k)]->get_batch(ops);
  for (size_t o = 0; o < ops.size(); ++o) {
    const size_t j = which[o];
    Status s = ops[o].status;
    if (s.ok() && ops[o].codec != KvCodec::kNone) {
      std::lock_guard lock(st.mu);
      st.result.load_codecs[t.loads[j]] = ops[o].codec;
    }
    if (s.ok() && ready[o] < r.l1) s = settle(o, r.l1, ops[o].placed);
    if (!s.ok()) {
      f.failed[j] = true;
      ready[o] = r.l1;  // nothing more comes from it: its layers go out with the error
      st.set(st.result.loads, t.loads[j], s, true);
    }
  }
  advance(false);
}

// Layers a fetch round covers: every layer for whole-chunk loads; one where a
// load's tier does not report layers as they land (the round's first layer
// would wait for its last); else as many as keep the round's raw bytes within
// kRoundBytes (at least one), read as one stream whose layers are published
// as they land. The bound is on what a worker keeps for its reads (the
// tier's bounce buffer, the staging).
uint32_t TransferEngine::round_layers(const Task& t) const {
  const uint32_t L = geometry_.num_layers;
  if (options_.load_mode == LoadMode::kWholeChunk) return L;
  size_t per_layer = 0;
  for (size_t i : t.loads) {
    const LoadMove& m = t.state->batch.loads[i];
    if (!options_.tiers[static_cast<size_t>(m.from)]->reports_layers()) return 1;
    per_layer += m.dst.size() * geometry_.layer_slice_bytes();
  }
  if (per_layer == 0) return 1;
  return static_cast<uint32_t>(std::clamp<size_t>(kRoundBytes / per_layer, 1, L));
}

void TransferEngine::run_fetch(Task& t) {
  BatchState& st = *t.state;
  const uint32_t L = geometry_.num_layers;
  const uint32_t group = round_layers(t);
  FetchLoads f = prepare_loads(t, group);
  std::vector<ByteCopy> copies;  // reused for every group of moves below
  for (uint32_t l0 = 0; l0 < L; l0 += group) {
    Round r{.l0 = l0, .l1 = std::min(L, l0 + group), .published = l0};
    if (st.cancelled.load(std::memory_order_acquire)) return cancel_fetch(t, f, l0);
    if (Status cs = copy_pages(st.batch, t.copies, r.l0, r.l1, copies); !cs.ok())
      for (size_t i : t.copies) st.set(st.result.copies, i, cs, true);
    else if (st.arrivals && !t.copies.empty())
      st.arrivals->mark(st.batch.copies[t.copies.front()].src.tier, r.l0, r.l1);
    for (size_t k = 0; k < size_t(kNumTiers); ++k) load_layers(t, f, TierKind(k), r, copies);
    if (r.published < r.l1) st.publish(r.published, r.l1);
  }
}

void TransferEngine::run_store(Task& t) {
  BatchState& st = *t.state;
  const auto& b = st.batch;
  std::vector<const std::byte*> src;
  std::vector<ByteCopy> slices;  // both reused across the task's stores
  for (size_t i : t.stores) {
    if (st.cancelled.load(std::memory_order_acquire)) {
      st.set(st.result.stores, i, Status::Cancelled("transfer cancelled"), false);
      std::lock_guard lock(st.mu);
      st.result.cancelled = true;
      continue;
    }
    const StoreMove& m = b.stores[i];
    if (any_encoded(m.src)) {
      // Pages in encoded host slots are approximate: they never go down as an exact entry.
      st.set(st.result.stores, i, Status::FailedPrecondition("TransferEngine: pages in encoded host slots are not stored down"), false);
      continue;
    }
    src.clear();
    for (const auto& s : m.src) src.push_back(page_ptr(s));
    thread_local Scratch tl_chunk;  // reused: see run_fetch
    const size_t bytes = chunk_geometry_.payload_bytes(static_cast<uint32_t>(src.size()));
    std::byte* const chunk = tl_chunk.get(bytes, pool_on_device());
    slices.clear();
    gather_copies(geometry_, src, chunk, slices);  // the aggregation step
    Status gs = move_bytes(slices);
    Tier* tier = options_.tiers[static_cast<size_t>(m.to)];
    st.set(st.result.stores, i, gs.ok() ? tier->put(m.key, m.page_hashes, {chunk, bytes}) : gs, false);
  }
}

void TransferEngine::finish_task(Task& t) {
  BatchState& st = *t.state;
  bool last = false;
  TransferResult snapshot;
  {
    std::lock_guard lock(st.mu);
    last = st.tasks_pending == 1;  // the last task keeps the batch pending until its completion is posted
    if (last) snapshot = st.result;
    else --st.tasks_pending;
  }
  if (last) {
    std::lock_guard lock(mu_);
    completions_.push_back(std::move(snapshot));
  }
  std::lock_guard lock(st.mu);
  // Only now may waiters see the batch done: whoever returns from
  // wait_all() finds its completion in poll_completions().
  if (last) --st.tasks_pending;
  st.cv.notify_all();
}

}  // namespace kvtier
