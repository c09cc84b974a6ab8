// Model-based test: random operation sequences on the PrefixIndex, checked
// after every step against a naive oracle — a map from (namespace,
// page-aligned prefix) to the page's residency and hash.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <unordered_map>

#include "common/page_hash.h"
#include "index/prefix_index.h"

namespace kvtier {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kScale = 10;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int kScale = 10;
#else
constexpr int kScale = 1;
#endif
#else
constexpr int kScale = 1;
#endif

using Key = std::pair<int, std::vector<TokenId>>;  // (namespace, tokens of a page-aligned prefix)

struct Entry {
  PageLocation loc;
  PageHash hash;
};

struct Held {
  NodeHandle node;
  int ns;
  std::vector<TokenId> prefix;  // the matched pages' tokens
  bool retained = false;        // retain() instead of lock()
};

class Model {
 public:
  Model(uint32_t P, EvictionPolicyKind policy, uint64_t seed) : P_(P), rng_(seed) {
    PrefixIndex::Options o;
    o.page_tokens = P;
    o.policy = policy;
    ix_ = std::move(PrefixIndex::create(o)).value();
    for (int i = 0; i < 3; ++i) {
      Namespace ns;
      ns.cache_salt = "tenant-" + std::to_string(i);
      ns_[i] = NsKey{namespace_seed(ns, HashAlgo::kXXH3_128)};
    }
  }

  void run(int ops) {
    for (int step = 0; step < ops; ++step) {
      const int r = pick(100);
      if (r < 38) do_insert();
      else if (r < 62) do_match();
      else if (r < 70) do_lock();
      else if (r < 77) do_unlock();
      else if (r < 90) do_evict(1 + pick(8));
      else if (r < 99) do_set_location();
      else do_drain();
      if (ix_->stats().pages > 1500) do_evict(200);
      check_counts();
      if (step % 64 == 0) check_full();
      if (::testing::Test::HasFatalFailure()) return;
    }
    do_drain();
  }

 private:
  uint32_t pick(uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng_); }

  // Prompts reuse earlier ones so that prefixes are shared and nodes split.
  std::vector<TokenId> prompt() {
    std::vector<TokenId> t;
    if (!pool_.empty() && pick(4) != 0) {
      const auto& base = pool_[pick(static_cast<uint32_t>(pool_.size()))];
      t.assign(base.begin(), base.begin() + pick(static_cast<uint32_t>(base.size()) + 1));
    }
    const uint32_t extra = pick(6 * P_ + 2);
    for (uint32_t i = 0; i < extra; ++i) t.push_back(static_cast<TokenId>(pick(3)));
    if (pool_.size() < 64) pool_.push_back(t);
    else pool_[pick(64)] = t;
    return t;
  }

  PageLocation random_loc() {
    PageLocation l;
    const uint32_t k = pick(10);
    if (k < 8) l.device = PageId(next_id_++);
    if (k >= 5) l.host = SlotId(next_id_++);
    return l;
  }

  Key key_of(int ns, const std::vector<TokenId>& t, size_t pages) const {
    return Key{ns, std::vector<TokenId>(t.begin(), t.begin() + pages * P_)};
  }

  uint32_t oracle_match(int ns, const std::vector<TokenId>& t) const {
    uint32_t k = 0;
    while ((k + 1) * P_ <= t.size() && oracle_.count(key_of(ns, t, k + 1))) ++k;
    return k;
  }

  void do_insert() {
    // A third of the inserts resume from the last match (possibly made stale
    // by later structural changes, which must fall back to a full walk).
    const bool resume = have_last_ && pick(3) == 0;
    const int ns = resume ? last_ns_ : static_cast<int>(pick(3));
    const auto t = resume ? last_tokens_ : prompt();
    const size_t n = t.size() / P_;
    std::vector<PageLocation> locs(n);
    for (auto& l : locs) l = random_loc();
    std::vector<PageHash> hashes;
    hash_pages(HashAlgo::kXXH3_128, ns_[ns].seed, t, P_, hashes);
    const bool give_hashes = pick(2) == 0;
    auto r = resume ? ix_->insert_matched(ns_[ns], t, locs, last_match_)
                    : ix_->insert(ns_[ns], t, locs,
                                  give_hashes ? std::span<const PageHash>(hashes) : std::span<const PageHash>());
    have_last_ = false;
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    uint32_t present = 0;
    bool absent_seen = false;
    for (size_t i = 0; i < n; ++i) {
      Key k = key_of(ns, t, i + 1);
      if (oracle_.count(k)) {
        ASSERT_FALSE(absent_seen) << "oracle has a hole";
        ++present;
      } else {
        absent_seen = true;
        by_hash_[hashes[i]] = k;
        oracle_.emplace(std::move(k), Entry{locs[i], hashes[i]});
      }
    }
    ASSERT_EQ(r->already_present, present);
    ASSERT_EQ(r->inserted, n - present);
  }

  void do_match() {
    const int ns = static_cast<int>(pick(3));
    const auto t = prompt();
    ix_->match(ns_[ns], t, m_, /*hash_remainder=*/pick(4) != 0);
    ASSERT_EQ(m_.matched_pages, oracle_match(ns, t));
    ASSERT_EQ(m_.whole_pages, t.size() / P_);
    have_last_ = true;
    last_ns_ = ns;
    last_tokens_ = t;
    last_match_ = m_;
    if (m_.hashes.size() != m_.whole_pages) {
      ASSERT_EQ(m_.hashes.size(), m_.matched_pages);
      return;
    }
    std::vector<PageHash> want;
    hash_pages(HashAlgo::kXXH3_128, ns_[ns].seed, t, P_, want);
    ASSERT_EQ(m_.hashes, want);
    for (uint32_t i = 0; i < m_.matched_pages; ++i) ASSERT_EQ(m_.locations[i], oracle_.at(key_of(ns, t, i + 1)).loc);
    ASSERT_EQ(m_.deepest.valid(), m_.matched_pages > 0);
  }

  void do_lock() {
    const int ns = static_cast<int>(pick(3));
    const auto t = prompt();
    ix_->match(ns_[ns], t, m_);
    if (m_.matched_pages == 0) return;
    const bool retain = pick(2) == 0;
    ASSERT_TRUE((retain ? ix_->retain(m_.deepest) : ix_->lock(m_.deepest)).ok());
    held_.push_back(
        Held{m_.deepest, ns, std::vector<TokenId>(t.begin(), t.begin() + m_.matched_pages * P_), retain});
  }

  Status let_go(const Held& h) { return h.retained ? ix_->unretain(h.node) : ix_->unlock(h.node); }

  void do_unlock() {
    if (held_.empty()) return;
    const size_t i = pick(static_cast<uint32_t>(held_.size()));
    ASSERT_TRUE(let_go(held_[i]).ok());
    held_.erase(held_.begin() + i);
  }

  bool locked(const Key& k, bool retained = false) const {
    for (const Held& h : held_)
      if (h.retained == retained && h.ns == k.first && k.second.size() <= h.prefix.size() &&
          std::equal(k.second.begin(), k.second.end(), h.prefix.begin()))
        return true;
    return false;
  }

  uint32_t do_evict(uint32_t n) {
    const TierKind tier = pick(2) == 0 ? TierKind::kDevice : TierKind::kHost;
    return evict(n, tier);
  }

  uint32_t evict(uint32_t n, TierKind tier) {
    EvictResult ev;
    EXPECT_TRUE(ix_->evict(n, tier, ev).ok());
    EXPECT_LE(ev.freed, n);
    EXPECT_EQ(ev.freed, ev.pages.size());
    for (const EvictedPage& p : ev.pages) {
      auto it = by_hash_.find(p.hash);
      EXPECT_TRUE(it != by_hash_.end()) << "evicted an unknown page";
      if (it == by_hash_.end()) return 0;
      const Key k = it->second;
      Entry& e = oracle_.at(k);
      EXPECT_EQ(p.location, e.loc);
      EXPECT_TRUE(e.loc.in(tier));
      EXPECT_FALSE(locked(k)) << "evicted a locked page";
      const bool retained = locked(k, /*retained=*/true);
      EXPECT_FALSE(retained && tier == TierKind::kHost) << "evicted a retained page from the host";
      if (tier == TierKind::kDevice) e.loc.device = PageId();
      else e.loc.host = SlotId();
      EXPECT_EQ(p.removed, !e.loc.any());
      EXPECT_FALSE(retained && p.removed) << "a retained page left the index";
      if (!e.loc.any()) {
        oracle_.erase(k);
        by_hash_.erase(it);
      }
    }
    return ev.freed;
  }

  void do_set_location() {
    const int ns = static_cast<int>(pick(3));
    const auto t = prompt();
    ix_->match(ns_[ns], t, m_);
    if (m_.matched_pages == 0) return;
    const uint32_t k = pick(m_.matched_pages);
    const PageLocation loc = random_loc();
    ASSERT_TRUE(ix_->set_location(m_.deepest, k, loc).ok());
    ASSERT_EQ(ix_->location(m_.deepest, k).value(), loc);
    oracle_.at(key_of(ns, t, k + 1)).loc = loc;
    ASSERT_FALSE(ix_->set_location(m_.deepest, m_.matched_pages + 1000, loc).ok());
  }

  // Unlock everything and evict both tiers until nothing is left: no leaked nodes.
  void do_drain() {
    for (const Held& h : held_) ASSERT_TRUE(let_go(h).ok());
    held_.clear();
    for (int round = 0; round < 100000; ++round) {
      const uint32_t a = evict(1000, TierKind::kDevice);
      const uint32_t b = evict(1000, TierKind::kHost);
      if (a == 0 && b == 0) break;
    }
    const IndexStats s = ix_->stats();
    ASSERT_EQ(s.pages, 0u);
    ASSERT_EQ(s.nodes, 0u);
    ASSERT_TRUE(oracle_.empty());
  }

  void check_counts() {
    const IndexStats s = ix_->stats();
    uint64_t dev = 0, host = 0, prot_min = 0, retained_min = 0;
    for (const auto& [k, e] : oracle_) {
      dev += e.loc.on_device();
      host += e.loc.on_host();
      prot_min += locked(k);
      retained_min += e.loc.on_host() && locked(k, /*retained=*/true);
    }
    ASSERT_GE(s.retained_host_pages, retained_min);
    if (std::none_of(held_.begin(), held_.end(), [](const Held& h) { return h.retained; })) {
      ASSERT_EQ(s.retained_host_pages, 0u);
    }
    ASSERT_EQ(s.pages, oracle_.size());
    ASSERT_EQ(s.device_pages, dev);
    ASSERT_EQ(s.host_pages, host);
    ASSERT_EQ(s.protected_pages + s.evictable_pages, s.pages);
    ASSERT_GE(s.protected_pages, prot_min);  // whole nodes are protected, so possibly more
    if (held_.empty()) {
      ASSERT_EQ(s.protected_pages, 0u);
    }
    ASSERT_LE(s.nodes, s.pages);
  }

  void check_full() {
    const Status st = ix_->check_invariants();
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (const auto& [k, e] : oracle_) {
      if (k.second.size() == P_) continue;
      Key parent{k.first, std::vector<TokenId>(k.second.begin(), k.second.end() - P_)};
      ASSERT_TRUE(oracle_.count(parent)) << "a cached page lost its prefix";
    }
  }

  uint32_t P_;
  std::mt19937_64 rng_;
  std::unique_ptr<PrefixIndex> ix_;
  NsKey ns_[3];
  std::map<Key, Entry> oracle_;
  std::unordered_map<PageHash, Key, PageHashHasher> by_hash_;
  std::vector<std::vector<TokenId>> pool_;
  std::vector<Held> held_;
  MatchResult m_;
  bool have_last_ = false;
  int last_ns_ = 0;
  std::vector<TokenId> last_tokens_;
  MatchResult last_match_;
  uint32_t next_id_ = 0;
};

struct Config {
  uint32_t page_tokens;
  EvictionPolicyKind policy;
};

class PrefixIndexModel : public ::testing::TestWithParam<Config> {};

TEST_P(PrefixIndexModel, RandomOperationsMatchTheOracle) {
  // 5 configurations x 24,000 = 120,000 operations in Release.
  Model m(GetParam().page_tokens, GetParam().policy, 0xC0FFEE + GetParam().page_tokens);
  m.run(24000 / kScale);
}

INSTANTIATE_TEST_SUITE_P(PageSizesAndPolicies, PrefixIndexModel,
                         ::testing::Values(Config{1, EvictionPolicyKind::kLru}, Config{2, EvictionPolicyKind::kLfu},
                                           Config{3, EvictionPolicyKind::kSlru},
                                           Config{4, EvictionPolicyKind::kPriorityLru},
                                           Config{8, EvictionPolicyKind::kFifo}));

}  // namespace
}  // namespace kvtier
