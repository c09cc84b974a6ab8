#include "common/strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier {
namespace {

std::vector<std::string> lines_of(std::string_view text, std::vector<size_t>* numbers = nullptr) {
  std::vector<std::string> out;
  Lines lines(text);
  for (std::string_view l; lines.next(l);) {
    out.emplace_back(l);
    if (numbers) numbers->push_back(lines.number());
  }
  return out;
}

TEST(Lines, SplitsAtNewlinesWithoutAnEmptyLastLine) {
  std::vector<size_t> numbers;
  EXPECT_EQ(lines_of("a\n\nb\r\nc", &numbers), (std::vector<std::string>{"a", "", "b\r", "c"}));
  EXPECT_EQ(numbers, (std::vector<size_t>{1, 2, 3, 4}));
  EXPECT_EQ(lines_of("a\nb\n"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(lines_of("").empty());
  EXPECT_EQ(lines_of("\n"), (std::vector<std::string>{""}));
}

TEST(Strings, TrimAndQuoted) {
  EXPECT_EQ(trim(" \t a b \n"), "a b");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(quoted("x y"), "'x y'");
}

// Brackets count where JSON nests them, not inside strings (escaped quotes included).
TEST(Strings, JsonKeyPairs) {
  EXPECT_EQ(json_key_pairs("", 8), 0u);
  EXPECT_EQ(json_key_pairs(R"({"a":1})", 8), 0u);
  EXPECT_EQ(json_key_pairs(R"({"a":1,"b":2,"c":{"d":[{"e":1,"f":2}]}})", 8), 3u + 1u);  // 3 keys, then 2
  EXPECT_EQ(json_key_pairs(R"({"a:b":"c:d","e":"\":"})", 8), 1u);  // colons inside strings are not keys
  EXPECT_EQ(json_key_pairs(R"([1,2,{"x":[3,4]}])", 8), 0u);
  EXPECT_EQ(json_key_pairs(R"({"a":{"b":1,"c":2}})", 1), 0u);  // the inner object is past max_depth
  std::string wide = "{";
  for (int i = 0; i < 1000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
  EXPECT_EQ(json_key_pairs(wide + "}", 8), 1000u * 999u / 2);
}

TEST(Strings, JsonNestingDepth) {
  EXPECT_EQ(json_nesting_depth(""), 0u);
  EXPECT_EQ(json_nesting_depth("42"), 0u);
  EXPECT_EQ(json_nesting_depth(R"({"a":[1,{"b":[]}],"c":{}})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"(["[[[[", "\"[[[", "\\", [[]]])"), 3u);
  EXPECT_EQ(json_nesting_depth(R"({"k": "}}}]]] {{{"})"), 1u);
  EXPECT_EQ(json_nesting_depth("]]][[]"), 2u);  // not JSON: stray closers never go below zero
  EXPECT_EQ(json_nesting_depth(std::string(100000, '[')), 100000u);
}

// find_text finds what std::string::find finds, for needles short and long (past 64 bytes it
// runs Knuth-Morris-Pratt, linear where find is quadratic: "a"*N+"b" in "a"*N).
TEST(Strings, FindTextAgreesWithFind) {
  const std::string hay = std::string(300, 'a') + "b" + std::string(100, 'a') + "ab";
  for (const std::string& needle : {std::string("ab"), std::string(""), std::string(70, 'a') + "b", std::string(150, 'a') + "b",
                                    std::string(101, 'a') + "b", std::string(400, 'a')})
    for (size_t from : {size_t(0), size_t(5), size_t(290), size_t(301), hay.size(), hay.size() + 1})
      EXPECT_EQ(find_text(hay, needle, from), from > hay.size() ? std::string::npos : hay.find(needle, from))
          << needle.size() << " from " << from;
}

}  // namespace
}  // namespace kvtier
