#include "server/serve_run.h"

#include <sys/stat.h>

#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/secrets.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/scheduler.h"
#include "server/signal_route.h"
#include "common/option_values.h"

namespace kvtier::server {
namespace {

bool loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost" || host.rfind("127.", 0) == 0;
}

// What an operator must hear at start about the set-up's security (docs/SECURITY.md).
std::vector<std::string> insecurity_warnings(const ServerConfig& config, AuthMode auth) {
  std::vector<std::string> out;
  if (auth == AuthMode::kNone && !loopback(config.host))
    out.push_back("listening on " + config.host + " without any key: anyone who reaches it may use and flush the "
                  "cache (give --api-keys-file and --admin-key-file)");
  if (!config.runtime.remote_url.empty() && !has_tier_secret(config.runtime))
    out.push_back("--remote-insecure: remote entries are neither authenticated nor keyed");
  if (redact_url_credentials(config.runtime.remote_url) != config.runtime.remote_url)
    out.push_back("the Redis password is in the --remote URL (visible in ps): use KVTIER_REDIS_PASSWORD or "
                  "--remote-password-file");
  // kvtier makes its own directory 0700 and its files 0600; one that already exists keeps its mode.
  struct stat st;
  if (!config.runtime.disk_dir.empty() && ::stat(config.runtime.disk_dir.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    out.push_back("the disk directory " + config.runtime.disk_dir + " is open to other users (mode " +
                  std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                  std::to_string(st.st_mode & 7) + "): its files hold every tenant's KV, from which much of a "
                  "prompt can be rebuilt (chmod 700 it)");
  return out;
}

void say(std::FILE* log, const std::string& line) {
  std::fprintf(log, "kvtier serve: %s\n", line.c_str());
  std::fflush(log);
}

}  // namespace

Status run_server(const ServerConfig& config, std::FILE* log) {
  KVTIER_RETURN_IF_ERROR(config.validate());
  SignalRoute signals;
  if (!signals.ok()) return Status::FromErrno(errno, "cannot set up the signal pipe");
  // A client that hangs up must be a failed write, not a dead server.
  ::signal(SIGPIPE, SIG_IGN);
  // The keys first: a bad keys file stops the start before the model loads.
  std::vector<std::string> warnings;
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<KeyRing> keys, KeyRing::create(config, &warnings));
  for (std::string& w : insecurity_warnings(config, keys->mode())) warnings.push_back(std::move(w));
  for (const std::string& w : warnings) say(log, "warning: " + w);

  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::create(config.runtime));
  const ModelInfo model = runtime->model();
  SchedulerOptions so;
  so.max_queue = config.limits.max_queue;
  so.max_running = config.runtime.max_sequences;
  so.request_timeout_s = config.limits.request_timeout_s;
  so.policy = config.limits.schedule;
  so.prefill_chunk_tokens = config.limits.prefill_chunk_tokens;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, Scheduler::create(so, std::move(runtime)));
  // Each tenant's quotas go to the cache, now and at every reload.
  auto apply_quotas = [&scheduler, &keys] {
    (void)scheduler->call([q = keys->quotas()](Runtime& r) mutable {
      r.set_tenant_quotas(std::move(q));
      return 0;
    });
  };
  apply_quotas();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> http, HttpServer::create(config, scheduler.get(), keys));
  KVTIER_ASSIGN_OR_RETURN(const uint16_t port, http->bind());

  std::fprintf(log,
               "kvtier serve: model %s (vocab %u, context %u, weights %s resident), cache %s, device %s, host %s, "
               "disk %s%s%s\n",
               config.runtime.model.c_str(), model.vocab_size, model.max_context, format_size(model.weight_bytes).c_str(),
               config.runtime.cache_enabled ? "on" : "off", format_size(config.runtime.device_bytes).c_str(),
               format_size(config.runtime.host_bytes).c_str(),
               config.runtime.disk_dir.empty() ? "none" : format_size(config.runtime.disk_bytes).c_str(),
               config.runtime.disk_dir.empty() ? "" : " at ", config.runtime.disk_dir.c_str());
  if (model.planner) std::fprintf(log, "kvtier serve: cost profile: %s\n", model.planner->profile().source.c_str());
  std::fprintf(log, "kvtier serve: authentication %s\n", std::string(auth_mode_name(keys->mode())).c_str());
  std::fprintf(log, "kvtier serve: listening on http://%s:%u\n", config.host.c_str(), unsigned(port));
  std::fflush(log);

  // The accept loop runs on its own thread and this one waits for the
  // shutdown signals in poll(): the kernel hands a process signal to the main
  // thread first, and a main thread parked in accept() would leave a
  // sanitizer build's deferred handler unrun (the signal then seems lost).
  Status served;
  std::atomic<bool> serving_done{false};
  std::thread acceptor([&] {
    served = http->serve();
    serving_done = true;
  });
  while (!serving_done.load()) {
    const int sig = signals.wait(100);
    if (sig == SIGHUP) {  // reload the keys; a bad file keeps the ones in use
      const Status st = keys->reload();
      if (st.ok()) apply_quotas();
      say(log, st.ok() ? "SIGHUP: keys reloaded (" + std::string(auth_mode_name(keys->mode())) + ")"
                       : "SIGHUP: keys not reloaded, the old ones stay: " + st.message());
      continue;
    }
    if (sig != SIGINT && sig != SIGTERM) continue;
    std::fprintf(log, "kvtier serve: %s received, draining (grace %.1fs)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 config.limits.shutdown_grace_s);
    std::fflush(log);
    const auto grace = std::chrono::milliseconds(int64_t(config.limits.shutdown_grace_s * 1000));
    const size_t cancelled = scheduler->drain(grace);
    std::fprintf(log, "kvtier serve: drained (%zu request(s) cancelled), stopping\n", cancelled);
    std::fflush(log);
    // The answers' last bytes get the grace again; then idle keep-alive connections and requests
    // half sent are shut, or the exit would wait out httplib's timeouts (5 s, 30 s).
    const size_t shut = http->shut_down(grace);
    if (shut > 0) std::fprintf(log, "kvtier serve: closed %zu connection(s) still open\n", shut);
    break;
  }
  acceptor.join();
  http.reset();
  scheduler.reset();  // destroys the Runtime on the scheduler thread (persists the disk tier)
  std::fprintf(log, "kvtier serve: stopped\n");
  std::fflush(log);
  return served;
}

}  // namespace kvtier::server
