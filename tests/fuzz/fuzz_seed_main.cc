// Writes the seeds built by code of the binary fuzz targets:
// fuzz_seeds <disk_region|chunk_value> <dir>. (Text targets' seeds are the
// files under tests/fuzz/corpus/<target>/.)
#include <cstdio>
#include <fstream>
#include <string>

#include "fuzz_checks.h"

int main(int argc, char** argv) {
  const std::string target = argc == 3 ? argv[1] : "";
  std::vector<std::vector<uint8_t>> seeds;
  if (target == "disk_region") seeds = kvtier::fuzzing::disk_region_seeds();
  else if (target == "chunk_value") seeds = kvtier::fuzzing::chunk_value_seeds();
  else {
    std::fprintf(stderr, "usage: fuzz_seeds <disk_region|chunk_value> <corpus-dir>\n");
    return 2;
  }
  for (size_t i = 0; i < seeds.size(); ++i)
    std::ofstream(std::string(argv[2]) + "/seed_" + std::to_string(i), std::ios::binary)
        .write(reinterpret_cast<const char*>(seeds[i].data()), std::streamsize(seeds[i].size()));
  return 0;
}
