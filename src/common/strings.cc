#include "common/strings.h"

#include <cctype>

namespace kvtier {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view text) {
  std::string q;
  q.reserve(text.size() + 2);
  q += '\'';
  q.append(text);
  q += '\'';
  return q;
}

}  // namespace kvtier
