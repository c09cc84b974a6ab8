#include "server/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <future>

#include "server/text_stream.h"

namespace kvtier::server {
namespace {

double seconds_between(RequestState::Clock::time_point a, RequestState::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

struct Scheduler::Running {
  GenerationRequest request;
  std::shared_ptr<RequestState> state;
  SeqId seq;
  std::vector<TokenId> tokens;  // completion tokens (EOS excluded)
  std::string decoded;          // their text, a token's at a time (TextCodec: the text of ids is the sum of theirs)
  CompletionText text;
  CompletionUsage usage;
  RequestState::Clock::time_point deadline;
  bool ended = false;
  bool prefilling = false;           // its prompt is being computed in chunks (Runtime::prefill_more)
  bool paused = false;               // preempted: its KV is off the device pool (Runtime::preempt)
  bool resuming = false;             // paused, and its KV being computed again in chunks (Runtime::resume)
  uint64_t resume_tried_at = 0;      // room_epoch_ when resume() last found no room

  explicit Running(GenerationRequest r) : request(std::move(r)), text(request.stop) {}
};

Status SchedulerOptions::validate() const {
  if (max_queue == 0) return Status::InvalidArgument("scheduler: max_queue must be at least 1");
  if (max_running == 0) return Status::InvalidArgument("scheduler: max_running must be at least 1");
  if (prefills_per_step == 0) return Status::InvalidArgument("scheduler: prefills_per_step must be at least 1");
  if (prefill_chunk_tokens == 0) return Status::InvalidArgument("scheduler: prefill_chunk_tokens must be at least 1");
  if (!(request_timeout_s > 0)) return Status::InvalidArgument("scheduler: request_timeout_s must be positive");
  if (retry_idle.count() <= 0) return Status::InvalidArgument("scheduler: retry_idle must be positive");
  if (recent_requests == 0) return Status::InvalidArgument("scheduler: recent_requests must be at least 1");
  if (clock == nullptr) return Status::InvalidArgument("scheduler: clock must be set");
  return {};
}

Result<std::unique_ptr<Scheduler>> Scheduler::create(const SchedulerOptions& options, std::unique_ptr<Runtime> runtime) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  if (runtime == nullptr) return Status::InvalidArgument("scheduler: runtime is null");
  return std::unique_ptr<Scheduler>(new Scheduler(options, std::move(runtime)));
}

Scheduler::Scheduler(const SchedulerOptions& options, std::unique_ptr<Runtime> runtime)
    : options_(options), runtime_(std::move(runtime)), model_(runtime_->model()), recent_(options.recent_requests) {
  free_pages_ = runtime_->free_device_pages();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(mu_);
    draining_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<std::shared_ptr<RequestState>> Scheduler::submit(GenerationRequest request) {
  if (!model_.fits_kv_pool(request.prompt.size(), request.max_tokens))
    return Status::InvalidArgument("prompt (" + std::to_string(request.prompt.size()) + " tokens) plus max_tokens (" +
                                   std::to_string(request.max_tokens) + ") needs KV for " +
                                   std::to_string(ModelInfo::kv_tokens_needed(request.prompt.size(), request.max_tokens)) +
                                   " tokens, more than the device KV pool holds (" +
                                   std::to_string(model_.max_kv_tokens) + " tokens): it could never run");
  auto state = std::make_shared<RequestState>();
  state->arrival_ = options_.clock->now();
  state->wake_scheduler_ = [this] {  // called once, by the state's cancel()
    {
      std::lock_guard lk(mu_);
      wake_ = true;
      ++cancels_;
    }
    cv_.notify_all();
  };
  {
    std::lock_guard lk(mu_);
    if (draining_) return Status::Unavailable("the server is shutting down");
    if (waiting_.size() >= options_.max_queue)
      return Status::Busy("the request queue is full (" + std::to_string(options_.max_queue) + " waiting)");
    waiting_.push_back({std::move(request), state});
  }
  cv_.notify_all();
  return state;
}

bool Scheduler::post(std::function<void(Runtime&)> fn) {
  {
    std::lock_guard lk(mu_);
    if (stopped_) return false;
    calls_.push_back([this, fn = std::move(fn)] { fn(*runtime_); });
  }
  cv_.notify_all();
  return true;
}

Status Scheduler::post_after(Clock::duration delay, std::function<void(Runtime&)> fn) {
  const Clock::time_point due = options_.clock->now() + std::max(Clock::duration(0), delay);
  {
    std::lock_guard lk(mu_);
    if (stopping_ || stopped_) return Status::Unavailable("the scheduler is stopping");
    if (timed_.size() >= kMaxTimedCalls) {
      // Full: the call due last gives way to a sooner one, so calls set far ahead (an hour-long
      // ready_in_ms, 1,024 times) cannot lock out everyone else's.
      const auto last = std::prev(timed_.end());
      if (last->first <= due)
        return Status::Busy("too many timed calls pending (" + std::to_string(kMaxTimedCalls) + "), all due sooner");
      timed_.erase(last);
    }
    timed_.emplace(due, [this, fn = std::move(fn)] { fn(*runtime_); });
  }
  cv_.notify_all();
  return Status::Ok();
}

void Scheduler::begin_drain() {
  {
    std::lock_guard lk(mu_);
    draining_ = true;
  }
  cv_.notify_all();
}

bool Scheduler::draining() const {
  std::lock_guard lk(mu_);
  return draining_;
}

size_t Scheduler::drain(std::chrono::milliseconds grace) {
  begin_drain();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::unique_lock lk(mu_);
  // The loop notifies cv_ after every step, so this sees the counts shrink.
  cv_.wait_until(lk, deadline, [&] { return waiting_.empty() && running_count_ == 0; });
  if (waiting_.empty() && running_count_ == 0) return 0;
  // Out of time: cancel what is left. Waiting requests are cancelled here;
  // running ones through their states (the loop finishes their sequences).
  size_t cancelled = waiting_.size() + running_count_;
  stopping_ = true;
  lk.unlock();
  cv_.notify_all();
  lk.lock();
  cv_.wait(lk, [&] { return waiting_.empty() && running_count_ == 0; });
  return cancelled;
}

Scheduler::Counts Scheduler::counts() const {
  std::lock_guard lk(mu_);
  return {waiting_.size(), running_count_, steps_, cancels_, preemptions_, free_pages_};
}

void Scheduler::wait_for_work(std::unique_lock<std::mutex>& lk) {
  const auto due = [&] { return !timed_.empty() && timed_.begin()->first <= options_.clock->now(); };
  const auto ready = [&] {
    return stopping_ || wake_ || !calls_.empty() || !running_.empty() || next_admissible_locked().has_value() || due();
  };
  // The next timed call's distance on the scheduler's clock (a ManualClock's
  // is virtual: a test that moves it wakes the loop with a call of its own).
  std::optional<Clock::duration> until;
  if (!timed_.empty()) until = std::max(Clock::duration(0), timed_.begin()->first - options_.clock->now());
  if (waiting_.empty() && !until) return cv_.wait(lk, ready);
  const bool retry = !waiting_.empty() && (!until || *until >= options_.retry_idle);
  if (!cv_.wait_for(lk, retry ? Clock::duration(options_.retry_idle) : *until, ready) && retry) {
    // Only requests that found no room wait, and nothing runs whose end
    // would make room: pages held outside sequences (copies in flight) may
    // have been freed since, so try them again, at this bounded rate.
    ++room_epoch_;
  }
}

void Scheduler::take_due_locked(std::vector<std::function<void()>>& calls) {
  const auto now = options_.clock->now();
  while (!timed_.empty() && timed_.begin()->first <= now) {
    calls.push_back(std::move(timed_.begin()->second));
    timed_.erase(timed_.begin());
  }
}

void Scheduler::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    wait_for_work(lk);
    wake_ = false;
    const bool stopping = stopping_;
    if (stopping) timed_.clear();  // best effort: not run once stopping
    // The due timed calls first: a test that moves its clock and then call()s sees them run before.
    std::vector<std::function<void()>> calls;
    take_due_locked(calls);
    for (auto& c : calls_) calls.push_back(std::move(c));
    calls_.clear();
    if (stopping) {
      // Cancel everything: waiting requests end here, running ones below.
      while (!waiting_.empty()) {
        waiting_.front().state->complete({}, {}, Status::Unavailable("the server is shutting down"), {.cut_short = true});
        waiting_.pop_front();
      }
    }
    lk.unlock();
    for (auto& c : calls) c();
    if (stopping)
      for (auto& r : running_) {
        r->usage.cut_short = true;
        end(*r, {}, Status::Unavailable("the server is shutting down"));  // its client may still be there: a 503
      }
    step();
    const uint32_t free_pages = runtime_->free_device_pages();
    lk.lock();
    running_count_ = running_.size();
    free_pages_ = free_pages;
    ++steps_;
    cv_.notify_all();  // drain() watches the counts
    if (stopping_ && waiting_.empty() && running_.empty()) break;
  }
  // Refuse further calls, run the ones that raced in, then release the
  // Runtime on this thread (its destructor persists what it must).
  stopped_ = true;
  auto calls = std::move(calls_);
  lk.unlock();
  for (auto& c : calls) c();
  runtime_.reset();
}

void Scheduler::step() {
  const auto now = options_.clock->now();
  for (auto& r : running_) {
    if (r->state->cancelled()) {
      end(*r, {}, Status::Cancelled("the request was cancelled"));
    } else if (now > r->deadline) {
      r->usage.cut_short = true;
      end(*r, {}, Status::DeadlineExceeded("the request timed out"));
    }
  }
  std::erase_if(running_, [](const auto& r) { return r->ended; });
  answer_waiting_that_are_over();
  uint32_t budget = options_.prefill_chunk_tokens;
  const bool none_paused = resume_paused(budget);  // first: a resumed sequence gets its chunk in this step
  prefill_running(budget);
  if (none_paused) admit(budget);  // new requests wait while a paused one does not fit
  prefetch_waiting();  // their lower-tier reads overlap the decode below
  decode_running();
  std::erase_if(running_, [](const auto& r) { return r->ended; });
}

// What the runtime's cache calls read of a request: its prompt and namespace.
PromptRequest Scheduler::prompt_of(const GenerationRequest& r) {
  PromptRequest p;
  p.prompt = r.prompt;
  p.cache_salt = r.cache_salt;
  p.tenant = r.tenant;
  return p;
}

void Scheduler::prefetch_waiting() {
  std::vector<PromptRequest> todo;
  {
    std::lock_guard lk(mu_);
    for (auto& w : waiting_) {
      if (w.prefetched) continue;
      w.prefetched = true;
      todo.push_back(prompt_of(w.request));
    }
  }
  for (const PromptRequest& p : todo) (void)runtime_->prefetch(p);  // best effort; start() decides
}

std::string_view schedule_policy_name(SchedulePolicy p) { return p == SchedulePolicy::kFcfs ? "fcfs" : "cached-first"; }

Result<SchedulePolicy> parse_schedule_policy(std::string_view name) {
  if (name == "fcfs") return SchedulePolicy::kFcfs;
  if (name == "cached-first") return SchedulePolicy::kCachedFirst;
  return Status::InvalidArgument("unknown schedule policy '" + std::string(name) + "' (fcfs, cached-first)");
}

std::optional<size_t> Scheduler::next_admissible_locked() const {
  std::optional<size_t> best;
  uint64_t best_left = 0;
  uint32_t seen = 0;
  for (size_t i = 0; i < waiting_.size() && seen < kScheduleWindow; ++i) {
    const Waiting& w = waiting_[i];
    if (w.state->cancelled()) return i;  // answered at once
    const bool admissible = !w.blocked || w.blocked_at != room_epoch_;
    // It has waited long enough: nobody else goes first. (Every request before it was passed
    // at least as often, so it is the first one due.)
    if (w.passed >= options_.max_passes) return admissible ? std::optional<size_t>(i) : std::nullopt;
    if (!admissible) continue;
    if (options_.policy == SchedulePolicy::kFcfs) return i;
    ++seen;
    const size_t prompt = w.request.prompt.size();
    const uint64_t left = prompt - std::min<size_t>(prompt, runtime_->cached_prefix_tokens(prompt_of(w.request)));
    if (!best || left < best_left) best = i, best_left = left;
  }
  return best;
}

void Scheduler::admit(uint32_t& budget) {
  for (uint32_t n = 0; n < options_.prefills_per_step && budget > 0 && running_.size() < options_.max_running;) {
    Waiting w;
    size_t index = 0;
    {
      std::lock_guard lk(mu_);
      const std::optional<size_t> next = next_admissible_locked();
      if (!next) return;
      index = *next;
      for (size_t i = 0; i < index; ++i) ++waiting_[i].passed;  // those before it wait for room
      w = std::move(waiting_[index]);
      waiting_.erase(waiting_.begin() + long(index));
      ++running_count_;  // so drain() never sees it in neither place
    }
    const Admission admission = start_waiting(w, budget);
    if (admission == Admission::kPrefilled) ++n;
    if (admission != Admission::kNoRoom) continue;
    // No room now: back to its place, skipped until room may have appeared.
    std::lock_guard lk(mu_);
    w.blocked = true;
    w.blocked_at = room_epoch_;
    waiting_.insert(waiting_.begin() + long(std::min(index, waiting_.size())), std::move(w));
  }
}

Clock::time_point Scheduler::deadline_of(const RequestState& state) const {
  return state.arrival() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.request_timeout_s));
}

bool Scheduler::answer_if_over(Waiting& w, Clock::time_point now) const {
  if (w.state->cancelled()) {
    w.state->complete({}, {}, Status::Cancelled("the client went away"), {});
    return true;
  }
  if (now <= deadline_of(*w.state)) return false;
  w.state->complete({}, {}, Status::DeadlineExceeded("the request timed out in the queue"), {.cut_short = true});
  return true;
}

void Scheduler::answer_waiting_that_are_over() {
  const auto now = options_.clock->now();
  std::lock_guard lk(mu_);
  std::erase_if(waiting_, [&](Waiting& w) { return answer_if_over(w, now); });
}

Scheduler::Admission Scheduler::start_waiting(Waiting& w, uint32_t& budget) {
  const auto now = options_.clock->now();
  if (answer_if_over(w, now)) return Admission::kAnswered;
  const auto deadline = deadline_of(*w.state);
  auto started = runtime_->start(w.request, budget);
  if (!started.ok() && started.status().is(StatusCode::kBusy)) return Admission::kNoRoom;
  auto r = std::make_unique<Running>(std::move(w.request));
  r->state = std::move(w.state);
  r->deadline = deadline;
  r->usage.prompt_tokens = uint32_t(r->request.prompt.size());
  r->usage.queue_s = seconds_between(r->state->arrival(), now);
  if (!started.ok()) {
    r->state->complete({}, {}, started.status(), r->usage);
    return Admission::kPrefilled;  // a prefill's worth of work was spent on it
  }
  budget -= std::min(budget, started->computed);
  r->seq = started->seq;
  r->prefilling = true;
  Running& ref = *r;
  running_.push_back(std::move(r));
  if (started->prompt_left == 0) prefilled(ref, *started);
  return Admission::kPrefilled;
}

void Scheduler::prefill_running(uint32_t& budget) {
  for (auto& r : running_) {
    if (budget == 0) return;
    if (!r->prefilling || r->paused || r->ended) continue;
    auto more = runtime_->prefill_more(r->seq, budget);
    if (!more.ok()) {
      end(*r, {}, more.status());
      continue;
    }
    budget -= std::min(budget, more->computed);
    if (more->prompt_left == 0) prefilled(*r, *more);
  }
}

void Scheduler::prefilled(Running& r, Runtime::Started& started) {
  r.prefilling = false;
  r.usage.report = started.report;
  r.state->set_prompt_logprobs(std::move(started.prompt_logprobs));
  r.usage.ttft_s = seconds_between(r.state->arrival(), options_.clock->now());
  record_prefill(r.usage, r.request.session);
  on_token(r, started.first_token);
}

void Scheduler::record_prefill(const CompletionUsage& usage, const std::string& session) {
  PrefillRecord record;
  record.session = session;
  const auto since_arrival = std::chrono::duration<double>(usage.ttft_s);
  record.arrival_unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch() - since_arrival).count();
  record.queue_s = usage.queue_s;
  record.ttft_s = usage.ttft_s;
  record.report = usage.report;
  recent_.add(std::move(record));
}

void Scheduler::decode_running() {
  for (;;) {
    std::vector<SeqId> seqs;
    std::vector<Running*> batch, active;  // decoding; holding pages (decoding, prefilling or resuming)
    for (auto& r : running_) {
      if (r->ended || (r->paused && !r->resuming)) continue;
      active.push_back(r.get());
      if (r->prefilling || r->paused) continue;
      seqs.push_back(r->seq);
      batch.push_back(r.get());
    }
    if (seqs.empty()) return;
    auto tokens = runtime_->decode(seqs);
    if (tokens.ok() && tokens->size() == seqs.size()) {
      for (size_t i = 0; i < batch.size(); ++i) on_token(*batch[i], (*tokens)[i]);
      return;
    }
    // Out of device pages: the youngest sequence pauses and the others go on.
    if (!tokens.ok() && tokens.status().is(StatusCode::kBusy) && active.size() > 1) {
      pause(*active.back());
      continue;
    }
    // The batch failed: decode one by one so a single bad sequence (context
    // full) fails alone instead of taking the others with it.
    for (Running* r : batch) {
      const SeqId one[] = {r->seq};
      auto t = runtime_->decode(one);
      if (t.ok() && t->size() == 1) on_token(*r, (*t)[0]);
      else end(*r, {}, t.ok() ? Status::Internal("decode returned a wrong number of tokens") : t.status());
    }
    return;
  }
}

void Scheduler::pause(Running& r) {
  auto kept = runtime_->preempt(r.seq);
  if (!kept.ok()) return end(r, {}, kept.status());
  r.paused = true;
  r.resuming = false;
  r.resume_tried_at = room_epoch_;  // back once room appears: a sequence ends
  std::lock_guard lk(mu_);
  ++preemptions_;
}

bool Scheduler::resume_paused(uint32_t& budget) {
  const bool others_decode = std::any_of(running_.begin(), running_.end(), [](const auto& r) { return !r->paused; });
  for (auto& r : running_) {  // oldest first: a younger one never resumes ahead of it
    if (!r->paused) continue;
    // No room has appeared since it last found none (one already resuming holds its pages).
    if (!r->resuming && others_decode && r->resume_tried_at == room_epoch_) return false;
    if (budget == 0) return false;
    auto resumed = runtime_->resume(r->seq, budget);
    if (!resumed.ok() && resumed.status().is(StatusCode::kBusy)) {
      r->resume_tried_at = room_epoch_;
      return false;
    }
    if (!resumed.ok()) {
      r->paused = r->resuming = false;
      end(*r, {}, resumed.status());
      continue;
    }
    budget -= std::min(budget, resumed->computed);
    // Approximate KV loaded at resume makes the rest of the answer approximate: the usage says so.
    r->usage.report.lossy_cached_tokens = std::max(r->usage.report.lossy_cached_tokens, resumed->lossy_tokens);
    r->resuming = resumed->left > 0;
    r->paused = r->resuming;
    if (r->paused) return false;
  }
  return true;
}

bool Scheduler::on_token(Running& r, TokenId token) {
  const bool first = r.tokens.empty();
  if (r.request.max_tokens == 0) {  // echo of the prompt only: the sampled token is not part of the answer
    r.state->publish({}, first, r.usage);
    end(r, "length", {});
    return true;
  }
  if (model_.is_end_of_generation(token) && !r.request.ignore_eos) {
    end(r, "stop", {});
    return true;
  }
  r.tokens.push_back(token);
  const engine::TokenLogprobs* logprobs = runtime_->last_logprobs(r.seq);
  r.usage.completion_tokens = uint32_t(r.tokens.size());
  r.decoded += model_.text.detokenize_showing({&token, 1}, r.request.shown_specials);  // the whole text again each token was quadratic
  std::string delta = r.text.advance(r.decoded);
  r.state->publish_token(delta, first, r.usage, token, logprobs);
  if (r.text.stopped()) {
    end(r, "stop", {});
    return true;
  }
  const bool at_limit = r.tokens.size() >= r.request.max_tokens ||
                        r.request.prompt.size() + r.tokens.size() >= model_.max_context;
  if (at_limit) {
    end(r, "length", {});
    return true;
  }
  return false;
}

void Scheduler::end(Running& r, std::string finish_reason, Status error) {
  if (r.ended) return;
  r.ended = true;
  r.usage.retained_tokens = runtime_->finish(r.seq);
  if (!r.request.tenant.empty()) r.usage.tenant = runtime_->tenant_usage(r.request.tenant);
  ++room_epoch_;  // its pages and slot are free: requests waiting for room may fit now
  std::string rest;
  if (error.ok() && !r.text.stopped()) rest = r.text.finish(r.decoded);
  r.usage.e2e_s = seconds_between(r.state->arrival(), options_.clock->now());
  r.state->complete(rest, std::move(finish_reason), std::move(error), r.usage);
}

}  // namespace kvtier::server
