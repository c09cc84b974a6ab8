#include "text/unicode.h"

#include <gtest/gtest.h>

namespace kvtier::text {
namespace {

TEST(Unicode, ClassesCoverAllOfUnicode) {
  EXPECT_EQ(codepoint_classes('a'), kLetter);
  EXPECT_EQ(codepoint_classes('7'), kNumber);
  EXPECT_EQ(codepoint_classes(' '), kWhitespace);
  EXPECT_EQ(codepoint_classes('!'), kPunctuation);
  EXPECT_EQ(codepoint_classes('$'), 0);          // a symbol (Sc)
  EXPECT_EQ(codepoint_classes(0x0416), kLetter);  // Ж
  EXPECT_EQ(codepoint_classes(0x4E2D), kLetter);  // 中
  EXPECT_EQ(codepoint_classes(0x0663), kNumber);  // Arabic-Indic digit three
  EXPECT_EQ(codepoint_classes(0x00BD), kNumber);  // ½ (No)
  EXPECT_EQ(codepoint_classes(0x3000), kWhitespace);
  EXPECT_EQ(codepoint_classes(0x00A0), kWhitespace);
  EXPECT_EQ(codepoint_classes(0x3001), kPunctuation);  // 、
  EXPECT_EQ(codepoint_classes(0x1F999), 0);            // 🦙
  EXPECT_EQ(codepoint_classes(0x20000), kLetter);      // CJK extension B
  EXPECT_EQ(codepoint_classes(0x110000), 0);
}

TEST(Unicode, Utf8DecodeNeverFails) {
  uint32_t cp = 0;
  EXPECT_EQ(utf8_decode("\xC3\x84", 2, &cp), 2u);
  EXPECT_EQ(cp, 0xC4u);
  EXPECT_EQ(utf8_decode("\xF0\x9F\xA6\x99", 4, &cp), 4u);
  EXPECT_EQ(cp, 0x1F999u);
  EXPECT_EQ(utf8_decode("\xF0\x9F\xA6", 3, &cp), 1u);  // truncated
  EXPECT_EQ(cp, kReplacementChar);
  EXPECT_EQ(utf8_decode("\xC0\x80", 2, &cp), 1u);  // overlong
  EXPECT_EQ(cp, kReplacementChar);
  EXPECT_EQ(utf8_decode("\xED\xA0\x80", 3, &cp), 1u);  // surrogate
  EXPECT_EQ(utf8_decode("\x80", 1, &cp), 1u);
  std::string s;
  utf8_append(s, 0x1F999);
  utf8_append(s, 0x416);
  EXPECT_EQ(s, "\xF0\x9F\xA6\x99\xD0\x96");
}

}  // namespace
}  // namespace kvtier::text
