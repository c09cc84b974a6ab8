// Corpus replay of the disk region fuzzer (disk_region_fuzz).
#include "replay_support.h"

namespace kvtier::fuzzing {
namespace {

TEST(DiskRegionReplay, SeedsAreRegionsOfOurs) {
  const auto seeds = disk_region_seeds();
  ASSERT_EQ(seeds.size(), 5u);
  const size_t want[] = {0, 1, 2, 4, 2};  // the last one's third entry is torn
  for (size_t i = 0; i < seeds.size(); ++i) EXPECT_EQ(disk_region_entries(Input(seeds[i])), want[i]) << i;
}

TEST(DiskRegionReplay, CorpusSeedsAndMutations) {
  auto inputs = corpus_files("disk_region");
  for (auto& s : named(disk_region_seeds(), "seed_")) inputs.push_back(std::move(s));
  replay(inputs, check_disk_region);
}

}  // namespace
}  // namespace kvtier::fuzzing
