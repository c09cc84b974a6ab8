#include "text/jinja/jinja_strings.h"

#include <algorithm>
#include <cstdint>

namespace kvtier::text::jinja {

char32_t decode_utf8(std::string_view text, size_t& pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  size_t length = 0;
  char32_t code_point = 0;
  if (lead < 0x80) {
    ++pos;
    return lead;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2;
    code_point = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    code_point = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    code_point = lead & 0x07;
  } else {
    ++pos;
    return 0xFFFD;
  }
  if (pos + length > text.size()) {
    ++pos;
    return 0xFFFD;
  }
  for (size_t offset = 1; offset < length; ++offset) {
    const auto byte = static_cast<unsigned char>(text[pos + offset]);
    if ((byte & 0xC0) != 0x80) {
      ++pos;
      return 0xFFFD;
    }
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  pos += length;
  return code_point;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

std::u32string to_code_points(std::string_view text) {
  std::u32string result;
  result.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) result.push_back(decode_utf8(text, pos));
  return result;
}

std::string from_code_points(const std::u32string& code_points) {
  std::string result;
  result.reserve(code_points.size());
  for (char32_t code_point : code_points) append_utf8(result, code_point);
  return result;
}

size_t code_point_count(std::string_view text) {
  size_t count = 0;
  for (size_t pos = 0; pos < text.size(); ++count) decode_utf8(text, pos);
  return count;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string code_points = to_code_points(text);
  const std::u32string strip_set = chars ? to_code_points(*chars) : std::u32string();
  auto strippable = [&](char32_t c) {
    return chars ? strip_set.find(c) != std::u32string::npos : is_python_space(c);
  };
  size_t begin = 0;
  size_t end = code_points.size();
  while (left && begin < end && strippable(code_points[begin])) ++begin;
  while (right && end > begin && strippable(code_points[end - 1])) --end;
  return from_code_points(code_points.substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_on_whitespace(std::string_view text, long long max_split) {
  std::vector<std::string> parts;
  const std::u32string code_points = to_code_points(text);
  size_t pos = 0;
  while (pos < code_points.size()) {
    while (pos < code_points.size() && is_python_space(code_points[pos])) ++pos;
    if (pos == code_points.size()) break;
    if (max_split >= 0 && static_cast<long long>(parts.size()) == max_split) {
      size_t end = code_points.size();
      while (end > pos && is_python_space(code_points[end - 1])) --end;
      parts.push_back(from_code_points(code_points.substr(pos, end - pos)));
      break;
    }
    size_t end = pos;
    while (end < code_points.size() && !is_python_space(code_points[end])) ++end;
    parts.push_back(from_code_points(code_points.substr(pos, end - pos)));
    pos = end;
  }
  return parts;
}

}  // namespace

size_t py_replace_size(std::string_view text, std::string_view old_text, std::string_view new_text, long long count) {
  uint64_t replaced = 0;
  if (old_text.empty()) {
    replaced = code_point_count(text) + 1;
  } else {
    for (size_t at = find_text(text, old_text); at != std::string_view::npos && (count < 0 || replaced < uint64_t(count));
         at = find_text(text, old_text, at + old_text.size()))
      ++replaced;
  }
  if (count >= 0) replaced = std::min<uint64_t>(replaced, uint64_t(count));
  return text.size() - replaced * old_text.size() + replaced * new_text.size();
}

std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& separator,
                                  long long max_split) {
  if (!separator) return split_on_whitespace(text, max_split);
  std::vector<std::string> parts;
  size_t start = 0;
  while (max_split < 0 || static_cast<long long>(parts.size()) < max_split) {
    const size_t found = find_text(text, *separator, start);
    if (found == std::string_view::npos) break;
    parts.emplace_back(text.substr(start, found - start));
    start = found + separator->size();
  }
  parts.emplace_back(text.substr(start));
  return parts;
}

std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       long long count) {
  std::string result;
  long long done = 0;
  if (old_text.empty()) {
    size_t pos = 0;
    while (pos <= text.size()) {
      if (count < 0 || done < count) {
        result += new_text;
        ++done;
      }
      if (pos == text.size()) break;
      const size_t start = pos;
      decode_utf8(text, pos);
      result += text.substr(start, pos - start);
    }
    return result;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t found = find_text(text, old_text, start);
    if (found == std::string_view::npos) break;
    result += text.substr(start, found - start);
    result += new_text;
    start = found + old_text.size();
    ++done;
  }
  result += text.substr(start);
  return result;
}

std::string py_upper(std::string_view text) {
  std::string result(text);
  for (char& c : result) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return result;
}

std::string py_lower(std::string_view text) {
  std::string result(text);
  for (char& c : result) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return result;
}

std::string py_title(std::string_view text) {
  std::string result(text);
  bool previous_cased = false;
  for (char& c : result) {
    const auto byte = static_cast<unsigned char>(c);
    const bool ascii_letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (ascii_letter) {
      c = previous_cased ? py_lower(std::string(1, c))[0] : py_upper(std::string(1, c))[0];
    }
    // Bytes of non-ASCII characters count as cased letters (they are left unchanged).
    previous_cased = ascii_letter || byte >= 0x80;
  }
  return result;
}

std::string py_capitalize(std::string_view text) {
  std::string result = py_lower(text);
  if (!result.empty()) result[0] = py_upper(result.substr(0, 1))[0];
  return result;
}

}  // namespace kvtier::text::jinja
