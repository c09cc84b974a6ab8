// The router's pass-through: a whole answer as it is, a stream chunk by chunk
// as the backend sends it. A thread reads the backend; the client's handler
// (a stream's content provider) takes what it read, at most kMaxQueuedBytes
// ahead of the client, and checks each second that the client is still
// there: a client that hangs up resets the backend's connection, which
// cancels the backend's sequence, and frees the router's thread.
#include <sys/socket.h>

#include <cstdio>
#include <deque>

#include <nlohmann/json.hpp>

#include "client/sse.h"
#include "server/api.h"
#include "server/client_connection.h"

#include "router/router_impl.h"

namespace kvtier::router {

httplib::Headers passed_headers(const httplib::Request& req) {
  httplib::Headers h;
  for (const char* name : {"Authorization", "X-Api-Key"})
    if (req.has_header(name)) h.emplace(name, req.get_header_value(name));
  return h;
}

namespace {

using namespace std::chrono_literals;
using server::ClientConnection;
using server::WaitingClient;

constexpr int kConnectTimeoutS = 2;
constexpr int kWholeAnswerTimeoutS = 3600;  // a long generation answers within it (the client may leave sooner)
constexpr size_t kMaxQueuedBytes = size_t(1) << 20;  // a stream read ahead of a slow client
// A whole answer is held until it is complete: past this, the backend's answer is refused (a
// backend that sent 800 MB grew the router as much). Echoed prompts with logprobs stay far below.
constexpr size_t kMaxWholeAnswerBytes = size_t(256) << 20;
constexpr auto kClientCheck = 1s;

// A backend's answer as it arrives, from its reading thread to the client's handler.
struct Relay {
  std::mutex mu;
  std::condition_variable cv;
  bool stream = false;
  std::deque<std::string> chunks;  // a stream's, not yet relayed
  size_t queued = 0;               // their bytes
  std::string body;                // a whole answer's
  bool head = false, done = false, cancelled = false;
  bool too_large = false;  // a whole answer past kMaxWholeAnswerBytes (its read stopped)
  int status = 0;
  std::string content_type;
  httplib::Headers advice;  // the backend's Retry-After and x-should-retry, for the client's own retries
  std::string error;  // set when done without a head: the backend could not be reached
  std::string tail;   // the stream's last bytes (its usage, where it sends one)
  // The answer has begun: its first event (`data:`) arrived. Until then nothing is relayed, so a
  // backend that dies while the request waits in its queue (sending at most keep-alive comments)
  // leaves the request free to go elsewhere.
  bool begun = false;
  bool failed = false;                // the backend's connection failed before the answer's end
  bool draining = false;              // the backend refused it draining: another backend may take it
  httplib::Client* client = nullptr;  // while the reader's request is in flight
  std::thread reader;
  // The handler thread's own (the content provider and its releaser run on it):
  std::optional<uint64_t> sent_at_start;  // the client connection's bytes sent before the stream's head
  bool written_raw = false;               // the stream went to a half-closed client past cpp-httplib

  // Ends the backend's request if it still runs (its connection is reset: the backend cancels it) and
  // waits for the reader. stop() does nothing before cpp-httplib has the request in flight, so it is
  // repeated until the reader is done.
  void cancel_and_join() {
    std::unique_lock lk(mu);
    cancelled = true;
    cv.notify_all();
    while (!done) {
      if (client != nullptr) client->stop();
      cv.wait_for(lk, 50ms, [&] { return done; });
    }
    lk.unlock();
    reader.join();
  }
  // Waits under `lk` until `ready`, checking each second that the client is there; false once it is not.
  template <class Ready>
  bool wait_watching(std::unique_lock<std::mutex>& lk, WaitingClient& from, Ready ready) {
    while (!cv.wait_for(lk, kClientCheck, ready))
      if (from.left()) return false;
    return true;
  }
  enum class Next : uint8_t { kChunk, kEnd, kClientGone };
  // Waits for the stream's next chunk (into `chunk`), its end, or its client's leaving.
  Next next_chunk(WaitingClient& from, std::string& chunk) {
    std::unique_lock lk(mu);
    if (!wait_watching(lk, from, [&] { return !chunks.empty() || done; })) return Next::kClientGone;
    if (chunks.empty()) return Next::kEnd;
    chunk = std::move(chunks.front());
    chunks.pop_front();
    queued -= chunk.size();
    cv.notify_all();  // the reader may wait for room
    return Next::kChunk;
  }
};

// What the backend sent, into the relay; a stream waits while the client is kMaxQueuedBytes behind.
bool receive(Relay& relay, const char* data, size_t n) {
  std::unique_lock lk(relay.mu);
  if (relay.cancelled) return false;  // the client left
  if (!relay.stream) {
    relay.too_large = relay.body.size() + n > kMaxWholeAnswerBytes;
    if (!relay.too_large) relay.body.append(data, n);
    return !relay.too_large;
  }
  relay.chunks.emplace_back(data, n);
  relay.queued += n;
  relay.tail.append(data, n);
  relay.begun = relay.begun || relay.tail.find("data:") != std::string::npos;
  if (relay.tail.size() > 2 * kTailBytes) relay.tail.erase(0, relay.tail.size() - kTailBytes);
  relay.cv.notify_all();
  relay.cv.wait(lk, [&] { return relay.queued <= kMaxQueuedBytes || relay.cancelled; });
  return !relay.cancelled;
}

void read_backend(const BackendAddress& b, httplib::Request r, int read_timeout_s, const std::shared_ptr<Relay>& relay) {
  httplib::Client c(b.host, b.port);
  c.set_connection_timeout(kConnectTimeoutS, 0);
  c.set_read_timeout(read_timeout_s, 0);
  c.set_write_timeout(60, 0);
  c.set_socket_options([](int fd) {  // close() resets: a backend notices a cancelled request at once
    const linger abort{1, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  });
  r.response_handler = [relay](const httplib::Response& res) {
    std::lock_guard lk(relay->mu);
    relay->status = res.status;
    relay->content_type = res.get_header_value("Content-Type");
    for (const char* h : {"Retry-After", "x-should-retry"})
      if (res.has_header(h)) relay->advice.emplace(h, res.get_header_value(h));
    relay->draining = res.status == 503 && res.has_header(server::kDrainingHeader);
    relay->head = true;
    relay->cv.notify_all();
    return true;
  };
  r.content_receiver = [relay](const char* data, size_t n, uint64_t, uint64_t) { return receive(*relay, data, n); };
  {
    std::lock_guard lk(relay->mu);
    if (relay->cancelled) {
      relay->done = true;
      relay->cv.notify_all();
      return;
    }
    relay->client = &c;
  }
  auto result = c.send(r);
  std::lock_guard lk(relay->mu);
  relay->client = nullptr;
  if (!result) relay->error = httplib::to_string(result.error());
  relay->failed = !result && !relay->cancelled && !relay->too_large;
  relay->done = true;
  relay->cv.notify_all();
}

std::shared_ptr<Relay> start_relay(const BackendAddress& b, const httplib::Request& req, bool stream,
                                   int read_timeout_s) {
  auto relay = std::make_shared<Relay>();
  relay->stream = stream;
  httplib::Request out;
  out.method = "POST";
  out.path = req.path;
  out.headers = passed_headers(req);
  out.headers.emplace("Content-Type", "application/json");
  out.body = req.body;
  relay->reader = std::thread(
      [b, out = std::move(out), read_timeout_s, relay]() mutable { read_backend(b, std::move(out), read_timeout_s, relay); });
  return relay;
}

// The client hung up before the answer began: the backend's request is reset.
Forwarded client_left(Relay& relay, httplib::Response& res, const std::function<void(int, std::string_view)>& done) {
  relay.cancel_and_join();
  res.status = kClientLeft;  // written to nobody
  done(kClientLeft, {});
  return Forwarded::kAnswered;
}

Forwarded forward_whole(const std::shared_ptr<Relay>& relay, WaitingClient& from, httplib::Response& res,
                        std::string& why, const std::function<void(int, std::string_view)>& done) {
  std::unique_lock lk(relay->mu);
  if (!relay->wait_watching(lk, from, [&] { return relay->done; })) {
    lk.unlock();
    return client_left(*relay, res, done);
  }
  lk.unlock();
  relay->reader.join();
  if (relay->too_large) {  // the backend did the work: not sent elsewhere again
    send_error(res, 502, "server_error", "answer_too_large",
               "the backend's answer is over " + std::to_string(kMaxWholeAnswerBytes >> 20) + " MiB");
    done(502, {});
    return Forwarded::kAnswered;
  }
  if (relay->failed || !relay->head || relay->draining) {
    why = relay->draining ? "draining" : relay->error.empty() ? "no answer" : relay->error;
    return Forwarded::kUnreachable;
  }
  res.status = relay->status;
  for (const auto& [name, value] : relay->advice) res.set_header(name, value);
  res.set_content(relay->body, relay->content_type.empty() ? "application/json" : relay->content_type);
  done(relay->status, relay->body);
  return Forwarded::kAnswered;
}

// The rest of a stream, written on the socket itself to a client that half-closed after its request
// (cpp-httplib takes the FIN for a hang-up and writes no more). `head_sent`: cpp-httplib wrote the
// (chunked) head, so the rest goes as chunks; else with a head of its own, ended by the close.
void relay_rest_raw(Relay& relay, const ClientConnection& to, std::string pending, bool head_sent) {
  relay.written_raw = true;
  auto framed = [](const std::string& data) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + data + "\r\n";
  };
  bool ok = head_sent || to.send_all("HTTP/1.1 " + std::to_string(relay.status) + (relay.status < 400 ? " OK" : " Error") +
                                     "\r\nContent-Type: " +
                                     (relay.content_type.empty() ? "text/event-stream" : relay.content_type) +
                                     "\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n");
  WaitingClient watched(to, false);  // the answer has begun
  for (std::string chunk = std::move(pending); ok;) {
    if (!chunk.empty()) ok = to.send_all(head_sent ? framed(chunk) : chunk);
    const Relay::Next next = relay.next_chunk(watched, chunk);
    if (next == Relay::Next::kEnd && head_sent && ok && !relay.failed) (void)to.send_all("0\r\n\r\n");
    if (next != Relay::Next::kChunk) break;
  }
}

// Whether cpp-httplib wrote the stream's head to `to` (the connection's bytes sent grew since).
bool head_went_out(const Relay& relay, const ClientConnection& to) {
  const auto sent = to.bytes_sent();
  return sent && relay.sent_at_start && *sent > *relay.sent_at_start;
}

Forwarded forward_stream(const std::shared_ptr<Relay>& relay, WaitingClient& waiting, httplib::Response& res,
                         std::string& why, std::function<void(int, std::string_view)> done) {
  const std::optional<ClientConnection>& from = waiting.connection();
  {
    std::unique_lock lk(relay->mu);
    // A backend that fills the queue without an event has begun an answer of its own kind.
    const bool waited = relay->wait_watching(lk, waiting, [&] {
      return (relay->head && (relay->begun || relay->queued >= kMaxQueuedBytes)) || relay->done;
    });
    if (!waited) {
      lk.unlock();
      return client_left(*relay, res, done);
    }
    if (!relay->begun && (relay->failed || relay->draining)) {  // nothing relayed yet: another backend may take it
      why = relay->draining ? "draining" : relay->error.empty() ? "no answer" : relay->error;
      lk.unlock();
      relay->reader.join();
      return Forwarded::kUnreachable;
    }
  }
  res.status = relay->status;
  for (const auto& [name, value] : relay->advice) res.set_header(name, value);
  if (from) relay->sent_at_start = from->bytes_sent();
  res.set_chunked_content_provider(
      relay->content_type.empty() ? "text/event-stream" : relay->content_type,
      [relay, from, watched = WaitingClient(from, false)](size_t, httplib::DataSink& sink) mutable {
        std::string chunk;
        const Relay::Next next = relay->next_chunk(watched, chunk);
        if (next == Relay::Next::kClientGone) return false;  // the releaser resets the backend
        // A stream its backend cut short ends without the chunked end, the connection closed: ended
        // cleanly, it read as whole to the client (the raw relay below never wrote the end either).
        if (next == Relay::Next::kEnd && relay->failed) return false;
        if (next == Relay::Next::kEnd) {
          sink.done();
          return true;
        }
        if (sink.write(chunk.data(), chunk.size())) return true;
        if (from && from->half_closed()) relay_rest_raw(*relay, *from, std::move(chunk), head_went_out(*relay, *from));
        return false;
      },
      [relay, from, done = std::move(done)](bool success) {
        // cpp-httplib gave up before the provider wrote anything: a client that half-closed gets it all here.
        if (!success && !relay->written_raw && from && from->half_closed() && !head_went_out(*relay, *from))
          relay_rest_raw(*relay, *from, {}, false);
        relay->cancel_and_join();  // after the end, nothing to cancel
        done(relay->failed ? kCutStream : relay->status, relay->tail);  // the reader has ended: no lock needed
      });
  return Forwarded::kAnswered;
}

}  // namespace

Forwarded forward(const BackendAddress& b, const httplib::Request& req, const std::optional<ClientConnection>& from,
                  const ForwardLimits& limits, httplib::Response& res, std::string& why,
                  std::function<void(int, std::string_view)> done) {
  auto relay = start_relay(b, req, limits.stream, limits.stream ? limits.stream_idle_s : kWholeAnswerTimeoutS);
  WaitingClient waiting(from, req.version == "HTTP/1.1");  // nothing of the answer is written yet
  if (limits.stream) return forward_stream(relay, waiting, res, why, std::move(done));
  return forward_whole(relay, waiting, res, why, done);
}

std::optional<uint64_t> reported_cached_tokens(std::string_view text) {
  auto cached_of = [](const nlohmann::json& j) -> std::optional<uint64_t> {
    if (!j.is_object() || !j.contains("usage") || !j["usage"].is_object()) return std::nullopt;
    const auto& u = j["usage"];
    if (!u.contains("prompt_tokens_details")) return std::nullopt;
    const auto& d = u["prompt_tokens_details"];
    if (!d.is_object() || !d.contains("cached_tokens") || !d["cached_tokens"].is_number_unsigned()) return std::nullopt;
    return d["cached_tokens"].get<uint64_t>();
  };
  if (auto whole = nlohmann::json::parse(text, nullptr, false); !whole.is_discarded()) return cached_of(whole);
  // A stream's tail: the last event that carries a usage (a message cut off at the tail's start is no field).
  std::optional<uint64_t> last;
  client::SseReader sse;
  (void)sse.feed_data(text, [&](std::string_view data) {
    if (auto n = cached_of(nlohmann::json::parse(data, nullptr, false))) last = n;
  });
  if (last) return last;
  return std::nullopt;
}

}  // namespace kvtier::router
