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
double gbps(double bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0; }

// The tiers under test, on the same server: plain, with a tier secret
// (authenticated entries), and plain without range reads (whole-value GET
// per layer); each takes batch_chunks chunks in one pipeline.
struct BenchTiers {
  std::unique_ptr<RemoteTier> plain, mac, whole;
};

// Connects the three tiers; Unavailable if the server is not reachable.
Result<BenchTiers> connect_tiers(const RemoteBenchOptions& o, const ChunkGeometry& g) {
  BenchTiers t;
  KVTIER_ASSIGN_OR_RETURN(RemoteTierOptions ro, RemoteTierOptions::from_url(o.url, g));
  ro.max_batch_bytes =
      std::max(ro.max_batch_bytes, size_t(o.batch_chunks) * chunk_entry_layout(g, g.chunk_pages, 1).entry_bytes);
  KVTIER_ASSIGN_OR_RETURN(t.plain, RemoteTier::create(ro));
  ro.auth = ChunkAuth::create(PageHash{std::random_device{}(), std::random_device{}()}.to_hex()).value();
  ro.max_batch_bytes =
      std::max(ro.max_batch_bytes, size_t(o.batch_chunks) * chunk_entry_layout(g, g.chunk_pages, 1, true).entry_bytes);
  KVTIER_ASSIGN_OR_RETURN(t.mac, RemoteTier::create(ro));
  ro.auth.reset();
  ro.range_reads = false;
  KVTIER_ASSIGN_OR_RETURN(t.whole, RemoteTier::create(ro));
  if (t.plain->degraded()) return Status::Unavailable("bench remote: Redis at " + o.url + " is not reachable");
  return t;
}

// What the bench writes: one payload shared by every chunk, distinct page
// hashes under a fresh namespace, and the raw baseline's keys and value.
struct BenchData {
  std::vector<std::byte> payload;
  PageHash ns;
  std::vector<std::vector<PageHash>> hashes;  // per chunk
  std::vector<std::string> raw_keys;          // per chunk
  std::string raw_value;                      // value_bytes
  // The raw SET baseline goes out as the tier's SETs do: one gather write of
  // RESP head, the value from where it lies and the RESP tail, no client-side
  // copy; only kvtier's entry format (metadata, checksums) is missing.
  std::vector<std::string> raw_set_heads;  // per chunk

  ChunkKey key(size_t i) const { return ChunkKey{ns, hashes[i].back()}; }
};

// Random data for res.chunks chunks of res's payload and value sizes.
BenchData make_data(const RemoteBenchResult& res, uint32_t chunk_pages) {
  BenchData d;
  std::mt19937_64 rng(std::random_device{}());
  d.payload.resize(res.chunk_payload_bytes);
  for (auto& b : d.payload) b = static_cast<std::byte>(rng());
  d.ns = PageHash{rng(), rng()};
  d.hashes.assign(res.chunks, std::vector<PageHash>(chunk_pages));
  for (auto& h : d.hashes)
    for (auto& p : h) p = PageHash{rng(), rng()};
  for (size_t i = 0; i < res.chunks; ++i)
    d.raw_keys.push_back("kvtier:bench:" + d.ns.to_hex() + ":" + std::to_string(i));
  d.raw_value.assign(res.value_bytes, 'r');
  for (const std::string& k : d.raw_keys)
    d.raw_set_heads.push_back("*3\r\n$3\r\nSET\r\n$" + std::to_string(k.size()) + "\r\n" + k + "\r\n$" +
                              std::to_string(res.value_bytes) + "\r\n");
  return d;
}

// Per-round GB/s of every figure.
struct RoundFigures {
  std::vector<double> raw_set, raw_set_buffered, raw_get, put, get, layer, layer_whole, put_mac, get_mac, layer_mac;

  // Sets res's figures, each the median of its rounds.
  void assign_to(RemoteBenchResult& res) const {
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
  }
};

// The measured steps over `chunks` chunks of `d`, in batches of B. Each step
// covers one batch [b, b + B) and returns its seconds (the caller
// accumulates); a failure is kept in `failed`.
struct Steps {
  const BenchTiers& tiers;
  const BenchData& d;
  size_t chunks, B, payload_bytes, value_bytes;
  uint32_t layers;
  std::vector<std::vector<std::byte>> outs =  // B chunks' payloads (or layers), read back
      std::vector<std::vector<std::byte>>(B, std::vector<std::byte>(payload_bytes));
  Status failed;

  // Raw pipelined SETs or GETs through the plain tier's client. SETs are
  // gather writes, or (buffered) copied through hiredis's output buffer.
  double raw(const char* verb, size_t b, bool buffered = false) {
    const auto t0 = SteadyClock::now();
    std::vector<RedisCommand> cmds;
    for (size_t i = b; i < std::min(chunks, b + B); ++i) {
      cmds.push_back(RedisCommand{{verb, d.raw_keys[i]}});
      if (verb[0] != 'S') continue;
      if (buffered) {
        cmds.back().args.push_back(d.raw_value);
      } else {
        cmds.back().formatted = {d.raw_set_heads[i], d.raw_value, "\r\n"};
      }
    }
    Status st = tiers.plain->client().run(cmds);
    for (auto& c : cmds)
      if (st.ok() && (c.reply->type == REDIS_REPLY_ERROR || (verb[0] == 'G' && c.reply->len != value_bytes)))
        st = Status::IOError("bench remote: raw " + std::string(verb) + " failed");
    if (!st.ok()) failed = st;
    return seconds_since(t0);
  }

  // One put_batch of the batch's chunks into `t`.
  double write(RemoteTier& t, size_t b) {
    const auto t0 = SteadyClock::now();
    std::vector<PutOp> ops;
    for (size_t i = b; i < std::min(chunks, b + B); ++i) ops.push_back(PutOp{d.key(i), d.hashes[i], d.payload});
    t.put_batch(ops);
    for (auto& op : ops)
      if (!op.status.ok()) failed = op.status;
    return seconds_since(t0);
  }

  // The batch's chunks read from `t` into `outs`: whole, in one get_batch, or
  // layer-wise, one get_batch per layer.
  double read(RemoteTier& t, bool layerwise, size_t b) {
    const auto t0 = SteadyClock::now();
    const size_t n = std::min(chunks, b + B) - b;
    for (uint32_t l = 0; l < (layerwise ? layers : 1u); ++l) {
      std::vector<GetOp> ops;
      for (size_t i = 0; i < n; ++i)
        ops.push_back(GetOp{.key = d.key(b + i),
                            .first_layer = layerwise ? l : 0,
                            .num_layers = layerwise ? 1u : kAllLayers,
                            .out = outs[i]});
      t.get_batch(ops);
      for (auto& op : ops)
        if (!op.status.ok()) failed = op.status;
    }
    return seconds_since(t0);
  }

  // One round of every figure into `f`. Raw and tier steps alternate batch
  // by batch, so both see the same server state (memory growth, overwrites,
  // background work) and the same noise.
  void round(RoundFigures& f) {
    double t_raw_set = 0, t_raw_set_buffered = 0, t_put = 0, t_raw_get = 0, t_get = 0, t_layer = 0;
    double t_put_mac = 0, t_get_mac = 0, t_layer_mac = 0;
    for (size_t b = 0; b < chunks && failed.ok(); b += B) {
      t_raw_set += raw("SET", b);
      t_put += write(*tiers.plain, b);
      t_put_mac += write(*tiers.mac, b);
      t_raw_set_buffered += raw("SET", b, /*buffered=*/true);
    }
    for (size_t b = 0; b < chunks && failed.ok(); b += B) {
      t_raw_get += raw("GET", b);
      t_get += read(*tiers.plain, false, b);
      t_get_mac += read(*tiers.mac, false, b);
      t_layer += read(*tiers.plain, true, b);
      t_layer_mac += read(*tiers.mac, true, b);
    }
    const double payload_total = double(chunks) * payload_bytes, value_total = double(chunks) * value_bytes;
    f.put_mac.push_back(gbps(payload_total, t_put_mac));
    f.get_mac.push_back(gbps(payload_total, t_get_mac));
    f.layer_mac.push_back(gbps(payload_total, t_layer_mac));
    f.raw_set.push_back(gbps(value_total, t_raw_set));
    f.raw_set_buffered.push_back(gbps(value_total, t_raw_set_buffered));
    f.put.push_back(gbps(payload_total, t_put));
    f.raw_get.push_back(gbps(value_total, t_raw_get));
    f.get.push_back(gbps(payload_total, t_get));
    f.layer.push_back(gbps(payload_total, t_layer));
    // Whole-value GET per layer moves L times the bytes: one batch is enough to show it.
    f.layer_whole.push_back(gbps(double(std::min(chunks, B)) * payload_bytes, read(*tiers.whole, true, 0)));
  }

  // Unless a step failed: fails if the last layer read back into outs[0]
  // differs from the payload's.
  void check_read_back(const ChunkGeometry& g) {
    const size_t layer_bytes = g.layer_bytes(g.chunk_pages);
    if (failed.ok() && std::memcmp(outs[0].data(), d.payload.data() + (layers - 1) * layer_bytes, layer_bytes) != 0)
      failed = Status::Internal("bench remote: read back different bytes");
  }
};

// Deletes what the bench wrote (the tiers' entries and the raw values), 64
// chunks a pipeline; best effort.
void delete_keys(const BenchTiers& t, const BenchData& d, size_t chunks) {
  for (size_t b = 0; b < chunks; b += 64) {
    std::vector<std::string> keys, mac_keys;  // RedisCommand's args view them
    for (size_t i = b; i < std::min(chunks, b + 64); ++i) {
      keys.push_back(t.plain->key_of(d.key(i)));
      mac_keys.push_back(t.mac->key_of(d.key(i)));
    }
    std::vector<RedisCommand> cmds;
    for (size_t i = 0; i < keys.size(); ++i) {
      cmds.push_back(RedisCommand{{"DEL", keys[i]}});
      cmds.push_back(RedisCommand{{"DEL", d.raw_keys[b + i]}});
    }
    for (const std::string& k : mac_keys) cmds.push_back(RedisCommand{{"DEL", k}});
    (void)t.plain->client().run(cmds);
  }
}

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
  KVTIER_ASSIGN_OR_RETURN(const BenchTiers tiers, connect_tiers(o, g));
  RemoteBenchResult res;
  res.chunk_payload_bytes = g.max_payload_bytes();
  res.value_bytes = chunk_entry_layout(g, g.chunk_pages, 1).entry_bytes;
  res.chunks = std::max<size_t>(o.batch_chunks, o.total_bytes / res.chunk_payload_bytes);
  res.cluster = tiers.plain->client().is_cluster();
  res.nodes = tiers.plain->client().nodes().size();
  const BenchData data = make_data(res, g.chunk_pages);
  Steps steps{tiers, data, res.chunks, o.batch_chunks, res.chunk_payload_bytes, res.value_bytes, g.kv.num_layers};
  RoundFigures figures;
  for (uint32_t r = 0; r < o.rounds && steps.failed.ok(); ++r) steps.round(figures);
  steps.check_read_back(g);
  delete_keys(tiers, data, res.chunks);
  KVTIER_RETURN_IF_ERROR(steps.failed);
  figures.assign_to(res);
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
