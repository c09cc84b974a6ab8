#include "tiers/remote/redis_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

namespace kvtier::redis_wire {

namespace {

// Marks the context broken by a timeout, as hiredis marks its own (is_timeout() reads errno).
void time_out(redisContext* c, const char* what) {
  c->err = REDIS_ERR_IO;
  std::snprintf(c->errstr, sizeof c->errstr, "%s incomplete at its deadline", what);
  errno = ETIMEDOUT;
}

// Bounds the socket's next blocking write by `b.each` and what is left of the call; false (a
// timeout) once nothing is.
bool bound_next_write(redisContext* c, const WaitBounds& b) {
  const int64_t left = std::min<int64_t>(ms_left(b.end), b.each.count());
  if (left == 0) {
    time_out(c, "send");
    return false;
  }
  const timeval tv = to_timeval(std::chrono::milliseconds(left));
  if (::setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
    c->err = REDIS_ERR_IO;
    std::snprintf(c->errstr, sizeof c->errstr, "%s", std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

SigpipeGuard::SigpipeGuard() {
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  blocked_ = pthread_sigmask(SIG_BLOCK, &block, &old_) == 0;
}

SigpipeGuard::~SigpipeGuard() {
  if (!blocked_) return;
  if (!was_pending_) {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      sigset_t just;
      sigemptyset(&just);
      sigaddset(&just, SIGPIPE);
      timespec zero{0, 0};
      while (sigtimedwait(&just, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

int64_t ms_left(Clock::time_point deadline) {
  return std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

bool is_timeout(const redisContext* c) {
  return c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT);
}

bool ArrayHeaderGuard::scan(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (skip_ > 0) {
      const uint64_t n = std::min<uint64_t>(skip_, bytes.size() - i);
      skip_ -= n;
      i += n - 1;
      continue;
    }
    const char ch = bytes[i];
    if (!in_line_) {
      in_line_ = true, type_ = ch, count_ = 0, negative_ = false;
    } else if (ch == '\n') {
      in_line_ = false;
      if (type_ == '$' && !negative_) skip_ = count_ + 2;
      if (type_ == '*' && !negative_ && count_ > kMaxReplyElements) return false;
    } else if ((type_ == '$' || type_ == '*') && ch >= '0' && ch <= '9') {
      count_ = std::min<uint64_t>(count_ * 10 + uint64_t(ch - '0'), uint64_t(1) << 62);
    } else if (ch == '-') {
      negative_ = true;
    }
  }
  return true;
}

bool read_reply(redisContext* c, Clock::time_point deadline, size_t max_bytes, void** reply) {
  *reply = nullptr;
  // The reader stands at a reply's start: a context whose reply failed half-read is dropped.
  ArrayHeaderGuard guard;
  const auto refuse_array = [&] {
    c->err = REDIS_ERR_PROTOCOL;
    std::snprintf(c->errstr, sizeof c->errstr, "an array reply of more than %llu elements",
                  static_cast<unsigned long long>(kMaxReplyElements));
    return false;
  };
  if (!guard.scan({c->reader->buf + c->reader->pos, c->reader->len - c->reader->pos})) return refuse_array();
  if (redisGetReplyFromReader(c, reply) != REDIS_OK) return false;
  // Every byte the reader takes while this reply is incomplete counts, with what it held before:
  // the bytes it has not parsed yet do not bound a reply (an array's elements are parsed, and kept,
  // as they arrive).
  size_t taken = c->reader->len - c->reader->pos;
  while (*reply == nullptr) {
    const int64_t left = ms_left(deadline);
    pollfd readable{c->fd, POLLIN, 0};
    const int ready = left > 0 ? ::poll(&readable, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX))) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      time_out(c, "reply");
      return false;
    }
    const size_t before = c->reader->len;  // a read only appends to the reader's buffer
    if (redisBufferRead(c) != REDIS_OK) return false;
    taken += c->reader->len - before;
    if (!guard.scan({c->reader->buf + before, c->reader->len - before})) return refuse_array();
    if (taken > max_bytes) {  // hiredis would buffer any length the server sends
      c->err = REDIS_ERR_PROTOCOL;
      std::snprintf(c->errstr, sizeof c->errstr, "reply longer than the %zu bytes expected at most", max_bytes);
      return false;
    }
    if (redisGetReplyFromReader(c, reply) != REDIS_OK) return false;
  }
  return true;
}

bool flush_output(redisContext* c, const WaitBounds& b) {
  int done = 0;
  while (!done)
    if (!bound_next_write(c, b) || redisBufferWrite(c, &done) != REDIS_OK) return false;
  return true;
}

bool append_command(redisContext* c, std::span<const std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> argl;
  argv.reserve(args.size()), argl.reserve(args.size());
  for (auto a : args) argv.push_back(a.data()), argl.push_back(a.size());
  return redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), argl.data()) == REDIS_OK;
}

RedisReplyPtr call(redisContext* c, const WaitBounds& b, std::initializer_list<std::string_view> args) {
  void* raw = nullptr;
  if (!append_command(c, std::span(args.begin(), args.size())) || !flush_output(c, b) ||
      !read_reply(c, b.reply_deadline(), kMaxControlReplyBytes, &raw))
    return nullptr;
  return RedisReplyPtr(static_cast<redisReply*>(raw));
}

std::string reply_error(const redisReply* r) {
  return "redis: " + (r && r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string("unexpected reply"));
}

std::string context_error(const redisContext* c, const RedisEndpoint& ep) {
  std::string what = c->errstr[0] ? c->errstr : "connection lost";
  if (c->err == REDIS_ERR_EOF) what = "server closed the connection";
  return "redis " + ep.to_string() + ": " + what;
}

bool send_pieces(redisContext* c, std::span<const std::string_view> pieces, const WaitBounds& b) {
  std::vector<iovec> iov;
  iov.reserve(pieces.size());
  for (auto p : pieces)
    if (!p.empty()) iov.push_back(iovec{const_cast<char*>(p.data()), p.size()});
  size_t i = 0;
  while (i < iov.size()) {
    msghdr m{};
    m.msg_iov = iov.data() + i;
    m.msg_iovlen = std::min<size_t>(iov.size() - i, IOV_MAX);
    if (!bound_next_write(c, b)) return false;
    ssize_t n = ::sendmsg(c->fd, &m, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      c->err = REDIS_ERR_IO;
      std::snprintf(c->errstr, sizeof c->errstr, "%s", std::strerror(errno));
      return false;
    }
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      const size_t take = std::min(left, iov[i].iov_len);
      iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + take;
      iov[i].iov_len -= take;
      left -= take;
      if (iov[i].iov_len == 0) ++i;
    }
    while (i < iov.size() && iov[i].iov_len == 0) ++i;
  }
  return true;
}

}  // namespace kvtier::redis_wire
