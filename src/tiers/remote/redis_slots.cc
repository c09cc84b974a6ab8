#include "tiers/remote/redis_slots.h"

#include <hiredis/hiredis.h>

#include <charconv>

namespace kvtier {

uint16_t crc16_xmodem(std::string_view data) {
  // Bitwise form: keys are short (about 80 bytes), so a table buys little.
  uint16_t crc = 0;
  for (unsigned char byte : data) {
    crc ^= static_cast<uint16_t>(byte) << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : static_cast<uint16_t>(crc << 1);
  }
  return crc;
}

uint16_t redis_key_slot(std::string_view key) {
  // Only the first '{' counts, and only when a '}' follows with something between.
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16_xmodem(key) & (kRedisSlots - 1);
}

Result<RedisEndpoint> parse_redis_endpoint(std::string_view s) {
  RedisEndpoint e;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return Status::InvalidArgument("bad Redis address '" + std::string(s) + "' (expected [ipv6]:port)");
    e.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) return Status::InvalidArgument("Redis address '" + std::string(s) + "' lacks a :port");
    e.host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (e.host.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return Status::InvalidArgument("bad Redis address '" + std::string(s) + "' (expected host:port, port 1..65535)");
  e.port = static_cast<uint16_t>(value);
  return e;
}

uint16_t RedisSlotMap::node_index(const RedisEndpoint& e) {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i] == e) return static_cast<uint16_t>(i);
  nodes.push_back(e);
  return static_cast<uint16_t>(nodes.size() - 1);
}

uint32_t RedisSlotMap::covered_slots() const {
  uint32_t n = 0;
  for (uint16_t o : owner) n += o != kNoOwner;
  return n;
}

Result<RedisSlotMap> parse_cluster_slots(const redisReply* r, const std::string& fallback_host) {
  if (!r || r->type != REDIS_REPLY_ARRAY) return Status::Corruption("CLUSTER SLOTS: reply is not an array");
  RedisSlotMap map;
  // Each element: [start, end, [master host, port, id...], [replica...]...].
  for (size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2)
      return Status::Corruption("CLUSTER SLOTS: malformed slot range");
    const long long lo = e->element[0]->integer, hi = e->element[1]->integer;
    if (lo < 0 || hi < lo || hi >= kRedisSlots) return Status::Corruption("CLUSTER SLOTS: slot range out of bounds");
    const redisReply* m = e->element[2];
    if (m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
      return Status::Corruption("CLUSTER SLOTS: malformed master address");
    const long long port = m->element[1]->integer;
    if (port < 1 || port > 65535) return Status::Corruption("CLUSTER SLOTS: master port " + std::to_string(port) + " out of range");
    RedisEndpoint ep{std::string(m->element[0]->str, m->element[0]->len), static_cast<uint16_t>(port)};
    if (ep.host.empty() || ep.host == "?") ep.host = fallback_host;
    if (map.nodes.size() >= RedisSlotMap::kNoOwner - 1) return Status::Corruption("CLUSTER SLOTS: too many masters");
    const uint16_t idx = map.node_index(ep);
    for (long long s = lo; s <= hi; ++s) map.owner[s] = idx;
  }
  return map;
}

}  // namespace kvtier
