// ChunkAuth: keyed authentication of chunk entries under a shared secret
// (docs/SECURITY.md, layout in docs/FORMATS.md).
//
// Every instance configured with the same secret derives the same three
// subkeys from it (HMAC-SHA256 of the secret over a fixed label each):
//   * name key  — Redis key names: HMAC(name key, ns ‖ chunk hash), so a
//     key name tells nothing about the prompt without the secret;
//   * entry key — the entry tag: HMAC-SHA256 over the entry's metadata
//     (header, page hashes, layer tags, nonce): binds the chunk key, the
//     geometry and every layer tag;
//   * layer key — per-entry GMAC keys: K_e = HMAC(layer key, ns ‖ hash ‖
//     nonce) with a fresh random 128-bit nonce per written entry; layer l's
//     tag is AES-256-GMAC(K_e, iv = l) over the layer's bytes. A layer is
//     verified by itself as it lands, at GHASH speed (several GB/s), and
//     each derived key authenticates each IV once, as GMAC requires.
// Without the secret nobody can name an entry, nor write one a holder of the
// secret accepts. It does not hide the KV bytes (no encryption) and it does
// not help against anyone who holds the secret.
//
// Thread safety: immutable after create(); every method is const and safe
// to call from any thread (each call uses its own OpenSSL contexts).
// Ownership: share it as std::shared_ptr<const ChunkAuth>.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "kvtier/types.h"

struct evp_cipher_ctx_st;  // OpenSSL's EVP_CIPHER_CTX

namespace kvtier {

inline constexpr size_t kMinTierSecretBytes = 16;
inline constexpr size_t kChunkNonceBytes = 16;
inline constexpr size_t kChunkLayerTagBytes = 16;
inline constexpr size_t kChunkEntryTagBytes = 32;

using ChunkNonce = std::array<uint8_t, kChunkNonceBytes>;
using LayerTag = std::array<uint8_t, kChunkLayerTagBytes>;
using EntryTag = std::array<uint8_t, kChunkEntryTagBytes>;

// The tier secret (read_secret, common/secrets.h): from `path` when named,
// else from KVTIER_TIER_SECRET; at least kMinTierSecretBytes bytes, e.g.
// `head -c 32 /dev/urandom | base64 > FILE`. nullopt: neither is given.
inline constexpr const char* kTierSecretEnv = "KVTIER_TIER_SECRET";
Result<std::optional<std::string>> read_tier_secret(const std::string& path);

class ChunkAuth {
 public:
  // `secret` must hold at least kMinTierSecretBytes bytes.
  static Result<std::shared_ptr<const ChunkAuth>> create(std::string_view secret);
  ~ChunkAuth();
  ChunkAuth(const ChunkAuth&) = delete;
  ChunkAuth& operator=(const ChunkAuth&) = delete;

  // 32 hex digits naming the chunk (ns, hash) under this secret.
  std::string key_name(const PageHash& ns, const PageHash& hash) const;
  // The entry tag over `parts`, concatenated.
  EntryTag entry_tag(std::span<const std::span<const std::byte>> parts) const;
  // A fresh random nonce (OpenSSL's CSPRNG).
  static Result<ChunkNonce> new_nonce();

  // Tags the layers of one entry: holds the entry's derived GMAC key.
  class LayerTagger {
   public:
    ~LayerTagger();
    LayerTagger(LayerTagger&&) noexcept;
    LayerTagger& operator=(LayerTagger&&) = delete;
    // Tag of layer `layer` whose bytes are `data`.
    Result<LayerTag> tag(uint32_t layer, std::span<const std::byte> data);

   private:
    friend class ChunkAuth;
    explicit LayerTagger(evp_cipher_ctx_st* ctx) : ctx_(ctx) {}
    evp_cipher_ctx_st* ctx_;  // AES-256-GCM keyed with K_e
  };
  Result<LayerTagger> layer_tagger(const PageHash& ns, const PageHash& hash, const ChunkNonce& nonce) const;

 private:
  struct Keys;
  explicit ChunkAuth(std::unique_ptr<Keys> k);
  std::unique_ptr<Keys> keys_;
};

// Constant-time comparison of two equally long tags.
bool tags_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace kvtier
