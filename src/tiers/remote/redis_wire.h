// The wire under RedisClient: one blocking hiredis connection. A reply read
// whole within a deadline (hiredis's own timeout bounds each read only), a
// command queued from string views, a value written from where it lies
// (gather write), SIGPIPE kept off the process, errors named by endpoint.
// Internal to src/tiers/remote; functions act on the one context they are
// given (a context is used by one thread at a time).
#pragma once

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <chrono>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "tiers/remote/redis_client.h"

namespace kvtier::redis_wire {

timeval to_timeval(std::chrono::milliseconds ms);

// hiredis writes with write(2): a peer that died turns the next write into a
// SIGPIPE that would kill the process. The library must not change process-
// wide signal handling, so SIGPIPE is blocked on this thread for the
// duration of a call and any instance it raised is consumed before unblocking.
class SigpipeGuard {
 public:
  SigpipeGuard();
  ~SigpipeGuard();
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t old_;
  bool blocked_ = false, was_pending_ = false;
};

// The context failed by a timeout (its own or read_reply's).
bool is_timeout(const redisContext* c);
// The context's next reply, whole within `limit` of now. hiredis's own timeout bounds each read of
// the socket, so a server that trickles a reply a byte at a time never tripped it. At most about
// `max_bytes` are buffered for it (hiredis keeps reading whatever length a reply claims). False
// (the context carries the error) on a timeout, a reply too long or a broken connection.
bool read_reply(redisContext* c, std::chrono::milliseconds limit, size_t max_bytes, void** reply);
// The longest reply call() takes (AUTH, CLUSTER SLOTS).
inline constexpr size_t kMaxControlReplyBytes = size_t(16) << 20;
// Writes what the context has queued (blocking, each write bounded by its send timeout).
bool flush_output(redisContext* c);
// Queues one command whose arguments are `args`.
bool append_command(redisContext* c, std::span<const std::string_view> args);
// One command on a connection, its reply whole within `limit`; nullptr when the connection failed
// (the context carries the error).
RedisReplyPtr call(redisContext* c, std::chrono::milliseconds limit, std::initializer_list<std::string_view> args);
// "redis HOST:PORT: what failed".
std::string context_error(const redisContext* c, const RedisEndpoint& ep);
// Sends `pieces` straight to the context's socket (blocking, bounded by its send timeout). On
// failure the context carries the error, as hiredis does.
bool send_pieces(redisContext* c, std::span<const std::string_view> pieces);

}  // namespace kvtier::redis_wire
