#include "server/serve_run.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "server/http_server.h"
#include "server/scheduler.h"
#include "server/size.h"

namespace kvtier::server {
namespace {

// Restores the caller's signal mask when run_server returns.
class SignalMask {
 public:
  explicit SignalMask(const sigset_t& block) { pthread_sigmask(SIG_BLOCK, &block, &old_); }
  ~SignalMask() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

}  // namespace

Status run_server(const ServerConfig& config, std::FILE* log) {
  KVTIER_RETURN_IF_ERROR(config.validate());
  // Block the shutdown signals before any thread exists, so every thread
  // inherits the mask and only the waiter below ever sees them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  SignalMask mask(sigs);
  // A client that hangs up must be a failed write, not a dead server.
  ::signal(SIGPIPE, SIG_IGN);

  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::create(config.runtime));
  const ModelInfo model = runtime->model();
  SchedulerOptions so;
  so.max_queue = config.limits.max_queue;
  so.max_running = config.runtime.max_sequences;
  so.request_timeout_s = config.limits.request_timeout_s;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, Scheduler::create(so, std::move(runtime)));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> http, HttpServer::create(config, scheduler.get()));
  KVTIER_ASSIGN_OR_RETURN(const uint16_t port, http->bind());

  std::fprintf(log,
               "kvtier serve: model %s (vocab %u, context %u), cache %s, device %s, host %s, disk %s%s%s\n",
               config.runtime.model.c_str(), model.vocab_size, model.max_context,
               config.runtime.cache_enabled ? "on" : "off", format_size(config.runtime.device_bytes).c_str(),
               format_size(config.runtime.host_bytes).c_str(),
               config.runtime.disk_dir.empty() ? "none" : format_size(config.runtime.disk_bytes).c_str(),
               config.runtime.disk_dir.empty() ? "" : " at ", config.runtime.disk_dir.c_str());
  std::fprintf(log, "kvtier serve: listening on http://%s:%u\n", config.host.c_str(), unsigned(port));
  std::fflush(log);

  std::atomic<bool> serving_done{false};
  std::thread waiter([&] {
    const timespec tick{0, 100 * 1000 * 1000};
    while (!serving_done.load()) {
      const int sig = sigtimedwait(&sigs, nullptr, &tick);
      if (sig != SIGINT && sig != SIGTERM) continue;
      std::fprintf(log, "kvtier serve: %s received, draining (grace %.1fs)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                   config.limits.shutdown_grace_s);
      std::fflush(log);
      const auto grace = std::chrono::milliseconds(int64_t(config.limits.shutdown_grace_s * 1000));
      const size_t cancelled = scheduler->drain(grace);
      std::fprintf(log, "kvtier serve: drained (%zu request(s) cancelled), stopping\n", cancelled);
      std::fflush(log);
      http->stop();
      return;
    }
  });
  const Status served = http->serve();
  serving_done = true;
  waiter.join();
  http.reset();
  scheduler.reset();  // destroys the Runtime on the scheduler thread (persists the disk tier)
  std::fprintf(log, "kvtier serve: stopped\n");
  std::fflush(log);
  return served;
}

}  // namespace kvtier::server
