// Corpus replay of the remote chunk-value fuzzer (chunk_value_fuzz).
#include "replay_support.h"

namespace kvtier::fuzzing {
namespace {

TEST(ChunkValueReplay, SeedsVerify) {
  for (const auto& s : chunk_value_seeds()) EXPECT_TRUE(chunk_value_verifies(Input(s)));
}

TEST(ChunkValueReplay, CorpusSeedsAndMutations) {
  auto inputs = corpus_files("chunk_value");
  for (auto& s : named(chunk_value_seeds(), "seed_")) inputs.push_back(std::move(s));
  replay(inputs, check_chunk_value);
}

}  // namespace
}  // namespace kvtier::fuzzing
