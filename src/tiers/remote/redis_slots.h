// Redis Cluster key routing: the CRC16 hash slot of a key and the slot map
// (which master serves which of the 16384 slots), as learned from
// `CLUSTER SLOTS`. Pure value types and functions; thread-compatible (a
// RedisSlotMap is immutable once built and shared read-only).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

struct redisReply;

namespace kvtier {

inline constexpr uint32_t kRedisSlots = 16384;

// CRC16-CCITT (XMODEM: poly 0x1021, init 0, no reflection, no final xor),
// the checksum Redis Cluster hashes keys with.
uint16_t crc16_xmodem(std::string_view data);

// The cluster slot of a key: CRC16 of the key, or of the first non-empty
// `{...}` hash tag inside it, modulo 16384.
uint16_t redis_key_slot(std::string_view key);

struct RedisEndpoint {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
  bool operator==(const RedisEndpoint&) const = default;
};

// Parses "host:port" (IPv6 as "[addr]:port").
Result<RedisEndpoint> parse_redis_endpoint(std::string_view s);

// Slot → master. `nodes` lists each master once; `owner[slot]` indexes it
// (kNoOwner for slots no master serves).
struct RedisSlotMap {
  static constexpr uint16_t kNoOwner = 0xFFFF;
  std::vector<RedisEndpoint> nodes;
  std::vector<uint16_t> owner = std::vector<uint16_t>(kRedisSlots, kNoOwner);

  // Index of `e` in nodes, appending it when new.
  uint16_t node_index(const RedisEndpoint& e);
  uint32_t covered_slots() const;
};

// Builds the map from a `CLUSTER SLOTS` reply. `fallback_host` replaces an
// empty or "?" host (a node that does not know its own address).
Result<RedisSlotMap> parse_cluster_slots(const redisReply* reply, const std::string& fallback_host);

}  // namespace kvtier
