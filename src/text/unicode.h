// Unicode helpers for the tokenizers: the character classes the
// pre-tokenizers test (\p{L}, \p{N}, \p{P} and White_Space, for every code
// point, from the Unicode Character Database; see scripts/gen_unicode_ranges.py)
// and UTF-8 decoding that never fails (a malformed byte is one U+FFFD).
// Pure functions over constant tables; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvtier::text {

enum CodepointClass : uint8_t {
  kLetter = 1,       // \p{L}
  kNumber = 2,       // \p{N}
  kWhitespace = 4,   // White_Space (what \s matches)
  kPunctuation = 8,  // \p{P}
};

// Bitwise OR of the classes of `cp` (0 for symbols, marks, controls, unassigned).
uint8_t codepoint_classes(uint32_t cp);

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes the UTF-8 sequence at s[0..n) (n > 0) into *cp and returns its length.
// A malformed or truncated sequence yields U+FFFD and length 1.
size_t utf8_decode(const char* s, size_t n, uint32_t* cp);
// The length a UTF-8 sequence has according to its lead byte (1 for continuation bytes).
inline size_t utf8_lead_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
void utf8_append(std::string& out, uint32_t cp);

}  // namespace kvtier::text
