#include "redis_bench.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/stats.h"
#include "tiers/remote/remote_tier.h"

namespace kvtier {

namespace {

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t0) { return std::chrono::duration<double>(SteadyClock::now() - t0).count(); }

}  // namespace

Status RemoteBenchOptions::validate() const {
  if (url.empty()) return Status::InvalidArgument("bench remote: a redis:// URL is needed");
  if (total_bytes == 0) return Status::InvalidArgument("bench remote: total bytes must be > 0");
  if (batch_chunks == 0) return Status::InvalidArgument("bench remote: batch_chunks must be > 0");
  if (rounds == 0) return Status::InvalidArgument("bench remote: rounds must be > 0");
  return ChunkGeometry{geometry, chunk_pages}.validate();
}

Result<RemoteBenchResult> run_remote_bench(const RemoteBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const ChunkGeometry g{o.geometry, o.chunk_pages};
  KVTIER_ASSIGN_OR_RETURN(RemoteTierOptions ro, RemoteTierOptions::from_url(o.url, g));
  ro.max_batch_bytes = std::max(ro.max_batch_bytes, size_t(o.batch_chunks) * chunk_entry_layout(g, g.chunk_pages, 1).entry_bytes);
  KVTIER_ASSIGN_OR_RETURN(auto tier, RemoteTier::create(ro));
  ro.auth = ChunkAuth::create(PageHash{std::random_device{}(), std::random_device{}()}.to_hex()).value();
  ro.max_batch_bytes = std::max(ro.max_batch_bytes, size_t(o.batch_chunks) * chunk_entry_layout(g, g.chunk_pages, 1, true).entry_bytes);
  KVTIER_ASSIGN_OR_RETURN(auto mac_tier, RemoteTier::create(ro));
  ro.auth.reset();
  ro.range_reads = false;
  KVTIER_ASSIGN_OR_RETURN(auto whole_tier, RemoteTier::create(ro));
  if (tier->degraded()) return Status::Unavailable("bench remote: Redis at " + o.url + " is not reachable");

  RemoteBenchResult res;
  res.chunk_payload_bytes = g.max_payload_bytes();
  res.value_bytes = chunk_entry_layout(g, g.chunk_pages, 1).entry_bytes;
  res.chunks = std::max<size_t>(o.batch_chunks, o.total_bytes / res.chunk_payload_bytes);
  res.cluster = tier->client().is_cluster();
  res.nodes = tier->client().nodes().size();

  // One payload shared by every chunk; distinct page hashes under a fresh namespace.
  std::mt19937_64 rng(std::random_device{}());
  std::vector<std::byte> payload(res.chunk_payload_bytes);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  const PageHash ns{rng(), rng()};
  std::vector<std::vector<PageHash>> hashes(res.chunks, std::vector<PageHash>(g.chunk_pages));
  for (auto& h : hashes)
    for (auto& p : h) p = PageHash{rng(), rng()};
  std::vector<std::string> raw_keys;
  for (size_t i = 0; i < res.chunks; ++i) raw_keys.push_back("kvtier:bench:" + ns.to_hex() + ":" + std::to_string(i));
  std::string raw_value(res.value_bytes, 'r');
  // The raw SET baseline goes out as the tier's SETs do: one gather write of
  // RESP head, the value from where it lies and the RESP tail, no client-side
  // copy; only kvtier's entry format (metadata, checksums) is missing.
  std::vector<std::string> raw_set_heads;
  for (const std::string& k : raw_keys)
    raw_set_heads.push_back("*3\r\n$3\r\nSET\r\n$" + std::to_string(k.size()) + "\r\n" + k + "\r\n$" +
                            std::to_string(res.value_bytes) + "\r\n");

  const size_t B = o.batch_chunks;
  std::vector<std::vector<std::byte>> outs(B, std::vector<std::byte>(res.chunk_payload_bytes));
  const double payload_total = double(res.chunks) * res.chunk_payload_bytes;
  const double value_total = double(res.chunks) * res.value_bytes;
  auto gbps = [](double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0; };
  std::vector<double> raw_set, raw_set_buffered, raw_get, put, get, layer, layer_whole, put_mac, get_mac, layer_mac;
  Status failed;

  // Each timed step covers one batch [b, b + B); the caller accumulates.
  // Raw SETs are gather writes, or (buffered) copied through hiredis's output buffer.
  auto raw = [&](const char* verb, size_t b, bool buffered = false) -> double {
    const auto t0 = SteadyClock::now();
    std::vector<RedisCommand> cmds;
    for (size_t i = b; i < std::min(res.chunks, b + B); ++i) {
      cmds.push_back(RedisCommand{{verb, raw_keys[i]}});
      if (verb[0] != 'S') continue;
      if (buffered) {
        cmds.back().args.push_back(raw_value);
      } else {
        cmds.back().formatted = {raw_set_heads[i], raw_value, "\r\n"};
      }
    }
    Status st = tier->client().run(cmds);
    for (auto& c : cmds)
      if (st.ok() && (c.reply->type == REDIS_REPLY_ERROR || (verb[0] == 'G' && c.reply->len != res.value_bytes)))
        st = Status::IOError("bench remote: raw " + std::string(verb) + " failed");
    if (!st.ok()) failed = st;
    return seconds_since(t0);
  };
  auto write = [&](RemoteTier& t, size_t b) -> double {
    const auto t0 = SteadyClock::now();
    std::vector<PutOp> ops;
    for (size_t i = b; i < std::min(res.chunks, b + B); ++i)
      ops.push_back(PutOp{ChunkKey{ns, hashes[i].back()}, hashes[i], payload});
    t.put_batch(ops);
    for (auto& op : ops)
      if (!op.status.ok()) failed = op.status;
    return seconds_since(t0);
  };
  auto read = [&](RemoteTier& t, bool layerwise, size_t b) -> double {
    const auto t0 = SteadyClock::now();
    const uint32_t L = g.kv.num_layers;
    const size_t n = std::min(res.chunks, b + B) - b;
    for (uint32_t l = 0; l < (layerwise ? L : 1u); ++l) {
      std::vector<GetOp> ops;
      for (size_t i = 0; i < n; ++i)
        ops.push_back(GetOp{ChunkKey{ns, hashes[b + i].back()}, layerwise ? l : 0, layerwise ? 1u : kAllLayers, outs[i]});
      t.get_batch(ops);
      for (auto& op : ops)
        if (!op.status.ok()) failed = op.status;
    }
    return seconds_since(t0);
  };

  // Raw and tier steps alternate batch by batch, so both see the same server
  // state (memory growth, overwrites, background work) and the same noise.
  for (uint32_t r = 0; r < o.rounds && failed.ok(); ++r) {
    double t_raw_set = 0, t_raw_set_buffered = 0, t_put = 0, t_raw_get = 0, t_get = 0, t_layer = 0;
    double t_put_mac = 0, t_get_mac = 0, t_layer_mac = 0;
    for (size_t b = 0; b < res.chunks && failed.ok(); b += B) {
      t_raw_set += raw("SET", b);
      t_put += write(*tier, b);
      t_put_mac += write(*mac_tier, b);
      t_raw_set_buffered += raw("SET", b, /*buffered=*/true);
    }
    for (size_t b = 0; b < res.chunks && failed.ok(); b += B) {
      t_raw_get += raw("GET", b);
      t_get += read(*tier, false, b);
      t_get_mac += read(*mac_tier, false, b);
      t_layer += read(*tier, true, b);
      t_layer_mac += read(*mac_tier, true, b);
    }
    put_mac.push_back(gbps(payload_total, t_put_mac));
    get_mac.push_back(gbps(payload_total, t_get_mac));
    layer_mac.push_back(gbps(payload_total, t_layer_mac));
    raw_set.push_back(gbps(value_total, t_raw_set));
    raw_set_buffered.push_back(gbps(value_total, t_raw_set_buffered));
    put.push_back(gbps(payload_total, t_put));
    raw_get.push_back(gbps(value_total, t_raw_get));
    get.push_back(gbps(payload_total, t_get));
    layer.push_back(gbps(payload_total, t_layer));
    // Whole-value GET per layer moves L times the bytes: one batch is enough to show it.
    layer_whole.push_back(gbps(double(std::min(res.chunks, B)) * res.chunk_payload_bytes, read(*whole_tier, true, 0)));
  }
  if (failed.ok() && std::memcmp(outs[0].data(), payload.data() + (g.kv.num_layers - 1) * g.layer_bytes(g.chunk_pages),
                                 g.layer_bytes(g.chunk_pages)) != 0)
    failed = Status::Internal("bench remote: read back different bytes");
  // Clean up both key sets (best effort).
  for (size_t b = 0; b < res.chunks; b += 64) {
    std::vector<std::string> keys;
    for (size_t i = b; i < std::min(res.chunks, b + 64); ++i) keys.push_back(tier->key_of(ChunkKey{ns, hashes[i].back()}));
    std::vector<RedisCommand> cmds;
    for (size_t i = 0; i < keys.size(); ++i) {
      cmds.push_back(RedisCommand{{"DEL", keys[i]}});
      cmds.push_back(RedisCommand{{"DEL", raw_keys[b + i]}});
    }
    std::vector<std::string> mac_keys;
    for (size_t i = b; i < std::min(res.chunks, b + 64); ++i) mac_keys.push_back(mac_tier->key_of(ChunkKey{ns, hashes[i].back()}));
    for (const std::string& k : mac_keys) cmds.push_back(RedisCommand{{"DEL", k}});
    (void)tier->client().run(cmds);
  }
  KVTIER_RETURN_IF_ERROR(failed);
  res.redis_raw_set_gbps = median(raw_set);
  res.redis_raw_set_buffered_gbps = median(raw_set_buffered);
  res.redis_raw_gbps = median(raw_get);
  res.remote_write_gbps = median(put);
  res.remote_read_gbps = median(get);
  res.remote_layer_read_gbps = median(layer);
  res.remote_layer_read_whole_gbps = median(layer_whole);
  res.remote_write_mac_gbps = median(put_mac);
  res.remote_read_mac_gbps = median(get_mac);
  res.remote_layer_read_mac_gbps = median(layer_mac);
  return res;
}

std::string RemoteBenchResult::to_json() const {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "{\"remote_chunk_payload_bytes\":%zu,\"remote_value_bytes\":%zu,\"remote_chunks\":%zu,"
                "\"remote_cluster\":%s,\"remote_nodes\":%zu,\"redis_raw_gbps\":%.4f,\"redis_raw_set_gbps\":%.4f,"
                "\"redis_raw_set_buffered_gbps\":%.4f,"
                "\"remote_write_gbps\":%.4f,\"remote_read_gbps\":%.4f,\"remote_layer_read_gbps\":%.4f,"
                "\"remote_layer_read_whole_gbps\":%.4f,\"remote_read_vs_raw\":%.3f,\"remote_write_vs_raw_set\":%.3f,"
                "\"remote_write_mac_gbps\":%.4f,\"remote_read_mac_gbps\":%.4f,\"remote_layer_read_mac_gbps\":%.4f,"
                "\"remote_read_mac_vs_raw\":%.3f,\"remote_write_mac_vs_raw_set\":%.3f,\"remote_layer_read_mac_vs_raw\":%.3f,"
                "\"remote_layer_read_vs_raw\":%.3f}",
                chunk_payload_bytes, value_bytes, chunks, cluster ? "true" : "false", nodes, redis_raw_gbps,
                redis_raw_set_gbps, redis_raw_set_buffered_gbps, remote_write_gbps, remote_read_gbps, remote_layer_read_gbps,
                remote_layer_read_whole_gbps, ratio(remote_read_gbps, redis_raw_gbps),
                ratio(remote_write_gbps, redis_raw_set_gbps), remote_write_mac_gbps, remote_read_mac_gbps,
                remote_layer_read_mac_gbps, ratio(remote_read_mac_gbps, redis_raw_gbps),
                ratio(remote_write_mac_gbps, redis_raw_set_gbps), ratio(remote_layer_read_mac_gbps, redis_raw_gbps),
                ratio(remote_layer_read_gbps, redis_raw_gbps));
  return buf;
}

std::string RemoteBenchResult::to_table() const {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  char buf[4096];
  std::snprintf(buf, sizeof buf,
                "remote tier: %zu chunks of %.2f MiB payload (%zu-byte values), %s, %zu node(s)\n"
                "  %-34s %8.3f GB/s\n  %-34s %8.3f GB/s\n  %-34s %8.3f GB/s\n"
                "  %-34s %8.3f GB/s  (%.2f x raw SET)\n  %-34s %8.3f GB/s  (%.2f x raw GET)\n"
                "  %-34s %8.3f GB/s  (%.2f x raw GET)\n  %-34s %8.3f GB/s  (%.2f x raw GET)\n"
                "  %-34s %8.3f GB/s  (%.2f x raw SET)\n  %-34s %8.3f GB/s  (%.2f x raw GET)\n"
                "  %-34s %8.3f GB/s  (%.2f x raw GET)\n",
                chunks, chunk_payload_bytes / 1048576.0, value_bytes, cluster ? "cluster" : "standalone", nodes,
                "redis raw pipelined SET (gather)", redis_raw_set_gbps, "redis raw pipelined SET (buffered)",
                redis_raw_set_buffered_gbps, "redis raw pipelined GET", redis_raw_gbps,
                "RemoteTier write (put_batch)", remote_write_gbps, ratio(remote_write_gbps, redis_raw_set_gbps),
                "RemoteTier read (whole chunks)", remote_read_gbps, ratio(remote_read_gbps, redis_raw_gbps),
                "RemoteTier layer-wise read (GETRANGE)", remote_layer_read_gbps, ratio(remote_layer_read_gbps, redis_raw_gbps),
                "RemoteTier layer-wise read (GET)", remote_layer_read_whole_gbps,
                ratio(remote_layer_read_whole_gbps, redis_raw_gbps), "with tier secret: write", remote_write_mac_gbps,
                ratio(remote_write_mac_gbps, redis_raw_set_gbps), "with tier secret: read (whole chunks)",
                remote_read_mac_gbps, ratio(remote_read_mac_gbps, redis_raw_gbps),
                "with tier secret: layer-wise (GETRANGE)", remote_layer_read_mac_gbps,
                ratio(remote_layer_read_mac_gbps, redis_raw_gbps));
  return buf;
}

}  // namespace kvtier
