// The tier factory: the one place host, disk and remote tiers are built
// from configuration. KVCache, ChunkStore, the runtime and the Python
// bindings all call it; the replay builds its payload-less twins with a
// function of its own in sim/ (the factory never reaches up into sim/).
//
// TierConfig holds the operator's view of the tiers (capacities, places,
// codecs, secrets' files); CacheConfig (cache/cache_config.h) derives from
// it, so its fields are rows of the cache's option table. TierEnv holds
// what only a program gives (a file-system seam, pinned memory, a ready
// key). Stateless; make_tiers is safe from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "memory/device_memory.h"
#include "tiers/chunk_auth.h"
#include "tiers/host_tier.h"
#include "codec/kv_codec.h"
#include "tiers/remote/remote_tier.h"
#include "tiers/tier.h"

namespace kvtier {

class FileSystem;

struct TierConfig {
  size_t host_bytes = size_t(1) << 30;       // host DRAM tier (hard); 0: none
  std::string disk_dir;                      // empty: no disk tier
  size_t disk_bytes = size_t(8) << 30;       // disk tier (hard)
  size_t disk_region_bytes = size_t(64) << 20;
  bool disk_direct_io = true;
  std::string remote_url;                    // "redis://host:port[,host:port]"; empty: no remote tier
  std::string remote_password_file;          // Redis password from this file (else KVTIER_REDIS_PASSWORD, else the URL's)
  std::string tier_secret_file;              // shared secret (else KVTIER_TIER_SECRET): remote entries authenticated (docs/SECURITY.md)
  bool remote_insecure = false;              // a remote tier without a tier secret is allowed (require_authenticated_remote)
  bool disk_authenticate = false;            // with tier_secret_file: disk entries too
  // Chunk codecs (tiers/kv_codec.h). Tiers whose codecs are all none serve
  // exact KV only: lossy entries, whoever wrote them, are misses
  // (TierStats::lossy_refused). With any lossy codec, entries of every codec
  // are served and KV from a lossy entry is marked lossy.
  KvCodec disk_codec = KvCodec::kNone;
  KvCodec remote_codec = KvCodec::kNone;
  KvCodec host_codec = KvCodec::kNone;

  // The mixed-entry rule: the tiers serve lossy entries only when some codec is lossy.
  bool serves_lossy() const {
    return kv_codec_lossy(disk_codec) || kv_codec_lossy(remote_codec) || kv_codec_lossy(host_codec);
  }
  TierConfig& tier_config() { return *this; }
  const TierConfig& tier_config() const { return *this; }
};

struct TierEnv {
  FileSystem* disk_fs = nullptr;             // the disk tier's storage seam (tests: fault injection); null: POSIX
  DeviceMemoryOptions host_memory;           // pinned beside a GPU (memory/device_memory.h)
  bool host_evicts_chunks = true;            // false: the caller's index owns host slots (KVCache)
  // A ready disk key (tests); null: from tier_secret_file when disk_authenticate.
  std::shared_ptr<const ChunkAuth> disk_auth;
  const Clock* clock = &Clock::system();     // retention holds on disk expire by it; must outlive the tiers
};

struct TierSet {
  std::unique_ptr<HostTier> host;            // null when host_bytes is 0
  std::shared_ptr<Tier> disk;                // null without disk_dir
  std::shared_ptr<Tier> remote;              // null without remote_url; a Redis that is down starts degraded
};

inline constexpr const char* kRedisPasswordEnv = "KVTIER_REDIS_PASSWORD";

// Whether a tier secret is given (tier_secret_file or KVTIER_TIER_SECRET).
bool has_tier_secret(const TierConfig& config);
// The server's and the Python package's rule (benches and the replay are
// exempt): a remote tier needs a tier secret, unless remote_insecure says
// otherwise. The error names --tier-secret-file.
Status require_authenticated_remote(const TierConfig& config);

// Builds every tier `config` names, for chunks of `chunks` (its codec is
// replaced by each tier's). Errors name the tier: a disk directory that
// cannot be used, a malformed URL, an unreadable secret file.
Result<TierSet> make_tiers(const TierConfig& config, const ChunkGeometry& chunks, const TierEnv& env = {});
// The remote tier alone (null without remote_url), as make_tiers builds it:
// for callers that measure its link before the rest exists.
Result<std::shared_ptr<RemoteTier>> make_remote_tier(const TierConfig& config, const ChunkGeometry& chunks);

}  // namespace kvtier
