// The tier secret end to end (docs/SECURITY.md): KVCache instances share a
// real Redis. A writer without the secret plants well-formed entries that
// would poison any reader that trusts the store; readers holding the secret
// never use them, recompute instead (same output as a full recompute) and
// count them in kvtier_forged_entries_total. Instances with the same secret
// share KV exactly; with different secrets they never do. Every byte of an
// authenticated value is covered, and a wrong Redis password never shows up
// in what the tier reports.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <cmath>
#include <sstream>

#include "redis_fixture.h"
#include "remote_test_util.h"
#include "runtime/cache_rig.h"
#include "runtime/runtime.h"
#include "server/stats_render.h"

namespace kvtier::testing {
namespace {

constexpr int kSteps = 8;
constexpr size_t kRemote = static_cast<size_t>(TierKind::kRemote);
constexpr std::string_view kSecret = "tier secret shared by the fleet";

std::shared_ptr<RemoteTier> remote_with(const RedisServer& s, const ChunkGeometry& g, std::string_view secret) {
  auto o = RemoteTierOptions::from_url(s.url() + "?backoff_ms=20&backoff_max_ms=100&timeout_ms=1000", g);
  EXPECT_TRUE(o.ok()) << o.status().to_string();
  if (!o.ok()) return nullptr;
  if (!secret.empty()) o->auth = ChunkAuth::create(secret).value();
  auto t = RemoteTier::create(*o);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::shared_ptr<RemoteTier>(std::move(t).value()) : nullptr;
}

std::vector<std::string> redis_keys(const RedisServer& s, const std::string& pattern) {
  std::vector<std::string> out;
  std::stringstream ss(s.cmd({"KEYS", pattern}).value());
  for (std::string k; std::getline(ss, k);)
    if (!k.empty()) out.push_back(k);
  return out;
}

std::string get_value(RemoteTier& t, const std::string& key) {
  auto r = t.client().command({"GET", key});
  return r.ok() && (*r)->type == REDIS_REPLY_STRING ? std::string((*r)->str, (*r)->len) : std::string();
}

void set_value(RemoteTier& t, const std::string& key, std::span<const std::byte> v) {
  auto r = t.client().command({"SET", key, {reinterpret_cast<const char*>(v.data()), v.size()}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

class RemoteAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis.start().ok());
    CacheRig shape(RigOptions{.disk = false});
    g = ChunkGeometry{shape.cache->geometry(), shape.cache->options().chunk_pages};
  }
  std::unique_ptr<CacheRig> rig(std::shared_ptr<RemoteTier> remote) {
    return std::make_unique<CacheRig>(RigOptions{.disk = false, .remote = std::move(remote)});
  }
  RedisServer redis;
  ChunkGeometry g;
};

// A writer without the secret computes the chunk keys as kvtier does without
// one and plants well-formed entries with poisoned KV, under those names and
// under the names the secret holder reads.
TEST_F(RemoteAuthTest, PlantedEntriesAreNeverServedAndAreCounted) {
  auto attacker_tier = remote_with(redis, g, "");
  auto reader_tier = remote_with(redis, g, kSecret);
  auto attacker = rig(attacker_tier), reader = rig(reader_tier);
  const auto prompt = CacheRig::random_tokens(300, 31);
  const Outcome ref = reader->reference(prompt, kSteps);
  attacker->cached(prompt, kSteps);
  ASSERT_TRUE(attacker->cache->drain().ok());
  const auto plain_keys = redis_keys(redis, "kvtier:1:*");
  ASSERT_EQ(plain_keys.size(), 6u);  // 4 whole chunks, the prompt's tail and the sequence's
  for (const std::string& k : plain_keys) {
    const std::string v = get_value(*attacker_tier, k);
    auto meta = decode_chunk_value(std::as_bytes(std::span(v.data(), v.size())), g);
    ASSERT_TRUE(meta.ok()) << meta.status().to_string();
    std::vector<std::byte> poison(meta->header.payload_bytes, std::byte{0x3F});
    std::vector<std::byte> forged(chunk_entry_layout(g, meta->header.num_pages, 1).entry_bytes);
    ASSERT_TRUE(encode_chunk_entry(g, meta->key, meta->page_hashes, poison, 1, 1, forged).ok());
    set_value(*attacker_tier, k, forged);                               // the unkeyed name
    set_value(*attacker_tier, reader_tier->key_of(meta->key), forged);  // the secret holder's name
  }
  // The plant is good enough to fool a reader without the secret...
  auto naive = rig(remote_with(redis, g, ""));
  const Outcome fooled = naive->cached(prompt, kSteps);
  EXPECT_EQ(fooled.report.reused_tokens_by_tier[kRemote], 288u);
  EXPECT_GT(max_abs_diff(fooled.logits, ref.logits), 1e-3f);
  // ...and is never served to one that holds it.
  const Outcome hit = reader->cached(prompt, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 0u);
  expect_same(hit, ref, 1e-5);
  const TierStats st = reader_tier->stats();
  EXPECT_GE(st.forged_entries, 1u);
  EXPECT_EQ(st.hits, 0u);
  RuntimeStats stats;
  stats.cache = reader->cache->stats();
  const std::string metrics = server::runtime_metrics_text(stats);
  EXPECT_NE(metrics.find("kvtier_forged_entries_total " + std::to_string(st.forged_entries)), std::string::npos) << metrics;
}

// Authenticated entries moved between the secret holder's own keys (each value under another
// chunk's name) are tampering, and the tamper alarm says so: they were counted as checksum
// failures, accidental corruption, and kvtier_forged_entries_total stayed 0.
TEST_F(RemoteAuthTest, EntriesMovedBetweenKeysCountAsForged) {
  auto tier = remote_with(redis, g, kSecret);
  auto r = rig(tier);
  const auto prompt = CacheRig::random_tokens(300, 37);
  const Outcome ref = r->reference(prompt, kSteps);
  r->cached(prompt, kSteps);
  ASSERT_TRUE(r->cache->drain().ok());
  const auto keys = redis_keys(redis, "kvtier:1:*");
  ASSERT_GE(keys.size(), 2u);
  std::vector<std::string> values;
  for (const std::string& k : keys) values.push_back(get_value(*tier, k));
  for (size_t i = 0; i < keys.size(); ++i)  // each value under the next key's name
    set_value(*tier, keys[i], std::as_bytes(std::span(values[(i + 1) % keys.size()])));
  ASSERT_TRUE(r->cache->flush().ok());  // device and host dropped: only Redis holds the prompt
  const Outcome hit = r->cached(prompt, kSteps);
  EXPECT_EQ(hit.report.reused_tokens_by_tier[kRemote], 0u);
  expect_same(hit, ref, 1e-5);
  EXPECT_GE(tier->stats().forged_entries, 1u);
  EXPECT_EQ(tier->stats().checksum_failures, 0u);
}

TEST_F(RemoteAuthTest, SameSecretSharesDifferentSecretsNever) {
  auto tier_a = remote_with(redis, g, kSecret), tier_b = remote_with(redis, g, kSecret);
  auto tier_c = remote_with(redis, g, "another fleet's secret, not ours");
  auto a = rig(tier_a), b = rig(tier_b), c = rig(tier_c);
  const auto prompt = CacheRig::random_tokens(300, 32);
  const Outcome ref = b->reference(prompt, kSteps);
  expect_same(a->cached(prompt, kSteps), ref, 1e-5);
  ASSERT_TRUE(a->cache->drain().ok());
  const auto keys = redis_keys(redis, "kvtier:*");
  ASSERT_EQ(keys.size(), 6u);  // 4 whole chunks, the prompt's tail and the sequence's
  // Key names are keyed: they carry neither the namespace nor a page hash.
  for (const std::string& k : keys) {
    EXPECT_EQ(k.rfind("kvtier:1:", 0), 0u) << k;  // then the layout (16 hex digits), then "a:"
    EXPECT_EQ(k.find(":a:"), std::string("kvtier:1:").size() + 16) << k;
    EXPECT_EQ(k.size(), std::string("kvtier:1:").size() + 16 + std::string(":a:").size() + 32) << k;
  }
  const Outcome shared = b->cached(prompt, kSteps);
  EXPECT_EQ(shared.report.reused_tokens_by_tier[kRemote], 288u);
  expect_same(shared, ref, 1e-5);
  // Another secret names other keys: it finds nothing...
  const Outcome other = c->cached(prompt, kSteps);
  EXPECT_EQ(other.report.reused_tokens_by_tier[kRemote], 0u);
  expect_same(other, ref, 1e-5);
  ASSERT_TRUE(c->cache->drain().ok());
  // ...and entries copied under its names fail authentication.
  for (const std::string& k : keys) {
    const std::string v = get_value(*tier_a, k);
    auto meta = decode_chunk_value(std::as_bytes(std::span(v.data(), v.size())), g);
    ASSERT_TRUE(meta.ok());
    set_value(*tier_a, tier_c->key_of(meta->key), std::as_bytes(std::span(v.data(), v.size())));
  }
  auto d = rig(tier_c);
  const Outcome refused = d->cached(prompt, kSteps);
  EXPECT_EQ(refused.report.reused_tokens_by_tier[kRemote], 0u);
  expect_same(refused, ref, 1e-5);
  EXPECT_GE(tier_c->stats().forged_entries, 1u);
  EXPECT_EQ(tier_b->stats().forged_entries, 0u);
}

// Every byte of an authenticated value, flipped, is caught by whole-value
// GETs and by layer-range GETRANGE reads alike; the entry is dropped and counted.
TEST_F(RemoteAuthTest, EveryTamperedByteOfAValueIsDetected) {
  const ChunkGeometry sg = testing_util::small_geometry();
  auto whole = make_remote(redis.url(), sg, [](RemoteTierOptions& o) {
    o.auth = ChunkAuth::create(kSecret).value();
    o.range_reads = false;
  });
  auto ranged = make_remote(redis.url(), sg, [](RemoteTierOptions& o) { o.auth = ChunkAuth::create(kSecret).value(); });
  ASSERT_TRUE(whole && ranged);
  const auto c = testing_util::make_chunk(sg, testing_util::test_ns(7), 1);
  ASSERT_TRUE(whole->put(c.key, c.hashes, c.payload).ok());
  const std::string key = whole->key_of(c.key);
  const std::string value = get_value(*whole, key);
  const auto lay = chunk_entry_layout(sg, sg.chunk_pages, 1, true);
  ASSERT_EQ(value.size(), lay.entry_bytes);
  const size_t lb = sg.layer_bytes(sg.chunk_pages);
  std::vector<std::byte> out(c.payload.size());
  uint64_t refused = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    std::string bad = value;
    bad[i] ^= (i % 2) ? 0x01 : 0x80;
    set_value(*whole, key, std::as_bytes(std::span(bad.data(), bad.size())));
    // The range read asks for the layer the byte lies in (layer 1 for a metadata byte).
    const uint32_t layer = i < lay.payload_offset ? 1 : uint32_t((i - lay.payload_offset) / lb);
    auto r = (i % 3 == 0) ? whole->get(c.key, out) : ranged->get_layers(c.key, layer, 1, out);
    EXPECT_FALSE(r.ok()) << "tampering with byte " << i << " went unnoticed";
    refused += !r.ok();
  }
  auto count = [](RemoteTier& t) { return t.stats().forged_entries + t.stats().checksum_failures; };
  EXPECT_EQ(count(*whole) + count(*ranged), refused);
  EXPECT_GT(whole->stats().forged_entries + ranged->stats().forged_entries, 0u);
}

TEST_F(RemoteAuthTest, AWrongPasswordNeverShowsUpInWhatTheTierReports) {
  RedisServer locked;
  ASSERT_TRUE(locked.start({"--requirepass", "the-right-one"}).ok());
  const std::string url = "redis://app:hunter2-wrong@" + locked.address() + "?backoff_ms=20&timeout_ms=500";
  auto o = RemoteTierOptions::from_url(url, g);
  ASSERT_TRUE(o.ok());
  auto t = RemoteTier::create(*o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const auto c = testing_util::make_chunk(g, testing_util::test_ns(8), 1);
  const Status put = (*t)->put(c.key, c.hashes, c.payload);
  EXPECT_FALSE(put.ok());
  EXPECT_EQ(put.to_string().find("hunter2"), std::string::npos) << put.to_string();
  const Status bad_scheme = RemoteTierOptions::from_url("http://app:hunter2-wrong@h:1", g).status();
  EXPECT_FALSE(bad_scheme.ok());
  EXPECT_EQ(bad_scheme.to_string().find("hunter2"), std::string::npos) << bad_scheme.to_string();
}

}  // namespace
}  // namespace kvtier::testing
