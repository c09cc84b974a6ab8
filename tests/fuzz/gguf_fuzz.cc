// libFuzzer target for the GGUF reader: any byte string must be either
// accepted as a valid model or refused with a Status, never crash, hang or
// allocate without bound.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/gguf.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = kvtier::engine::parse_gguf(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz");
  (void)r;
  // The vocabulary alone (what `model tokenize` reads), and a tokenizer built from it.
  auto vocab = kvtier::engine::parse_gguf_vocab(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz");
  if (vocab.ok())
    if (auto tok = kvtier::text::Tokenizer::create(*vocab); tok.ok())
      (void)tok->decode(tok->encode("Hello <s> w\xC3\xB6rld 123 \xFF", {.add_bos = true}));
  return 0;
}
