// Scheduler: the one thread that owns the Runtime, with continuous batching.
//
// HTTP threads submit() a GenerationRequest and get a RequestState to wait
// on; they never touch the Runtime. The scheduler thread loops:
//   1. reap running sequences whose client went away or whose time is up
//      (Runtime::finish frees their pages);
//   2. compute at most `prefill_chunk_tokens` prompt positions in all:
//      first the next chunks of prompts being computed (oldest first,
//      Runtime::prefill_more), then with what is left admit at most
//      `prefills_per_step` waiting requests (Runtime::start: cache lookup,
//      loads, a first chunk), so a long prompt is computed in chunks between
//      the decode steps of running streams instead of stalling them for its
//      whole length (chunked prefill); which request first is
//      SchedulerOptions::policy's choice (arrival order, or the one with the
//      least left to compute: server/schedule_policy.h);
//   3. decode every running sequence whose prompt is computed, in one
//      Runtime::decode batch.
// A sequence ends on EOS, a stop string, max_tokens or the context limit;
// its text is published incrementally (stop strings are cut off).
// The waiting queue is bounded: submit() fails with Busy (HTTP 429) when it
// is full, and with Unavailable (503) once draining has begun.
// Admission never stalls the loop. A request that could never run (prompt
// plus max_tokens beyond the whole device pool, ModelInfo::max_kv_tokens) is
// refused by submit() with InvalidArgument. One that does not fit now
// (Runtime::start says Busy: running sequences hold the pages or slots) stays
// in its place in the queue while later requests that fit start ahead of it;
// it is tried again, first, only once room may have appeared (a sequence
// ended, or `retry_idle` passed with nothing running), never in a busy loop.
// After `max_passes` later requests have started ahead of it, no other
// request starts until it has, so it cannot starve.
// Running sequences that together outgrow the device pool while decoding
// never fail for it: the youngest is preempted (Runtime::preempt: its KV
// leaves the pool, raw to host memory or to the cache for recompute; a prompt
// being computed caches what it has and resumes from there) and paused;
// paused sequences resume, oldest first, once a sequence ends (KV recomputed
// in chunks of the prefill budget, as prompts are), and no new request is
// admitted while one is paused. Their output is unchanged.
// Each prefill is kept in a small log (recent()) with its per-layer trace,
// for the dashboard's per-request race.
// Everything public is thread-safe. The Runtime is created by the caller,
// handed over, and destroyed on the scheduler thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/clock.h"
#include "runtime/runtime.h"
#include "server/api.h"
#include "server/request_log.h"
#include "server/schedule_policy.h"

namespace kvtier::server {


// The progress of one request, shared by its HTTP thread and the scheduler.
class RequestState {
 public:
  using Clock = std::chrono::steady_clock;

  struct View {
    std::string delta;          // text published since the caller's offset
    bool started = false;       // the first token exists
    bool done = false;
    std::string finish_reason;  // "stop" | "length" when done without error
    Status error;               // non-OK when the request failed or was cancelled
    CompletionUsage usage;      // final once done
    CompletionTokens tokens;    // wait_done(): all of them; wait(StreamCursor&): those past the cursor
  };
  // How far a streaming reader has got: text bytes, tokens, and whether it has the prompt's logprobs.
  struct StreamCursor {
    size_t text = 0;
    size_t tokens = 0;
    bool prompt_taken = false;
  };
  // Waits until there is text beyond `offset`, the first token exists and
  // the caller has not seen it yet (`seen_start` false; its text may be held
  // back, but clients time the first event), the request is done, or
  // `timeout` passes; advances `offset` past the returned delta.
  View wait(size_t& offset, bool seen_start, std::chrono::milliseconds timeout);
  // The same, also waking for tokens (ids, logprobs) published past `cursor.tokens` (a token
  // whose text is held back still comes at once), returning them and, once the request has
  // started, the prompt's logprobs the first time.
  View wait(StreamCursor& cursor, bool seen_start, std::chrono::milliseconds timeout);
  // Waits until done (no timeout: the scheduler enforces request_timeout_s).
  View wait_done();
  // The same, giving up after `timeout` (nullopt: not done yet).
  std::optional<View> wait_done(std::chrono::milliseconds timeout);

  // The client went away: the scheduler finishes the sequence at its next step.
  // True when this call cancelled it (not done nor cancelled before).
  bool cancel();
  bool cancelled() const;

  // Scheduler side.
  void publish(std::string_view delta, bool first_token, const CompletionUsage& usage);
  // A generated token (and its logprobs, when asked for), published with its text delta.
  void publish_token(std::string_view delta, bool first_token, const CompletionUsage& usage, TokenId token,
                     const engine::TokenLogprobs* logprobs);
  void set_prompt_logprobs(std::vector<engine::TokenLogprobs> logprobs);
  void complete(std::string_view delta, std::string finish_reason, Status error, const CompletionUsage& usage);
  Clock::time_point arrival() const { return arrival_; }

 private:
  friend class Scheduler;
  // A view of where the request stands (started, done, why, usage); no text or tokens. Under mu_.
  View status_locked() const;
  std::function<void()> wake_scheduler_;
  Clock::time_point arrival_;  // set by Scheduler::submit from its clock
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
  bool started_ = false;
  bool done_ = false;
  bool cancelled_ = false;
  std::string finish_reason_;
  Status error_;
  CompletionUsage usage_;
  CompletionTokens tokens_;
};

struct SchedulerOptions {
  uint32_t max_queue = 256;          // waiting (not yet prefilled) requests
  uint32_t max_running = 64;         // sequences decoded together
  uint32_t prefills_per_step = 1;    // admissions between two decode steps
  // Prompt positions computed between two decode steps, over every prompt (a chunk of a long one,
  // or several short ones): bounds how long a prompt holds the streams beside it. A prompt's cached
  // prefix (its loads, a recomputed front) and a prompt that may blend are computed past it.
  uint32_t prefill_chunk_tokens = kDefaultPrefillChunkTokens;
  double request_timeout_s = 600;
  uint32_t max_passes = 64;          // later requests that may start ahead of one (waiting for room, or by policy)
  SchedulePolicy policy = SchedulePolicy::kFcfs;  // admission order (server/schedule_policy.h)
  std::chrono::milliseconds retry_idle{50};  // retry of requests waiting for room when nothing runs
  uint32_t recent_requests = 64;     // prefills kept in recent() (GET /v1/requests/recent)
  // Arrival, deadlines, TTFT and end-to-end times are read from it (tests: a ManualClock).
  const Clock* clock = &Clock::system();

  Status validate() const;
};

class Scheduler {
 public:
  static Result<std::unique_ptr<Scheduler>> create(const SchedulerOptions& options, std::unique_ptr<Runtime> runtime);
  // Cancels everything still queued or running and joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A copy taken at creation; immutable.
  const ModelInfo& model() const { return model_; }

  // Busy when the waiting queue is full, Unavailable when draining.
  Result<std::shared_ptr<RequestState>> submit(GenerationRequest request);

  // Runs `fn` on the scheduler thread between two steps and returns its value,
  // typed as `fn` returns it (stats, flush, tokenization: anything that
  // touches the Runtime). Unavailable once the scheduler has stopped.
  // A function that returns a Status gives that Status (or Unavailable).
  template <class T>
  using CallResult = std::conditional_t<std::is_same_v<T, Status>, Status, Result<T>>;
  template <class Fn>
  auto call(Fn fn) -> CallResult<std::invoke_result_t<Fn&, Runtime&>> {
    using T = std::invoke_result_t<Fn&, Runtime&>;
    auto promise = std::make_shared<std::promise<T>>();
    auto future = promise->get_future();
    if (!post([fn = std::move(fn), promise](Runtime& r) mutable { promise->set_value(fn(r)); }))
      return Status::Unavailable("the scheduler has stopped");
    return future.get();  // a posted call always runs, even when the scheduler stops after posting it
  }
  // The same without waiting: `fn` runs later, between two steps. False (and
  // `fn` dropped) once the scheduler has stopped.
  bool post(std::function<void(Runtime&)> fn);
  // The same once `delay` has passed on the scheduler's clock (options.clock),
  // at the first step from then on. Best effort: calls still pending when the
  // scheduler stops are dropped. At most kMaxTimedCalls pending (each may
  // hold a prompt: 1024 of the longest prompts are a bounded few hundred MB):
  // past it the call due last is dropped for a sooner one, else Busy.
  // Unavailable once stopping.
  static constexpr size_t kMaxTimedCalls = 1024;
  Status post_after(Clock::duration delay, std::function<void(Runtime&)> fn);

  // The last options.recent_requests prefills, with their per-layer traces.
  const RequestLog& recent() const { return recent_; }

  // Stops accepting new requests (submit() -> Unavailable).
  void begin_drain();
  bool draining() const;
  // begin_drain(), waits up to `grace` for in-flight requests, then cancels
  // the rest and waits for them to be released. Returns how many were cancelled.
  size_t drain(std::chrono::milliseconds grace);

  struct Counts {
    size_t waiting = 0;
    size_t running = 0;
    uint64_t steps = 0;  // decode steps so far
    uint64_t cancels = 0;  // RequestState::cancel() calls that took effect (a client went away, or shutdown)
    uint64_t preemptions = 0;  // running sequences paused because together they outgrew the device pool
    uint32_t free_device_pages = 0;  // after the last step (Runtime::free_device_pages)
  };
  Counts counts() const;

 private:
  struct Running;
  Scheduler(const SchedulerOptions& options, std::unique_ptr<Runtime> runtime);
  void loop();
  // Waits (mu_ held in `lk`) until there is work, the next timed call is due, or, with requests
  // waiting for room, options_.retry_idle has passed (then room_epoch_ moves on).
  void wait_for_work(std::unique_lock<std::mutex>& lk);
  // Moves the timed calls due by now (the scheduler's clock) to `calls`. Holds mu_.
  void take_due_locked(std::vector<std::function<void()>>& calls);
  void step();
  // Admissions, each computing a first chunk of at most `budget` positions (taken from it).
  void admit(uint32_t& budget);
  enum class Admission { kPrefilled, kAnswered, kNoRoom };  // kPrefilled: start() ran (counts toward prefills_per_step)
  struct Waiting;
  // Runtime::start for one request taken from the queue; kNoRoom leaves `w` intact.
  Admission start_waiting(Waiting& w, uint32_t& budget);
  // The next chunks of prompts being computed, oldest first, while `budget` lasts.
  void prefill_running(uint32_t& budget);
  // The prompt is computed: its report, and its first token.
  void prefilled(Running& r, Runtime::Started& started);
  // When a request's time is up: its arrival plus options_.request_timeout_s.
  Clock::time_point deadline_of(const RequestState& state) const;
  // Answers a waiting request whose client left or whose deadline passed (at `now`); false if neither.
  bool answer_if_over(Waiting& w, Clock::time_point now) const;
  // Every step: waiting requests that are over are answered, whether or not any request can start
  // (their queue places and their HTTP threads come back). Takes mu_.
  void answer_waiting_that_are_over();
  // The index of the next waiting request to try, if any may start, by options_.policy
  // (server/schedule_policy.h) over the first kScheduleWindow admissible ones. Holds mu_.
  static constexpr uint32_t kScheduleWindow = 16;
  std::optional<size_t> next_admissible_locked() const;
  static PromptRequest prompt_of(const GenerationRequest& r);
  // Asks the runtime to read ahead the cached prefixes of requests still queued.
  void prefetch_waiting();
  // One decode step for every running sequence that is not paused nor
  // prefilling. When they outgrow the device pool (the runtime answers Busy)
  // the youngest sequence holding pages (decoding, prefilling, or paused and
  // being resumed) is preempted (pause()) and the rest try again.
  void decode_running();
  void pause(Running& r);
  // Resumes paused sequences, oldest first, once room may have appeared; one
  // whose KV is recomputed takes its chunks from the step's prefill `budget`,
  // so a long one never holds the decoding streams for more than a chunk.
  // True when none is left paused (new requests may then be admitted).
  bool resume_paused(uint32_t& budget);
  // Keeps a just-prefilled request in recent_.
  void record_prefill(const CompletionUsage& usage, const std::string& session);
  // Applies one sampled token; returns true when the sequence has ended.
  bool on_token(Running& r, TokenId token);
  void end(Running& r, std::string finish_reason, Status error);

  const SchedulerOptions options_;
  std::unique_ptr<Runtime> runtime_;
  const ModelInfo model_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Waiting {
    GenerationRequest request;
    std::shared_ptr<RequestState> state;
    bool prefetched = false;  // the runtime was asked to read its cached prefix ahead
    bool blocked = false;     // start() found no room at `blocked_at`
    uint64_t blocked_at = 0;  // room_epoch_ then
    uint32_t passed = 0;      // later requests started ahead of it
  };
  std::deque<Waiting> waiting_;
  std::vector<std::function<void()>> calls_;
  std::multimap<Clock::time_point, std::function<void()>> timed_;  // post_after(), by due time
  bool draining_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  size_t running_count_ = 0;  // mirror of running_.size() for counts()
  uint32_t free_pages_ = 0;   // Runtime::free_device_pages() after the last step
  uint64_t steps_ = 0;
  uint64_t cancels_ = 0;
  uint64_t preemptions_ = 0;
  bool wake_ = false;  // a cancel arrived
  uint64_t room_epoch_ = 0;  // bumped whenever room may have appeared (a sequence ended, an idle retry); scheduler thread only

  std::vector<std::unique_ptr<Running>> running_;  // scheduler thread only
  RequestLog recent_;
  std::thread thread_;
};

}  // namespace kvtier::server
