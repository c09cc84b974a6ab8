// libFuzzer target for the GGUF reader: any byte string must be either
// accepted as a valid model or refused with a Status, never crash, hang or
// allocate without bound.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = kvtier::engine::parse_gguf(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz");
  (void)r;
  return 0;
}
