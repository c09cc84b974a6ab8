#include "tier_bench.h"

#include "scratch_dir.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "common/page_hash.h"
#include "common/stats.h"
#include "io/aligned_buffer.h"
#include "io/file_system.h"
#include "tiers/disk_tier.h"
#include "transfer/transfer_engine.h"

namespace kvtier {
namespace {

using SteadyClock = std::chrono::steady_clock;
double secs(SteadyClock::time_point a, SteadyClock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double gbps(size_t bytes, double s) { return s > 0 ? double(bytes) / s / 1e9 : 0; }
// Median over rounds of a[k] / b[k].
double paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k)
    if (b[k] > 0) r.push_back(a[k] / b[k]);
  return median(std::move(r));
}

void fill(std::byte* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
}

constexpr size_t kRawBlock = size_t(1) << 20;
// The disk figures are measured in rounds that alternate raw, DiskTier and
// per-page I/O on the same bytes, so that drift of a shared virtual disk
// (its throughput swings by 1.5x within seconds here) hits all of them alike,
// and each figure is the median of its rounds' bandwidths, so that a stall
// of the device in one round does not decide it. Reads alternate more
// finely than writes: a write round ends with a flush (an extra fdatasync
// for DiskTier), a read round costs nothing extra.
constexpr uint32_t kRounds = 4;
constexpr uint32_t kReadSplit = 4;  // read sub-rounds per write round

// Sequential 1 MiB O_DIRECT blocks over [begin, end) through io_uring: the
// device's floor. Writes fdatasync at every multiple of `sync_every` and at
// the end, as DiskTier (sync_writes) syncs each region and each flush;
// sync_every = 0: never, as DiskTier without sync_writes.
Result<double> raw_pass(File& f, IoQueue& q, IoKind kind, uint64_t begin, uint64_t end, size_t sync_every, AlignedBuffer& buf) {
  const size_t depth = q.depth();
  std::vector<IoOp> ops;
  auto t0 = SteadyClock::now();
  for (uint64_t off = begin; off < end; off += kRawBlock) {
    ops.push_back({kind, &f, off, buf.data() + (ops.size() % depth) * kRawBlock, kRawBlock});
    const bool last = off + kRawBlock >= end;
    const bool sync_now = kind == IoKind::kWrite && sync_every > 0 && ((off + kRawBlock) % sync_every == 0 || last);
    if (ops.size() == depth * 8 || last || sync_now) {
      KVTIER_RETURN_IF_ERROR(q.run(ops));
      ops.clear();
    }
    if (sync_now) KVTIER_RETURN_IF_ERROR(f.sync());
  }
  return secs(t0, SteadyClock::now());
}

// The un-aggregated loader: pages stored page-first ([layer][k|v][P][H][D],
// one page after another, in order) and loaded layer by layer, so each
// (page, layer) slice of pages [first, last) is its own read, with the same
// io_uring queue depth as DiskTier. Slices not 4096-aligned are read as their
// enclosing aligned range (O_DIRECT), counting only the slice bytes. Like
// DiskTier, it checksums what it reads as each read completes (a store that
// serves KV must detect corruption), so the comparison is one of I/O
// granularity alone.
Result<double> per_page_pass(File& f, IoQueue& q, const KVGeometry& g, size_t first, size_t last, AlignedBuffer& buf,
                             uint64_t& sink) {
  const size_t depth = q.depth();
  const size_t slice = g.layer_slice_bytes(), page = g.page_bytes();
  const size_t span = buf.size() / depth;
  std::vector<IoOp> ops;
  std::vector<size_t> skip;  // bytes before the slice in each read
  auto t0 = SteadyClock::now();
  for (uint32_t l = 0; l < g.num_layers; ++l) {
    for (size_t p = first; p < last; ++p) {
      const uint64_t off = p * page + size_t(l) * slice;
      const uint64_t start = align_down(off);
      ops.push_back({IoKind::kRead, &f, start, buf.data() + (ops.size() % depth) * span, align_up(off + slice) - start});
      skip.push_back(off - start);
      if (ops.size() == depth * 8 || (l + 1 == g.num_layers && p + 1 == last)) {
        KVTIER_RETURN_IF_ERROR(q.run_notify(ops, [&](size_t i) { sink += checksum64(ops[i].buf + skip[i], slice); }));
        ops.clear();
        skip.clear();
      }
    }
  }
  return secs(t0, SteadyClock::now());
}

// Pool memory of `pages` pages, where TierBenchOptions::device puts the pool.
Result<std::unique_ptr<BlockPool>> make_pool(const TierBenchOptions& o, uint32_t pages) {
  return BlockPool::create(BlockPoolOptions::on(o.device, o.geometry, pages));
}

// Host memory that pool memory copies into (pinned with the pool on a GPU).
Result<std::unique_ptr<DeviceMemory>> host_buffer(const TierBenchOptions& o, size_t bytes) {
  return DeviceMemory::allocate(bytes, host_memory_options(o.device));
}

// memcpy_gbps, the limit for gathers: the best of three copies of
// memory_bytes from pool memory to host memory (one copy each).
Result<double> measure_memcpy(const TierBenchOptions& o) {
  KVTIER_ASSIGN_OR_RETURN(auto a, DeviceMemory::allocate(o.memory_bytes, pool_memory_options(o.device)));
  KVTIER_ASSIGN_OR_RETURN(auto b, host_buffer(o, o.memory_bytes));
  if (a->host_accessible()) fill(a->data(), a->size(), 2);
  const ByteCopy c{b->data(), a->data(), o.memory_bytes};
  KVTIER_RETURN_IF_ERROR(a->copy({&c, 1}));  // fault pages in
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    auto t0 = SteadyClock::now();
    KVTIER_RETURN_IF_ERROR(a->copy({&c, 1}));
    asm volatile("" : : "r"(b->data()) : "memory");  // the copy must happen
    best = std::min(best, secs(t0, SteadyClock::now()));
  }
  return gbps(o.memory_bytes, best);
}

// host_gather_gbps: the best of three gathers of memory_bytes of scattered
// (shuffled) pool pages into contiguous layer-major chunks in host memory.
Result<double> measure_host_gather(const TierBenchOptions& o) {
  const size_t chunk_bytes = ChunkGeometry{o.geometry, o.chunk_pages}.max_payload_bytes();
  const uint32_t pages = static_cast<uint32_t>(o.memory_bytes / o.geometry.page_bytes());
  KVTIER_ASSIGN_OR_RETURN(auto pool, make_pool(o, pages));
  if (pool->memory().host_accessible()) fill(pool->memory().data(), pool->memory().size(), 3);
  std::vector<uint32_t> order(pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(4));
  KVTIER_ASSIGN_OR_RETURN(auto out, host_buffer(o, size_t(pages / o.chunk_pages) * chunk_bytes));
  std::vector<ByteCopy> copies;
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    auto t0 = SteadyClock::now();
    for (uint32_t c = 0; c + o.chunk_pages <= pages; c += o.chunk_pages) {
      std::vector<const std::byte*> src;
      for (uint32_t p = 0; p < o.chunk_pages; ++p) src.push_back(pool->page(PageId(order[c + p])));
      copies.clear();  // what the transfer engine does: slice copies run by the pool's memory
      gather_copies(o.geometry, src, out->data() + size_t(c / o.chunk_pages) * chunk_bytes, copies);
      KVTIER_RETURN_IF_ERROR(pool->memory().copy(copies));
    }
    asm volatile("" : : "r"(out->data()) : "memory");
    best = std::min(best, secs(t0, SteadyClock::now()));
  }
  return gbps(out->size(), best);
}

// The DiskTier of the disk figures, under dir/disk, for the write rounds
// (fresh, syncing as sync_writes says).
DiskTierOptions write_options(const TierBenchOptions& o, const std::string& dir) {
  return DiskTierOptions{.geometry = ChunkGeometry{o.geometry, o.chunk_pages},
                         .dir = dir + "/disk",
                         .region_bytes = o.region_bytes,
                         .capacity_bytes = o.disk_bytes * 2 + 4 * o.region_bytes,
                         .queue_depth = o.queue_depth,
                         .sync_writes = o.sync_writes};
}

// The same DiskTier reopened for the reads: read_threads share queue_depth.
DiskTierOptions read_options(const TierBenchOptions& o, const std::string& dir) {
  DiskTierOptions d = write_options(o, dir);
  d.verify_on_open = false;  // reopen fast; reads verify every layer anyway
  d.queue_depth = o.queue_depth / o.read_threads;
  d.read_waves = o.read_waves;
  return d;
}

// Bytes of raw writes between fdatasyncs (0: never). DiskTier syncs once per
// region, and a region holds fewer payload bytes than region_bytes (region
// header, entry metadata): raw writes sync once per that many payload bytes,
// so both pay for the same number of syncs.
size_t raw_sync_every(const TierBenchOptions& o) {
  const ChunkGeometry cg{o.geometry, o.chunk_pages};
  const size_t region_chunks =
      (o.region_bytes - kIoAlign) / chunk_entry_layout(cg, o.chunk_pages, kIoAlign).entry_bytes;
  return o.sync_writes ? std::max(kRawBlock, align_down(region_chunks * cg.max_payload_bytes(), kRawBlock)) : 0;
}

// The bench's chunks: chunk c's page hashes are hash(c, p), its key the
// "bench" namespace and its last page's hash.
struct BenchChunks {
  std::vector<ChunkKey> keys;
  std::vector<std::vector<PageHash>> hashes;
};

// Chunks 0 .. n - 1 of `chunk_pages` pages each.
BenchChunks make_chunks(uint32_t n, uint32_t chunk_pages) {
  BenchChunks b;
  const PageHash ns = hash_bytes(HashAlgo::kXXH3_128, "bench", 5);
  for (uint32_t c = 0; c < n; ++c) {
    std::vector<PageHash> h;
    for (uint32_t p = 0; p < chunk_pages; ++p) {
      uint64_t v[2] = {c, p};
      h.push_back(hash_bytes(HashAlgo::kXXH3_128, v, sizeof v));
    }
    b.keys.push_back({ns, h.back()});
    b.hashes.push_back(std::move(h));
  }
  return b;
}

// GB/s of each disk round, per figure.
struct DiskFigures {
  std::vector<double> raw_w, disk_w, raw_r, disk_r, page_r, page1_r;

  // Sets r's disk figures: each the median of its rounds, each ratio the
  // median of the rounds' own ratios.
  void assign_to(TierBenchResult& r) const {
    r.raw_write_gbps = median(raw_w);
    r.raw_read_gbps = median(raw_r);
    r.disk_write_gbps = median(disk_w);
    r.disk_read_gbps = median(disk_r);
    r.per_page_read_gbps = median(page_r);
    r.per_page_qd1_read_gbps = median(page1_r);
    r.disk_write_vs_raw = paired_ratio(disk_w, raw_w);
    r.disk_read_vs_raw = paired_ratio(disk_r, raw_r);
    r.aggregated_vs_per_page = paired_ratio(disk_r, page_r);
    r.aggregated_vs_per_page_qd1 = paired_ratio(disk_r, page1_r);
  }
};

// DiskTier::get_batch from `readers` threads at once, as the TransferEngine's
// workers call it: reader r reads every readers-th batch of `batch` chunks of
// a range into its own part of `out`.
struct ChunkReaders {
  DiskTier& disk;
  const std::vector<ChunkKey>& keys;
  size_t chunk_bytes;
  uint32_t batch, readers;
  AlignedBuffer out;

  // Reader r's share of chunks [first, last); the first failed read's status.
  Status read(uint32_t r, size_t first, size_t last) {
    std::byte* dst = out.data() + size_t(r) * batch * chunk_bytes;
    std::vector<GetOp> ops;
    for (size_t c = first + size_t(r) * batch; c < last; c += size_t(readers) * batch) {
      ops.clear();
      for (size_t i = c; i < std::min(last, c + batch); ++i)
        ops.push_back(GetOp{.key = keys[i], .out = {dst + (i - c) * chunk_bytes, chunk_bytes}});
      disk.get_batch(ops);
      for (auto& op : ops) KVTIER_RETURN_IF_ERROR(op.status);
    }
    return Status::Ok();
  }

  // Seconds for all readers together to read chunks [first, last).
  Result<double> timed_read(size_t first, size_t last) {
    auto t0 = SteadyClock::now();
    std::vector<Status> read_status(readers);
    {
      std::vector<std::jthread> helpers;
      for (uint32_t r = 1; r < readers; ++r) helpers.emplace_back([&, r] { read_status[r] = read(r, first, last); });
      read_status[0] = read(0, first, last);
    }
    const double t = secs(t0, SteadyClock::now());
    for (const Status& st : read_status) KVTIER_RETURN_IF_ERROR(st);
    return t;
  }
};

// The disk figures: raw floor, DiskTier and per-page I/O of the same volume,
// split into kRounds write rounds of whole chunks (kReadSplit read
// sub-rounds each), the three alternating round by round. raw.bin is the raw
// floor's file and doubles as the page-first store of the per-page figure.
struct DiskBench {
  const TierBenchOptions& o;
  size_t chunk_bytes;
  size_t round_chunks;  // chunks per write round
  size_t round_bytes;   // raw bytes per write round: round_chunks' payload, 1 MiB-aligned
  std::unique_ptr<File> raw_file;
  std::unique_ptr<IoQueue> queue, queue1;  // at queue_depth, at 1
  AlignedBuffer raw_buf;
  BenchChunks chunks;  // kRounds * round_chunks
  DiskFigures figures;
  uint64_t sink = 0;  // sum of the per-page checksums: the calls' results have a use

  // Opens raw.bin under `dir` and the queues, and sizes the rounds.
  static Result<DiskBench> open(const TierBenchOptions& o, const std::string& dir) {
    const size_t chunk_bytes = ChunkGeometry{o.geometry, o.chunk_pages}.max_payload_bytes();
    const size_t round_chunks = o.disk_bytes / kRounds / chunk_bytes;
    DiskBench db{o, chunk_bytes, round_chunks, align_down(round_chunks * chunk_bytes, kRawBlock)};
    FileSystem& fs = FileSystem::posix();
    KVTIER_ASSIGN_OR_RETURN(db.raw_file, fs.open(dir + "/raw.bin", {.create = true, .truncate = true, .direct = true}));
    KVTIER_ASSIGN_OR_RETURN(db.queue, fs.create_queue(o.queue_depth));
    KVTIER_ASSIGN_OR_RETURN(db.queue1, fs.create_queue(1));
    db.raw_buf = AlignedBuffer(size_t(o.queue_depth) * kRawBlock);
    fill(db.raw_buf.data(), db.raw_buf.size(), 1);
    db.chunks = make_chunks(static_cast<uint32_t>(round_chunks * kRounds), o.chunk_pages);
    return db;
  }

  // The write rounds into a fresh DiskTier, closed again at the end.
  Status write_rounds(const DiskTierOptions& dopt) {
    AlignedBuffer payload(chunk_bytes);
    fill(payload.data(), payload.size(), 5);
    const size_t sync_every = raw_sync_every(o);
    KVTIER_ASSIGN_OR_RETURN(auto disk, DiskTier::create(dopt));
    for (uint32_t k = 0; k < kRounds; ++k) KVTIER_RETURN_IF_ERROR(write_round(*disk, k, sync_every, payload));
    return Status::Ok();
  }

  // Write round k: its raw blocks, then its chunks put into `disk` and flushed.
  Status write_round(DiskTier& disk, uint32_t k, size_t sync_every, const AlignedBuffer& payload) {
    KVTIER_ASSIGN_OR_RETURN(double t, raw_pass(*raw_file, *queue, IoKind::kWrite, k * round_bytes,
                                               (k + 1) * round_bytes, sync_every, raw_buf));
    figures.raw_w.push_back(gbps(round_bytes, t));
    auto t0 = SteadyClock::now();
    for (size_t c = k * round_chunks; c < (k + 1) * round_chunks; ++c)
      KVTIER_RETURN_IF_ERROR(disk.put(chunks.keys[c], chunks.hashes[c], payload.span()));
    KVTIER_RETURN_IF_ERROR(disk.flush());  // the round's puts are on disk (and synced) before the clock stops
    figures.disk_w.push_back(gbps(round_chunks * chunk_bytes, secs(t0, SteadyClock::now())));
    return Status::Ok();
  }

  // The read sub-rounds, DiskTier reads from `disk` (the written one, reopened).
  Status read_rounds(DiskTier& disk) {
    const size_t out_bytes = size_t(o.read_threads) * o.read_batch_chunks * chunk_bytes;
    ChunkReaders cr{disk, chunks.keys, chunk_bytes, o.read_batch_chunks, o.read_threads, AlignedBuffer(out_bytes)};
    // At least kHugePage bytes, so it is huge-page backed like the pool pages a real per-page loader reads into.
    AlignedBuffer page_buf(
        std::max(kHugePage, size_t(o.queue_depth) * (align_up(o.geometry.layer_slice_bytes()) + kIoAlign)));
    for (uint32_t k = 0; k < kRounds * kReadSplit; ++k) KVTIER_RETURN_IF_ERROR(read_round(cr, k, page_buf));
    return Status::Ok();
  }

  // Read sub-round k: the same number of bytes read three ways (raw,
  // DiskTier, per-page), and per-page again with one read in flight.
  Status read_round(ChunkReaders& cr, uint32_t k, AlignedBuffer& page_buf) {
    const size_t page = o.geometry.page_bytes();
    const size_t sub_chunks = round_chunks / kReadSplit, sub_bytes = sub_chunks * chunk_bytes;
    const uint64_t b0 = align_down(k * sub_bytes, kRawBlock), b1 = align_down((k + 1) * sub_bytes, kRawBlock);
    KVTIER_ASSIGN_OR_RETURN(double t, raw_pass(*raw_file, *queue, IoKind::kRead, b0, b1, 0, raw_buf));
    figures.raw_r.push_back(gbps(b1 - b0, t));
    KVTIER_ASSIGN_OR_RETURN(t, cr.timed_read(k * sub_chunks, (k + 1) * sub_chunks));
    figures.disk_r.push_back(gbps(sub_bytes, t));
    // Per-page reads another part of the file than the raw pass just read (no help from any cache below).
    const size_t pk = (k + kRounds * kReadSplit / 2) % (kRounds * kReadSplit);
    const size_t pages = (pk + 1) * sub_bytes / page - pk * sub_bytes / page;
    KVTIER_ASSIGN_OR_RETURN(t, per_page_pass(*raw_file, *queue, o.geometry, pk * sub_bytes / page,
                                             (pk + 1) * sub_bytes / page, page_buf, sink));
    figures.page_r.push_back(gbps(pages * page, t));
    // The same loader with one read in flight (synchronous preads), on an eighth of those pages.
    const size_t p0 = pk * sub_bytes / page, n1 = std::max<size_t>(1, sub_bytes / page / 8);
    KVTIER_ASSIGN_OR_RETURN(t, per_page_pass(*raw_file, *queue1, o.geometry, p0, p0 + n1, page_buf, sink));
    figures.page1_r.push_back(gbps(n1 * page, t));
    return Status::Ok();
  }
};

// One timed layer-wise load: ms until layer 0 and until every layer was in
// place, and whether the rest was still in flight when layer 0 was.
struct LoadTiming {
  double first_ms, all_ms;
  bool early;
};

// Loads chunks [0, n) of `keys` from the disk tier into pool pages 0 .. n * chunk_pages - 1.
Result<LoadTiming> timed_load(TransferEngine& engine, const std::vector<ChunkKey>& keys, uint32_t n,
                              uint32_t chunk_pages) {
  TransferBatch b;
  for (uint32_t c = 0; c < n; ++c) {
    LoadMove mv{TierKind::kDisk, keys[c], {}};
    for (uint32_t p = 0; p < chunk_pages; ++p) mv.dst.push_back(PageLoc::pool(PageId(c * chunk_pages + p)));
    b.loads.push_back(std::move(mv));
  }
  auto t0 = SteadyClock::now();
  KVTIER_ASSIGN_OR_RETURN(auto h, engine.submit(std::move(b)));
  KVTIER_RETURN_IF_ERROR(h.wait_layer(LayerIdx(0)));
  auto t1 = SteadyClock::now();
  const bool early = !h.done();
  KVTIER_RETURN_IF_ERROR(h.wait_all());
  auto t2 = SteadyClock::now();
  return LoadTiming{secs(t0, t1) * 1e3, secs(t0, t2) * 1e3, early};
}

// The layer-wise load figures of `r`, both load modes: the best of three
// loads of up to load_bytes of `keys`' chunks from `disk`, the modes
// alternating within each repetition so drift of the device hits both alike.
Status measure_layer_loads(const TierBenchOptions& o, DiskTier& disk, const std::vector<ChunkKey>& keys,
                           TierBenchResult& r) {
  const size_t chunk_bytes = ChunkGeometry{o.geometry, o.chunk_pages}.max_payload_bytes();
  const uint32_t lchunks =
      std::min<uint32_t>(static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(o.load_bytes / chunk_bytes));
  KVTIER_ASSIGN_OR_RETURN(auto pool, make_pool(o, lchunks * o.chunk_pages));
  std::unique_ptr<TransferEngine> engines[2];  // kWholeChunk, kLayerMajor
  for (int m = 0; m < 2; ++m) {
    TransferEngineOptions eo{
        .workers = 2, .load_mode = m == 0 ? LoadMode::kWholeChunk : LoadMode::kLayerMajor, .pool = pool.get()};
    eo.tiers[size_t(TierKind::kDisk)] = &disk;
    KVTIER_ASSIGN_OR_RETURN(engines[m], TransferEngine::create(eo));
  }
  double first[2] = {1e9, 1e9}, all[2] = {1e9, 1e9};
  uint32_t early[2] = {0, 0};
  for (int rep = 0; rep < 3; ++rep) {
    for (int m = 0; m < 2; ++m) {
      KVTIER_ASSIGN_OR_RETURN(LoadTiming t, timed_load(*engines[m], keys, lchunks, o.chunk_pages));
      early[m] += t.early ? 1 : 0;
      first[m] = std::min(first[m], t.first_ms);
      all[m] = std::min(all[m], t.all_ms);
    }
  }
  r.first_layer_ms_whole = first[0];
  r.all_layers_ms_whole = all[0];
  r.first_layer_ms_layer = first[1];
  r.all_layers_ms_layer = all[1];
  r.first_layer_early_whole = early[0];
  r.first_layer_early_layer = early[1];
  const bool layer_default = TransferEngineOptions{}.load_mode == LoadMode::kLayerMajor;
  r.first_layer_ms = layer_default ? r.first_layer_ms_layer : r.first_layer_ms_whole;
  r.all_layers_ms = layer_default ? r.all_layers_ms_layer : r.all_layers_ms_whole;
  return Status::Ok();
}

}  // namespace

Status TierBenchOptions::validate() const {
  if (dir.empty()) return Status::InvalidArgument("bench tiers: --dir is required");
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  if (disk_bytes < kRounds * std::max(region_bytes, kReadSplit * geometry.page_bytes() * chunk_pages) ||
      memory_bytes < (size_t(16) << 20) || load_bytes < (size_t(16) << 20))
    return Status::InvalidArgument("bench tiers: sizes too small to measure");
  if (region_bytes == 0 || region_bytes % (size_t(1) << 20))
    return Status::InvalidArgument("bench tiers: region_bytes must be a multiple of 1 MiB");
  if (read_batch_chunks == 0) return Status::InvalidArgument("bench tiers: read_batch_chunks must be positive");
  if (read_threads == 0 || read_threads > queue_depth)
    return Status::InvalidArgument("bench tiers: read_threads must be in 1..queue_depth");
  return Status::Ok();
}

Result<TierBenchResult> run_tier_bench(const TierBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  TierBenchResult r;
  const ScratchDir scratch(o.dir, "tiers");  // removed on every way out, the failures' too
  KVTIER_RETURN_IF_ERROR(scratch.create());
  const std::string dir = scratch.path().string();
  FileSystem& fs = FileSystem::posix();
  KVTIER_ASSIGN_OR_RETURN(r.memcpy_gbps, measure_memcpy(o));
  KVTIER_ASSIGN_OR_RETURN(r.host_gather_gbps, measure_host_gather(o));
  KVTIER_ASSIGN_OR_RETURN(DiskBench db, DiskBench::open(o, dir));
  r.direct_io = db.raw_file->direct();
  r.pool_on_device = o.device != MemoryBackend::kCpu;
  KVTIER_RETURN_IF_ERROR(db.write_rounds(write_options(o, dir)));
  KVTIER_ASSIGN_OR_RETURN(auto disk, DiskTier::create(read_options(o, dir)));
  KVTIER_RETURN_IF_ERROR(db.read_rounds(*disk));
  db.figures.assign_to(r);
  db.raw_file.reset();
  (void)fs.remove(dir + "/raw.bin");
  KVTIER_RETURN_IF_ERROR(measure_layer_loads(o, *disk, db.chunks.keys, r));
  return r;
}

std::string TierBenchResult::to_json() const {
  nlohmann::json j{{"memcpy_gbps", memcpy_gbps},
                   {"host_gather_gbps", host_gather_gbps},
                   {"raw_write_gbps", raw_write_gbps},
                   {"raw_read_gbps", raw_read_gbps},
                   {"disk_write_gbps", disk_write_gbps},
                   {"disk_read_gbps", disk_read_gbps},
                   {"per_page_read_gbps", per_page_read_gbps},
                   {"per_page_qd1_read_gbps", per_page_qd1_read_gbps},
                   {"first_layer_ms", first_layer_ms},
                   {"all_layers_ms", all_layers_ms},
                   {"first_layer_ms_whole_chunk", first_layer_ms_whole},
                   {"all_layers_ms_whole_chunk", all_layers_ms_whole},
                   {"first_layer_ms_layer_major", first_layer_ms_layer},
                   {"all_layers_ms_layer_major", all_layers_ms_layer},
                   {"first_layer_early_whole_chunk", first_layer_early_whole},
                   {"first_layer_early_layer_major", first_layer_early_layer},
                   {"direct_io", direct_io},
                   {"pool_on_device", pool_on_device},
                   {"gather_vs_memcpy", memcpy_gbps > 0 ? host_gather_gbps / memcpy_gbps : 0},
                   {"disk_write_vs_raw", disk_write_vs_raw},
                   {"disk_read_vs_raw", disk_read_vs_raw},
                   {"aggregated_vs_per_page", aggregated_vs_per_page},
                   {"aggregated_vs_per_page_qd1", aggregated_vs_per_page_qd1}};
  return j.dump();
}

std::string TierBenchResult::to_table() const {
  std::ostringstream s;
  auto row = [&](const char* name, double v, const char* unit, double ratio, const char* vs) {
    s << "  " << name;
    for (size_t i = std::strlen(name); i < 22; ++i) s << ' ';
    s << v << ' ' << unit;
    if (ratio >= 0) s << "   (" << ratio << "x " << vs << ")";
    s << '\n';
  };
  s << "kvtier bench tiers (O_DIRECT " << (direct_io ? "on" : "OFF: buffered fallback") << "; disk: medians of rounds, ratios paired per round"
    << (pool_on_device ? "; pool on the GPU: memcpy = one device -> pinned host copy" : "") << ")\n";
  row("memcpy", memcpy_gbps, "GB/s", -1, "");
  row("host_gather", host_gather_gbps, "GB/s", host_gather_gbps / memcpy_gbps, "memcpy, target >= 0.8");
  row("raw_write", raw_write_gbps, "GB/s", -1, "");
  row("raw_read", raw_read_gbps, "GB/s", -1, "");
  row("disk_write", disk_write_gbps, "GB/s", disk_write_vs_raw, "raw write, target >= 0.8");
  row("disk_read", disk_read_gbps, "GB/s", disk_read_vs_raw, "raw read, target >= 0.8");
  row("per_page_read", per_page_read_gbps, "GB/s", aggregated_vs_per_page,
      "= disk_read / per-page; one read per (page, layer slice), same queue depth");
  row("per_page_qd1_read", per_page_qd1_read_gbps, "GB/s", aggregated_vs_per_page_qd1,
      "= disk_read / per-page; the same, one read in flight");
  row("first_layer", first_layer_ms, "ms", -1, "");
  row("all_layers", all_layers_ms, "ms", -1, "");
  row("whole_chunk first/all", first_layer_ms_whole, "ms", all_layers_ms_whole, "ms all");
  row("layer_major first/all", first_layer_ms_layer, "ms", all_layers_ms_layer, "ms all");
  return s.str();
}

}  // namespace kvtier
