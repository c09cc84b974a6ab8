#include "tiers/remote/remote_tier.h"

#include <cstddef>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "common/mix.h"
#include "tiers/remote/redis_wire.h"

namespace kvtier {

using redis_wire::reply_error;

namespace {

bool is_oom(const redisReply* r) {
  return r && r->type == REDIS_REPLY_ERROR && r->len >= 3 && std::strncmp(r->str, "OOM", 3) == 0;
}

// An error reply to a read (LOADING, NOPERM, CLUSTERDOWN, MOVED, ...) says
// nothing about the entry: the server refused, so the read is unavailable and
// the entry stays. WRONGTYPE does say: another kind of value holds the key, a
// foreign value that open_entry drops. OK for any other reply.
Status refused_read(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_ERROR) return Status::Ok();
  if (std::string_view(r->str, r->len).starts_with("WRONGTYPE")) return Status::Ok();
  return Status::Unavailable("remote: read refused, " + reply_error(r));
}

// A whole chunk entry of the tier's layout, as stored (packed, align 1).
size_t full_entry_bytes(const RemoteTierOptions& o) {
  return chunk_entry_layout(o.geometry, o.geometry.chunk_pages, 1, o.auth != nullptr).entry_bytes;
}

}  // namespace

Status RemoteTierOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  KVTIER_RETURN_IF_ERROR(redis.validate());
  if (ttl.count() < 0) return Status::InvalidArgument("remote: ttl must be >= 0");
  if (backoff_initial.count() <= 0 || backoff_max < backoff_initial)
    return Status::InvalidArgument("remote: backoff must satisfy 0 < initial <= max");
  const size_t entry = full_entry_bytes(*this);
  if (max_batch_bytes < entry)
    return Status::InvalidArgument("remote: max_batch_bytes must hold one chunk entry (" + std::to_string(entry) + " bytes)");
  if (entry > (size_t(512) << 20)) return Status::InvalidArgument("remote: a chunk entry exceeds Redis's 512 MiB value limit");
  return Status::Ok();
}

namespace {

// The tier's layout, in its keys: 16 hex digits of the KV's shape, element type, page and chunk
// size. Instances that differ in any of them (one model served with f16 and with f32 KV, say) write
// different keys: sharing them, each read the other's entries as corrupt (they verify against another
// geometry), deleted them and counted checksum failures. The codec is not in it: entries record their
// own, and an instance reads what others of its layout wrote in another (lossy ones only if it may).
std::string layout_tag(const ChunkGeometry& g) {
  uint64_t h = 0;
  for (uint64_t v : {uint64_t(g.kv.num_layers), uint64_t(g.kv.num_kv_heads), uint64_t(g.kv.head_dim),
                     uint64_t(g.kv.dtype), uint64_t(g.kv.page_tokens), uint64_t(g.chunk_pages)})
    h = splitmix64_mix(h + kSplitMix64Gamma + v);
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace

RemoteTier::RemoteTier(const RemoteTierOptions& o, std::unique_ptr<RedisClient> c)
    : options_(o),
      client_(std::move(c)),
      ttl_ms_(std::to_string(o.ttl.count())),
      key_prefix_("kvtier:" + std::to_string(kChunkFormatVersion) + ":" + layout_tag(o.geometry) + ":") {}

RemoteTier::~RemoteTier() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (prober_.joinable()) prober_.join();
}

size_t RemoteTier::largest_value_bytes(const RemoteTierOptions& o) { return std::max(full_entry_bytes(o), kMaxProbeBytes); }

size_t RemoteTier::max_reply_bytes(const RemoteTierOptions& o) {
  return largest_value_bytes(o) + (size_t(64) << 10);  // the value and its RESP header
}

Result<std::unique_ptr<RemoteTier>> RemoteTier::create(const RemoteTierOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  RedisClientOptions redis = o.redis;
  redis.max_reply_bytes = std::min(redis.max_reply_bytes, max_reply_bytes(o));  // nothing it reads is longer
  KVTIER_ASSIGN_OR_RETURN(auto client, RedisClient::create(redis));
  std::unique_ptr<RemoteTier> t(new RemoteTier(o, std::move(client)));
  Status st = t->client_->connect();
  // A wrong cluster setting is a configuration error; an unreachable server is not.
  if (st.code() == StatusCode::kFailedPrecondition || st.code() == StatusCode::kCorruption) return st;
  t->note_result(st);
  t->prober_ = std::thread([tier = t.get()] { tier->probe_loop(); });
  return t;
}

std::string RemoteTier::key_of(const ChunkKey& key) const {
  std::string k = key_prefix_;
  if (options_.auth) return k + "a:" + options_.auth->key_name(key.ns, key.hash);
  k += key.ns.to_hex();
  k += ':';
  k += key.hash.to_hex();
  return k;
}

// ----------------------------------------------------------------- puts ----

// Each SET (SET key <entry> [PX ttl]) goes out as a gather list: RESP head
// and entry metadata from a small buffer, the payload from where the caller
// holds it (no copy), then the RESP tail. The commands hold views into these.
struct RemoteTier::SetPipeline {
  std::vector<std::string> keys, heads;
  std::vector<std::vector<std::byte>> encoded;  // stored payloads under a codec (the raw one is sent as is)
  std::vector<RedisCommand> cmds;
  std::string tail;
};

size_t RemoteTier::pipeline_end(std::span<PutOp* const> valid, size_t begin) const {
  size_t end = begin, bytes = 0;
  for (; end < valid.size(); ++end) {
    const auto pages = static_cast<uint32_t>(valid[end]->page_hashes.size());
    const size_t b = chunk_entry_layout(options_.geometry, pages, 1, options_.auth != nullptr).entry_bytes;
    if (end > begin && bytes + b > options_.max_batch_bytes) break;
    bytes += b;
  }
  return end;
}

void RemoteTier::build_sets(std::span<PutOp* const> ops, SetPipeline& p) {
  const ChunkGeometry& g = options_.geometry;
  const bool px = options_.ttl.count() > 0;
  p.tail = "\r\n" + (px ? "$2\r\nPX\r\n$" + std::to_string(ttl_ms_.size()) + "\r\n" + ttl_ms_ + "\r\n" : "");
  p.keys.reserve(ops.size());  // no reallocation: commands hold views into these strings
  p.heads.reserve(ops.size());
  p.encoded.reserve(ops.size());
  for (PutOp* op : ops) {
    const auto pages = static_cast<uint32_t>(op->page_hashes.size());
    const ChunkEntryLayout lay = chunk_entry_layout(g, pages, 1, options_.auth != nullptr);
    const std::string& k = p.keys.emplace_back(key_of(op->key));
    std::string head = std::string(px ? "*5" : "*3") + "\r\n$3\r\nSET\r\n$" + std::to_string(k.size()) + "\r\n" + k +
                       "\r\n$" + std::to_string(lay.entry_bytes) + "\r\n";
    const size_t meta_at = head.size();
    head.resize(meta_at + lay.payload_offset);
    std::span<const std::byte> stored = op->payload;
    if (g.codec != KvCodec::kNone) {
      p.encoded.emplace_back(lay.payload_bytes);
      op->status = encode_chunk_payload(g, pages, op->payload, p.encoded.back());
      if (!op->status.ok()) continue;
      stored = p.encoded.back();
    }
    op->status = encode_chunk_meta(g, op->key, op->page_hashes, stored, ++sequence_, 1,
                                   {reinterpret_cast<std::byte*>(head.data() + meta_at), lay.payload_offset},
                                   options_.auth.get());
    if (!op->status.ok()) continue;
    p.heads.push_back(std::move(head));
    RedisCommand c;
    c.args = {"SET", k};
    // With align 1 the entry is exactly metadata followed by the payload.
    c.formatted = {p.heads.back(), {reinterpret_cast<const char*>(stored.data()), stored.size()}, p.tail};
    p.cmds.push_back(std::move(c));
  }
}

bool RemoteTier::settle_sets(std::span<PutOp* const> ops, SetPipeline& p) {
  bool oom = false;
  size_t j = 0;
  for (PutOp* op : ops) {
    if (!op->status.ok()) continue;
    RedisCommand& c = p.cmds[j++];
    if (!c.status.ok()) {
      op->status = c.status;
    } else if (is_oom(c.reply.get())) {
      ++counters_.oom;
      oom = true;
      op->status = Status::NoSpace(reply_error(c.reply.get()));
    } else if (c.reply->type != REDIS_REPLY_STATUS) {
      ++counters_.reply_errors;
      op->status = Status::IOError(reply_error(c.reply.get()));
    } else {
      ++counters_.puts;
      counters_.bytes_put += op->payload.size();
      report_chunk(KvEventKind::kStored, op->key);
    }
  }
  return oom;
}

void RemoteTier::put_batch(std::span<PutOp> ops) {
  std::vector<PutOp*> valid;
  for (auto& op : ops) {
    op.status = validate_put(options_.geometry, op);
    if (op.status.ok()) valid.push_back(&op);
  }
  if (valid.empty()) return;
  if (Status a = admit_write(); !a.ok()) {
    for (auto* op : valid) op->status = a;
    return;
  }
  for (size_t begin = 0; begin < valid.size();) {
    const size_t end = pipeline_end(valid, begin);
    const std::span<PutOp* const> some(valid.data() + begin, end - begin);
    SetPipeline p;
    build_sets(some, p);
    const Status transport = client_->run(p.cmds);
    const bool oom = settle_sets(some, p);
    note_result(transport);
    if (transport.ok()) note_oom(oom);
    if (!transport.ok() || oom) {  // the rest are not sent
      for (size_t i = end; i < valid.size(); ++i) valid[i]->status = transport.ok() ? Status::NoSpace("redis: OOM") : transport;
      return;
    }
    begin = end;
  }
}

// ----------------------------------------------------------------- gets ----

void RemoteTier::drop_corrupt(const ChunkKey& key, bool forged) {
  ++(forged ? counters_.forged : counters_.checksum_failures);
  report_chunk(KvEventKind::kRemoved, key);
  // Best effort (a later put rewrites the entry anyway), and one call of its own: a DEL that fails
  // degrades the tier, so the batch's other corrupt entries do not each wait on a failing server.
  if (unreachable()) return;
  const std::string k = key_of(key);
  if (auto r = client_->command({"DEL", k}); !r.ok()) note_result(r.status());
}

void RemoteTier::get_batch(std::span<GetOp> ops) {
  const ChunkGeometry& g = options_.geometry;
  std::vector<GetOp*> whole, ranged;
  for (auto& op : ops) {
    op.num_pages = 0;
    // Layer range and a minimum buffer size are checkable before reading; the page count is not.
    GetOp probe = op;
    op.status = resolve_get_range(g, 1, probe);
    if (!op.status.ok()) continue;
    const bool all = op.first_layer == 0 && probe.num_layers == g.kv.num_layers;
    (all || !options_.range_reads ? whole : ranged).push_back(&op);
  }
  if (whole.empty() && ranged.empty()) return;
  if (Status a = admit(); !a.ok()) {
    for (auto* op : whole) op->status = a;
    for (auto* op : ranged) op->status = a;
    return;
  }
  // Pipelines of at most max_batch_bytes of values each.
  auto in_batches = [&](std::vector<GetOp*>& list, auto&& fn) {
    const size_t per = std::max<size_t>(1, options_.max_batch_bytes / full_entry_bytes(options_));
    for (size_t b = 0; b < list.size(); b += per) fn(std::span(list).subspan(b, std::min(per, list.size() - b)));
  };
  in_batches(whole, [&](std::span<GetOp*> s) { get_whole(s); });
  in_batches(ranged, [&](std::span<GetOp*> s) { get_ranges(s); });
}

Result<ChunkMeta> RemoteTier::check_entry(const ChunkKey& key, std::span<const std::byte> entry, bool whole) {
  const ChunkGeometry& g = options_.geometry;
  auto meta = whole ? decode_chunk_value(entry, g) : decode_chunk_meta(entry, g);
  Status st = meta.ok() ? Status::Ok() : Status::Corruption("remote: " + meta.status().message());
  if (!st.ok()) {
    drop_corrupt(key);
    return st;
  }
  if (!(meta->key == key)) {
    // Under a tier secret only its holders can name a key, so an entry under another's name was
    // moved there: forged (the tamper alarm), not a corrupt value.
    drop_corrupt(key, /*forged=*/options_.auth != nullptr);
    return Status::Corruption("remote: value holds another chunk's entry");
  }
  st = authenticate_chunk_meta(*meta, entry, options_.auth.get());
  if (!st.ok()) {
    drop_corrupt(key, /*forged=*/true);
    return Status::Corruption("remote: " + st.message());
  }
  return meta;
}

std::optional<ChunkMeta> RemoteTier::open_entry(GetOp& op, const redisReply* r, bool whole) {
  if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0)) {
    ++counters_.misses;
    op.status = Status::NotFound("remote: no such chunk");
    return std::nullopt;
  }
  if (r->type != REDIS_REPLY_STRING) {
    op.status = Status::Corruption("remote: value is not a string: " + reply_error(r));
    drop_corrupt(op.key);
    return std::nullopt;
  }
  auto meta = check_entry(op.key, {reinterpret_cast<const std::byte*>(r->str), r->len}, whole);
  op.status = meta.ok() ? resolve_get_range(options_.geometry, meta->header.num_pages, op) : meta.status();
  if (!op.status.ok()) return std::nullopt;
  return *std::move(meta);
}

Status RemoteTier::take_layers(GetOp& op, const ChunkMeta& meta, std::span<const std::byte> stored) {
  const ChunkGeometry& g = options_.geometry;
  op.codec = meta.codec();
  if (Status st = accept_chunk_codec(op.codec, options_.accept_lossy); !st.ok()) {
    ++counters_.lossy_refused;
    return st;
  }
  Status st = verify_chunk_layers(meta, g, op.first_layer, op.num_layers, stored, options_.auth.get());
  if (st.ok()) st = decode_chunk_layers(op.codec, g, meta.header.num_pages, op.num_layers, stored, op.out);
  // With a secret every layer check is a keyed tag: a mismatch is a failed authentication.
  if (!st.ok()) drop_corrupt(op.key, /*forged=*/meta.authenticated());
  return st;
}

void RemoteTier::get_whole(std::span<GetOp*> ops) {
  const ChunkGeometry& g = options_.geometry;
  const size_t per = options_.ttl.count() > 0 && options_.refresh_ttl_on_hit ? 2 : 1;
  std::vector<std::string> keys;
  std::vector<RedisCommand> cmds;
  for (auto* op : ops) keys.push_back(key_of(op->key));
  for (auto& k : keys) {
    cmds.push_back(RedisCommand{{"GET", k}});
    if (per == 2) cmds.push_back(RedisCommand{{"PEXPIRE", k, ttl_ms_}});
  }
  Status transport = client_->run(cmds), refused;
  for (size_t i = 0; i < ops.size(); ++i) {
    GetOp& op = *ops[i];
    RedisCommand& c = cmds[i * per];
    if (!c.status.ok()) {
      op.status = c.status;
      continue;
    }
    const redisReply* r = c.reply.get();
    if (op.status = refused_read(r); !op.status.ok()) {
      refused = op.status;
      continue;
    }
    const std::optional<ChunkMeta> meta = open_entry(op, r, /*whole=*/true);
    if (!meta) continue;
    const std::span<const std::byte> entry(reinterpret_cast<const std::byte*>(r->str), r->len);
    const uint32_t n = meta->header.num_pages;
    const size_t lb = g.stored_layer_bytes(n, meta->codec());
    op.status = take_layers(op, *meta, entry.subspan(meta->header.payload_offset + op.first_layer * lb, op.num_layers * lb));
    if (!op.status.ok()) continue;
    op.num_pages = n;
    ++counters_.hits;
  }
  note_result(transport.ok() ? refused : transport);  // refusals back off like a failing transport
}

void RemoteTier::get_ranges(std::span<GetOp*> ops) {
  const ChunkGeometry& g = options_.geometry;
  // Round 1 assumes the pages the caller expects, in this tier's codec (what
  // KVCache stores: whole chunks, and a prompt's tail); others take a second round.
  auto expected = [&](const GetOp& op) { return op.expect_pages ? std::min(op.expect_pages, g.chunk_pages) : g.chunk_pages; };
  // The metadata is read for the longest chunk: where it is longer than expected, the round still
  // tells its length (a read cut inside the metadata was taken for a corrupt entry and deleted).
  const std::string meta_end = std::to_string(chunk_entry_layout(g, g.chunk_pages, 1, options_.auth != nullptr).meta_bytes - 1);
  std::vector<std::string> keys, r_begin, r_end;
  for (auto* op : ops) {
    GetOp probe = *op;
    (void)resolve_get_range(g, 1, probe);  // resolves kAllLayers
    const uint32_t n = expected(*op);
    const ChunkEntryLayout layout = chunk_entry_layout(g, n, 1, options_.auth != nullptr);
    const size_t lb = g.stored_layer_bytes(n, g.codec);
    const size_t off = layout.payload_offset + probe.first_layer * lb;
    keys.push_back(key_of(op->key));
    r_begin.push_back(std::to_string(off));
    r_end.push_back(std::to_string(off + probe.num_layers * lb - 1));
  }
  const bool touch = options_.ttl.count() > 0 && options_.refresh_ttl_on_hit;
  const size_t per = touch ? 3 : 2;
  std::vector<RedisCommand> cmds;
  for (size_t i = 0; i < ops.size(); ++i) {
    cmds.push_back(RedisCommand{{"GETRANGE", keys[i], "0", meta_end}});
    cmds.push_back(RedisCommand{{"GETRANGE", keys[i], r_begin[i], r_end[i]}});
    if (touch) cmds.push_back(RedisCommand{{"PEXPIRE", keys[i], ttl_ms_}});
  }
  Status transport = client_->run(cmds), refused;
  std::vector<GetOp*> partial;
  for (size_t i = 0; i < ops.size(); ++i) {
    GetOp& op = *ops[i];
    RedisCommand& mc = cmds[i * per];
    RedisCommand& lc = cmds[i * per + 1];
    if (!mc.status.ok() || !lc.status.ok()) {
      op.status = mc.status.ok() ? lc.status : mc.status;
      continue;
    }
    if (op.status = refused_read(mc.reply.get()); op.status.ok()) op.status = refused_read(lc.reply.get());
    if (!op.status.ok()) {
      refused = op.status;
      continue;
    }
    const std::optional<ChunkMeta> meta = open_entry(op, mc.reply.get(), /*whole=*/false);
    if (!meta) continue;
    const uint32_t n = meta->header.num_pages;
    if (n != expected(op) || meta->codec() != g.codec) {  // the ranged read assumed another layout
      partial.push_back(&op);
      continue;
    }
    const redisReply* l = lc.reply.get();
    const size_t len = op.num_layers * g.stored_layer_bytes(n, g.codec);
    if (l->type != REDIS_REPLY_STRING || l->len != len) {
      op.status = Status::Corruption("remote: value truncated");
      drop_corrupt(op.key);
      continue;
    }
    op.status = take_layers(op, *meta, {reinterpret_cast<const std::byte*>(l->str), len});
    if (!op.status.ok()) continue;
    op.num_pages = n;
    ++counters_.hits;
  }
  note_result(transport.ok() ? refused : transport);
  // Chunks of other lengths or codecs than expected: their layers sit elsewhere; reread them whole
  // (with the transport failing, they fail with it: nothing was read into them).
  for (auto* op : partial) {
    op->status = transport;
    op->num_pages = 0;
  }
  if (!partial.empty() && transport.ok()) get_whole(partial);
}

std::vector<bool> RemoteTier::exist(const PageHash& ns, std::span<const PageHash> chunk_keys) {
  if (chunk_keys.empty() || !admit().ok()) return std::vector<bool>(chunk_keys.size(), false);
  std::vector<std::string> keys;  // the commands refer to them
  keys.reserve(chunk_keys.size());
  for (const auto& h : chunk_keys) keys.push_back(key_of(ChunkKey{ns, h}));
  // An instance that serves exact KV only reads each entry's codec byte, not its existence: another
  // instance's lossy entry would be a refused load at every lookup, and was never replaced by the
  // exact one (store_down skips what exists).
  static const std::string codec_at = std::to_string(offsetof(ChunkHeader, codec));
  std::vector<RedisCommand> cmds;
  cmds.reserve(keys.size());
  for (auto& k : keys)
    cmds.push_back(options_.accept_lossy ? RedisCommand{{"EXISTS", k}} : RedisCommand{{"GETRANGE", k, codec_at, codec_at}});
  Status transport = client_->run(cmds);
  note_result(transport);
  std::vector<bool> out;
  out.reserve(cmds.size());
  for (auto& c : cmds) {
    const redisReply* r = c.status.ok() ? c.reply.get() : nullptr;
    if (r != nullptr && r->type == REDIS_REPLY_STRING && r->len == 1)
      out.push_back(accept_chunk_codec(KvCodec(uint8_t(r->str[0])), false).ok());
    else
      out.push_back(r != nullptr && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  }
  return out;
}

size_t RemoteTier::exists_prefix(const PageHash& ns, std::span<const PageHash> chunk_keys) {
  const std::vector<bool> present = exist(ns, chunk_keys);
  return size_t(std::find(present.begin(), present.end(), false) - present.begin());
}

size_t RemoteTier::exists_first(const PageHash& ns, std::span<const PageHash> chunk_keys) {
  const std::vector<bool> present = exist(ns, chunk_keys);
  return size_t(std::find(present.begin(), present.end(), true) - present.begin());
}

Status RemoteTier::erase(const ChunkKey& key) {
  KVTIER_RETURN_IF_ERROR(admit());
  const std::string k = key_of(key);
  auto r = client_->command({"DEL", k});
  note_result(r.status());
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_INTEGER) return Status::IOError(reply_error(r->get()));
  report_chunk(KvEventKind::kRemoved, key);
  return Status::Ok();
}

TierStats RemoteTier::stats() const {
  TierStats s;  // capacity, bytes and entries are the server's (INFO memory / DBSIZE)
  s.hits = counters_.hits.load();
  s.misses = counters_.misses.load();
  s.puts = counters_.puts.load();
  s.checksum_failures = counters_.checksum_failures.load();
  s.forged_entries = counters_.forged.load();
  s.lossy_refused = counters_.lossy_refused.load();
  s.io_errors = counters_.io_errors.load();
  s.degraded_episodes = counters_.episodes.load();
  s.fast_fails = counters_.fast_fails.load();
  std::lock_guard lk(mu_);
  s.last_error = last_error_;
  return s;
}

RemoteTierStats RemoteTier::remote_stats() const {
  RemoteTierStats s;
  s.oom_errors = counters_.oom.load();
  s.reply_errors = counters_.reply_errors.load();
  s.client = client_->stats();
  return s;
}

}  // namespace kvtier
