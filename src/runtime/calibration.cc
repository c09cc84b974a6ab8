#include "runtime/calibration.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include "memory/device_memory.h"
#include "io/aligned_buffer.h"
#include "tiers/disk_tier.h"

namespace kvtier {

Status CalibrationOptions::validate() const {
  if (remote_bytes_per_s < 0 || remote_latency_s < 0)
    return Status::InvalidArgument("calibration: remote figures must be >= 0");
  return Status::Ok();
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double host_to_pool_bytes_per_s(const BlockPool& pool, size_t bytes) {
  // The source is what a host tier would hold: pinned memory beside an accelerator.
  const MemoryBackend backend = pool.memory().backend();
  auto a = DeviceMemory::allocate(bytes, host_memory_options(backend));
  auto b = DeviceMemory::allocate(bytes, pool_memory_options(backend));
  if (!a.ok() || !b.ok()) return 1e9;
  const ByteCopy c{(*b)->data(), (*a)->data(), bytes};
  if (!(*b)->copy({&c, 1}).ok()) return 1e9;  // touch
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!(*b)->copy({&c, 1}).ok()) return 1e9;
    best = std::max(best, double(bytes) / seconds_since(t0));
  }
  return best;
}

namespace {

// Disk tier read figures, through a DiskTier in a scratch folder: chunks are
// written until earlier regions are sealed on disk, then read back with
// O_DIRECT — one chunk alone (latency) and all sealed chunks in one batch
// (bandwidth).
}  // namespace

// Chunks of 16 pages, fewer where twelve chunks would not fit a quarter of the
// capacity; at least eight chunks (two sealed regions, the fewest measured).
DiskTierOptions calibration_scratch(const KVGeometry& g, const CalibrationOptions& o, size_t& n_chunks) {
  DiskTierOptions d;
  const auto entry_of = [](const ChunkGeometry& c) { return c.max_payload_bytes() + (size_t(64) << 10); };
  const size_t budget = o.disk_capacity_bytes == 0 ? SIZE_MAX : o.disk_capacity_bytes / 4;
  d.geometry = ChunkGeometry{g, 16};
  while (d.geometry.chunk_pages > 1 && 12 * entry_of(d.geometry) > budget) d.geometry.chunk_pages /= 2;
  const size_t chunk = d.geometry.max_payload_bytes(), entry = entry_of(d.geometry);  // metadata, generously
  d.region_bytes = (4 * entry + 4095) / 4096 * 4096;                                    // four chunks per region
  n_chunks = std::clamp<size_t>((size_t(o.quick ? 32 : 256) << 20) / chunk, 8, std::max<size_t>(8, budget / entry));
  d.capacity_bytes = (n_chunks / 4 + 3) * d.region_bytes;  // nothing is reclaimed
  d.dir = (std::filesystem::path(o.disk_dir) / ".calibration").string();
  d.direct_io = o.disk_direct_io;
  return d;
}

namespace {

Result<TierLink> measure_disk(const KVGeometry& g, const CalibrationOptions& o) {
  size_t n_chunks = 0;
  DiskTierOptions d = calibration_scratch(g, o, n_chunks);
  const std::string dir = d.dir;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  struct RemoveAfter {  // on every path out, the failures' too
    std::string dir;
    ~RemoveAfter() {
      std::error_code e;
      std::filesystem::remove_all(dir, e);
    }
  } remove_after{dir};
  const size_t chunk = d.geometry.max_payload_bytes();
  const uint32_t C = d.geometry.chunk_pages;
  auto tier = DiskTier::create(d);
  if (!tier.ok()) return Status(tier.status().code(), "calibration of the disk tier under " + dir + ": " + tier.status().message());
  std::vector<std::byte> payload(chunk, std::byte{0x5A});
  std::vector<std::vector<PageHash>> hashes;
  const PageHash ns{7, 7};
  for (size_t i = 0; i < n_chunks; ++i) {
    std::vector<PageHash> h(C);
    for (uint32_t k = 0; k < C; ++k) h[k] = PageHash{i + 1, k + 1};
    Status st = (*tier)->put(ChunkKey{ns, h.back()}, h, payload);
    if (!st.ok()) return Status(st.code(), "calibration of the disk tier under " + dir + ": " + st.message());
    hashes.push_back(std::move(h));
  }
  KVTIER_RETURN_IF_ERROR((*tier)->flush());
  // Only chunks of sealed regions are read from the file (the active one is in memory).
  const size_t sealed = (n_chunks / 4) * 4 - (n_chunks % 4 == 0 ? 4 : 0);
  // Aligned destinations, as the transfer engine's staging is: reads go straight in (no bounce).
  std::vector<AlignedBuffer> bufs;
  for (size_t i = 0; i < sealed; ++i) bufs.emplace_back(chunk);
  // Warm-up (queue set-up, first touch of the buffers), then the latency of a
  // single-chunk read (median of three) and the bandwidth of one batch.
  (void)(*tier)->get(ChunkKey{ns, hashes[sealed - 1].back()}, bufs[0].span());
  std::vector<double> lat;
  for (size_t i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    (void)(*tier)->get(ChunkKey{ns, hashes[i].back()}, bufs[i].span());
    lat.push_back(seconds_since(t0));
  }
  std::sort(lat.begin(), lat.end());
  // The fixed cost is what a read costs beyond its bytes; bounded below by 20 µs.
  std::vector<GetOp> ops;
  for (size_t i = 0; i < sealed; ++i)
    ops.push_back(GetOp{.key = ChunkKey{ns, hashes[i].back()}, .out = bufs[i].span()});
  auto t0 = std::chrono::steady_clock::now();
  (*tier)->get_batch(ops);
  const double secs = seconds_since(t0);
  const double bw = double(ops.size() * chunk) / std::max(secs, 1e-6);
  const double latency = std::max(lat[1] - double(chunk) / bw, 20e-6);
  for (const GetOp& op : ops)
    if (!op.status.ok()) return Status(op.status.code(), "calibration read from " + dir + ": " + op.status.message());
  tier->reset();  // before remove_after: its files closed
  return TierLink{latency, bw};
}

}  // namespace

Result<CostProfile> calibrate(engine::Forward& engine, BlockPool& pool, const CalibrationOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const auto& cfg = engine.model().config();
  const ModelCost mc = model_cost(cfg, engine.geometry());
  // Enough tokens for a stable rate, few enough to stay quick on large models.
  const double budget = o.quick ? 4e10 : 4e11;
  uint32_t n = static_cast<uint32_t>(std::clamp(budget / mc.dense_flops_per_token, 64.0, o.quick ? 512.0 : 2048.0));
  n = std::min(n, cfg.max_context - 1);
  engine::SequenceKV seq;
  const uint32_t pages = engine.pages_for(n);
  if (pool.free_pages() < pages) n = std::max<uint32_t>(1, pool.free_pages()) * engine.geometry().page_tokens - 1;
  Status st = pool.allocate(engine.pages_for(n), seq.pages);
  if (!st.ok()) return Status::FailedPrecondition("calibration: device pool too small for a calibration prefill");
  std::mt19937 rng(42);
  std::vector<TokenId> toks(n);
  for (auto& t : toks) t = static_cast<TokenId>(rng() % cfg.vocab_size);

  // Warm-up, then a measured prefill; the engine splits attention time out.
  (void)engine.prefill(seq, std::span(toks).first(std::min<uint32_t>(n, 32)), 0);
  engine.reset_profile();
  seq.num_tokens = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto r = engine.prefill(seq, toks, 0);
  const double total = seconds_since(t0);
  const engine::EngineProfile prof = engine.profile();
  for (PageId p : seq.pages) pool.unref(p);
  if (!r.ok()) return r.status();

  CostProfile p;
  const double attn_flops = cfg.attention_flops(0, n);
  const double attn_s = std::max(prof.attention_seconds, 1e-6);
  const double dense_s = std::max(total - prof.attention_seconds, 1e-6);
  p.gemm_flops_per_s = mc.dense_flops_per_token * n / dense_s;
  p.attn_flops_per_s = std::max(attn_flops / attn_s, 1e6);
  p.link(TierKind::kDevice) = {0, std::numeric_limits<double>::infinity()};
  p.link(TierKind::kHost) = {10e-6, host_to_pool_bytes_per_s(pool, size_t(o.quick ? 32 : 256) << 20)};
  std::string disk_note;
  if (!o.disk_dir.empty()) {
    auto disk = measure_disk(engine.geometry(), o);
    p.link(TierKind::kDisk) = disk.ok() ? *disk : kAssumedDiskLink;  // a full disk still starts the server
    if (!disk.ok()) disk_note = "; disk not measured (" + disk.status().to_string() + "): assumed 0.1 ms + 1 GB/s";
  }
  if (o.remote_bytes_per_s > 0) p.link(TierKind::kRemote) = {o.remote_latency_s, o.remote_bytes_per_s};
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.source = std::string(o.quick ? "quick calibration " : "calibration ") + date + disk_note;
  KVTIER_RETURN_IF_ERROR(p.validate());
  return p;
}

}  // namespace kvtier
