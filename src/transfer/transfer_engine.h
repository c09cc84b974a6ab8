// TransferEngine: moves KV bytes between the BlockPool, the HostTier slot
// arena and chunk tiers (host/disk/remote) on worker threads, in batches.
//
// A TransferBatch holds page copies (pool <-> host, one page each), chunk
// loads (a Tier chunk -> pages) and chunk stores (pages -> gathered chunk ->
// Tier). Loads and copies are "fetch" work and always run before stores
// (two queues; workers drain the load queue first). Fetch work is published
// layer by layer: wait_layer(l) returns once layer l of every fetched page is
// in place, so compute on layer l can overlap the loading of later layers.
// LoadMode picks how a chunk load is issued: kWholeChunk reads each chunk in
// one I/O, then publishes its layers; kLayerMajor issues one I/O per layer
// across all chunks of the shard (first layer ready sooner, more I/Os): from
// a tier that reports layers as they land (a disk tier) as one stream of up
// to kRoundBytes, each layer published as soon as the shard has it; from
// others (host, Redis) one round per layer.
//
// The moves of a batch (and of different batches) run concurrently on the
// workers, loads and copies before stores: no move may write a page that
// another move in flight reads or writes.
//
// The engine decides nothing: callers say what moves where. Workers never
// touch the index; finished batches are reported to the owner through
// poll_completions() (drained on the owner thread) and through the handle.
//
// With workers = 0 the engine is inline: submit() runs the whole batch on the
// calling thread (loads and copies, then stores) and returns a finished
// handle — deterministic, for callers that want every move done when the call
// returns (the replay simulator's payload-less cache).
//
// Thread safety: submit/poll_completions may be called from any thread; a
// TransferHandle is used by one thread at a time. Ownership: the pool, host
// and tiers are borrowed and must outlive the engine. A handle's destructor
// cancels what has not started and waits for what has, so no worker ever
// writes into pages the caller has since released. Destroying the engine
// cancels queued work and joins the workers; surviving handles stay valid.
#pragma once

#include <array>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "memory/block_pool.h"
#include "tiers/host_tier.h"
#include "tiers/tier.h"

namespace kvtier {

// Where one page lives: a BlockPool page (kDevice) or a HostTier slot (kHost).
struct PageLoc {
  TierKind tier = TierKind::kDevice;
  uint32_t index = 0;
  static PageLoc pool(PageId p) { return {TierKind::kDevice, p.value()}; }
  static PageLoc host(SlotId s) { return {TierKind::kHost, s.value()}; }
};

struct CopyMove {
  PageLoc src;
  PageLoc dst;
};
struct LoadMove {
  TierKind from = TierKind::kDisk;  // which Tier of the engine
  ChunkKey key;
  std::vector<PageLoc> dst;  // one per page of the chunk
};
struct StoreMove {
  TierKind to = TierKind::kDisk;
  ChunkKey key;
  std::vector<PageHash> page_hashes;
  std::vector<PageLoc> src;
};
struct TransferBatch {
  std::vector<CopyMove> copies;
  std::vector<LoadMove> loads;
  std::vector<StoreMove> stores;
};

// Per-move outcome, index-aligned with the batch.
struct TransferResult {
  uint64_t id = 0;
  std::vector<Status> copies;
  std::vector<Status> loads;
  std::vector<KvCodec> load_codecs;  // the codec of the entry each load read (lossy: approximate KV)
  std::vector<Status> stores;
  bool cancelled = false;
};

enum class LoadMode : uint8_t { kWholeChunk = 0, kLayerMajor = 1 };

struct TransferEngineOptions {
  uint32_t workers = 2;                        // 0: inline (moves run inside submit)
  LoadMode load_mode = LoadMode::kLayerMajor;  // measured faster (first layer and all layers); docs/perf/tiers.md
  BlockPool* pool = nullptr;                   // needed for kDevice page locations
  HostTier* host = nullptr;                    // needed for kHost page locations
  std::array<Tier*, kNumTiers> tiers{};        // chunk stores by TierKind (kHost may be the HostTier)

  Status validate() const;
};

namespace transfer_detail {
struct BatchState;
}

class TransferHandle {
 public:
  TransferHandle() = default;
  TransferHandle(TransferHandle&&) noexcept = default;
  TransferHandle& operator=(TransferHandle&& o) noexcept;
  TransferHandle(const TransferHandle&) = delete;
  TransferHandle& operator=(const TransferHandle&) = delete;
  ~TransferHandle();

  bool valid() const { return state_ != nullptr; }
  uint64_t id() const;
  // Blocks until layer l of every copy and load is in place (or failed).
  // OK when every copy/load so far succeeded; else the first failure.
  Status wait_layer(LayerIdx l);
  // Blocks until the whole batch (stores included) is finished. OK when every move succeeded.
  Status wait_all();
  bool done() const;
  // Stops moves that have not started; running ones finish their current step. Idempotent.
  void cancel();
  // Per-move statuses; complete after wait_all().
  TransferResult result() const;

 private:
  friend class TransferEngine;
  explicit TransferHandle(std::shared_ptr<transfer_detail::BatchState> s) : state_(std::move(s)) {}
  std::shared_ptr<transfer_detail::BatchState> state_;
};

class TransferEngine {
 public:
  static Result<std::unique_ptr<TransferEngine>> create(const TransferEngineOptions& options);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // Validates every page location and tier, then queues the batch.
  Result<TransferHandle> submit(TransferBatch batch);
  // Finished batches since the last call, in completion order (owner thread applies them).
  std::vector<TransferResult> poll_completions();
  const TransferEngineOptions& options() const { return options_; }

 private:
  struct Task;
  explicit TransferEngine(const TransferEngineOptions& o);
  void worker_loop();
  void run_fetch(Task& t);
  struct FetchLoads;
  // One round of a fetch task: layers [l0, l1), those below `published` published.
  struct Round {
    uint32_t l0 = 0, l1 = 0, published = 0;
  };
  // Raw bytes of every load's pages in one round of a layer-major fetch task:
  // in one stream, a 16,384-token load moved 1.6x faster than in rounds of one
  // layer (docs/PERF.md, "Streamed disk loads"); this bounds the buffers.
  static constexpr size_t kRoundBytes = size_t(16) << 20;
  uint32_t round_layers(const Task& t) const;
  FetchLoads prepare_loads(const Task& t, uint32_t group) const;
  void cancel_fetch(Task& t, const FetchLoads& f, uint32_t l0);
  void load_layers(Task& t, FetchLoads& f, TierKind k, Round& r, std::vector<ByteCopy>& copies);
  void run_store(Task& t);
  void finish_task(Task& t);
  std::byte* page_ptr(const PageLoc& loc) const;
  // A host slot holding its page encoded (HostTier::codec()): reached through the host tier, not page_ptr.
  bool encoded(const PageLoc& loc) const;
  bool any_encoded(std::span<const PageLoc> locs) const;
  // The copies `which` of batch b, layers [l0, l1); plain slices go in one move_bytes.
  Status copy_pages(const TransferBatch& b, std::span<const size_t> which, uint32_t l0, uint32_t l1,
                    std::vector<ByteCopy>& copies) const;
  // One copy between a pool page and an encoded host slot (encode or decode on the way).
  Status copy_encoded(const CopyMove& c, uint32_t l0, uint32_t l1) const;
  // Layers [l0, l1) of a loaded chunk (layer-major `layers`) into its destination pages.
  Status scatter_load(const LoadMove& m, const std::byte* layers, uint32_t l0, uint32_t l1, std::span<std::byte* const> dst,
                      std::vector<ByteCopy>& copies) const;
  // True when the CPU cannot touch the pool's pages (an accelerator's memory).
  bool pool_on_device() const;
  // Runs slice copies that may touch pool pages, through the pool's memory.
  Status move_bytes(std::span<const ByteCopy> copies) const;
  Status check_loc(const PageLoc& loc) const;

  TransferEngineOptions options_;
  KVGeometry geometry_;
  ChunkGeometry chunk_geometry_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Task>> fetch_queue_;
  std::deque<std::unique_ptr<Task>> store_queue_;
  std::vector<TransferResult> completions_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvtier
