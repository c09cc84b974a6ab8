#include "server/auth.h"

#include <algorithm>
#include <cctype>
#include <mutex>

#include "common/file_text.h"
#include "common/option_values.h"
#include "common/secrets.h"
#include "common/strings.h"
#include "server/config.h"

namespace kvtier::server {
namespace {

constexpr size_t kMinKeyChars = 16;

PageHash key_hash(std::string_view key) { return hash_bytes(HashAlgo::kSHA256, key.data(), key.size()); }

bool valid_tenant_name(std::string_view t) {
  if (t.empty() || t.size() > 64) return false;
  for (char c : t)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

bool printable_key(std::string_view k) {
  for (char c : k)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  return true;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t b = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > b) out.push_back(line.substr(b, i - b));
  }
  return out;
}

Status line_error(std::string_view origin, size_t line, std::string_view what) {
  return Status::InvalidArgument(std::string(origin) + ":" + std::to_string(line) + ": " + std::string(what));
}

// `device=SIZE` | `host=SIZE` | `disk=SIZE` onto `q`.
Status apply_quota(std::string_view word, TenantQuota& q, std::string_view origin, size_t line) {
  const size_t eq = word.find('=');
  const std::string_view name = word.substr(0, eq);
  uint64_t* field = name == "device" ? &q.device : name == "host" ? &q.host : name == "disk" ? &q.disk : nullptr;
  // The word itself is never echoed: a line missing its newline may hold the next line's key.
  if (eq == std::string_view::npos || field == nullptr)
    return line_error(origin, line, "expected device=SIZE, host=SIZE or disk=SIZE after the tenant, got a word of " +
                                        std::to_string(word.size()) + " characters" +
                                        (eq == std::string_view::npos ? std::string(" without '='") : std::string()));
  auto size = parse_size(word.substr(eq + 1));
  if (!size.ok() || *size == 0)
    return line_error(origin, line, std::string(name) + "= needs a positive size (64MiB, 2GiB)");
  *field = *size;
  return Status::Ok();
}

// The one key of a source: a file (not readable by others), else the environment variable; "" when neither is given.
Result<std::string> key_from(const std::string& file, const char* env, std::string_view what) {
  if (!file.empty()) KVTIER_RETURN_IF_ERROR(require_private_file(file, what));
  KVTIER_ASSIGN_OR_RETURN(const std::optional<std::string> key, read_secret(file, env, what, kMinKeyChars));
  if (!key) return std::string();
  if (!printable_key(*key))
    return Status::InvalidArgument(std::string(what) + " from " + (file.empty() ? std::string(env) : file) +
                                   " must be one line of printable characters without spaces");
  return *key;
}

}  // namespace

std::string request_key(std::string_view authorization, std::string_view x_api_key) {
  constexpr std::string_view kBearer = "Bearer ";
  return std::string(authorization.substr(0, kBearer.size()) == kBearer ? authorization.substr(kBearer.size()) : x_api_key);
}

std::string_view auth_mode_name(AuthMode m) {
  switch (m) {
    case AuthMode::kNone: return "none";
    case AuthMode::kApiKey: return "api-key";
    case AuthMode::kTenantKeys: return "tenant-keys";
  }
  return "none";
}

Result<std::vector<TenantKey>> parse_tenant_keys(std::string_view text, std::string_view origin) {
  std::vector<TenantKey> out;
  std::map<std::string, TenantQuota, std::less<>> quotas;
  std::unordered_map<PageHash, size_t, PageHashHasher> seen;  // key hash → line
  Lines lines(text);
  for (std::string_view line; lines.next(line);) {
    const size_t line_no = lines.number();
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const std::vector<std::string_view> w = words(line);
    if (w.empty()) continue;
    if (w.size() < 2) return line_error(origin, line_no, "expected KEY TENANT [device=SIZE] [host=SIZE] [disk=SIZE]");
    TenantKey k{std::string(w[0]), std::string(w[1]), {}};
    if (k.key.size() < kMinKeyChars || !printable_key(k.key))
      return line_error(origin, line_no, "the key must be at least " + std::to_string(kMinKeyChars) + " printable characters");
    if (!valid_tenant_name(k.tenant))
      return line_error(origin, line_no, "the tenant must be 1 to 64 of A-Z a-z 0-9 . _ -");
    for (size_t i = 2; i < w.size(); ++i) KVTIER_RETURN_IF_ERROR(apply_quota(w[i], k.quota, origin, line_no));
    if (auto [it, fresh] = seen.emplace(key_hash(k.key), line_no); !fresh)
      return line_error(origin, line_no, "this key is already listed on line " + std::to_string(it->second));
    if (auto [it, fresh] = quotas.emplace(k.tenant, k.quota); !fresh && !(it->second == k.quota))
      return line_error(origin, line_no, "tenant '" + k.tenant + "' has other quotas on an earlier line; its keys must agree");
    out.push_back(std::move(k));
  }
  return out;
}

KeyRing::KeyRing(const ServerConfig& config) : config_(std::make_unique<ServerConfig>(config)) {}

Result<KeyRing::Keys> KeyRing::load(const ServerConfig& c, std::vector<std::string>* warnings) {
  auto warn = [warnings](std::string w) {
    if (warnings) warnings->push_back(std::move(w));
  };
  Keys k;
  KVTIER_ASSIGN_OR_RETURN(std::string admin, key_from(c.admin_key_file, "KVTIER_ADMIN_KEY", "admin key"));
  KVTIER_ASSIGN_OR_RETURN(std::string client, key_from(c.api_key_file, "KVTIER_API_KEY", "API key"));
  if (!c.api_key.empty()) {
    if (!c.api_key_file.empty()) return Status::InvalidArgument("give the API key once: --api-key or --api-key-file");
    client = c.api_key;
    // The rule a key from a file or the environment meets (read_secret): a short flag key was the one way
    // around it.
    if (client.size() < kMinKeyChars || !printable_key(client))
      return Status::InvalidArgument("the API key (--api-key or server.api_key) must be at least " +
                                     std::to_string(kMinKeyChars) + " printable characters without spaces");
    warn("the API key is given in the configuration (--api-key or server.api_key): a flag is visible in ps; use "
         "KVTIER_API_KEY or --api-key-file");
  }
  std::vector<TenantKey> tenants;
  if (!c.api_keys_file.empty()) {
    if (!client.empty())
      return Status::InvalidArgument("an API key (--api-key, --api-key-file or KVTIER_API_KEY) cannot be combined with "
                                     "--api-keys-file: list every client key, with its tenant, in that file");
    KVTIER_RETURN_IF_ERROR(require_private_file(c.api_keys_file, "tenant keys file"));
    KVTIER_ASSIGN_OR_RETURN(const std::string text, read_file(c.api_keys_file, "tenant keys file"));
    KVTIER_ASSIGN_OR_RETURN(tenants, parse_tenant_keys(text, c.api_keys_file));
    if (tenants.empty()) return Status::InvalidArgument("the tenant keys file " + c.api_keys_file + " lists no key");
  }
  for (const TenantKey& t : tenants) {
    k.by_hash.emplace(key_hash(t.key), Principal{t.tenant, false});
    k.quotas.emplace(t.tenant, t.quota);
  }
  if (!client.empty()) k.by_hash.emplace(key_hash(client), Principal{"", admin.empty()});
  if (!admin.empty() && !k.by_hash.emplace(key_hash(admin), Principal{std::string(kAdminTenant), true}).second)
    return Status::InvalidArgument("the admin key is also a client key: give the admin a key of its own");
  k.mode = !tenants.empty() ? AuthMode::kTenantKeys : k.by_hash.empty() ? AuthMode::kNone : AuthMode::kApiKey;
  if (!client.empty() && admin.empty())
    warn("one key is both the clients' key and the admin key: any client may flush the cache and read its views; "
         "give the admin its own with --admin-key-file (docs/SECURITY.md)");
  if (!tenants.empty() && admin.empty())
    warn("tenant keys without an admin key: the admin endpoints (flush, the cache's views, /metrics) answer 403 to everyone");
  return k;
}

Result<std::unique_ptr<KeyRing>> KeyRing::create(const ServerConfig& config, std::vector<std::string>* warnings) {
  auto ring = std::unique_ptr<KeyRing>(new KeyRing(config));
  KVTIER_ASSIGN_OR_RETURN(ring->keys_, load(config, warnings));
  return ring;
}

AuthMode KeyRing::mode() const {
  std::shared_lock lk(mu_);
  return keys_.mode;
}

std::optional<Principal> KeyRing::authenticate(std::string_view key) const {
  const PageHash h = key_hash(key);  // hashed first: the lookup's timing says nothing about the key
  std::shared_lock lk(mu_);
  if (keys_.mode == AuthMode::kNone) return Principal{"", true};
  auto it = keys_.by_hash.find(h);
  if (it == keys_.by_hash.end()) return std::nullopt;
  return it->second;
}

Status KeyRing::reload() {
  KVTIER_ASSIGN_OR_RETURN(Keys next, load(*config_, nullptr));
  std::unique_lock lk(mu_);
  keys_ = std::move(next);
  return Status::Ok();
}

std::map<std::string, TenantQuota> KeyRing::quotas() const {
  std::shared_lock lk(mu_);
  return keys_.quotas;
}

}  // namespace kvtier::server
