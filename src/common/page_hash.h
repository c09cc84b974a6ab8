// Chained page hashing (DESIGN §4): h_i = H(h_{i-1} || tokens of page i),
// h_{-1} = namespace_seed(ns). The byte encoding is fixed (little-endian
// h.lo, h.hi, then each token as little-endian int32) so that every process
// and build agrees; tests pin test vectors. Stateless and thread-safe.
#pragma once

#include <span>
#include <vector>

#include "kvtier/namespace.h"

namespace kvtier {

// Hash of one page given the previous hash in the chain.
PageHash hash_page(HashAlgo algo, const PageHash& prev, std::span<const TokenId> page_tokens);

// Hashes of every *whole* page of `tokens` (a trailing partial page is
// ignored), starting the chain at `prev`. Appends to `out`.
void hash_pages(HashAlgo algo, const PageHash& prev, std::span<const TokenId> tokens, uint32_t page_tokens,
                std::vector<PageHash>& out);

// Arbitrary bytes → 128-bit hash (used for namespaces, fingerprints, checksums of keys).
PageHash hash_bytes(HashAlgo algo, const void* data, size_t len);

// hash_bytes(kXXH3_128, ...) of bytes given piece by piece: the digest equals the hash of
// every update's bytes concatenated. Not copyable; one thread at a time.
class StreamHash128 {
 public:
  StreamHash128();
  ~StreamHash128();
  StreamHash128(const StreamHash128&) = delete;
  StreamHash128& operator=(const StreamHash128&) = delete;
  void update(const void* data, size_t len);
  PageHash digest() const;

 private:
  void* state_;  // XXH3_state_t
};

// Fast 64-bit checksum of a byte range (XXH3-64); used by on-disk formats.
uint64_t checksum64(const void* data, size_t len, uint64_t seed = 0);

}  // namespace kvtier
