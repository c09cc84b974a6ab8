#include "server/request_log.h"

#include <algorithm>

namespace kvtier::server {

uint64_t RequestLog::add(PrefillRecord record) {
  std::lock_guard lk(mu_);
  record.id = next_id_++;
  if (records_.size() == capacity_) records_.pop_front();
  records_.push_back(std::move(record));
  return records_.back().id;
}

std::vector<PrefillRecord> RequestLog::newest(size_t limit) const {
  std::lock_guard lk(mu_);
  std::vector<PrefillRecord> out;
  const size_t n = std::min(limit, records_.size());
  out.reserve(n);
  for (auto it = records_.rbegin(); it != records_.rend() && out.size() < n; ++it) out.push_back(*it);
  return out;
}

}  // namespace kvtier::server
