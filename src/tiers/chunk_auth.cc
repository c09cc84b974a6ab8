#include "tiers/chunk_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <climits>
#include <cstring>

#include "common/secrets.h"

namespace kvtier {

namespace {

constexpr size_t kSubkeyBytes = 32;

// An HMAC-SHA256 context already keyed: dup'ed per use, never used itself.
struct MacTemplate {
  EVP_MAC_CTX* ctx = nullptr;
  ~MacTemplate() { EVP_MAC_CTX_free(ctx); }
};

Status openssl_error(const char* what) { return Status::Internal(std::string("OpenSSL: ") + what + " failed"); }

Status init_hmac(EVP_MAC* mac, std::span<const std::byte> key, MacTemplate& out) {
  out.ctx = EVP_MAC_CTX_new(mac);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
  if (!out.ctx || !EVP_MAC_init(out.ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params))
    return openssl_error("HMAC init");
  return Status::Ok();
}

// HMAC(template's key, parts...) into `out` (32 bytes).
bool hmac_parts(const MacTemplate& t, std::span<const std::span<const std::byte>> parts, uint8_t* out) {
  EVP_MAC_CTX* c = EVP_MAC_CTX_dup(t.ctx);
  bool ok = c != nullptr;
  for (const auto& p : parts)
    ok = ok && EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(p.data()), p.size());
  size_t len = 0;
  ok = ok && EVP_MAC_final(c, out, &len, kSubkeyBytes) && len == kSubkeyBytes;
  EVP_MAC_CTX_free(c);
  return ok;
}

std::span<const std::byte> bytes_of(const PageHash& h) { return std::as_bytes(std::span(&h, 1)); }

}  // namespace

struct ChunkAuth::Keys {
  EVP_MAC* hmac = nullptr;
  EVP_CIPHER* gcm = nullptr;
  MacTemplate name, entry, layer;
  ~Keys() {
    EVP_MAC_free(hmac);
    EVP_CIPHER_free(gcm);
  }
};

Result<std::optional<std::string>> read_tier_secret(const std::string& path) {
  return read_secret(path, kTierSecretEnv, path.empty() ? "tier secret" : "tier secret file", kMinTierSecretBytes);
}

ChunkAuth::ChunkAuth(std::unique_ptr<Keys> k) : keys_(std::move(k)) {}
ChunkAuth::~ChunkAuth() = default;

Result<std::shared_ptr<const ChunkAuth>> ChunkAuth::create(std::string_view secret) {
  if (secret.size() < kMinTierSecretBytes)
    return Status::InvalidArgument("tier secret: needs at least " + std::to_string(kMinTierSecretBytes) + " bytes");
  auto k = std::make_unique<Keys>();
  k->hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  k->gcm = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (!k->hmac || !k->gcm) return openssl_error("fetching HMAC / AES-256-GCM");
  MacTemplate root;
  KVTIER_RETURN_IF_ERROR(init_hmac(k->hmac, std::as_bytes(std::span(secret.data(), secret.size())), root));
  // One subkey per purpose, so no tag of one kind is ever valid as another.
  const std::pair<const char*, MacTemplate*> subkeys[] = {
      {"kvtier tier secret v1: key names", &k->name},
      {"kvtier tier secret v1: entry tags", &k->entry},
      {"kvtier tier secret v1: layer keys", &k->layer}};
  for (const auto& [label, dst] : subkeys) {
    uint8_t sub[kSubkeyBytes];
    const std::span<const std::byte> part = std::as_bytes(std::span(label, std::strlen(label)));
    const bool ok = hmac_parts(root, {&part, 1}, sub);
    Status st = ok ? init_hmac(k->hmac, std::as_bytes(std::span(sub)), *dst) : openssl_error("HMAC");
    OPENSSL_cleanse(sub, sizeof sub);
    KVTIER_RETURN_IF_ERROR(st);
  }
  return std::shared_ptr<const ChunkAuth>(new ChunkAuth(std::move(k)));
}

std::string ChunkAuth::key_name(const PageHash& ns, const PageHash& hash) const {
  uint8_t mac[kSubkeyBytes] = {};
  const std::span<const std::byte> parts[] = {bytes_of(ns), bytes_of(hash)};
  (void)hmac_parts(keys_->name, parts, mac);  // a failed HMAC names nothing a writer used: a miss
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (size_t i = 0; i < 16; ++i) {
    out[2 * i] = kHex[mac[i] >> 4];
    out[2 * i + 1] = kHex[mac[i] & 15];
  }
  return out;
}

EntryTag ChunkAuth::entry_tag(std::span<const std::span<const std::byte>> parts) const {
  EntryTag t{};
  if (!hmac_parts(keys_->entry, parts, t.data())) t.fill(0);  // an all-zero tag never verifies a real entry
  return t;
}

Result<ChunkNonce> ChunkAuth::new_nonce() {
  ChunkNonce n;
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) return openssl_error("RAND_bytes");
  return n;
}

Result<ChunkAuth::LayerTagger> ChunkAuth::layer_tagger(const PageHash& ns, const PageHash& hash,
                                                       const ChunkNonce& nonce) const {
  uint8_t ke[kSubkeyBytes];
  const std::span<const std::byte> parts[] = {bytes_of(ns), bytes_of(hash), std::as_bytes(std::span(nonce))};
  if (!hmac_parts(keys_->layer, parts, ke)) return openssl_error("HMAC");
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  const bool ok = c && EVP_EncryptInit_ex2(c, keys_->gcm, ke, nullptr, nullptr);
  OPENSSL_cleanse(ke, sizeof ke);
  if (!ok) {
    EVP_CIPHER_CTX_free(c);
    return openssl_error("AES-256-GCM init");
  }
  return LayerTagger(c);
}

ChunkAuth::LayerTagger::~LayerTagger() { EVP_CIPHER_CTX_free(ctx_); }
ChunkAuth::LayerTagger::LayerTagger(LayerTagger&& o) noexcept : ctx_(o.ctx_) { o.ctx_ = nullptr; }

Result<LayerTag> ChunkAuth::LayerTagger::tag(uint32_t layer, std::span<const std::byte> data) {
  // GMAC: GCM with the layer as additional data and nothing to encrypt; the IV is the layer index.
  unsigned char iv[12] = {};
  std::memcpy(iv, &layer, sizeof layer);
  bool ok = ctx_ && EVP_EncryptInit_ex2(ctx_, nullptr, nullptr, iv, nullptr);
  int outl = 0;
  for (size_t off = 0; ok && off < data.size(); off += size_t(1) << 30) {
    const size_t n = std::min(data.size() - off, size_t(1) << 30);
    ok = EVP_EncryptUpdate(ctx_, nullptr, &outl, reinterpret_cast<const unsigned char*>(data.data() + off), int(n));
  }
  unsigned char none[16];
  LayerTag t;
  ok = ok && EVP_EncryptFinal_ex(ctx_, none, &outl) &&
       EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, int(t.size()), t.data());
  if (!ok) return openssl_error("GMAC");
  return t;
}

bool tags_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace kvtier
