// Internal to DiskTier's sources: one region file and what the tier knows
// of it. Guarded by DiskTier::mu_ except `file`, which readers use outside
// the lock (a reclaimed region's file stays valid while they hold it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/file_system.h"
#include "tiers/disk_tier.h"

namespace kvtier {

// A region's file name: region-%08x.kvr (disk_tier.cc).
std::string region_file_name(uint32_t id);

struct DiskTier::Region {
  uint32_t id = 0;
  std::shared_ptr<File> file;
  uint64_t size = 0;  // bytes it may take on disk: the region size it was written with
  uint64_t used = 0;  // bytes of the file holding entries (sealed) or reserved so far (active)
  std::vector<ChunkKey> keys;
  int buffer = -1;       // the region buffer still holding its bytes (-1: on disk only)
  uint64_t written = 0;  // [0, written) of the file holds the buffer's bytes
};

}  // namespace kvtier
