#include "cache/cache_config.h"

#include "common/secrets.h"

namespace kvtier {

std::string_view write_policy_name(WritePolicy p) {
  switch (p) {
    case WritePolicy::kWriteThrough: return "write_through";
    case WritePolicy::kWriteBack: return "write_back";
    case WritePolicy::kSelective: return "selective";
  }
  return "unknown";
}

Result<WritePolicy> parse_write_policy(std::string_view s) {
  std::string name(s);
  for (char& c : name)
    if (c == '-') c = '_';
  for (WritePolicy p : {WritePolicy::kWriteThrough, WritePolicy::kWriteBack, WritePolicy::kSelective})
    if (name == write_policy_name(p)) return p;
  return Status::InvalidArgument("unknown write policy '" + std::string(s) +
                                 "' (expected write_through, write_back or selective)");
}

Status CacheConfig::validate() const {
  if (chunk_pages == 0 || chunk_pages > 1024) return Status::InvalidArgument("cache.chunk_pages must be in [1, 1024]");
  if (selective_hits == 0) return Status::InvalidArgument("cache.selective_hits must be >= 1");
  if (transfer_workers > 64) return Status::InvalidArgument("cache.transfer_workers must be in [0, 64]");
  if (disk_region_bytes < 4096) return Status::InvalidArgument("cache.disk_region must be at least 4KiB");
  if (kv_codec_lossy(host_codec) && write_policy == WritePolicy::kWriteBack)
    return Status::InvalidArgument("host codec " + std::string(kv_codec_name(host_codec)) +
                                   " with write_back would spill lossy host pages down as exact entries; use "
                                   "write_through or selective, or host codec none");
  return Status::Ok();
}

namespace {

using C = CacheConfig;

OptionTable<C> make_table() {
  constexpr uint8_t kBoth = kScopeServe | kScopeReplay;
  OptionTable<C> t;
  t.push_back(uint_option<C>({"cache.chunk_pages", "--chunk-pages", "chunk_pages", "Pages per lower-tier I/O chunk",
                              {}, false, kBoth},
                             KVTIER_FIELD(chunk_pages), 1, 1024));
  t.push_back(size_option<C>({"cache.device_capacity", "--device-capacity", "device_capacity",
                              "Device tier (KV pool) size: 512MiB, 8GiB or bytes"},
                             KVTIER_FIELD(device_bytes), 1));
  t.push_back(size_option<C>({"cache.host_capacity", "--host-capacity", "host_capacity", "Host DRAM tier size; 0 = none"},
                             KVTIER_FIELD(host_bytes)));
  t.push_back(size_option<C>({"cache.disk_capacity", "--disk-capacity", "disk_capacity", "Disk tier size (at least two regions)"},
                             KVTIER_FIELD(disk_bytes)));
  t.push_back(string_option<C>({"cache.disk_dir", "--disk-dir", "disk_dir", "Disk tier directory", "none, no disk tier"},
                               KVTIER_FIELD(disk_dir)));
  t.push_back(size_option<C>({"cache.disk_region", "--disk-region", "disk_region_bytes",
                              "Disk tier region: the unit the segment log writes and reclaims; holds at least one chunk of the model", {}, false, kBoth},
                             KVTIER_FIELD(disk_region_bytes), 4096));
  t.push_back(bool_option<C>({"cache.disk_direct_io", "--no-disk-direct-io", "disk_direct_io",
                              "Disk tier I/O through the page cache instead of O_DIRECT"},
                             KVTIER_FIELD(disk_direct_io)));
  Option<C> remote = string_option<C>({"cache.remote", "--remote", "remote", "Remote tier: redis://host:port[,host:port]",
                                       "none"},
                                      KVTIER_FIELD(remote_url));
  remote.print = [](const C& c) { return redact_url_credentials(c.remote_url); };  // a password in the URL is never shown
  t.push_back(std::move(remote));
  t.push_back(string_option<C>({"cache.remote_password_file", "--remote-password-file", "remote_password_file",
                                "Redis password read from this file (else KVTIER_REDIS_PASSWORD) instead of the URL",
                                "the URL's, if any"},
                               KVTIER_FIELD(remote_password_file)));
  t.push_back(string_option<C>({"cache.tier_secret_file", "--tier-secret-file", "tier_secret_file",
                                "Shared secret (>= 16 bytes; else KVTIER_TIER_SECRET) that authenticates remote entries "
                                "and keys their names (docs/SECURITY.md)",
                                "none"},
                               KVTIER_FIELD(tier_secret_file)));
  t.push_back(bool_option<C>({"cache.remote_insecure", "--remote-insecure", "remote_insecure",
                              "Allow a remote tier without a tier secret: its entries are neither authenticated nor "
                              "keyed (anyone who can write to the Redis can serve forged KV)"},
                             KVTIER_FIELD(remote_insecure)));
  t.push_back(bool_option<C>({"cache.disk_authenticate", "--disk-authenticate", {},
                              "Authenticate disk entries with the tier secret too"},
                             KVTIER_FIELD(disk_authenticate)));
  t.push_back(enum_option<C>({"cache.disk_codec", "--disk-codec", "disk_codec",
                            "Disk entry codec: none is exact; f16 (16 bits/value: half an f32 pool), k16v8 (12.25), q8 (8.5), "
                            "k8v4 (6.5) and q4 (4.5) are lossy (docs/FORMATS.md)",
                            {}, false, kBoth},
                             KVTIER_FIELD(disk_codec), parse_kv_codec, kv_codec_name, kv_codec_choices()));
  t.push_back(enum_option<C>({"cache.remote_codec", "--remote-codec", "remote_codec", "Remote (Redis) entry codec", {},
                              false, kBoth},
                             KVTIER_FIELD(remote_codec), parse_kv_codec, kv_codec_name, kv_codec_choices()));
  t.push_back(enum_option<C>({"cache.host_codec", "--host-codec", "host_codec",
                            "Host DRAM slot codec (lossy codecs need write_through or selective)", {}, false, kBoth},
                             KVTIER_FIELD(host_codec), parse_kv_codec, kv_codec_name, kv_codec_choices()));
  t.push_back(enum_option<C>({"cache.write_policy", "--write-policy", "write_policy", "How pages move to lower tiers", {},
                              false, kBoth},
                             KVTIER_FIELD(write_policy), parse_write_policy, write_policy_name,
                             "write_through, write_back, selective"));
  t.push_back(bool_option<C>({"cache.store_tails", "--no-store-tails", "store_tails",
                              "write_through: store whole chunks only, not the pages of a prompt past its last whole "
                              "chunk (fewer writes; a turn found on disk or Redis recomputes those pages)"},
                             KVTIER_FIELD(store_tails)));
  t.push_back(uint_option<C>({"cache.selective_hits", "--selective-hits", "selective_hits",
                              "selective: hits of a prefix before its chunks go down", {}, false, kBoth},
                             KVTIER_FIELD(selective_hits), 1, 1u << 20));
  t.push_back(enum_option<C>({"cache.eviction", "--eviction", "eviction", "Eviction policy of device and host pages", {},
                              false, kBoth},
                             KVTIER_FIELD(eviction), parse_eviction_policy, eviction_policy_name,
                             "lru, lfu, fifo, priority, slru"));
  t.push_back(enum_option<C>({"cache.hash", "--hash", "hash", "Page hash", {}, false, kBoth}, KVTIER_FIELD(hash),
                             parse_hash_algo, hash_algo_name, "xxh3, sha256"));
  t.push_back(bool_option<C>({"cache.layerwise", "--no-layerwise", "layerwise",
                              "Load every layer before prefill instead of overlapping loads and compute layer by layer", {}, false,
                              kBoth},
                             KVTIER_FIELD(layerwise)));
  t.push_back(uint_option<C>({"cache.transfer_workers", "--transfer-workers", "transfer_workers",
                              "Threads moving KV between tiers; 0 = inline"},
                             KVTIER_FIELD(transfer_workers), 0, 64));
  t.push_back(string_option<C>({"cache.profile", "--profile", {}, "Calibration profile (JSON, `kvtier calibrate`)",
                                "serve: a quick calibration at start; replay: the --hardware preset", false, kBoth},
                               KVTIER_FIELD(profile_path)));
  t.push_back(number_option<C>({"cache.max_retained_share", "--max-retained-share", "max_retained_share",
                                "Share of the host tier (and of the disk's regions) that retention hints (retain_s, "
                                "cache_control) may keep from eviction; past it the oldest hint of the tenant holding the most yields",
                                {}, false, kBoth},
                               KVTIER_FIELD(max_retained_share), 0.0, 1.0));
  return t;
}

}  // namespace

const OptionTable<CacheConfig>& cache_option_table() {
  static const OptionTable<CacheConfig> table = make_table();
  return table;
}

}  // namespace kvtier
