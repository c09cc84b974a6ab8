// DiskTier at open: the region files already in its directory scanned, indexed or skipped.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "tiers/disk_region_format.h"
#include "tiers/disk_tier.h"
#include "tiers/disk_tier_region.h"

namespace kvtier {
namespace {

// Only the names region_file_name writes: sscanf alone also takes upper-case
// hex, a sign or spaces, so two files could claim one id. The last id is
// never written (open_region), so that id + 1 never wraps to 0.
bool parse_region_name(const std::string& name, uint32_t& id) {
  unsigned v = 0;
  if (name.size() != 19 || std::sscanf(name.c_str(), "region-%8x.kvr", &v) != 1 || v == UINT32_MAX) return false;
  if (region_file_name(v) != name) return false;
  id = v;
  return true;
}

}  // namespace

// ---- restart ----

Status DiskTier::open_existing() {
  KVTIER_ASSIGN_OR_RETURN(auto names, fs_->list_dir(options_.dir));
  for (const std::string& name : names) {
    uint32_t id;
    if (!parse_region_name(name, id)) continue;
    // New regions go past this tier's own (ids order copies of an entry); a name that exists,
    // ours or not, is never created over (open_region), so a foreign file is left alone
    // and cannot push the ids to their end.
    if (scan_region(id, options_.dir + "/" + name)) next_region_ = std::max(next_region_, id + 1);
  }
  // A smaller capacity (or larger regions) than last time: shed the oldest regions now.
  scan_buf_ = AlignedBuffer();
  make_room_for_region_locked();
  for (const std::string& path : std::exchange(doomed_, {}))  // nothing else runs yet
    if (Status st = fs_->remove(path); !st.ok()) count_io_error_locked(st);
  open_report_.regions = static_cast<uint32_t>(regions_.size());
  open_report_.entries = index_.size();
  stats_.checksum_failures += open_report_.dropped_corrupt;
  stats_.forged_entries += open_report_.dropped_forged;
  stats_.evictions = 0;  // reclaiming at open is not an eviction of this run
  return Status::Ok();
}

// Reads [have, want) of `file` into the scan buffer (sequential reads; the
// end of file may be unaligned after a crash). Returns the bytes now held.
Result<size_t> DiskTier::read_for_scan(File& file, size_t have, size_t want) {
  if (scan_buf_.size() < want) {
    AlignedBuffer bigger(want);
    if (have > 0) std::memcpy(bigger.data(), scan_buf_.data(), have);
    scan_buf_ = std::move(bigger);
  }
  while (have < want) {
    const size_t len = std::min<size_t>(size_t(8) << 20, want - have);
    KVTIER_ASSIGN_OR_RETURN(size_t got, file.read(have, {scan_buf_.data() + have, len}));
    if (got == 0) break;
    have += got;
    if (got < len) break;  // end of file
  }
  return have;
}

// Indexes region `id` if it is this tier's; a file that is not (or cannot be
// read, or is no regular file) is skipped and counted, and left alone. Reads
// stop at the region size. Whether the region was indexed (a torn one, removed,
// is not: an empty file planted at a high id would push the ids to their end).
bool DiskTier::scan_region(uint32_t id, const std::string& path) {
  const auto skipped = [this] {
    ++open_report_.skipped_regions;
    return false;
  };
  auto opened = fs_->open(path, {.read_only = true, .direct = options_.direct_io});
  auto size = opened.ok() ? (*opened)->size() : Result<uint64_t>(opened.status());
  if (!size.ok()) return skipped();
  std::shared_ptr<File> file = std::move(opened).value();
  auto head = read_for_scan(*file, 0, kRegionHeaderBlock);
  if (!head.ok()) return skipped();
  const size_t head_bytes = std::min<size_t>(*head, *size);
  const RegionHeaderCheck check = check_region_header({scan_buf_.data(), head_bytes}, id, options_.geometry, options_.region_bytes);
  if (check.kind == RegionKind::kForeign) return skipped();
  // Ours, but nothing in it can be trusted: removed. A file larger than any region this tier writes
  // is not a torn one of ours, whatever its first bytes (a user's file that happens to be zeros there).
  if (check.kind == RegionKind::kTorn && *size > std::max<uint64_t>(options_.region_bytes, check.region_bytes))
    return skipped();
  if (check.kind == RegionKind::kTorn) {
    ++open_report_.dropped_torn;
    file.reset();
    (void)fs_->remove(path);
    return false;
  }
  const size_t limit = std::min<uint64_t>(*size, check.region_bytes);
  auto have = read_for_scan(*file, head_bytes, align_up(limit));
  if (!have.ok()) return skipped();
  RegionScan scan = scan_region_entries({scan_buf_.data(), std::min<size_t>(*have, limit)}, options_.geometry,
                                        options_.verify_on_open, options_.auth.get());
  index_region(id, check.region_bytes, std::move(file), scan);
  return true;
}

void DiskTier::index_region(uint32_t id, uint64_t size, std::shared_ptr<File> file, RegionScan& scan) {
  auto region = std::make_shared<Region>();
  region->id = id;
  region->size = size;
  region->file = std::move(file);
  for (ScannedEntry& e : scan.entries) {
    next_sequence_ = std::max(next_sequence_, e.sequence + 1);
    if (index_.count(e.key)) drop_locked(e.key, nullptr);  // a newer copy wins (ids ascend)
    add_entry_locked(e.key, Loc{region, e.offset, e.num_pages, e.payload_offset, e.codec, std::move(e.layer_checksums),
                                std::move(e.auth_meta)});
    region->keys.push_back(e.key);
  }
  open_report_.dropped_corrupt += scan.dropped_corrupt;
  open_report_.dropped_forged += scan.dropped_forged;
  open_report_.dropped_torn += scan.dropped_torn;
  region->used = scan.end;
  reclaim_order_.add(id, ++tick_);
  regions_bytes_ += region->size;
  regions_.emplace(id, std::move(region));
}

}  // namespace kvtier
