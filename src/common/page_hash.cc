#include "common/page_hash.h"

#include <openssl/evp.h>
#include <xxhash.h>
#if defined(__x86_64__)
// XXH3 in the widest vector code this CPU has (AVX-512, AVX2 or SSE2), chosen by libxxhash at run
// time: the same values as the plain entry points, which Debian's library builds for baseline
// x86-64 only (4.5 GB/s on a 1 MiB layer against 80+ with AVX-512; docs/PERF.md). The header
// renames XXH3_* below to their *_dispatch forms.
#include <xxh_x86dispatch.h>
#endif

#include <bit>
#include <new>
#include <cstring>
#include <stdexcept>

namespace kvtier {

static_assert(std::endian::native == std::endian::little, "kvtier's hash encoding assumes a little-endian host");

namespace {

PageHash from_xxh128(XXH128_hash_t h) { return PageHash{h.low64, h.high64}; }

PageHash sha256_128(const void* a, size_t alen, const void* b, size_t blen) {
  unsigned char md[32];
  unsigned int mdlen = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  if (alen) EVP_DigestUpdate(ctx, a, alen);
  if (blen) EVP_DigestUpdate(ctx, b, blen);
  EVP_DigestFinal_ex(ctx, md, &mdlen);
  EVP_MD_CTX_free(ctx);
  PageHash h;
  std::memcpy(&h.lo, md, 8);
  std::memcpy(&h.hi, md + 8, 8);
  return h;
}

}  // namespace

PageHash hash_page(HashAlgo algo, const PageHash& prev, std::span<const TokenId> toks) {
  if (toks.empty()) return prev;
  if (algo == HashAlgo::kSHA256) return sha256_128(&prev, sizeof(prev), toks.data(), toks.size_bytes());
  // XXH3-128 over [prev (16 bytes) | tokens]; hash_pages uses the same bytes.
  std::vector<PageHash> out;
  hash_pages(algo, prev, toks, static_cast<uint32_t>(toks.size()), out);
  return out.empty() ? prev : out[0];
}

void hash_pages(HashAlgo algo, const PageHash& prev, std::span<const TokenId> tokens, uint32_t page_tokens,
                std::vector<PageHash>& out) {
  const size_t n = tokens.size() / page_tokens;
  PageHash h = prev;
  if (algo == HashAlgo::kXXH3_128) {
    // One contiguous buffer [prev(16 bytes) | page tokens] avoids the streaming state.
    alignas(16) unsigned char buf[16 + 4 * 1024];
    const size_t page_bytes = size_t(page_tokens) * sizeof(TokenId);
    if (page_bytes <= 4 * 1024) {  // larger pages take the streaming path below
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(buf, &h, 16);
        std::memcpy(buf + 16, tokens.data() + i * page_tokens, page_bytes);
        h = from_xxh128(XXH3_128bits(buf, 16 + page_bytes));
        out.push_back(h);
      }
      return;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    auto page = tokens.subspan(i * page_tokens, page_tokens);
    if (algo == HashAlgo::kSHA256) {
      h = sha256_128(&h, sizeof(h), page.data(), page.size_bytes());
    } else {
      XXH3_state_t* st = XXH3_createState();
      XXH3_128bits_reset(st);
      XXH3_128bits_update(st, &h, sizeof(h));
      XXH3_128bits_update(st, page.data(), page.size_bytes());
      h = from_xxh128(XXH3_128bits_digest(st));
      XXH3_freeState(st);
    }
    out.push_back(h);
  }
}

PageHash hash_bytes(HashAlgo algo, const void* data, size_t len) {
  if (algo == HashAlgo::kSHA256) return sha256_128(data, len, nullptr, 0);
  return from_xxh128(XXH3_128bits(data, len));
}

StreamHash128::StreamHash128() : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
StreamHash128::~StreamHash128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void StreamHash128::update(const void* data, size_t len) {
  if (len) XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, len);
}
PageHash StreamHash128::digest() const { return from_xxh128(XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_))); }

uint64_t checksum64(const void* data, size_t len, uint64_t seed) { return XXH3_64bits_withSeed(data, len, seed); }

}  // namespace kvtier
