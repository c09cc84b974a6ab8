// CacheView: the published state behind the dashboard's tree and tier
// panels (GET /v1/cache/tree, GET /v1/cache/tiers).
//
// HTTP threads never touch the Runtime. The view asks the scheduler thread
// to take snapshots between two steps (Scheduler::post) and publishes them:
//  * a tier sample (occupancy, capacity and the cumulative counters of
//    Runtime::stats) once per `sample_every`, kept for `history`
//    samples, so hit ratios and link rates over the last minutes exist
//    before anyone opens the page;
//  * the prefix tree (Runtime::cache_tree), only when asked for.
// A reader gets the published value at once when it is younger than
// `max_age`; otherwise it asks for a fresh one and waits at most `max_wait`
// for it, then answers with what it has (so a long prefill delays an answer
// by max_wait at most, never by the prefill).
//
// Thread safety: tree() and samples() from any thread; refresh() runs on the
// scheduler thread (posted tasks hold a weak reference: a view destroyed
// before its task runs is simply skipped). The sampler thread stops in the
// destructor.
#pragma once

#include "common/clock.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "index/tree_snapshot.h"
#include "runtime/runtime.h"

namespace kvtier::server {

// One reading of the cache's counters. Cumulative fields only grow (rates
// and ratios come from two samples).
struct TierSample {
  double t_s = 0;  // seconds since the view started
  bool present[kNumTiers] = {true, true, false, false};
  uint64_t used_bytes[kNumTiers] = {};
  uint64_t capacity_bytes[kNumTiers] = {};
  uint64_t cached_pages[2] = {};  // device and host pages held by the index
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens[kNumTiers] = {};
  uint64_t bytes_loaded[kNumTiers] = {};  // into device pages, from each tier
  uint64_t bytes_stored[kNumTiers] = {};  // written to each tier
  uint64_t evicted_pages[kNumTiers] = {};
  uint64_t demoted_pages = 0, spilled_chunks = 0, prefetched_pages = 0, prefetch_failures = 0;
  uint64_t checksum_failures = 0, forged_entries = 0, load_failures = 0;
};

// A sample of the Runtime's statistics.
TierSample tier_sample_from_stats(const RuntimeStats& stats, double t_s);

struct PublishedTree {
  TreeSnapshot snapshot;
  std::chrono::steady_clock::time_point taken;
  double take_s = 0;  // scheduler time spent taking it
};

struct CacheViewOptions {
  std::chrono::milliseconds sample_every{1000};
  uint32_t history = 300;                   // periods of samples kept (5 minutes at 1 Hz)
  std::chrono::milliseconds max_age{500};   // older published values are refreshed on request
  std::chrono::milliseconds max_wait{250};  // the longest a request waits for a refresh
  TreeSnapshotOptions tree;                 // what the scheduler takes (max_nodes: the most any client gets)
  const Clock* clock = &Clock::system();    // ages and sample times are read from it

  Status validate() const;
};

class CacheView : public std::enable_shared_from_this<CacheView> {
 public:
  // Runs a task on the scheduler thread later; false when it cannot (stopped).
  using Post = std::function<bool(std::function<void(Runtime&)>)>;

  // Starts the sampler; the first sample is asked for at once.
  static Result<std::shared_ptr<CacheView>> create(const CacheViewOptions& options, Post post);
  ~CacheView();
  CacheView(const CacheView&) = delete;
  CacheView& operator=(const CacheView&) = delete;

  // The latest tree (null when none could be taken yet).
  std::shared_ptr<const PublishedTree> tree();
  // Every kept sample, oldest first (empty when none yet).
  std::vector<TierSample> samples();
  const CacheViewOptions& options() const { return options_; }

  // Scheduler thread: takes a sample, and the tree when `with_tree`, and publishes them.
  void refresh(const Runtime& runtime, bool with_tree);

 private:
  CacheView(const CacheViewOptions& options, Post post);
  // Posts a refresh unless one of that kind is pending. Holds mu_ (unlocks it around the post).
  void ask_locked(std::unique_lock<std::mutex>& lk, bool with_tree);
  void sampler_loop();

  const CacheViewOptions options_;
  const Post post_;
  const Clock::time_point started_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const PublishedTree> tree_;
  std::deque<TierSample> samples_;
  double kept_t_s_ = 0;  // when the newest sample was added (replacements keep it)
  Clock::time_point last_sample_{};
  bool sample_pending_ = false, tree_pending_ = false, stopping_ = false;
  std::thread sampler_;
};

}  // namespace kvtier::server
