#include "common/secrets.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/file_text.h"

namespace kvtier {

namespace {
// A secret's one trailing line end ("\n" or "\r\n") is not part of it, from a file (echo > f) or
// from the environment (a Kubernetes secret made --from-file): the same secret, the same bytes.
std::string without_line_end(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}
}  // namespace

Result<std::string> read_secret_file(const std::string& path, std::string_view what, size_t min_bytes) {
  auto text = read_file(path, what);
  if (!text.ok()) return Status::InvalidArgument(text.status().message());
  std::string s = without_line_end(std::move(text).value());
  if (s.size() < min_bytes)
    return Status::InvalidArgument(std::string(what) + " '" + path + "' holds fewer than " + std::to_string(min_bytes) +
                                   " bytes");
  return s;
}

namespace {
SecretLookup g_lookup = nullptr;

const char* lookup(const char* name) { return g_lookup ? g_lookup(name) : nullptr; }
}  // namespace

void set_secret_lookup(SecretLookup l) { g_lookup = l; }

Result<std::optional<std::string>> read_secret(const std::string& file, const char* env, std::string_view what,
                                               size_t min_bytes) {
  if (!file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::string s, read_secret_file(file, what, min_bytes));
    return std::optional<std::string>(std::move(s));
  }
  const char* v = lookup(env);
  if (v == nullptr || *v == '\0') return std::optional<std::string>();
  std::string s = without_line_end(v);
  if (s.size() < min_bytes)
    return Status::InvalidArgument(std::string(what) + " from " + env + " holds fewer than " + std::to_string(min_bytes) +
                                   " bytes");
  return std::optional<std::string>(std::move(s));
}

Status require_private_file(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "cannot read the " + std::string(what) + " " + path);
  if ((st.st_mode & S_IROTH) == 0) return Status::Ok();
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
  return Status::InvalidArgument("the " + std::string(what) + " " + path + " is readable by every user (mode " + mode +
                                 "): it holds secrets; run chmod o-r " + path);
}

bool secret_given(const std::string& file, const char* env) {
  const char* v = lookup(env);
  return !file.empty() || (v != nullptr && *v != '\0');
}

std::string redact_url_credentials(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t start = scheme + 3;
  // The credentials end at the URL's last '@': a password may hold '#', '/' or '?' (the Redis URL
  // parser takes '#' as part of it and refuses the others), and ending them at the first of those
  // printed such a password whole.
  const size_t at = url.rfind('@');
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
