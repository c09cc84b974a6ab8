// Replays deterministic mutations of valid GGUF images through the reader
// (the libFuzzer target's job, in every `make test`): each must be accepted
// or refused with a message, never crash (ASan/UBSan builds check memory).
#include <gtest/gtest.h>

#include <fstream>

#include "gguf_corpus.h"
#include "gguf_hostile.h"
#include "text/tokenizer.h"

namespace kvtier::engine {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kCases = 400;
#else
constexpr uint64_t kCases = 2000;
#endif

TEST(GgufReplay, MutatedImagesNeverCrash) {
  for (GgufType t : {GgufType::kF32, GgufType::kF16, GgufType::kBF16, GgufType::kQ8_0, GgufType::kQ4_0,
                    GgufType::kQ5_1, GgufType::kQ4_K, GgufType::kQ6_K}) {
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

// Headers that lie about sizes, shapes, offsets and counts: each is refused
// with a message naming the problem, before anything is allocated for what
// it claims (the first case would need ~512 GiB of weights).
TEST(GgufReplay, HostileHeadersGetACleanError) {
  const auto control = fuzzing::spelled_out_micro_image();
  auto ok = parse_gguf(std::span(reinterpret_cast<const std::byte*>(control.data()), control.size()));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  for (const auto& h : fuzzing::hostile_images()) {
    SCOPED_TRACE(h.name);
    const std::span bytes(reinterpret_cast<const std::byte*>(h.bytes.data()), h.bytes.size());
    auto r = parse_gguf(bytes, h.name);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(h.expect), std::string::npos) << r.status().message();
    (void)parse_gguf_vocab(bytes, h.name);  // refused or read, never a crash
  }
}

}  // namespace
}  // namespace kvtier::engine
