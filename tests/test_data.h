// Where tests find their fixtures: tests/data of the source tree (CTest sets
// KVTIER_SOURCE_DIR). Tests never read outside the project, so a lone clone
// passes; benchmarks may read the workspace's shared data, tests may not.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace kvtier::testdata {

// `relative` is a path under tests/data, e.g. "traces/mooncake_synthetic_trace.jsonl".
inline std::string test_data_path(std::string_view relative) {
  const char* source = std::getenv("KVTIER_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/tests/data/" + std::string(relative);
}

// The public Mooncake request trace (tests/data/traces/README.md).
inline std::string mooncake_trace_path() { return test_data_path("traces/mooncake_synthetic_trace.jsonl"); }

}  // namespace kvtier::testdata
