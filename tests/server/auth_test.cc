// Keys: the tenant keys file's grammar, the key sources and how they combine,
// private files, and reloading.
#include "server/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "e2e/e2e_util.h"
#include "common/secrets.h"
#include "server/config.h"

namespace kvtier::server {
namespace {

using kvtier::testing::TempDir;

constexpr const char* kAcmeKey = "acme-key-0123456789";
constexpr const char* kAcmeKey2 = "acme-key-second-0123";
constexpr const char* kGlobexKey = "globex-key-0123456789";
constexpr const char* kAdminKey = "admin-key-0123456789";

std::string write(const TempDir& dir, const std::string& name, const std::string& text, mode_t mode = 0600) {
  const std::string path = dir.str() + "/" + name;
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

// Every test starts without the environment's keys.
class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_secret_lookup([](const char* name) -> const char* { return std::getenv(name); });  // as the executable's main() does
    ::unsetenv("KVTIER_API_KEY");
    ::unsetenv("KVTIER_ADMIN_KEY");
  }
  void TearDown() override { SetUp(); }
  TempDir dir_;
};

TEST_F(AuthTest, KeysFileGrammar) {
  const std::string text = std::string("# tenants\n\n") + kAcmeKey + " acme device=64MiB host=1GiB\r\n" + kAcmeKey2 +
                           "\tacme device=64MiB host=1GiB   # a second key\n" + kGlobexKey + " globex disk=2GiB";
  auto keys = parse_tenant_keys(text, "keys");
  ASSERT_TRUE(keys.ok()) << keys.status().to_string();
  ASSERT_EQ(keys->size(), 3u);
  EXPECT_EQ((*keys)[0].tenant, "acme");
  EXPECT_EQ((*keys)[0].quota, (TenantQuota{64ull << 20, 1ull << 30, 0}));
  EXPECT_EQ((*keys)[1].key, kAcmeKey2);
  EXPECT_EQ((*keys)[2].quota.disk, 2ull << 30);
}

TEST_F(AuthTest, KeysFileErrorsNameTheLineNeverTheKey) {
  struct Case {
    std::string text, expect;
  };
  const Case cases[] = {
      {"short-key acme\n", "keys:1: the key must be at least 16"},
      {std::string(kAcmeKey) + "\n", "keys:1: expected KEY TENANT"},
      {std::string(kAcmeKey) + " ac:me\n", "keys:1: the tenant must be"},
      {std::string(kAcmeKey) + " acme gpu=1GiB\n", "keys:1: expected device=SIZE"},
      // A line that ran into the next key (its newline lost): that key is not echoed either.
      {std::string(kAcmeKey) + " acme host=1GiB " + kAcmeKey2 + "\n", "keys:1: expected device=SIZE"},
      {std::string(kAcmeKey) + " acme host=lots\n", "keys:1: host= needs a positive size"},
      {std::string(kAcmeKey) + " acme\n" + kAcmeKey + " globex\n", "keys:2: this key is already listed on line 1"},
      {std::string(kAcmeKey) + " acme host=1GiB\n" + kAcmeKey2 + " acme host=2GiB\n", "keys:2: tenant 'acme' has other quotas"},
  };
  for (const Case& c : cases) {
    auto r = parse_tenant_keys(c.text, "keys");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find("key-0123"), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find("key-second"), std::string::npos) << r.status().message();
  }
}

TEST_F(AuthTest, TenantsAndAdmin) {
  ServerConfig c;
  c.api_keys_file = write(dir_, "keys", std::string(kAcmeKey) + " acme host=1GiB\n" + kGlobexKey + " globex\n");
  c.admin_key_file = write(dir_, "admin", std::string(kAdminKey) + "\n");
  std::vector<std::string> warnings;
  auto ring = KeyRing::create(c, &warnings);
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ((*ring)->mode(), AuthMode::kTenantKeys);
  auto acme = (*ring)->authenticate(kAcmeKey);
  ASSERT_TRUE(acme);
  EXPECT_EQ(acme->tenant, "acme");
  EXPECT_FALSE(acme->admin);
  auto admin = (*ring)->authenticate(kAdminKey);
  ASSERT_TRUE(admin);
  EXPECT_TRUE(admin->admin);
  EXPECT_EQ(admin->tenant, kAdminTenant);  // its completions run in a namespace of their own
  EXPECT_FALSE((*ring)->authenticate(""));
  EXPECT_FALSE((*ring)->authenticate("acme"));
  EXPECT_EQ((*ring)->quotas().at("acme").host, 1ull << 30);
  // Disk quotas are enforced like the others (KVCache::set_tenant_quotas): nothing to warn of.
  write(dir_, "keys", std::string(kAcmeKey) + " acme disk=1GiB\n");
  warnings.clear();
  auto with_disk = KeyRing::create(c, &warnings);
  ASSERT_TRUE(with_disk.ok());
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ((*with_disk)->quotas().at("acme").disk, 1ull << 30);
}

TEST_F(AuthTest, WorldReadableKeyFilesAreRefused) {
  ServerConfig c;
  c.api_keys_file = write(dir_, "keys", std::string(kAcmeKey) + " acme\n", 0644);
  auto ring = KeyRing::create(c);
  ASSERT_FALSE(ring.ok());
  EXPECT_NE(ring.status().message().find("readable by every user (mode 0644)"), std::string::npos);
  EXPECT_NE(ring.status().message().find("chmod o-r"), std::string::npos);
  ServerConfig a;
  a.admin_key_file = write(dir_, "admin", kAdminKey, 0604);
  EXPECT_FALSE(KeyRing::create(a).ok());
}

TEST_F(AuthTest, KeySourcesAndTheirConflicts) {
  {  // no key: everything open, no tenant
    auto ring = KeyRing::create(ServerConfig{});
    ASSERT_TRUE(ring.ok());
    EXPECT_EQ((*ring)->mode(), AuthMode::kNone);
    EXPECT_TRUE((*ring)->authenticate("")->admin);
  }
  {  // a lone legacy key is tenant and admin, with warnings (on argv; admin too)
    ServerConfig c;
    c.api_key = "sekret-0123456789";
    std::vector<std::string> warnings;
    auto ring = KeyRing::create(c, &warnings);
    ASSERT_TRUE(ring.ok());
    EXPECT_EQ((*ring)->mode(), AuthMode::kApiKey);
    EXPECT_EQ(warnings.size(), 2u);
    auto who = (*ring)->authenticate("sekret-0123456789");
    ASSERT_TRUE(who);
    EXPECT_TRUE(who->admin);
    EXPECT_EQ(who->tenant, "");  // today's namespace seeds
  }
  {  // a flag key meets the rule a file's or the environment's does: 16 printable characters
    for (const char* weak : {"sekret", "sixteen chars ok"}) {
      ServerConfig c;
      c.api_key = weak;
      auto ring = KeyRing::create(c);
      ASSERT_FALSE(ring.ok()) << weak;
      EXPECT_NE(ring.status().message().find("at least 16"), std::string::npos) << ring.status().to_string();
    }
  }
  {  // KVTIER_API_KEY and KVTIER_ADMIN_KEY: a client key apart from the admin's
    ::setenv("KVTIER_API_KEY", "client-key-from-env-01", 1);
    ::setenv("KVTIER_ADMIN_KEY", kAdminKey, 1);
    std::vector<std::string> warnings;
    auto ring = KeyRing::create(ServerConfig{}, &warnings);
    ASSERT_TRUE(ring.ok()) << ring.status().to_string();
    EXPECT_TRUE(warnings.empty());
    EXPECT_FALSE((*ring)->authenticate("client-key-from-env-01")->admin);
    EXPECT_TRUE((*ring)->authenticate(kAdminKey)->admin);
    ::setenv("KVTIER_ADMIN_KEY", "short", 1);
    auto bad = KeyRing::create(ServerConfig{});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("KVTIER_ADMIN_KEY"), std::string::npos);
    ::setenv("KVTIER_ADMIN_KEY", "client-key-from-env-01", 1);
    EXPECT_FALSE(KeyRing::create(ServerConfig{}).ok()) << "the admin key may not be a client key";
  }
  SetUp();
  {  // an API key beside the tenants file is refused: every client key has a tenant
    ServerConfig c;
    c.api_keys_file = write(dir_, "keys", std::string(kAcmeKey) + " acme\n");
    c.api_key = "legacy-key-0123456789";
    EXPECT_FALSE(KeyRing::create(c).ok());
    c.api_key.clear();
    std::vector<std::string> warnings;
    ASSERT_TRUE(KeyRing::create(c, &warnings).ok());
    ASSERT_EQ(warnings.size(), 1u);  // no admin key: the admin endpoints are closed
    EXPECT_NE(warnings[0].find("403"), std::string::npos);
  }
}

TEST_F(AuthTest, ReloadSwapsTheKeysOrKeepsThemOnError) {
  ServerConfig c;
  c.api_keys_file = write(dir_, "keys", std::string(kAcmeKey) + " acme\n");
  auto ring = KeyRing::create(c);
  ASSERT_TRUE(ring.ok());
  write(dir_, "keys", std::string(kGlobexKey) + " globex\n");
  ASSERT_TRUE((*ring)->reload().ok());
  EXPECT_FALSE((*ring)->authenticate(kAcmeKey));
  EXPECT_EQ((*ring)->authenticate(kGlobexKey)->tenant, "globex");
  write(dir_, "keys", "not a valid line\n");
  EXPECT_FALSE((*ring)->reload().ok());
  EXPECT_EQ((*ring)->authenticate(kGlobexKey)->tenant, "globex") << "a bad file keeps the keys in use";
}

}  // namespace
}  // namespace kvtier::server
