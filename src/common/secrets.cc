#include "common/secrets.h"

#include "common/file_text.h"

namespace kvtier {

Result<std::string> read_secret_file(const std::string& path, std::string_view what, size_t min_bytes) {
  auto text = read_file(path, what);
  if (!text.ok()) return Status::InvalidArgument(text.status().message());
  std::string s = std::move(text).value();
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  if (s.size() < min_bytes)
    return Status::InvalidArgument(std::string(what) + " '" + path + "' holds fewer than " + std::to_string(min_bytes) +
                                   " bytes");
  return s;
}

std::string redact_url_credentials(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t start = scheme + 3;
  // The authority ends at the first '/', '?' or '#'; its credentials at its last '@'.
  const size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const size_t at = url.substr(0, end).rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  const std::string_view cred = url.substr(start, at - start);
  const size_t colon = cred.find(':');
  std::string out(url.substr(0, start));
  if (colon != std::string_view::npos) out += std::string(cred.substr(0, colon + 1));
  out += "<redacted>";
  out += url.substr(at);
  return out;
}

}  // namespace kvtier
