// Namespace: what makes two caches of KV incompatible. Two namespaces never
// share an index node, a page hash or a storage key (DESIGN §4).
// A plain value; safe to copy and use from any thread.
#pragma once

#include <string>

#include "kvtier/types.h"

namespace kvtier {

enum class HashAlgo : uint8_t {
  kXXH3_128 = 0,  // default: fast, not collision-resistant against adversaries
  kSHA256 = 1,    // for untrusted multi-tenant deployments (truncated to 128 bits)
};
std::string_view hash_algo_name(HashAlgo a);
Result<HashAlgo> parse_hash_algo(std::string_view name);  // "xxh3" | "sha256"

struct Namespace {
  PageHash model_fingerprint;  // hash of model config + weights
  std::string adapter_id;      // LoRA / adapter, empty for the base model
  std::string cache_salt;      // the client's isolation salt, empty for none
  // The authenticated tenant (server/auth.h), empty for none. Set by the
  // server from the request's key, never by the client: no salt can name
  // another tenant's namespace.
  std::string tenant;

  bool operator==(const Namespace&) const = default;
};

// The chain seed h_{-1} = H(namespace). Deterministic across processes and
// builds. A namespace without a tenant hashes exactly as before tenants
// existed (entries on disk and in Redis stay valid); a tenant adds a tagged
// field after the salt, so no (salt, tenant) pair meets another.
PageHash namespace_seed(const Namespace& ns, HashAlgo algo);

}  // namespace kvtier
