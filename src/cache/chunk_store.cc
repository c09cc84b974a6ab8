#include "cache/chunk_store.h"

#include "tiers/disk_tier.h"

namespace kvtier {

Status ChunkStoreOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  if (host_bytes == 0 && disk_dir.empty() && !remote && remote_url.empty())
    return Status::InvalidArgument("ChunkStore: needs at least one tier (host_bytes, disk_dir or remote)");
  if (remote && !remote_url.empty()) return Status::InvalidArgument("ChunkStore: give remote_url or a remote tier, not both");
  if (remote && !(remote->geometry().kv == geometry.kv && remote->geometry().chunk_pages == geometry.chunk_pages))
    return Status::InvalidArgument("ChunkStore: the remote tier's chunk geometry differs from the store's");
  return Status::Ok();
}

Result<std::unique_ptr<ChunkStore>> ChunkStore::create(const ChunkStoreOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  std::unique_ptr<ChunkStore> s(new ChunkStore(o));
  KVTIER_ASSIGN_OR_RETURN(TierSet tiers, make_tiers(o, o.geometry));  // host: the store's own LRU
  s->host_ = std::move(tiers.host);
  s->disk_ = std::move(tiers.disk);
  s->remote_ = o.remote ? o.remote : std::move(tiers.remote);
  return s;
}

ChunkStore::~ChunkStore() = default;

std::vector<Tier*> ChunkStore::tiers(bool reading) const {
  std::vector<Tier*> out;
  for (Tier* t : {host_.get(), disk_.get(), remote_.get()})
    if (t && (reading ? t->readable() : !t->degraded())) out.push_back(t);
  return out;
}

size_t ChunkStore::exists(const PageHash& ns, std::span<const PageHash> keys) {
  // A key may live in any tier: extend the run of hits tier by tier until none advances.
  size_t n = 0;
  for (bool advanced = true; advanced && n < keys.size();) {
    advanced = false;
    for (Tier* t : tiers(true)) {
      const size_t k = t->exists_prefix(ns, keys.subspan(n));
      n += k;
      advanced |= k > 0;
      if (n == keys.size()) break;
    }
  }
  std::lock_guard lk(mu_);
  ++stats_.exists_calls;
  stats_.exists_keys += keys.size();
  stats_.exists_hits += n;
  return n;
}

void ChunkStore::get(std::span<GetOp> ops) {
  std::vector<size_t> pending(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    pending[i] = i;
    ops[i].status = Status::NotFound("ChunkStore: no tier holds the chunk");
  }
  uint64_t hits[kNumTiers] = {};
  std::vector<GetOp> batch;
  for (Tier* t : tiers(true)) {
    if (pending.empty()) break;
    batch.clear();
    for (size_t i : pending) batch.push_back(ops[i]);
    t->get_batch(batch);
    std::vector<size_t> still;
    for (size_t j = 0; j < batch.size(); ++j) {
      GetOp& op = ops[pending[j]];
      op.take_outputs(batch[j]);  // the codec (a lossy entry is labelled) and placed too
      if (op.status.ok()) {
        ++hits[static_cast<size_t>(t->kind())];
      } else {
        still.push_back(pending[j]);
      }
    }
    pending.swap(still);
  }
  std::lock_guard lk(mu_);
  stats_.gets += ops.size();
  stats_.get_misses += pending.size();
  for (int k = 0; k < kNumTiers; ++k) stats_.get_hits_by_tier[k] += hits[k];
}

void ChunkStore::set(std::span<PutOp> ops) {
  std::vector<uint8_t> stored(ops.size(), 0);
  std::vector<Status> last(ops.size(), Status::Unavailable("ChunkStore: no tier available"));
  std::vector<PutOp> batch(ops.begin(), ops.end());
  for (Tier* t : tiers(false)) {
    for (size_t i = 0; i < ops.size(); ++i) batch[i].status = Status::Ok();
    t->put_batch(batch);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (batch[i].status.ok()) {
        stored[i] = 1;
      } else {
        last[i] = batch[i].status;
      }
    }
  }
  uint64_t failures = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].status = stored[i] ? Status::Ok() : last[i];
    failures += !stored[i];
  }
  std::lock_guard lk(mu_);
  stats_.sets += ops.size();
  stats_.set_failures += failures;
}

Status ChunkStore::flush() {
  for (Tier* t : tiers(false)) KVTIER_RETURN_IF_ERROR(t->flush());
  return Status::Ok();
}

ChunkStoreStats ChunkStore::stats() const {
  ChunkStoreStats s;
  {
    std::lock_guard lk(mu_);
    s = stats_;
  }
  for (Tier* t : {host_.get(), disk_.get(), remote_.get()}) {
    if (!t) continue;
    s.tiers[static_cast<size_t>(t->kind())] = t->stats();
    s.present[static_cast<size_t>(t->kind())] = true;
  }
  return s;
}

}  // namespace kvtier
