// UTF-8 string helpers with Python's str semantics, for the Jinja interpreter:
// code point decoding, Python's whitespace set (str.isspace), strip/split,
// case mapping (ASCII letters only; other characters are left unchanged).
// Pure functions; safe from any thread. Malformed UTF-8 decodes byte by byte
// as U+FFFD so every function is total.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"  // find_text

namespace kvtier::text::jinja {

// Decodes one code point at `pos` (advancing it); U+FFFD for a malformed byte.
char32_t decode_utf8(std::string_view text, size_t& pos);
void append_utf8(std::string& out, char32_t code_point);
std::u32string to_code_points(std::string_view text);
std::string from_code_points(const std::u32string& code_points);
size_t code_point_count(std::string_view text);

// Python's str.isspace for one code point.
bool is_python_space(char32_t code_point);

// str.strip/lstrip/rstrip: `chars` absent strips whitespace, else any of its code points.
std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right);
// str.split: no separator splits on whitespace runs; max_split < 0 is unlimited.
std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& separator,
                                  long long max_split);
// The size py_replace's result will have, without building it.
size_t py_replace_size(std::string_view text, std::string_view old_text, std::string_view new_text, long long count);
// str.replace with an optional count (< 0: all).
std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       long long count);
std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
std::string py_title(std::string_view text);       // str.title
std::string py_capitalize(std::string_view text);  // str.capitalize

}  // namespace kvtier::text::jinja
