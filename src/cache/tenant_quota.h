// TenantQuota: a tenant's budget in each tier, in bytes (0: none). The
// server reads them from its keys file (server/auth.h) and hands them to the
// cache (KVCache::set_tenant_quotas), which keeps each tenant within its
// device and host budgets by evicting that tenant's own pages. A plain value.
#pragma once

#include <cstdint>

namespace kvtier {

struct TenantQuota {
  uint64_t device = 0, host = 0, disk = 0;
  bool operator==(const TenantQuota&) const = default;
};

}  // namespace kvtier
