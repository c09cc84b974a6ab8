#include "tiers/tier_factory.h"

#include "common/secrets.h"
#include "tiers/disk_tier.h"

namespace kvtier {
namespace {

ChunkGeometry with_codec(ChunkGeometry g, KvCodec codec) {
  g.codec = codec;
  return g;
}

// The tier secret's key, when a secret is given; null otherwise.
Result<std::shared_ptr<const ChunkAuth>> secret_key(const TierConfig& c) {
  KVTIER_ASSIGN_OR_RETURN(const std::optional<std::string> secret, read_tier_secret(c.tier_secret_file));
  if (!secret) return std::shared_ptr<const ChunkAuth>();
  return ChunkAuth::create(*secret);
}

Result<std::unique_ptr<HostTier>> make_host(const TierConfig& c, const ChunkGeometry& g, const TierEnv& env) {
  if (c.host_bytes == 0) return std::unique_ptr<HostTier>();
  HostTierOptions h;
  h.geometry = with_codec(g, c.host_codec);
  h.capacity_bytes = c.host_bytes;
  h.evict_chunks = env.host_evicts_chunks;
  h.memory = env.host_memory;
  return HostTier::create(h);
}

Result<std::shared_ptr<Tier>> make_disk(const TierConfig& c, const ChunkGeometry& g, const TierEnv& env) {
  if (c.disk_dir.empty()) return std::shared_ptr<Tier>();
  DiskTierOptions d;
  d.geometry = with_codec(g, c.disk_codec);
  d.dir = c.disk_dir;
  d.capacity_bytes = c.disk_bytes;
  d.region_bytes = c.disk_region_bytes;
  d.direct_io = c.disk_direct_io;
  d.fs = env.disk_fs;
  d.clock = env.clock;
  d.accept_lossy = c.serves_lossy();
  if (env.disk_auth) {
    d.auth = env.disk_auth;
  } else if (c.disk_authenticate) {
    KVTIER_ASSIGN_OR_RETURN(d.auth, secret_key(c));
    if (!d.auth) return Status::InvalidArgument("disk_authenticate needs a tier secret (--tier-secret-file or KVTIER_TIER_SECRET)");
  }
  auto disk = DiskTier::create(d);
  if (!disk.ok()) return Status(disk.status().code(), "disk tier at " + c.disk_dir + ": " + disk.status().message());
  return std::shared_ptr<Tier>(std::move(disk).value());
}

}  // namespace

bool has_tier_secret(const TierConfig& c) { return secret_given(c.tier_secret_file, kTierSecretEnv); }

Status require_authenticated_remote(const TierConfig& c) {
  if (c.remote_url.empty() || c.remote_insecure || has_tier_secret(c)) return Status::Ok();
  return Status::InvalidArgument(
      "--remote without a tier secret: anyone who can write to that Redis could serve forged KV and read others' "
      "entries. Give --tier-secret-file FILE (or KVTIER_TIER_SECRET), or --remote-insecure to run unauthenticated");
}

Result<std::shared_ptr<RemoteTier>> make_remote_tier(const TierConfig& c, const ChunkGeometry& g) {
  if (c.remote_url.empty()) return std::shared_ptr<RemoteTier>();
  KVTIER_ASSIGN_OR_RETURN(RemoteTierOptions ro, RemoteTierOptions::from_url(c.remote_url, with_codec(g, c.remote_codec)));
  KVTIER_ASSIGN_OR_RETURN(const std::optional<std::string> password,
                          read_secret(c.remote_password_file, kRedisPasswordEnv, "remote password", 1));
  if (password) ro.redis.password = *password;
  KVTIER_ASSIGN_OR_RETURN(ro.auth, secret_key(c));
  ro.accept_lossy = c.serves_lossy();  // one rule for every tier
  KVTIER_ASSIGN_OR_RETURN(auto remote, RemoteTier::create(ro));  // Redis down is not fatal: the tier starts degraded
  return std::shared_ptr<RemoteTier>(std::move(remote));
}

Result<TierSet> make_tiers(const TierConfig& c, const ChunkGeometry& g, const TierEnv& env) {
  TierSet t;
  KVTIER_ASSIGN_OR_RETURN(t.host, make_host(c, g, env));
  KVTIER_ASSIGN_OR_RETURN(t.disk, make_disk(c, g, env));
  KVTIER_ASSIGN_OR_RETURN(t.remote, make_remote_tier(c, g));
  return t;
}

}  // namespace kvtier
