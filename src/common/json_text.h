// JSON as text for the wire and for pages: invalid UTF-8 in a string (a model path, a file name,
// a generated reply may hold any bytes) is replaced with U+FFFD rather than thrown, which answered
// /health with a 500 and aborted `kvtier replay --html`.
#pragma once

#include <string>

namespace kvtier {

template <class Json>
std::string json_text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace kvtier
