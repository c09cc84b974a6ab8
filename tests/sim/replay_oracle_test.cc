// The replay's single-tier LRU hit ratio against an independent naive
// simulator (a flat hash map of pages plus an ordered set of leaf pages).
//
// Why the oracle is exactly equivalent to the radix tree under LRU:
//  * The tree evicts leaves first: the candidate with the smallest
//    last_access is trimmed from its tail. At page level that is "remove the
//    leaf page (no cached children) with the smallest recency", provided a
//    page's recency is its node's last_access.
//  * A node's last_access is set by every match/insert walk that reaches
//    the node's first page — for all pages of the node, including pages past
//    the walk's own prefix (a walk that diverges or ends inside a node still
//    touches it, and a split copies the usage to both halves). So the oracle
//    keeps node boundaries explicitly (seg_end = last page of a node) with
//    the tree's rules: an insert ends its new node at its last page and ends
//    the node before its first new page (a split); trimming a tail page ends
//    the node at its predecessor. A walk touches every node whose first page
//    it matches.
//  * Ticks advance once per match (always) and once per insert (of >= 1
//    whole page), as in the index, and the index gives a new leaf a tick of
//    its own, after its insert's walk. The oracle instead re-walks the
//    request's path after its insert: for leaf-first eviction the two are
//    the same order (the only leaves that walk touched are the new leaf and
//    the unused tail of a node it split, and both make the new leaf the more
//    recent; the split head is the tail's parent, never a leaf beside it).
//    Without either, that tail and the new leaf would share a tick and the
//    index would order them by node slot. The oracle checks that no tie occurs.
// The replay drives the real KVCache: it looks up the whole pages before
// the last prompt token; apply pins the matched path (splitting its deepest
// node where the match ends, so only matched pages are pinned) and
// takes a pool page for every prompt position not shared in place
// (ceil(input_length / P) minus the matched pages), evicting leaves first
// until that many are free — a request that needs more than the whole pool,
// or than eviction can free, is refused and inserts nothing; commit inserts
// all whole pages. So does the oracle, with a pool of capacity_pages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <set>
#include <unordered_map>

#include "sim/replay.h"
#include "test_data.h"

namespace kvtier {
namespace {

class NaiveLru {
 public:
  NaiveLru(uint64_t capacity_pages, uint32_t page_tokens, uint32_t block_tokens)
      : cap_(capacity_pages), P_(page_tokens), ppb_(block_tokens / page_tokens) {}

  // Returns the cached tokens of the request (the replay's hit tokens; 0 when refused).
  uint64_t request(std::span<const uint64_t> ids, uint32_t input_length) {
    if (input_length == 0) return 0;
    const uint32_t W = input_length / P_;
    const uint32_t lookup = (input_length - 1) / P_;
    keys_.resize(W);
    for (uint32_t i = 0; i < W; ++i) keys_[i] = (ids[i / ppb_] << 8) | (i % ppb_);
    // lookup
    ++tick_;
    const uint32_t matched = walk(lookup);
    // apply: pin the matched nodes, then free a pool page for every fresh position
    const uint64_t fresh = (input_length + P_ - 1) / P_ - matched;
    split();
    if (fresh > cap_) return 0;  // more than the whole pool: refused before evicting
    pin(true);
    bool refused = false;
    while (cap_ - live_ < fresh && !refused) refused = !evict_one();
    pin(false);
    if (refused) return 0;
    // commit
    if (W > 0) {
      ++tick_;
      const uint32_t present = walk(W);
      if (present < W) {
        int32_t parent = present == 0 ? -1 : path_[present - 1];
        if (parent >= 0 && !pages_[parent].seg_end) end_node(parent);  // split
        for (uint32_t i = present; i < W; ++i) {
          const int32_t id = add_page(parent, keys_[i]);
          if (parent >= 0 && i > present) pages_[parent].next = id;
          parent = id;
        }
        pages_[parent].seg_end = true;
      }
      // The new leaf is the most recent (see the top of the file).
      ++tick_;
      walk(W);
    }
    return uint64_t(matched) * P_;
  }

  bool saw_tie() const { return tie_; }

 private:
  struct Page {
    int32_t parent = -1;
    uint64_t key = 0;
    uint32_t children = 0;
    uint64_t r = 0;
    bool seg_end = false;
    int32_t next = -1;  // the only child while !seg_end
    bool live = false;
    bool pinned = false;
  };

  static uint64_t edge(int32_t parent, uint64_t key) { return (uint64_t(uint32_t(parent)) << 40) ^ key * 0x9E3779B97F4A7C15ull; }

  int32_t find(int32_t parent, uint64_t key) const {
    auto range = map_.equal_range(edge(parent, key));
    for (auto it = range.first; it != range.second; ++it)
      if (pages_[it->second].parent == parent && pages_[it->second].key == key) return it->second;
    return -1;
  }

  // Walks the first n pages of the prompt; touches every node whose first page matches.
  uint32_t walk(uint32_t n) {
    path_.clear();
    int32_t parent = -1;
    for (uint32_t i = 0; i < n; ++i) {
      const int32_t id = find(parent, keys_[i]);
      if (id < 0) break;
      if (parent < 0 || pages_[parent].seg_end) touch_node(id);
      path_.push_back(id);
      parent = id;
    }
    return static_cast<uint32_t>(path_.size());
  }

  void set_r(int32_t id, uint64_t r) {
    Page& p = pages_[id];
    if (p.children == 0) leaves_.erase({p.r, id});
    p.r = r;
    if (p.children == 0) leaves_.insert({p.r, id});
  }

  void touch_node(int32_t first) {
    for (int32_t id = first;; id = pages_[id].next) {
      set_r(id, tick_);
      if (pages_[id].seg_end) break;
    }
  }

  void end_node(int32_t id) {
    pages_[id].seg_end = true;
    pages_[id].next = -1;
  }

  int32_t add_page(int32_t parent, uint64_t key) {
    int32_t id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<int32_t>(pages_.size());
      pages_.emplace_back();
    }
    Page& p = pages_[id];
    p = Page{};
    p.parent = parent;
    p.key = key;
    p.r = tick_;
    p.live = true;
    if (parent >= 0) {
      if (pages_[parent].children++ == 0) leaves_.erase({pages_[parent].r, parent});
    }
    leaves_.insert({p.r, id});
    map_.emplace(edge(parent, key), id);
    ++live_;
    return id;
  }

  // The matched path (a lease's lock; split() left the pages past it evictable).
  void pin(bool on) {
    for (int32_t id : path_) pages_[id].pinned = on;
  }

  // apply() first splits the deepest matched node where the match ends
  // (PrefixIndex::ending_at), even when the request is then refused.
  void split() {
    if (!path_.empty() && !pages_[path_.back()].seg_end) end_node(path_.back());
  }

  // Evicts the least recent unpinned leaf page; false when there is none.
  bool evict_one() {
    auto it = leaves_.begin();
    while (it != leaves_.end() && pages_[it->second].pinned) ++it;
    if (it == leaves_.end()) return false;
    const int32_t id = it->second;
    if (std::next(it) != leaves_.end() && std::next(it)->first == it->first) {
      if (!tie_) {
        const int32_t o = std::next(it)->second;
        auto depth = [&](int32_t x) { int d = 0; while (x >= 0) { x = pages_[x].parent; ++d; } return d; };
        fprintf(stderr, "tie r=%llu a=%d depth %d seg %d children %d | b=%d depth %d seg %d children %d tick %llu\n",
                (unsigned long long)it->first, id, depth(id), pages_[id].seg_end, pages_[id].children, o, depth(o),
                pages_[o].seg_end, pages_[o].children, (unsigned long long)tick_);
      }
      tie_ = true;
    }
    leaves_.erase(it);
    Page& p = pages_[id];
    auto range = map_.equal_range(edge(p.parent, p.key));
    for (auto m = range.first; m != range.second; ++m)
      if (m->second == id) {
        map_.erase(m);
        break;
      }
    if (p.parent >= 0) {
      Page& q = pages_[p.parent];
      if (!q.seg_end) end_node(p.parent);  // the trimmed node now ends at the predecessor
      if (--q.children == 0) leaves_.insert({q.r, p.parent});
    }
    p.live = false;
    free_.push_back(id);
    --live_;
    return true;
  }

  uint64_t cap_;
  uint32_t P_, ppb_;
  uint64_t tick_ = 0, live_ = 0;
  bool tie_ = false;
  std::vector<Page> pages_;
  std::vector<int32_t> free_, path_;
  std::unordered_multimap<uint64_t, int32_t> map_;
  std::set<std::pair<uint64_t, int32_t>> leaves_;
  std::vector<uint64_t> keys_;
};

uint64_t oracle_hits(const ReplayTrace& t, uint64_t capacity_tokens, uint32_t P, bool* tie) {
  NaiveLru lru(capacity_tokens / P, P, t.block_tokens);
  uint64_t hits = 0;
  for (const ReplayRequest& r : t.requests) hits += lru.request(t.ids(r), r.input_length);
  if (tie) *tie = lru.saw_tie();
  return hits;
}

ReplayOptions single_tier(uint64_t capacity_tokens, uint32_t P) {
  ReplayOptions o = default_replay_options();
  o.model = replay_model_preset("llama-3-8b", DType::kBF16, P).value();
  o.device = Capacity::tokens(capacity_tokens);
  o.timing = false;
  o.max_pass = false;
  return o;
}

// Conversations over shared system prompts: turns extend their history,
// some requests are pure prefixes, lengths end mid-block and mid-page.
ReplayTrace generated_trace(uint32_t seed, size_t n, uint32_t block_tokens) {
  std::mt19937_64 rng(seed);
  ReplayTrace t;
  t.block_tokens = block_tokens;
  uint64_t next_id = 0;
  std::vector<std::vector<uint64_t>> systems(6), convs(40);
  for (auto& s : systems) {
    s.resize(1 + rng() % 6);
    for (auto& id : s) id = next_id++;
  }
  for (auto& c : convs) c = systems[rng() % systems.size()];
  for (size_t i = 0; i < n; ++i) {
    auto& c = convs[rng() % convs.size()];
    const int kind = static_cast<int>(rng() % 10);
    std::vector<uint64_t> ids = c;
    if (kind < 7) {  // next turn
      const size_t add = 1 + rng() % 4;
      for (size_t k = 0; k < add; ++k) c.push_back(next_id++);
      ids = c;
    } else if (kind < 9 && ids.size() > 1) {  // a prefix of the history
      ids.resize(1 + rng() % ids.size());
    } else {  // a fresh prompt
      ids.assign(1 + rng() % 5, 0);
      for (auto& id : ids) id = next_id++;
    }
    ReplayRequest r;
    r.timestamp_ms = double(i) * 10;
    r.offset = t.hash_ids.size();
    r.count = static_cast<uint32_t>(ids.size());
    r.input_length = static_cast<uint32_t>((ids.size() - 1) * block_tokens + 1 + rng() % block_tokens);
    t.hash_ids.insert(t.hash_ids.end(), ids.begin(), ids.end());
    t.requests.push_back(r);
  }
  return t;
}

TEST(ReplayOracle, SingleTierLruEqualsNaiveSimulatorOnGeneratedTraces) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const ReplayTrace t = generated_trace(seed, 600, 64);
    for (uint64_t cap : {32ull, 160ull, 1024ull, 4096ull, 20000ull, 1ull << 30}) {
      auto r = run_replay(single_tier(cap, 16), t);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      bool tie = false;
      const uint64_t want = oracle_hits(t, cap, 16, &tie);
      EXPECT_FALSE(tie);
      EXPECT_EQ(r->hit_tokens, want) << "seed " << seed << " capacity " << cap;
      EXPECT_TRUE(r->compressed);
    }
  }
}

TEST(ReplayOracle, SingleTierLruEqualsNaiveSimulatorOnSharedTrace) {
  auto t = read_replay_trace(testdata::mooncake_trace_path(), TraceReadOptions{});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ReplayTrace& trace = *t;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  trace.requests.resize(800);  // a prefix keeps sanitizer builds quick
  const std::vector<uint64_t> caps = {300000};
#else
  const std::vector<uint64_t> caps = {1000000, 3000000};
#endif
  for (uint64_t cap : caps) {
    auto r = run_replay(single_tier(cap, 16), trace);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    bool tie = false;
    EXPECT_EQ(r->hit_tokens, oracle_hits(trace, cap, 16, &tie)) << cap;
    EXPECT_GT(r->evictions[0], 0u);
    EXPECT_FALSE(tie);
  }
}

}  // namespace
}  // namespace kvtier
