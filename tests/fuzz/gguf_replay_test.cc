// Replays deterministic mutations of valid GGUF images through the reader
// (the libFuzzer target's job, in every `make test`): each must be accepted
// or refused with a message, never crash (ASan/UBSan builds check memory).
#include <gtest/gtest.h>

#include <fstream>

#include "gguf_corpus.h"
#include "text/tokenizer.h"

namespace kvtier::engine {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kCases = 400;
#else
constexpr uint64_t kCases = 2000;
#endif

TEST(GgufReplay, MutatedImagesNeverCrash) {
  for (GgufType t : {GgufType::kF32, GgufType::kF16, GgufType::kBF16, GgufType::kQ8_0}) {
    const auto base = fuzzing::valid_image(t);
    ASSERT_FALSE(base.empty());
    ASSERT_TRUE(parse_gguf(std::span(reinterpret_cast<const std::byte*>(base.data()), base.size())).ok());
    uint64_t refused = 0;
    for (uint64_t k = 0; k < kCases; ++k) {
      const auto b = fuzzing::mutate(base, k + uint64_t(t) * 1000003);
      auto r = parse_gguf(std::span(reinterpret_cast<const std::byte*>(b.data()), b.size()));
      if (!r.ok()) {
        ++refused;
        EXPECT_FALSE(r.status().message().empty());
      } else {
        EXPECT_TRUE((*r)->config().validate().ok());
      }
      // The vocabulary alone, then a tokenizer over it: refused or usable, never a crash.
      auto v = parse_gguf_vocab(std::span(reinterpret_cast<const std::byte*>(b.data()), b.size()));
      if (v.ok())
        if (auto tok = text::Tokenizer::create(*v); tok.ok())
          (void)tok->decode(tok->encode("Hello <s> w\xC3\xB6rld 123 \xFF", {.add_bos = true}));
    }
    // Most mutations break the file; the reader must notice.
    EXPECT_GT(refused, kCases / 4) << gguf_type_name(t);
  }
}

}  // namespace
}  // namespace kvtier::engine
