// Summary statistics shared by the benchmarks.
#pragma once

#include <algorithm>
#include <vector>

namespace kvtier {

// The median of `v` (for an even count, the upper of the two middle values);
// 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace kvtier
