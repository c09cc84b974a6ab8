#include "text/unicode.h"

#include <vector>

namespace kvtier::text {
namespace {

struct Range {
  uint32_t first, last;
  uint8_t classes;
};

constexpr Range kRanges[] = {
#include "text/unicode_ranges.inc"
};

// White_Space (PropList.txt): what \s matches in Unicode-aware regex engines.
constexpr Range kWhitespaceRanges[] = {{0x09, 0x0D, 0}, {0x20, 0x20, 0},     {0x85, 0x85, 0},     {0xA0, 0xA0, 0},
                                 {0x1680, 0x1680, 0}, {0x2000, 0x200A, 0}, {0x2028, 0x2029, 0}, {0x202F, 0x202F, 0},
                                 {0x205F, 0x205F, 0}, {0x3000, 0x3000, 0}};

constexpr uint32_t kCodepoints = 0x110000;

const std::vector<uint8_t>& class_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(kCodepoints, 0);
    for (const Range& r : kRanges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) t[cp] |= r.classes;
    for (const Range& r : kWhitespaceRanges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) t[cp] |= kWhitespace;
    return t;
  }();
  return table;
}

}  // namespace

uint8_t codepoint_classes(uint32_t cp) {
  static const uint8_t* table = class_table().data();
  return cp < kCodepoints ? table[cp] : 0;
}

size_t utf8_decode(const char* s, size_t n, uint32_t* cp) {
  const auto* u = reinterpret_cast<const unsigned char*>(s);
  const unsigned char b0 = u[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len = 0;
  uint32_t value = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) len = 2, value = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) len = 3, value = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) len = 4, value = b0 & 0x07, min = 0x10000;
  if (len == 0 || len > n) {
    *cp = kReplacementChar;
    return 1;
  }
  for (size_t k = 1; k < len; ++k) {
    if ((u[k] & 0xC0) != 0x80) {
      *cp = kReplacementChar;
      return 1;
    }
    value = (value << 6) | (u[k] & 0x3F);
  }
  if (value < min || value >= kCodepoints || (value >= 0xD800 && value <= 0xDFFF)) {
    *cp = kReplacementChar;
    return 1;
  }
  *cp = value;
  return len;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace kvtier::text
