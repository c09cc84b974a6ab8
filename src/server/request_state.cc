// RequestState (server/scheduler.h): a request's progress, shared by its HTTP thread and the scheduler.
#include "server/scheduler.h"

#include <algorithm>
#include <cstdint>

namespace kvtier::server {

RequestState::View RequestState::wait(size_t& offset, bool seen_start, std::chrono::milliseconds timeout) {
  StreamCursor cursor{offset, SIZE_MAX, true};  // text only: no tokens are read nor waited for
  View v = wait(cursor, seen_start, timeout);
  offset = cursor.text;
  return v;
}

RequestState::View RequestState::wait(StreamCursor& cursor, bool seen_start, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] {
    return done_ || text_.size() > cursor.text || tokens_.ids.size() > cursor.tokens || (started_ && !seen_start);
  });
  View v = status_locked();
  v.delta = text_.substr(std::min(cursor.text, text_.size()));
  cursor.text = text_.size();
  const size_t from = std::min(cursor.tokens, tokens_.ids.size());
  v.tokens.ids.assign(tokens_.ids.begin() + long(from), tokens_.ids.end());
  if (from < tokens_.logprobs.size()) v.tokens.logprobs.assign(tokens_.logprobs.begin() + long(from), tokens_.logprobs.end());
  cursor.tokens = tokens_.ids.size();
  if (started_ && !cursor.prompt_taken) {
    v.tokens.prompt_logprobs = tokens_.prompt_logprobs;
    cursor.prompt_taken = true;
  }
  return v;
}

RequestState::View RequestState::wait_done() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  View v = status_locked();
  v.delta = text_;
  v.tokens = tokens_;
  return v;
}

RequestState::View RequestState::status_locked() const {
  View v;
  v.started = started_;
  v.done = done_;
  v.finish_reason = finish_reason_;
  v.error = error_;
  v.usage = usage_;
  return v;
}

std::optional<RequestState::View> RequestState::wait_done(std::chrono::milliseconds timeout) {
  {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return done_; })) return std::nullopt;
  }
  return wait_done();
}

bool RequestState::cancel() {
  std::function<void()> wake;
  {
    std::lock_guard lk(mu_);
    if (cancelled_ || done_) return false;
    cancelled_ = true;
    wake = wake_scheduler_;
  }
  if (wake) wake();
  return true;
}

bool RequestState::cancelled() const {
  std::lock_guard lk(mu_);
  return cancelled_;
}

void RequestState::publish(std::string_view delta, bool first_token, const CompletionUsage& usage) {
  {
    std::lock_guard lk(mu_);
    text_ += delta;
    started_ |= first_token;
    usage_ = usage;
  }
  cv_.notify_all();
}

void RequestState::publish_token(std::string_view delta, bool first_token, const CompletionUsage& usage, TokenId token,
                                 const engine::TokenLogprobs* logprobs) {
  {
    std::lock_guard lk(mu_);
    tokens_.ids.push_back(token);
    if (logprobs != nullptr) tokens_.logprobs.push_back(*logprobs);
  }
  publish(delta, first_token, usage);
}

void RequestState::set_prompt_logprobs(std::vector<engine::TokenLogprobs> logprobs) {
  std::lock_guard lk(mu_);
  tokens_.prompt_logprobs = std::move(logprobs);
}

void RequestState::complete(std::string_view delta, std::string finish_reason, Status error, const CompletionUsage& usage) {
  {
    std::lock_guard lk(mu_);
    text_ += delta;
    done_ = true;
    finish_reason_ = std::move(finish_reason);
    error_ = std::move(error);
    usage_ = usage;
  }
  cv_.notify_all();
}

}  // namespace kvtier::server
