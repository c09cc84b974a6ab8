// The wire under RedisClient: one blocking hiredis connection. A reply read
// whole by a deadline (hiredis's own timeout bounds each read only), writes
// that end by a deadline however slowly the peer reads, a
// command queued from string views, a value written from where it lies
// (gather write), SIGPIPE kept off the process, errors named by endpoint.
// Internal to src/tiers/remote; functions act on the one context they are
// given (a context is used by one thread at a time).
#pragma once

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "tiers/remote/redis_client.h"

namespace kvtier::redis_wire {

using Clock = std::chrono::steady_clock;

// The bounds of a wait: `each` bounds one reply's whole arrival and one write's progress, `end` the
// whole call the wait belongs to; every wait is cut to what is left of the call.
struct WaitBounds {
  std::chrono::milliseconds each;
  Clock::time_point end;
  Clock::time_point reply_deadline() const { return std::min(Clock::now() + each, end); }
};

timeval to_timeval(std::chrono::milliseconds ms);
// Whole milliseconds left until `deadline` (rounded up), 0 once it passed.
int64_t ms_left(Clock::time_point deadline);

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

// The most elements an array reply kvtier reads may hold (CLUSTER SLOTS: one per slot range, and
// a node's few fields; nothing else kvtier sends answers with an array).
inline constexpr uint64_t kMaxReplyElements = uint64_t(1) << 16;

// Follows a RESP byte stream from a reply's start and refuses an array header claiming more than
// kMaxReplyElements elements before hiredis reads it: hiredis 0.14 allocates an array from its
// header alone and walks every claimed slot to free it (13 bytes, `*2147483647`, held the engine's
// thread for 5 s). Bulk payloads are skipped, not read.
class ArrayHeaderGuard {
 public:
  // Takes the next bytes of the stream; false once a header claims too many elements.
  bool scan(std::string_view bytes);

 private:
  uint64_t skip_ = 0;      // bytes of a bulk payload (and its CRLF) still to pass
  bool in_line_ = false;   // inside a type byte's line, up to its LF
  char type_ = 0;          // the line's type byte
  uint64_t count_ = 0;     // the line's decimal (for '$' and '*')
  bool negative_ = false;  // the line's count is negative (a nil)
};

// The context failed by a timeout (its own or read_reply's).
bool is_timeout(const redisContext* c);
// The context's next reply, whole by `deadline`. hiredis's own timeout bounds each read of the
// socket, so a server that trickles a reply a byte at a time never tripped it. At most about
// `max_bytes` are read for it (hiredis keeps reading whatever length a reply claims), so what it
// holds is bounded too: the bytes, or for an array the objects they parse into (at least 4 bytes
// each on the wire, some 20 times that in memory). False
// (the context carries the error) on a timeout, a reply too long or a broken connection.
bool read_reply(redisContext* c, Clock::time_point deadline, size_t max_bytes, void** reply);
// The longest reply call() takes (AUTH, CLUSTER SLOTS).
inline constexpr size_t kMaxControlReplyBytes = size_t(16) << 20;
// Writes what the context has queued, each write progressing within `b.each`, all by `b.end` (a
// timeout otherwise: a peer reading slowly enough made every write progress and never tripped a
// per-write limit).
bool flush_output(redisContext* c, const WaitBounds& b);
// Queues one command whose arguments are `args`.
bool append_command(redisContext* c, std::span<const std::string_view> args);
// One command on a connection, sent and answered within `b`; nullptr when the connection failed
// (the context carries the error).
RedisReplyPtr call(redisContext* c, const WaitBounds& b, std::initializer_list<std::string_view> args);
// "redis: " and an error reply's text (or "unexpected reply" for another kind).
std::string reply_error(const redisReply* r);
// "redis HOST:PORT: what failed".
std::string context_error(const redisContext* c, const RedisEndpoint& ep);
// Sends `pieces` straight to the context's socket, within `b` as flush_output. On failure the
// context carries the error, as hiredis does.
bool send_pieces(redisContext* c, std::span<const std::string_view> pieces, const WaitBounds& b);

}  // namespace kvtier::redis_wire
