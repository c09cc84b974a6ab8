// RemoteTierOptions::from_url: the `--remote redis://...` syntax (docs/REMOTE.md).
#include <algorithm>
#include <charconv>

#include "common/secrets.h"
#include "tiers/remote/remote_tier.h"

namespace kvtier {

namespace {

Result<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    unsigned v = 0;
    if (i + 2 >= s.size()) return Status::InvalidArgument("remote URL: bad %-escape");
    auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
    if (ec != std::errc() || end != s.data() + i + 3) return Status::InvalidArgument("remote URL: bad %-escape");
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

Result<uint64_t> parse_uint(std::string_view name, std::string_view v) {
  uint64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    return Status::InvalidArgument("remote URL: option " + std::string(name) + " needs a non-negative integer, got '" +
                                   std::string(v) + "'");
  return x;
}

Result<bool> parse_bool(std::string_view name, std::string_view v) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  return Status::InvalidArgument("remote URL: option " + std::string(name) + " needs 0 or 1, got '" + std::string(v) +
                                 "'");
}

using ms = std::chrono::milliseconds;

// A `?name=value` option of the URL and how its value sets the options.
struct UrlOption {
  std::string_view name;
  Status (*apply)(RemoteTierOptions& o, std::string_view name, std::string_view value);
};

Result<ms> parse_ms(std::string_view name, std::string_view v, uint64_t scale = 1) {
  KVTIER_ASSIGN_OR_RETURN(uint64_t x, parse_uint(name, v));
  return ms(x * scale);
}

// Stores a parsed value in `field`, or passes the parse failure on.
template <class T>
Status store(T& field, Result<T> parsed) {
  if (!parsed.ok()) return parsed.status();
  field = std::move(parsed).value();
  return Status::Ok();
}

constexpr UrlOption kUrlOptions[] = {
    {"connect_timeout_ms", [](RemoteTierOptions& o, std::string_view k,
                              std::string_view v) { return store(o.redis.connect_timeout, parse_ms(k, v)); }},
    {"timeout_ms", [](RemoteTierOptions& o, std::string_view k,
                      std::string_view v) { return store(o.redis.command_timeout, parse_ms(k, v)); }},
    {"call_timeout_ms", [](RemoteTierOptions& o, std::string_view k,
                           std::string_view v) { return store(o.redis.call_timeout, parse_ms(k, v)); }},
    {"ttl_s",
     [](RemoteTierOptions& o, std::string_view k, std::string_view v) { return store(o.ttl, parse_ms(k, v, 1000)); }},
    {"ttl_ms",
     [](RemoteTierOptions& o, std::string_view k, std::string_view v) { return store(o.ttl, parse_ms(k, v)); }},
    {"pool",
     [](RemoteTierOptions& o, std::string_view k, std::string_view v) -> Status {
       KVTIER_ASSIGN_OR_RETURN(uint64_t x, parse_uint(k, v));
       o.redis.pool_size = static_cast<uint32_t>(std::min<uint64_t>(x, 1u << 20));
       return Status::Ok();
     }},
    {"cluster",
     [](RemoteTierOptions& o, std::string_view, std::string_view v) -> Status {
       if (v == "auto")
         o.redis.cluster = RedisClusterMode::kAuto;
       else if (v == "on" || v == "1" || v == "yes")
         o.redis.cluster = RedisClusterMode::kOn;
       else if (v == "off" || v == "0" || v == "no")
         o.redis.cluster = RedisClusterMode::kOff;
       else
         return Status::InvalidArgument("remote URL: cluster must be auto, on or off");
       return Status::Ok();
     }},
    {"range_reads", [](RemoteTierOptions& o, std::string_view k,
                       std::string_view v) { return store(o.range_reads, parse_bool(k, v)); }},
    {"refresh_ttl", [](RemoteTierOptions& o, std::string_view k,
                       std::string_view v) { return store(o.refresh_ttl_on_hit, parse_bool(k, v)); }},
    {"backoff_ms", [](RemoteTierOptions& o, std::string_view k,
                      std::string_view v) { return store(o.backoff_initial, parse_ms(k, v)); }},
    {"backoff_max_ms",
     [](RemoteTierOptions& o, std::string_view k, std::string_view v) { return store(o.backoff_max, parse_ms(k, v)); }},
    {"tls",
     [](RemoteTierOptions&, std::string_view k, std::string_view v) -> Status {
       KVTIER_ASSIGN_OR_RETURN(bool tls, parse_bool(k, v));
       return tls ? Status::Unimplemented("remote URL: TLS is not supported") : Status::Ok();
     }},
};

// `name=value&...` after the `?`: each pair applied through kUrlOptions.
Status apply_query(RemoteTierOptions& o, std::string_view query) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos)
      return Status::InvalidArgument("remote URL: option '" + std::string(kv) + "' needs =value");
    const std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    const auto* opt =
        std::find_if(std::begin(kUrlOptions), std::end(kUrlOptions), [&](const UrlOption& u) { return u.name == k; });
    if (opt == std::end(kUrlOptions)) {
      std::string known;
      for (const UrlOption& u : kUrlOptions) known += (known.empty() ? "" : ", ") + std::string(u.name);
      return Status::InvalidArgument("remote URL: unknown option '" + std::string(k) + "' (" + known + ")");
    }
    KVTIER_RETURN_IF_ERROR(opt->apply(o, k, v));
  }
  return Status::Ok();
}

// `[user:]password@host:port[,host:port...]`: the credentials and the seed nodes.
Status apply_authority(RemoteTierOptions& o, std::string_view rest) {
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = cred.find(':');
    if (colon == std::string_view::npos) {
      KVTIER_ASSIGN_OR_RETURN(o.redis.password, percent_decode(cred));  // redis://secret@host:port
    } else {
      KVTIER_ASSIGN_OR_RETURN(o.redis.username, percent_decode(cred.substr(0, colon)));
      KVTIER_ASSIGN_OR_RETURN(o.redis.password, percent_decode(cred.substr(colon + 1)));
    }
  }
  if (rest.empty()) return Status::InvalidArgument("remote URL: no host:port given");
  for (bool more = true; more;) {
    const size_t comma = rest.find(',');
    KVTIER_ASSIGN_OR_RETURN(RedisEndpoint ep, parse_redis_endpoint(rest.substr(0, comma)));
    o.redis.seeds.push_back(std::move(ep));
    more = comma != std::string_view::npos;
    if (more) rest = rest.substr(comma + 1);  // "a:1," leaves an empty address: an error above
  }
  return Status::Ok();
}

}  // namespace

Result<RemoteTierOptions> RemoteTierOptions::from_url(std::string_view url, const ChunkGeometry& geometry) {
  RemoteTierOptions o;
  o.geometry = geometry;
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, 9) == "rediss://")
    return Status::Unimplemented("remote URL: TLS (rediss://) is not supported; use redis:// on a trusted network");
  if (url.substr(0, kScheme.size()) != kScheme)
    return Status::InvalidArgument("remote URL '" + redact_url_credentials(url) + "' must start with redis://");
  std::string_view rest = url.substr(kScheme.size());
  // An '@' past the first '/' or '?' is a password holding one of them: parsed as it stands, part of
  // the password became a host name, and the error printed it.
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos && rest.find_first_of("/?") < at)
    return Status::InvalidArgument("remote URL: the credentials hold '/' or '?': percent-encode them (%2F, %3F), or "
                                   "give the password in KVTIER_REDIS_PASSWORD or --remote-password-file");
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    if (rest.substr(slash + 1) != "0")
      return Status::InvalidArgument("remote URL: only database 0 is supported (Redis Cluster has no others)");
    rest = rest.substr(0, slash);
  }
  KVTIER_RETURN_IF_ERROR(apply_authority(o, rest));
  KVTIER_RETURN_IF_ERROR(apply_query(o, query));
  KVTIER_RETURN_IF_ERROR(o.validate());
  return o;
}

}  // namespace kvtier
