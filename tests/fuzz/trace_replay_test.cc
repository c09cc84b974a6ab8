// Corpus replay of both trace fuzzers (mooncake_trace_fuzz, kvtier_trace_fuzz).
#include <map>

#include "replay_support.h"
#include "sim/kvtier_trace.h"

namespace kvtier::fuzzing {
namespace {

std::string_view text_of(const std::vector<uint8_t>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// The valid seeds are read (so the mutations start from traces the readers take).
TEST(TraceReplay, ValidSeedsAreRead) {
  for (const auto& [name, bytes] : corpus_files("mooncake_trace")) {
    if (name != "basic.jsonl") continue;
    auto t = parse_replay_trace(text_of(bytes), {.format = TraceFormat::kMooncake, .block_tokens = 16});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->requests.size(), 3u);
  }
  const std::map<std::string, size_t> want = {{"mixed.jsonl", 4}, {"mooncake_lines.jsonl", 2}};
  for (const auto& [name, bytes] : corpus_files("kvtier_trace")) {
    auto t = parse_replay_trace(text_of(bytes), {.format = TraceFormat::kKvtier, .block_tokens = 16});
    auto it = want.find(name);
    ASSERT_EQ(t.ok(), it != want.end()) << name;
    if (t.ok()) {
      EXPECT_EQ(t->requests.size(), it->second) << name;
    }
  }
}

TEST(TraceReplay, MooncakeCorpusAndMutations) { replay(corpus_files("mooncake_trace"), check_mooncake_trace); }

TEST(TraceReplay, KvtierCorpusAndMutations) { replay(corpus_files("kvtier_trace"), check_kvtier_trace); }

}  // namespace
}  // namespace kvtier::fuzzing
