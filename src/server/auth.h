// Who may call the server, and in whose namespace a request runs.
//
// Three kinds of key (docs/SECURITY.md):
// - tenant keys, from --api-keys-file: one per line, `KEY TENANT [device=SIZE]
//   [host=SIZE] [disk=SIZE]`. A request with one runs in that tenant's
//   namespace (PromptRequest::tenant → Namespace::tenant), so isolation is the
//   index's and every tier's, not this layer's.
// - the admin key, from --admin-key-file or KVTIER_ADMIN_KEY: the only key
//   for the admin endpoints (flush, tree, tiers, stats, recent requests,
//   /metrics); its completions run in a namespace of their own.
// - a lone API key (--api-key-file, KVTIER_API_KEY, or the legacy --api-key):
//   a client key without a tenant (today's namespace seeds); with no admin key
//   it is the admin key too, as before tenants existed.
// No key at all: every endpoint is open and runs without a tenant.
//
// Files that hold keys must not be readable by every user. Keys are compared
// by their SHA-256, never printed, logged or put in an error message.
// KeyRing is thread-safe: authenticate() from connection threads, reload()
// (SIGHUP) from another.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/tenant_quota.h"
#include "common/page_hash.h"
#include "kvtier/status.h"

namespace kvtier::server {

struct ServerConfig;

enum class AuthMode : uint8_t { kNone, kApiKey, kTenantKeys };
std::string_view auth_mode_name(AuthMode m);  // "none" | "api-key" | "tenant-keys"

// What a request may do: run in `tenant`'s namespace ("": none), and use the admin endpoints.
struct Principal {
  std::string tenant;
  bool admin = false;
};

// The namespace of the admin key's own completions: ':' is not allowed in tenant names.
inline constexpr std::string_view kAdminTenant = ":admin";

struct TenantKey {
  std::string key;
  std::string tenant;
  TenantQuota quota;
};

// The lines of a keys file. Errors name `origin` and the line, never a key:
// a key shorter than 16 characters, a tenant name outside [A-Za-z0-9._-]{1,64},
// an unknown or malformed quota, a key listed twice, two quotas for one tenant.
Result<std::vector<TenantKey>> parse_tenant_keys(std::string_view text, std::string_view origin);

// The key a request carries: `Authorization: Bearer KEY`, else `X-Api-Key` (empty: none).
std::string request_key(std::string_view authorization, std::string_view x_api_key);

class KeyRing {
 public:
  // Reads every key source the config names (and KVTIER_API_KEY,
  // KVTIER_ADMIN_KEY); refuses contradictory set-ups. `warnings` collects
  // what an operator must hear at start (a key on the command line, a lone
  // key that is admin too, tenants without an admin key).
  static Result<std::unique_ptr<KeyRing>> create(const ServerConfig& config, std::vector<std::string>* warnings = nullptr);

  AuthMode mode() const;
  // nullopt: the key is unknown (401). Mode kNone: everyone is an admin without a tenant.
  std::optional<Principal> authenticate(std::string_view key) const;
  // Re-reads every source (SIGHUP); on an error the keys in use stay and the error says why.
  Status reload();
  // Each tenant's quotas, from the keys file (the server hands them to the cache).
  std::map<std::string, TenantQuota> quotas() const;

 private:
  struct Keys {
    AuthMode mode = AuthMode::kNone;
    std::unordered_map<PageHash, Principal, PageHashHasher> by_hash;
    std::map<std::string, TenantQuota> quotas;
  };
  static Result<Keys> load(const ServerConfig& config, std::vector<std::string>* warnings);
  explicit KeyRing(const ServerConfig& config);

  std::unique_ptr<ServerConfig> config_;  // the sources, for reload()
  mutable std::shared_mutex mu_;
  Keys keys_;
};

}  // namespace kvtier::server
