// The router's pass-through: a whole answer as it is, a stream chunk by chunk
// as the backend sends it (a thread reads the backend; the client's content
// provider writes what it read, so nothing is buffered past one chunk).
#include <deque>

#include <nlohmann/json.hpp>

#include "client/sse.h"

#include "router/router_impl.h"

namespace kvtier::router {

httplib::Headers passed_headers(const httplib::Request& req) {
  httplib::Headers h;
  for (const char* name : {"Authorization", "X-Api-Key"})
    if (req.has_header(name)) h.emplace(name, req.get_header_value(name));
  return h;
}

namespace {

constexpr int kConnectTimeoutS = 2;
constexpr int kReadTimeoutS = 3600;  // a long generation streams or answers within it

void set_timeouts(httplib::Client& c) {
  c.set_connection_timeout(kConnectTimeoutS, 0);
  c.set_read_timeout(kReadTimeoutS, 0);
  c.set_write_timeout(60, 0);
}

// A backend's stream as it arrives, from its reading thread to the client's content provider.
struct Relay {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> chunks;
  bool head = false, done = false, cancelled = false;
  int status = 0;
  std::string content_type;
  std::string error;  // set when done without a head: the backend could not be reached
  std::string tail;   // the stream's last bytes (its usage, where it sends one)
  // The answer has begun: its first event (`data:`) arrived. Until then nothing is relayed, so a
  // backend that dies while the request waits in its queue (sending at most keep-alive comments)
  // leaves the request free to go elsewhere.
  bool begun = false;
  bool failed = false;  // the backend's connection failed before the answer's end
  std::thread reader;
};

void read_backend(const BackendAddress& b, httplib::Request r, const std::shared_ptr<Relay>& relay) {
  httplib::Client c(b.host, b.port);
  set_timeouts(c);
  r.response_handler = [relay](const httplib::Response& res) {
    std::lock_guard lk(relay->mu);
    relay->status = res.status;
    relay->content_type = res.get_header_value("Content-Type");
    relay->head = true;
    relay->cv.notify_all();
    return true;
  };
  r.content_receiver = [relay](const char* data, size_t n, uint64_t, uint64_t) {
    std::lock_guard lk(relay->mu);
    if (relay->cancelled) return false;  // the client left: closing the connection cancels the backend's sequence
    relay->chunks.emplace_back(data, n);
    relay->tail.append(data, n);
    relay->begun = relay->begun || relay->tail.find("data:") != std::string::npos;
    if (relay->tail.size() > 2 * kTailBytes) relay->tail.erase(0, relay->tail.size() - kTailBytes);
    relay->cv.notify_all();
    return true;
  };
  auto result = c.send(r);
  std::lock_guard lk(relay->mu);
  if (!result) relay->error = httplib::to_string(result.error());
  relay->failed = !result && !relay->cancelled;
  relay->done = true;
  relay->cv.notify_all();
}

Forwarded forward_stream(const BackendAddress& b, const httplib::Request& req, httplib::Response& res,
                         std::string& why, std::function<void(int, std::string_view)> done) {
  auto relay = std::make_shared<Relay>();
  httplib::Request out;
  out.method = "POST";
  out.path = req.path;
  out.headers = passed_headers(req);
  out.headers.emplace("Content-Type", "application/json");
  out.body = req.body;
  relay->reader = std::thread([b, out = std::move(out), relay]() mutable { read_backend(b, std::move(out), relay); });
  {
    std::unique_lock lk(relay->mu);
    relay->cv.wait(lk, [&] { return (relay->head && relay->begun) || relay->done; });
    if (!relay->begun && relay->failed) {  // nothing relayed yet: another backend may take it
      why = relay->error.empty() ? "no answer" : relay->error;
      lk.unlock();
      relay->reader.join();
      return Forwarded::kUnreachable;
    }
  }
  res.status = relay->status;
  res.set_chunked_content_provider(
      relay->content_type.empty() ? "text/event-stream" : relay->content_type,
      [relay](size_t, httplib::DataSink& sink) {
        std::unique_lock lk(relay->mu);
        relay->cv.wait(lk, [&] { return !relay->chunks.empty() || relay->done; });
        if (relay->chunks.empty()) {
          sink.done();
          return true;
        }
        std::string chunk = std::move(relay->chunks.front());
        relay->chunks.pop_front();
        lk.unlock();
        return sink.write(chunk.data(), chunk.size());
      },
      [relay, done = std::move(done)](bool) {
        {
          std::lock_guard lk(relay->mu);
          relay->cancelled = true;
        }
        relay->reader.join();
        done(relay->failed ? kCutStream : relay->status, relay->tail);  // the reader has ended: no lock needed
      });
  return Forwarded::kAnswered;
}

}  // namespace

Forwarded forward(const BackendAddress& b, const httplib::Request& req, bool stream, httplib::Response& res,
                  std::string& why, std::function<void(int, std::string_view)> done) {
  if (stream) return forward_stream(b, req, res, why, std::move(done));
  httplib::Client c(b.host, b.port);
  set_timeouts(c);
  auto r = c.Post(req.path.c_str(), passed_headers(req), req.body, "application/json");
  if (!r) {
    why = httplib::to_string(r.error());
    return Forwarded::kUnreachable;
  }
  res.status = r->status;
  res.set_content(r->body, r->get_header_value("Content-Type").empty() ? "application/json"
                                                                        : r->get_header_value("Content-Type"));
  done(r->status, r->body);
  return Forwarded::kAnswered;
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
