#include "client/small_call.h"

namespace kvtier::client {

RequestDeadline::RequestDeadline(httplib::Client& client, double seconds)
    : thread_([this, &client, seconds] {
        std::unique_lock lock(mu_);
        if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
        passed_ = true;
        client.stop();  // shuts the socket down: the blocked read returns
      }) {}

RequestDeadline::~RequestDeadline() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

bool RequestDeadline::passed() const {
  std::lock_guard lock(mu_);
  return passed_;
}

Result<SmallAnswer> small_call(httplib::Client& client, httplib::Request req, double seconds, size_t max_bytes,
                               const std::string& where) {
  SmallAnswer answer;
  req.response_handler = [&](const httplib::Response& r) {
    answer.status = r.status;
    return true;
  };
  bool too_large = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    too_large = answer.body.size() + n > max_bytes;
    if (!too_large) answer.body.append(data, n);
    return !too_large;
  };
  const RequestDeadline deadline(client, seconds);
  auto res = client.send(req);
  if (too_large) {
    const bool mib = max_bytes % (size_t(1) << 20) == 0;
    return Status::Unavailable(where + ": the answer is over " +
                               (mib ? std::to_string(max_bytes >> 20) + " MiB" : std::to_string(max_bytes) + " bytes"));
  }
  if (deadline.passed()) return Status::Unavailable(where + ": timed out after " + std::to_string(seconds) + " s");
  if (!res) return Status::Unavailable(where + ": " + httplib::to_string(res.error()));
  return answer;
}

}  // namespace kvtier::client
