// Chaos: the real `kvtier serve` with a disk tier, under `kvtier loadgen`,
// SIGKILLed at random moments and restarted on the same directory (issue 18).
//
// Each round: start the server on the directory; check every probe prompt of
// the earlier rounds (the latest must be served from disk, and every output
// must equal a fresh recompute of the same prompt under a new cache_salt);
// send this round's probe and flush it to disk; run loadgen, flush once more
// at a random point of its writes, and SIGKILL the server at another; check
// the directory stays within the disk capacity. What the test asserts does
// not depend on when the kill lands; the randomness only makes the kills
// land at different points of the write path.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "load_always_profile.h"

extern char** environ;

namespace kvtier::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kRounds = 12;
constexpr int kProbeTokens = 600;  // two whole chunks of 16 pages x 16 tokens, and a tail
constexpr int kChunkTokens = 256;
constexpr uint64_t kDiskCapacity = uint64_t(256) << 20;

std::string write_load_always_profile(const TempDir& dir) { return kvtier::testing::write_load_always_profile(dir.str()); }

std::vector<std::string> server_args(const std::string& disk_dir, const std::string& profile) {
  return {"--model", "tiny", "--disk-dir", disk_dir, "--device-capacity", "64MiB", "--host-capacity", "64MiB",
          "--disk-capacity", std::to_string(kDiskCapacity), "--threads", "1", "--profile", profile,
          "--max-tokens", "64", "--shutdown-grace", "5"};
}

// Starts `kvtier ARGS...` with its output discarded.
pid_t spawn_quiet(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {kvtier_binary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

void kill_and_reap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

bool exited(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == pid;
}

std::vector<int> probe_prompt(int round) {
  std::mt19937 rng(1000 + round);
  std::vector<int> ids(kProbeTokens);
  for (int& id : ids) id = 3 + int(rng() % 497);
  return ids;
}

json complete(int port, const std::vector<int>& prompt, const std::string& salt) {
  json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true},
               {"return_token_ids", true}};
  if (!salt.empty()) body["cache_salt"] = salt;
  Reply r = post_json(port, "/v1/completions", body);
  EXPECT_EQ(r.status, 200) << r.body.dump();
  return r.body;
}

uint64_t disk_puts(int port) {
  Reply r = get_json(port, "/v1/cache/stats");
  if (r.status != 200) return 0;
  return r.body["cache"]["disk"]["puts"].get<uint64_t>();
}

uint64_t directory_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) total += entry.file_size();
  return total;
}

// Every earlier probe gives what a fresh recompute gives; the latest one was
// flushed before the kill, so it comes from disk. Returns its disk tokens.
int check_probes(int port, int round) {
  int latest_disk_tokens = 0;
  for (int earlier = 0; earlier < round; ++earlier) {
    const auto prompt = probe_prompt(earlier);
    const json cached = complete(port, prompt, "");
    const json fresh = complete(port, prompt, "recompute-" + std::to_string(round) + "-" + std::to_string(earlier));
    EXPECT_EQ(fresh["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << fresh.dump();
    EXPECT_EQ(cached["choices"][0]["token_ids"], fresh["choices"][0]["token_ids"])
        << "round " << round << ": probe " << earlier << " differs from its recompute";
    if (earlier == round - 1) latest_disk_tokens = cached["usage"]["kvtier"]["cached_tokens_by_tier"]["disk"].get<int>();
  }
  return latest_disk_tokens;
}

// Waits until the disk tier has accepted `puts` chunks in all, or loadgen is done.
bool wait_for_puts(int port, uint64_t puts, pid_t loadgen) {
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (disk_puts(port) < puts && std::chrono::steady_clock::now() < deadline) {
    if (exited(loadgen)) return true;
    std::this_thread::sleep_for(2ms);
  }
  return false;
}

// Under loadgen (4 users, 1500 tokens of history each, the same conversations
// every round, so later rounds read them back from disk): after a random
// number of chunks is written, a flush makes them durable; after a random
// number more, and a random delay, the kill lands.
void load_then_kill(ServerProcess& server, std::mt19937& rng) {
  const int port = server.port();
  const pid_t loadgen = spawn_quiet({"loadgen", "--url", "http://127.0.0.1:" + std::to_string(port), "--users", "4",
                                     "--rounds", "3", "--system-prompt-tokens", "256", "--history-tokens", "1500",
                                     "--answer-tokens", "8", "--timeout", "120", "--quiet"});
  ASSERT_GT(loadgen, 0);
  bool loadgen_done = wait_for_puts(port, disk_puts(port) + rng() % 16, loadgen);
  EXPECT_EQ(post_json(port, "/v1/cache/flush", json::object()).status, 200);
  if (!loadgen_done) loadgen_done = wait_for_puts(port, disk_puts(port) + rng() % 16, loadgen);
  std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 50));
  server.signal(SIGKILL);
  EXPECT_EQ(server.wait_exit(), -(100 + SIGKILL));
  if (!loadgen_done) kill_and_reap(loadgen);
}

TEST(Chaos, SigkilledServerRestartsWarmAndServesOnlyExactKv) {
  if (kvtier_binary().empty()) GTEST_SKIP() << "KVTIER_BINARY is not set";
  TempDir work;
  const std::string disk_dir = work.str() + "/disk";
  const std::string profile = write_load_always_profile(work);
  std::mt19937 rng(18);
  int warm_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    ServerProcess server;
    ASSERT_TRUE(server.start(server_args(disk_dir, profile))) << server.log();
    if (round > 0) {
      const json disk = get_json(server.port(), "/v1/cache/stats").body["cache"]["disk"];
      std::printf("round %d: restarted with %s disk entries, %s torn or corrupt dropped\n", round,
                  disk["entries"].dump().c_str(), disk["checksum_failures"].dump().c_str());
      std::fflush(stdout);
      const int disk_tokens = check_probes(server.port(), round);
      EXPECT_GE(disk_tokens, (kProbeTokens / kChunkTokens) * kChunkTokens) << server.log();
      if (disk_tokens > 0) ++warm_rounds;
    }
    complete(server.port(), probe_prompt(round), "");
    ASSERT_EQ(post_json(server.port(), "/v1/cache/flush", json::object()).status, 200);
    load_then_kill(server, rng);
    EXPECT_LE(directory_bytes(disk_dir), kDiskCapacity);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(warm_rounds, kRounds - 1);
}

}  // namespace
}  // namespace kvtier::testing
