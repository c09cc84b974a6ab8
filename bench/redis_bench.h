// The remote-tier measurement behind `kvtier bench remote` and
// `kvtier bench tiers --remote URL`: RemoteTier write and read bandwidth
// against the limit measured in the same run on the same server — plain
// pipelined SET/GET of values of the same size, issued by the bench itself
// through the same client (no entry encoding, no verification, no copy out).
// Raw SETs are gather writes like the tier's (head, value in place, tail);
// SETs copied through hiredis's output buffer are reported beside them.
// Also measures layer-by-layer reads, with GETRANGE and with whole-value GETs.
// The tier is measured twice in the same run, plain and with a tier secret
// (authenticated entries, tiers/chunk_auth.h), batches alternating.
// Single-threaded driver; writes fresh keys and deletes them afterwards.
#pragma once

#include <string>

#include "kvtier/status.h"
#include "kvtier/types.h"

namespace kvtier {

struct RemoteBenchOptions {
  std::string url;                        // redis://host:port[,host:port...] (tier URL options allowed)
  size_t total_bytes = size_t(64) << 20;  // payload bytes per figure
  uint32_t batch_chunks = 8;              // chunks per put_batch/get_batch call (one pipeline)
  uint32_t rounds = 3;                    // each figure is the median of this many rounds
  KVGeometry geometry{.num_layers = 16, .num_kv_heads = 4, .head_dim = 64, .dtype = DType::kF16, .page_tokens = 16};
  uint32_t chunk_pages = 16;

  Status validate() const;
};

struct RemoteBenchResult {
  size_t chunk_payload_bytes = 0, value_bytes = 0, chunks = 0;
  double redis_raw_gbps = 0;       // pipelined GET of value_bytes values
  double redis_raw_set_gbps = 0;   // pipelined SET of value_bytes values, one gather write each (the baseline)
  double redis_raw_set_buffered_gbps = 0;  // the same SETs copied through hiredis's output buffer
  double remote_write_gbps = 0;    // RemoteTier::put_batch, payload bytes
  double remote_read_gbps = 0;     // RemoteTier::get_batch of whole chunks, payload bytes, verified
  double remote_layer_read_gbps = 0;        // one get_batch per layer, GETRANGE
  double remote_layer_read_whole_gbps = 0;  // one get_batch per layer, whole-value GET each time
  // The same three with a tier secret (authenticated entries: HMAC entry tag, GMAC layer tags).
  double remote_write_mac_gbps = 0, remote_read_mac_gbps = 0, remote_layer_read_mac_gbps = 0;
  bool cluster = false;
  size_t nodes = 0;

  std::string to_json() const;   // one JSON object
  std::string to_table() const;  // human-readable
};

Result<RemoteBenchResult> run_remote_bench(const RemoteBenchOptions& options);

}  // namespace kvtier
