#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "server/config.h"
#include "server/config_flags.h"
#include "common/option_values.h"
#include "common/file_text.h"
#include "common/secrets.h"

namespace kvtier::server {
namespace {

TEST(SizeTest, ParsesUnits) {
  EXPECT_EQ(*parse_size("4096"), 4096u);
  EXPECT_EQ(*parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(*parse_size("8GiB"), 8ull << 30);
  EXPECT_EQ(*parse_size("8 gib"), 8ull << 30);
  EXPECT_EQ(*parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*parse_size("2GB"), 2000000000ull);
  EXPECT_EQ(*parse_size("64K"), 64ull << 10);
  EXPECT_EQ(*parse_size("1TiB"), 1ull << 40);
  EXPECT_EQ(*parse_size("10B"), 10u);
}

TEST(SizeTest, RejectsGarbage) {
  for (const char* bad : {"", "MiB", "-1GiB", "12XB", "1.2.3", "99999999999999999999TiB", "0.3B", "abc"})
    EXPECT_FALSE(parse_size(bad).ok()) << bad;
}

// Hostile numbers are refused, never thrown: a size of 5,000 digits threw out_of_range from stold
// (a SIGHUP reload of a keys file with such a quota aborted the server), and a duration past ~9e9 s
// overflowed its deadline (every request timed out at once).
TEST(SizeTest, HostileNumbersAreErrors) {
  EXPECT_FALSE(parse_size("1" + std::string(5000, '0') + ".5").ok());
  EXPECT_FALSE(parse_size("0." + std::string(5000, '0') + "1GiB").ok());
  for (const char* bad : {"1e10", "1e308h", "inf"}) EXPECT_FALSE(parse_duration(bad).ok()) << bad;
  EXPECT_TRUE(parse_duration("1e9").ok());
  ServerConfig c;
  c.limits.request_timeout_s = 1e10;
  EXPECT_FALSE(c.limits.validate().ok());
}

// A config printed by --print-config and read back does not take its placeholders for secrets:
// the API key became the literal '<set>'.
TEST(ConfigTest, APrintedSecretsPlaceholderIsNotASecret) {
  ServerConfig c;
  c.api_key = "0123456789abcdefXYZ";
  ServerConfig back;
  const Status s = apply_toml(to_toml(c), "printed", back);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("placeholder"), std::string::npos) << s.to_string();
}

// Secrets from a file and from the environment are the same bytes: one trailing line end is not
// part of either (a Kubernetes secret made --from-file keeps it in the variable).
TEST(SecretTest, ATrailingLineEndIsNotPartOfAnEnvironmentSecret) {
  set_secret_lookup([](const char*) -> const char* { return "0123456789abcdef0123\r\n"; });
  auto s = read_secret("", "KVTIER_TIER_SECRET", "tier secret", 16);
  set_secret_lookup(nullptr);
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ(**s, "0123456789abcdef0123");
}

// Only regular files are read, and small ones: a directory read as an empty config (the server
// started unconfigured), a FIFO blocked, /dev/urandom was read until memory ran out.
TEST(FileTest, OnlySmallRegularFilesAreRead) {
  const std::string dir = std::filesystem::temp_directory_path() / ("kvtier-file-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_EQ(read_file(dir, "config file").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_file("/dev/zero", "tier secret").status().code(), StatusCode::kInvalidArgument);
  {
    std::ofstream big(dir + "/big");
    big << std::string(kMaxSmallFileBytes + 1, 'x');
  }
  EXPECT_EQ(read_file(dir + "/big", "config file").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(read_file(dir + "/big", "trace", kMaxSmallFileBytes + 1).ok());
  ServerConfig c;
  EXPECT_FALSE(apply_toml_file(dir, c).ok());
  std::filesystem::remove_all(dir);
}

TEST(SizeTest, FormatsExactBinaryUnits) {
  EXPECT_EQ(format_size(512ull << 20), "512MiB");
  EXPECT_EQ(format_size(1000), "1000B");
  EXPECT_EQ(format_size(3ull << 30), "3GiB");
  EXPECT_EQ(format_size(0), "0B");
}

TEST(ConfigTest, TomlAppliesEverySection) {
  ServerConfig c;
  const char* doc = R"(
[server]
host = "0.0.0.0"
port = 9001
api_key = "k"
[model]
name = "tiny"
seed = 7
[cache]
enabled = false
kv_dtype = "f16"
page_tokens = 32
device_capacity = "1GiB"
host_capacity = 1048576
disk_dir = "/tmp/x"
write_policy = "write_back"
eviction = "lfu"
hash = "sha256"
[limits]
max_queue = 3
max_tokens = 100
request_timeout_s = 5
max_sequences = 8
)";
  ASSERT_TRUE(apply_toml(doc, "test.toml", c).ok());
  EXPECT_EQ(c.host, "0.0.0.0");
  EXPECT_EQ(c.port, 9001);
  EXPECT_EQ(c.api_key, "k");
  EXPECT_EQ(c.runtime.model, "tiny");
  EXPECT_EQ(c.runtime.model_seed, 7u);
  EXPECT_FALSE(c.runtime.cache_enabled);
  EXPECT_EQ(c.runtime.kv_dtype, DType::kF16);
  EXPECT_EQ(c.runtime.page_tokens, 32u);
  EXPECT_EQ(c.runtime.device_bytes, size_t(1) << 30);
  EXPECT_EQ(c.runtime.host_bytes, size_t(1) << 20);
  EXPECT_EQ(c.runtime.disk_dir, "/tmp/x");
  EXPECT_EQ(c.runtime.write_policy, WritePolicy::kWriteBack);
  EXPECT_EQ(c.runtime.eviction, EvictionPolicyKind::kLfu);
  EXPECT_EQ(c.runtime.hash, HashAlgo::kSHA256);
  EXPECT_EQ(c.limits.max_queue, 3u);
  EXPECT_EQ(c.limits.max_tokens, 100u);
  EXPECT_DOUBLE_EQ(c.limits.request_timeout_s, 5.0);
  EXPECT_EQ(c.runtime.max_sequences, 8u);
  EXPECT_TRUE(c.validate().ok());
}

// Every running and queued request holds a connection thread: by default there are enough for
// all of them, the event listeners' quarter and one more, so a request past the queue gets its
// 429 and /health an answer. Fewer, set by hand, is refused.
TEST(ConfigTest, ConnectionThreadsCoverEveryRequestInFlight) {
  ServerConfig c;
  ASSERT_TRUE(c.validate().ok());
  const uint32_t in_flight = c.runtime.max_sequences + c.limits.max_queue;
  EXPECT_GT(c.connection_threads(), in_flight + c.max_event_listeners());
  EXPECT_EQ(c.max_event_listeners(), c.connection_threads() / 4);
  c.limits.http_threads = 64;  // the old default, under 64 sequences + 256 queued
  const Status s = c.validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("429"), std::string::npos) << s.to_string();
  c.limits.max_queue = 16;
  c.runtime.max_sequences = 8;
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.connection_threads(), 64u);
  c.limits.http_threads = 1;
  EXPECT_FALSE(c.validate().ok());
}

TEST(ConfigTest, TomlErrorsNameTheKeyAndLeaveConfigUntouched) {
  ServerConfig c;
  auto expect_bad = [&](const char* doc, const char* needle) {
    const Status s = apply_toml(doc, "f.toml", c);
    ASSERT_FALSE(s.ok()) << doc;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_bad("[server]\nport = \"x\"\n", "server.port");
  expect_bad("[server]\nport = 70000\n", "server.port");
  expect_bad("[server]\nprot = 1\n", "unknown key 'server.prot'");
  expect_bad("[srever]\n", "unknown section");
  expect_bad("[cache]\ndevice_capacity = \"12 parsecs\"\n", "cache.device_capacity");
  expect_bad("[cache]\nwrite_policy = \"sometimes\"\n", "cache.write_policy");
  expect_bad("[cache]\nkv_dtype = \"f8\"\n", "cache.kv_dtype");
  expect_bad("[server\n", "f.toml:");
  expect_bad("[server]\nhost = \"a\"\nport = true\n", "server.port");
  EXPECT_EQ(c.host, "127.0.0.1");  // the partly applied file above changed nothing
}

TEST(ConfigTest, FlagsWinOverTheFile) {
  const auto path = std::filesystem::temp_directory_path() / ("kvtier_cfg_" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream f(path);
    f << "[server]\nport = 9100\nhost = \"127.0.0.2\"\n[cache]\ndisk_capacity = \"1GiB\"\n[model]\nname = \"tiny\"\n";
  }
  CLI::App app;
  ServeFlags flags;
  add_serve_flags(app, flags);
  const std::string p = path.string();
  std::vector<std::string> args = {"--port", "9200", "--disk-capacity", "512MiB", "--no-cache", "--config", p};
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  app.parse(args);
  auto c = resolve_config(flags);
  std::filesystem::remove(path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->port, 9200);                     // flag
  EXPECT_EQ(c->host, "127.0.0.2");              // file
  EXPECT_EQ(c->runtime.model, "tiny");          // file
  EXPECT_EQ(c->runtime.disk_bytes, size_t(512) << 20);  // flag
  EXPECT_FALSE(c->runtime.cache_enabled);       // flag
  const RuntimeOptions defaults;
  EXPECT_EQ(c->runtime.host_bytes, defaults.host_bytes);  // default
}

// Every bool option has both flags; blending is off unless --blend; the two spellings exclude each other.
TEST(ConfigTest, BoolOptionsHaveBothFlags) {
  auto parse = [](std::vector<std::string> args) -> Result<ServerConfig> {
    CLI::App app;
    ServeFlags flags;
    add_serve_flags(app, flags);
    std::reverse(args.begin(), args.end());
    app.parse(args);
    return resolve_config(flags);
  };
  auto defaults = parse({});
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_FALSE(defaults->runtime.blend.enabled);
  EXPECT_TRUE(defaults->runtime.cache_enabled);
  auto on = parse({"--blend", "--cache", "--no-layerwise"});
  ASSERT_TRUE(on.ok()) << on.status().to_string();
  EXPECT_TRUE(on->runtime.blend.enabled);
  EXPECT_TRUE(on->runtime.cache_enabled);
  EXPECT_FALSE(on->runtime.layerwise);
  auto off = parse({"--no-blend", "--no-cache", "--layerwise"});
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_FALSE(off->runtime.blend.enabled);
  EXPECT_FALSE(off->runtime.cache_enabled);
  EXPECT_TRUE(off->runtime.layerwise);
  EXPECT_THROW(parse({"--blend", "--no-blend"}), CLI::ExcludesError);
}

TEST(ConfigTest, BadFlagValuesAreErrors) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--device-capacity", "lots"}, {"--write-policy", "x"}, {"--kv-dtype", "f64"}, {"--eviction", "random"},
           {"--max-queue", "0"}, {"--config", "/nonexistent/kvtier.toml"}}) {
    CLI::App app;
    ServeFlags flags;
    add_serve_flags(app, flags);
    std::reverse(args.begin(), args.end());
    app.parse(args);
    EXPECT_FALSE(resolve_config(flags).ok()) << args.back();
  }
}

TEST(ConfigTest, HelpDocumentsEveryRequiredFlagWithDefaults) {
  CLI::App app;
  ServeFlags flags;
  add_serve_flags(app, flags);
  const std::string help = app.help();
  for (const char* f : {"--config", "--model", "--host", "--port", "--disk-dir", "--device-capacity", "--host-capacity",
                        "--disk-capacity", "--api-key", "--no-cache", "--kv-dtype", "--page-tokens", "--chunk-pages",
                        "--write-policy", "--eviction", "--profile", "--remote", "--max-queue", "--max-tokens",
                        "--max-prompt-tokens", "--request-timeout"})
    EXPECT_NE(help.find(f), std::string::npos) << f;
  EXPECT_NE(help.find("(default: 8000)"), std::string::npos);
  EXPECT_NE(help.find("(default: 127.0.0.1)"), std::string::npos);
  EXPECT_NE(help.find("(default: 512MiB)"), std::string::npos);
}

TEST(ConfigTest, PrintedConfigReadsBack) {
  ServerConfig c;
  c.runtime.model = "tiny";
  c.runtime.disk_dir = "/var/cache/kv";
  c.runtime.host_bytes = size_t(3) << 30;
  c.limits.max_queue = 17;
  ServerConfig back;
  const Status s = apply_toml(to_toml(c), "printed", back);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(back.runtime.model, "tiny");
  EXPECT_EQ(back.runtime.disk_dir, "/var/cache/kv");
  EXPECT_EQ(back.runtime.host_bytes, size_t(3) << 30);
  EXPECT_EQ(back.limits.max_queue, 17u);
}

TEST(ConfigTest, PrintedConfigNeverShowsTheRedisPassword) {
  // From a flag and from a config file alike; the file names of secrets are shown, never their contents.
  CLI::App app;
  ServeFlags flags;
  add_serve_flags(app, flags);
  std::vector<std::string> args = {"--tier-secret-file", "/run/secrets/tier", "--remote-password-file", "/run/secrets/redis",
                                   "--metrics-public", "--disk-authenticate",
                                   "--remote", "redis://app:hunter2@10.0.0.1:6379?timeout_ms=100"};
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  ASSERT_NO_THROW(app.parse(args));
  auto c = resolve_config(flags);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::string printed = to_toml(*c);
  EXPECT_EQ(printed.find("hunter2"), std::string::npos) << printed;
  EXPECT_NE(printed.find("redis://app:<redacted>@10.0.0.1:6379?timeout_ms=100"), std::string::npos) << printed;
  ServerConfig back;
  ASSERT_TRUE(apply_toml(printed, "printed", back).ok());
  EXPECT_EQ(back.runtime.tier_secret_file, "/run/secrets/tier");
  EXPECT_EQ(back.runtime.remote_password_file, "/run/secrets/redis");
  EXPECT_TRUE(back.runtime.disk_authenticate);
  EXPECT_TRUE(back.metrics_public);
  ServerConfig from_file;
  ASSERT_TRUE(apply_toml("[cache]\nremote = \"redis://s3cr3t-pw@h:1\"\n", "file", from_file).ok());
  EXPECT_EQ(to_toml(from_file).find("s3cr3t-pw"), std::string::npos);
  EXPECT_EQ(redact_url_credentials("redis://h:1,h2:2/?pool=2"), "redis://h:1,h2:2/?pool=2");
  EXPECT_EQ(redact_url_credentials("redis://:pw@h:1"), "redis://:<redacted>@h:1");
  // A password holding '#' (which the URL parser takes as part of it) or '/' or '?' is redacted too.
  EXPECT_EQ(redact_url_credentials("redis://default:Pa#ss123@h:1"), "redis://default:<redacted>@h:1");
  EXPECT_EQ(redact_url_credentials("redis://u:Pa?ss/1@h:1?pool=2"), "redis://u:<redacted>@h:1?pool=2");
}

TEST(OptionValuesTest, OneParserPerKind) {
  EXPECT_EQ(*parse_size("8G"), 8ull << 30);  // K/M/G are binary units wherever a size is read
  EXPECT_EQ(*parse_size("64KiB"), 64ull << 10);
  EXPECT_TRUE(*parse_bool("on"));
  EXPECT_FALSE(*parse_bool("False"));
  EXPECT_FALSE(parse_bool("maybe").ok());
  EXPECT_EQ(*parse_uint("42", 1, 64), 42u);
  EXPECT_FALSE(parse_uint("0", 1, 64).ok());
  EXPECT_FALSE(parse_uint("-1", 0, 64).ok());
  EXPECT_FALSE(parse_uint("4x", 0, 64).ok());
  EXPECT_DOUBLE_EQ(*parse_duration("600"), 600);
  EXPECT_DOUBLE_EQ(*parse_duration("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*parse_duration("10m"), 600);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5s"), 1.5);
  EXPECT_FALSE(parse_duration("-1").ok());
  EXPECT_FALSE(parse_duration("soon").ok());
  EXPECT_EQ(format_number(0.15f), format_number(double(0.15f)));
  EXPECT_EQ(*parse_number(format_number(double(0.15f)), 0, 1), double(0.15f));
}

TEST(OptionTableTest, RowsAreUniqueAndEveryDefaultReadsBack) {
  std::set<std::string> keys, flags, python;
  const ServerConfig defaults;
  for (const Option<ServerConfig>& row : server_option_table()) {
    EXPECT_TRUE(keys.insert(std::string(row.info.key)).second) << row.info.key;
    if (!row.info.flag.empty()) {
      EXPECT_TRUE(flags.insert(std::string(row.info.flag)).second) << row.info.flag;
    }
    if (!row.info.python.empty()) {
      EXPECT_TRUE(python.insert(std::string(row.info.python)).second) << row.info.python;
    }
    EXPECT_FALSE(row.info.help.empty()) << row.info.key;
    ServerConfig c;
    const Status st = row.parse(c, row.print(defaults));
    EXPECT_TRUE(st.ok()) << row.info.key << ": " << st.to_string();
    EXPECT_EQ(row.print(c), row.print(defaults)) << row.info.key;
  }
  // Every cache option is offered by the server, under the same key.
  for (const Option<CacheConfig>& row : cache_option_table()) EXPECT_TRUE(keys.count(std::string(row.info.key))) << row.info.key;
}

TEST(OptionTableTest, WriteBackAndSizesParseAlikeEverywhere) {
  ServerConfig file;
  ASSERT_TRUE(apply_toml("[cache]\nwrite_policy = \"write-back\"\nhost_capacity = \"8G\"\n", "f", file).ok());
  EXPECT_EQ(file.runtime.write_policy, WritePolicy::kWriteBack);
  EXPECT_EQ(file.runtime.host_bytes, 8ull << 30);
  CLI::App app;
  ServeFlags flags;
  add_serve_flags(app, flags);
  std::vector<std::string> args = {"--write-policy", "write-back", "--host-capacity", "8G"};
  std::reverse(args.begin(), args.end());
  app.parse(args);
  auto c = resolve_config(flags);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->runtime.write_policy, WritePolicy::kWriteBack);
  EXPECT_EQ(c->runtime.host_bytes, 8ull << 30);
}

TEST(OptionTableTest, SecretsAreNeverPrinted) {
  ServerConfig c;
  c.api_key = "sk-very-secret-0123";
  const std::string printed = to_toml(c);
  EXPECT_EQ(printed.find("sk-very-secret-0123"), std::string::npos) << printed;
  EXPECT_NE(printed.find("<set>"), std::string::npos) << printed;
  EXPECT_EQ(config_markdown().find("sk-very-secret-0123"), std::string::npos);
}

TEST(OptionTableTest, ConfigDocIsGeneratedFromTheTable) {
  // docs/CONFIG.md is `kvtier config --markdown`; regenerate it when this fails.
  std::ifstream f(std::string(KVTIER_SOURCE_DIR) + "/docs/CONFIG.md");
  ASSERT_TRUE(f.good());
  const std::string committed((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The server's sections come first; the router's follows (checked by router_test).
  EXPECT_EQ(committed.substr(0, config_markdown().size()), config_markdown())
      << "docs/CONFIG.md is stale: run `build/tools/kvtier config --markdown > docs/CONFIG.md`";
}

}  // namespace
}  // namespace kvtier::server
