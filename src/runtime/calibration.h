// Calibration: measures the figures the planner's cost model needs on this
// machine — the engine's dense and attention FLOP rates, host copy bandwidth,
// and (when a directory is given) the disk tier's read bandwidth — and
// returns them as a CostProfile. `kvtier calibrate` writes the profile to a
// file; without one, the runtime runs the quick variant at start-up.
// Not thread-safe with respect to the engine and pool it borrows.
#pragma once

#include "model/model_cost.h"

#include <string>

#include "engine/engine.h"
#include "planner/cost_model.h"
#include "tiers/disk_tier.h"

namespace kvtier {

struct CalibrationOptions {
  std::string disk_dir;     // empty: no disk figure
  // The disk tier's capacity: the scratch files (under disk_dir/.calibration,
  // removed after, on every path) take at most a quarter of it, in smaller
  // chunks where whole ones would not fit. 0: no bound beyond the default.
  size_t disk_capacity_bytes = 0;
  bool disk_direct_io = true;  // as the disk tier's (O_DIRECT, buffered where refused)
  bool quick = true;        // start-up variant (well under a second on the small model)
  double remote_bytes_per_s = 0;  // measured by the caller when a remote store is configured
  double remote_latency_s = 0;

  Status validate() const;
};

// Host → pool copy rate (bytes/s, best of three of `bytes`): memcpy on the
// CPU; pinned host → device memory through DeviceMemory::copy beside an accelerator.
double host_to_pool_bytes_per_s(const BlockPool& pool, size_t bytes);

// The scratch disk tier calibrate() measures, and the chunks it writes there
// (`n_chunks`, each of its geometry's max_payload_bytes()). Pure.
DiskTierOptions calibration_scratch(const KVGeometry& g, const CalibrationOptions& o, size_t& n_chunks);

// The disk figures used where the disk could not be measured (its scratch files did not fit: a full
// or read-only disk): a slow NVMe's, so that what the disk tier holds is still priced and loaded.
inline constexpr TierLink kAssumedDiskLink{1e-4, 1e9};

// Runs prefills on `engine` (borrowing free pages of `pool`) and I/O under disk_dir. A disk that
// cannot be measured gets kAssumedDiskLink, and the profile's source says why.
Result<CostProfile> calibrate(engine::Forward& engine, BlockPool& pool, const CalibrationOptions& options);

}  // namespace kvtier
