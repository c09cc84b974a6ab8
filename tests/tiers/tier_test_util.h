// Shared fixtures for tier tests: a small geometry, deterministic chunk
// contents derived from the key, and a self-cleaning temp directory.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/page_hash.h"
#include "tiers/chunk_format.h"

namespace kvtier::testing_util {

inline ChunkGeometry small_geometry(uint32_t chunk_pages = 4) {
  return ChunkGeometry{KVGeometry{.num_layers = 4, .num_kv_heads = 2, .head_dim = 8, .dtype = DType::kF32, .page_tokens = 4},
                       chunk_pages};
}

class TempDir {
 public:
  explicit TempDir(const std::string& base = "/tmp") {
    std::string tmpl = base + "/kvtier-tiers-XXXXXX";
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline PageHash test_ns(uint64_t n) { return hash_bytes(HashAlgo::kXXH3_128, &n, sizeof n); }

// A chunk whose pages chain from `ns`, with `n` pages and contents fixed by (ns, index).
struct TestChunk {
  ChunkKey key;
  std::vector<PageHash> hashes;
  std::vector<std::byte> payload;
};

inline TestChunk make_chunk(const ChunkGeometry& g, PageHash ns, uint64_t index, uint32_t n = 0) {
  if (n == 0) n = g.chunk_pages;
  TestChunk c;
  PageHash prev = ns;
  for (uint32_t p = 0; p < n; ++p) {
    std::vector<TokenId> toks(g.kv.page_tokens);
    for (uint32_t t = 0; t < toks.size(); ++t) toks[t] = static_cast<TokenId>(index * 1000003 + p * 101 + t);
    prev = hash_page(HashAlgo::kXXH3_128, prev, toks);
    c.hashes.push_back(prev);
  }
  c.key = {ns, c.hashes.back()};
  c.payload.resize(g.payload_bytes(n));
  std::mt19937_64 rng(c.key.hash.lo ^ index);
  for (size_t i = 0; i < c.payload.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(c.payload.data() + i, &v, std::min<size_t>(8, c.payload.size() - i));
  }
  return c;
}

}  // namespace kvtier::testing_util
