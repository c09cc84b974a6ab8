#include "server/scheduler.h"

#include <gtest/gtest.h>

#include <thread>

#include "server/fake_runtime.h"

namespace kvtier::server {
namespace {

using namespace std::chrono_literals;
using testing::FakeRuntime;
using testing::FakeShared;

struct Fixture {
  std::shared_ptr<FakeShared> fake = std::make_shared<FakeShared>();
  std::unique_ptr<Scheduler> sched;

  explicit Fixture(SchedulerOptions o = {}, std::function<void(FakeShared&)> setup = {}) {
    if (setup) setup(*fake);
    auto s = Scheduler::create(o, std::make_unique<FakeRuntime>(fake));
    EXPECT_TRUE(s.ok());
    sched = std::move(s).value();
  }
  std::shared_ptr<RequestState> submit(std::vector<TokenId> prompt, uint32_t max_tokens, std::vector<std::string> stop = {}) {
    GenerationRequest g;
    g.prompt = std::move(prompt);
    g.max_tokens = max_tokens;
    g.stop = std::move(stop);
    auto r = sched->submit(std::move(g));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : nullptr;
  }
  std::vector<std::string> log() {
    std::lock_guard lk(fake->mu);
    return fake->log;
  }
};

TEST(SchedulerTest, GeneratesUntilMaxTokens) {
  Fixture f;
  auto st = f.submit({1, 2, 3}, 5);
  auto v = st->wait_done();
  ASSERT_TRUE(v.error.ok()) << v.error.to_string();
  EXPECT_EQ(v.finish_reason, "length");
  // prompt.back() = 3 -> tokens 4,5,6,7,8 -> "efghi".
  EXPECT_EQ(v.delta, "efghi");
  EXPECT_EQ(v.usage.completion_tokens, 5u);
  EXPECT_EQ(v.usage.prompt_tokens, 3u);
  EXPECT_TRUE(f.fake->wait_for([&] { return f.fake->finished.size() == 1 && f.fake->live.empty(); }));
}

TEST(SchedulerTest, StopsOnEosAndOnStopStrings) {
  Fixture f({}, [](FakeShared& s) { s.eos_after = 3; });
  auto v = f.submit({1}, 10)->wait_done();
  EXPECT_EQ(v.finish_reason, "stop");
  EXPECT_EQ(v.delta, "cd");  // two tokens, then EOS
  EXPECT_EQ(v.usage.completion_tokens, 2u);

  Fixture g;
  auto w = g.submit({1}, 10, {"ef"})->wait_done();  // c d e f g ...
  EXPECT_EQ(w.finish_reason, "stop");
  EXPECT_EQ(w.delta, "cd");
}

// The first token wakes a streaming waiter even when its text is held back
// (here: a possible start of the stop string), so the first event, by which
// clients time TTFT, is not delayed to the next token or the end.
TEST(SchedulerTest, FirstTokenWakesTheStreamWhileItsTextIsHeldBack) {
  Fixture f({}, [](FakeShared& s) { s.decode_delay = 300ms; });
  auto st = f.submit({1}, 4, {"cz"});  // first token: "c", a prefix of the stop string
  size_t offset = 0;
  auto v = st->wait(offset, /*seen_start=*/false, 5000ms);
  EXPECT_TRUE(v.started);
  EXPECT_FALSE(v.done);
  EXPECT_EQ(v.delta, "");  // "c" held back; without the wake-up this returns "cd" a decode step later
  std::string got = v.delta;
  while (!v.done) {
    v = st->wait(offset, true, 5000ms);
    got += v.delta;
  }
  EXPECT_EQ(got, "cdef");
}

TEST(SchedulerTest, StreamsTextIncrementally) {
  Fixture f({}, [](FakeShared& s) { s.decode_delay = 2ms; });
  auto st = f.submit({1}, 20);
  size_t offset = 0;
  std::string got;
  int pieces = 0;
  for (;;) {
    auto v = st->wait(offset, true, 1000ms);
    if (!v.delta.empty()) ++pieces;
    got += v.delta;
    if (v.done) break;
  }
  EXPECT_EQ(got.size(), 20u);
  EXPECT_GT(pieces, 1);
}

TEST(SchedulerTest, DecodeIsBatchedAcrossRunningSequences) {
  Fixture f({}, [](FakeShared& s) { s.decode_delay = 1ms; });
  std::vector<std::shared_ptr<RequestState>> states;
  for (int i = 0; i < 6; ++i) states.push_back(f.submit({TokenId(i + 1)}, 30));
  for (auto& s : states) EXPECT_TRUE(s->wait_done().error.ok());
  EXPECT_GE(f.fake->max_batch, 4u);
}

TEST(SchedulerTest, PrefillIsInterleavedWithDecodeSteps) {
  Fixture f({}, [](FakeShared& s) { s.decode_delay = 1ms; });
  auto first = f.submit({1}, 200);
  ASSERT_TRUE(f.fake->wait_for([&] { return !f.fake->log.empty(); }));
  std::vector<std::shared_ptr<RequestState>> more;
  for (int i = 0; i < 5; ++i) more.push_back(f.submit({TokenId(i + 2)}, 3));
  for (auto& s : more) EXPECT_TRUE(s->wait_done().error.ok());
  first->cancel();
  first->wait_done();
  // While a stream is running, two prefills never come back to back: a decode
  // step of the running batch always separates them.
  const auto log = f.log();
  for (size_t i = 1; i < log.size(); ++i) EXPECT_FALSE(log[i] == "start" && log[i - 1] == "start") << "at " << i;
  EXPECT_EQ(std::count(log.begin(), log.end(), "start"), 6);
}

// Chunked prefill: a long prompt is computed prefill_chunk_tokens positions at a time, and the
// running stream decodes between two chunks (without it the whole prompt ran in one step).
TEST(SchedulerTest, ALongPromptIsComputedInChunksBetweenDecodeSteps) {
  SchedulerOptions o;
  o.prefill_chunk_tokens = 8;
  Fixture f(o, [](FakeShared& s) { s.gate_closed = true; });
  auto stream = f.submit({1}, 4000);
  ASSERT_TRUE(f.fake->wait_for([&] { return f.fake->in_start; }));
  auto longer = f.submit(std::vector<TokenId>(40, 5), 3);  // 5 chunks
  auto after = f.submit({2}, 2);
  f.fake->open_gate();
  const auto v = longer->wait_done();
  ASSERT_TRUE(v.error.ok()) << v.error.to_string();
  EXPECT_EQ(v.delta, "ghi");  // 5 -> 6, 7, 8
  ASSERT_TRUE(after->wait_done().error.ok());
  stream->cancel();
  stream->wait_done();
  std::vector<std::string> steps;  // starts, chunks and decodes, in order
  for (const std::string& e : f.log())
    if (e.rfind("start", 0) == 0 || e.rfind("prefill", 0) == 0 || e.rfind("decode", 0) == 0) steps.push_back(e);
  const auto second_start = std::find(std::next(std::find(steps.begin(), steps.end(), "start")), steps.end(), "start");
  ASSERT_NE(second_start, steps.end());
  // The long prompt's first chunk at its start, then four more, each after a decode step of the stream alone.
  const std::vector<std::string> expected = {"start", "decode:1", "prefill:8", "decode:1", "prefill:8", "decode:1",
                                             "prefill:8", "decode:1", "prefill:8", "decode:2"};
  ASSERT_GE(size_t(steps.end() - second_start), expected.size());
  EXPECT_EQ(std::vector<std::string>(second_start, second_start + long(expected.size())), expected);
}

// A streaming reader that takes tokens wakes for a token whose text is held back (a byte of a
// character): with logprobs every token is an event as it comes. (Before, it slept until text came.)
TEST(SchedulerTest, AStreamTakingTokensWakesForATokenWithoutText) {
  RequestState state;
  std::thread reader([&] {
    RequestState::StreamCursor cursor;
    const auto v = state.wait(cursor, /*seen_start=*/true, std::chrono::hours(1));
    EXPECT_EQ(v.tokens.ids, std::vector<TokenId>{7});
    EXPECT_EQ(v.delta, "");
    EXPECT_FALSE(v.done);
  });
  state.publish_token("", /*first_token=*/false, {}, 7, nullptr);
  reader.join();  // without the wake-up, an hour
}

TEST(SchedulerTest, CancelFreesTheSequence) {
  Fixture f({}, [](FakeShared& s) { s.decode_delay = 1ms; });
  auto st = f.submit({1}, 4000);
  size_t offset = 0;
  while (offset < 3) st->wait(offset, true, 1000ms);
  st->cancel();
  auto v = st->wait_done();
  EXPECT_TRUE(v.error.is(StatusCode::kCancelled));
  EXPECT_TRUE(f.fake->wait_for([&] { return f.fake->finished.size() == 1 && f.fake->live.empty(); }));
  EXPECT_LT(v.usage.completion_tokens, 4000u);
}

TEST(SchedulerTest, QueueFullIsBusy) {
  SchedulerOptions o;
  o.max_queue = 2;
  Fixture f(o, [](FakeShared& s) { s.gate_closed = true; });
  auto a = f.submit({1}, 2);
  ASSERT_TRUE(f.fake->wait_for([&] { return f.fake->in_start; }));  // a is held inside start()
  auto b = f.submit({2}, 2);
  auto c = f.submit({3}, 2);
  GenerationRequest d;
  d.prompt = {4};
  auto r = f.sched->submit(d);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().is(StatusCode::kBusy));
  EXPECT_EQ(f.sched->counts().waiting, 2u);
  f.fake->open_gate();
  for (auto& s : {a, b, c}) EXPECT_TRUE(s->wait_done().error.ok());
}

TEST(SchedulerTest, CancelWhileQueuedNeverStarts) {
  Fixture f({}, [](FakeShared& s) { s.gate_closed = true; });
  auto a = f.submit({1}, 2);
  ASSERT_TRUE(f.fake->wait_for([&] { return f.fake->in_start; }));
  auto b = f.submit({2}, 2);
  b->cancel();
  f.fake->open_gate();
  EXPECT_TRUE(a->wait_done().error.ok());
  EXPECT_TRUE(b->wait_done().error.is(StatusCode::kCancelled));
  const auto log = f.log();
  EXPECT_EQ(std::count(log.begin(), log.end(), "start"), 1);
}

// A queued request whose client left is answered at the next step even while nothing can start:
// it kept its queue place (new requests got 429) and its HTTP thread until a running request ended.
TEST(SchedulerTest, AQueuedRequestWhoseClientLeftIsAnsweredWhileTheRunningOnesRun) {
  SchedulerOptions o;
  o.max_running = 1;
  Fixture f(o, [](FakeShared& s) { s.decode_delay = 1ms; });
  auto running = f.submit({1}, 100000000);
  size_t offset = 0;
  while (offset == 0) running->wait(offset, true, 1000ms);
  auto left = f.submit({2}, 2);
  left->cancel();
  EXPECT_TRUE(left->wait_done().error.is(StatusCode::kCancelled));
  EXPECT_EQ(f.sched->counts().waiting, 0u);
  EXPECT_FALSE(running->wait_done(0ms).has_value());  // it never had to end first
  running->cancel();
  (void)running->wait_done();
}

TEST(SchedulerTest, RunningLimitIsRespected) {
  SchedulerOptions o;
  o.max_running = 2;
  Fixture f(o, [](FakeShared& s) { s.decode_delay = 1ms; });
  std::vector<std::shared_ptr<RequestState>> states;
  for (int i = 0; i < 5; ++i) states.push_back(f.submit({TokenId(i + 1)}, 10));
  for (auto& s : states) EXPECT_TRUE(s->wait_done().error.ok());
  EXPECT_LE(f.fake->max_batch, 2u);
}

// Requests that must wait for a running slot are read ahead once, before they start.
TEST(SchedulerTest, QueuedRequestsArePrefetchedOnceBeforeTheyStart) {
  SchedulerOptions o;
  o.max_running = 1;
  Fixture f(o, [](FakeShared& s) { s.decode_delay = 1ms; });
  std::vector<std::shared_ptr<RequestState>> states;
  for (int i = 0; i < 4; ++i) states.push_back(f.submit({TokenId(i + 1), 5, 6}, 8));
  for (auto& s : states) EXPECT_TRUE(s->wait_done().error.ok());
  const auto log = f.log();
  for (int i = 2; i <= 4; ++i) {
    const std::string tag = "prefetch:" + std::to_string(i);
    EXPECT_LE(std::count(log.begin(), log.end(), tag), 1) << tag;
  }
  // At least the last request waited behind the others and was read ahead.
  EXPECT_EQ(std::count(log.begin(), log.end(), "prefetch:4"), 1);
}

// Two requests queue behind a running one: a newcomer, then a returning conversation whose
// prompt is mostly cached. cached-first starts the returning one first; fcfs keeps arrival order.
void queue_newcomer_then_returning(SchedulePolicy policy, TokenId want_first) {
  SchedulerOptions o;
  o.max_running = 1;
  o.policy = policy;
  Fixture f(o);
  std::vector<TokenId> chat(40);
  for (size_t i = 0; i < chat.size(); ++i) chat[i] = TokenId(1 + i % 30);
  ASSERT_TRUE(f.submit(chat, 2)->wait_done().error.ok());  // now cached
  {
    std::lock_guard lk(f.fake->mu);
    f.fake->gate_closed = true;
  }
  auto busy = f.submit({31, 32}, 2);
  ASSERT_TRUE(f.fake->wait_for([&] { return f.fake->in_start; }));  // held inside start(): the others queue
  std::vector<TokenId> newcomer(30, 33);
  std::vector<TokenId> returning = chat;
  returning.insert(returning.end(), {34, 35, 36});
  auto a = f.submit(newcomer, 2);
  auto b = f.submit(returning, 2);
  f.fake->open_gate();
  for (auto& s : {busy, a, b}) ASSERT_TRUE(s->wait_done().error.ok());
  std::lock_guard lk(f.fake->mu);
  ASSERT_EQ(f.fake->started.size(), 4u);
  EXPECT_EQ(f.fake->started[2], want_first) << schedule_policy_name(policy);
}

TEST(SchedulerTest, CachedFirstStartsTheRequestWithLeastLeftToCompute) {
  queue_newcomer_then_returning(SchedulePolicy::kCachedFirst, 1);
}

TEST(SchedulerTest, FcfsKeepsArrivalOrder) { queue_newcomer_then_returning(SchedulePolicy::kFcfs, 33); }

TEST(SchedulerTest, DrainRefusesNewWorkAndCancelsAfterGrace) {
  Fixture f({}, [](FakeShared& s) { s.decode_delay = 1ms; });
  auto quick = f.submit({1}, 3);
  EXPECT_TRUE(quick->wait_done().error.ok());
  auto slow = f.submit({1}, 100000);
  size_t offset = 0;
  while (offset == 0) slow->wait(offset, true, 1000ms);
  f.sched->begin_drain();
  GenerationRequest g;
  g.prompt = {1};
  auto refused = f.sched->submit(g);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().is(StatusCode::kUnavailable));
  EXPECT_EQ(f.sched->drain(50ms), 1u);
  const auto v = slow->wait_done();  // its client is still there: a 503 it can act on, counted as cancelled
  EXPECT_TRUE(v.error.is(StatusCode::kUnavailable)) << v.error.to_string();
  EXPECT_NE(v.error.message().find("shutting down"), std::string::npos);
  EXPECT_TRUE(v.usage.cut_short);
  EXPECT_TRUE(f.fake->wait_for([&] { return f.fake->live.empty(); }));
}

TEST(SchedulerTest, DrainWaitsForShortRequests) {
  Fixture f({}, [](FakeShared& s) { s.decode_delay = 1ms; });
  auto st = f.submit({1}, 20);
  EXPECT_EQ(f.sched->drain(10000ms), 0u);
  auto v = st->wait_done();
  EXPECT_TRUE(v.error.ok());
  EXPECT_EQ(v.usage.completion_tokens, 20u);
}

// The deadline is read from the scheduler's clock: a request times out when
// that clock passes request_timeout_s, however slow or fast the machine is.
TEST(SchedulerTest, RequestTimeout) {
  ManualClock clock;
  SchedulerOptions o;
  o.request_timeout_s = 10;
  o.clock = &clock;
  Fixture f(o, [](FakeShared& s) { s.decode_delay = 1ms; });
  auto st = f.submit({1}, 100000);
  ASSERT_TRUE(f.fake->wait_for([&] {  // running, and decoding for a while in real time
    return std::count_if(f.fake->log.begin(), f.fake->log.end(), [](const std::string& e) { return e.starts_with("decode"); }) >= 3;
  }));
  EXPECT_FALSE(st->wait_done(0ms).has_value());  // 10 s have not passed on the scheduler's clock
  clock.advance(std::chrono::seconds(11));
  auto v = st->wait_done();
  EXPECT_TRUE(v.error.is(StatusCode::kDeadlineExceeded)) << v.error.to_string();
  EXPECT_TRUE(v.usage.cut_short);
  EXPECT_LT(v.usage.completion_tokens, 100000u);
  EXPECT_TRUE(f.fake->wait_for([&] { return f.fake->live.empty(); }));
}

// post_after runs its call once its delay has passed on the scheduler's clock, not before, and
// drops what is still pending when the scheduler stops.
TEST(SchedulerTest, TimedCallsRunWhenDueOnTheSchedulersClock) {
  ManualClock clock;
  SchedulerOptions o;
  o.clock = &clock;
  Fixture f(o);
  std::atomic<int> ran{0};
  ASSERT_TRUE(f.sched->post_after(std::chrono::seconds(5), [&](Runtime&) { ran += 1; }).ok());
  ASSERT_TRUE(f.sched->post_after(std::chrono::seconds(60), [&](Runtime&) { ran += 10; }).ok());
  const auto nothing = [](Runtime&) { return 0; };  // a call: one turn of the loop, and after it
  ASSERT_TRUE(f.sched->call(nothing).ok());
  EXPECT_EQ(ran.load(), 0);
  clock.advance(std::chrono::seconds(4));
  ASSERT_TRUE(f.sched->call(nothing).ok());
  EXPECT_EQ(ran.load(), 0);
  clock.advance(std::chrono::seconds(1));
  ASSERT_TRUE(f.sched->call(nothing).ok());  // the due call runs before the calls posted with it
  EXPECT_EQ(ran.load(), 1);
  ASSERT_TRUE(f.sched->post_after(-std::chrono::seconds(1), [&](Runtime&) { ran += 100; }).ok());  // past: at once
  ASSERT_TRUE(f.sched->call(nothing).ok());
  EXPECT_EQ(ran.load(), 101);
  f.sched.reset();  // the 60 s call never came due
  EXPECT_EQ(ran.load(), 101);
}

// A full timer table gives way to a sooner call: the call due last is dropped. One client's
// 1,024 hour-long prefetch timers locked every other client's ten-second ones out for the hour.
TEST(SchedulerTest, AFullTimerTableDropsTheCallDueLastForASoonerOne) {
  ManualClock clock;
  SchedulerOptions o;
  o.clock = &clock;
  Fixture f(o);
  std::atomic<int> hours{0}, soon{0};
  for (size_t i = 0; i < Scheduler::kMaxTimedCalls; ++i)
    ASSERT_TRUE(f.sched->post_after(std::chrono::hours(1), [&](Runtime&) { hours += 1; }).ok());
  EXPECT_EQ(f.sched->post_after(std::chrono::hours(2), [&](Runtime&) {}).code(), StatusCode::kBusy);  // not sooner
  ASSERT_TRUE(f.sched->post_after(std::chrono::seconds(10), [&](Runtime&) { soon += 1; }).ok());
  clock.advance(std::chrono::seconds(10));
  const auto nothing = [](Runtime&) { return 0; };
  ASSERT_TRUE(f.sched->call(nothing).ok());
  EXPECT_EQ(soon.load(), 1);
  clock.advance(std::chrono::hours(1));
  ASSERT_TRUE(f.sched->call(nothing).ok());
  EXPECT_EQ(hours.load(), int(Scheduler::kMaxTimedCalls) - 1);  // one gave way
}

TEST(SchedulerTest, StartErrorsReachTheRequest) {
  Fixture f({}, [](FakeShared& s) { s.fail_start = true; });
  auto v = f.submit({1}, 3)->wait_done();
  EXPECT_TRUE(v.error.is(StatusCode::kInvalidArgument));
}

TEST(SchedulerTest, CallRunsOnTheSchedulerAndRuntimeDiesThere) {
  auto fake = std::make_shared<FakeShared>();
  {
    auto s = Scheduler::create({}, std::make_unique<FakeRuntime>(fake));
    ASSERT_TRUE(s.ok());
    std::thread::id seen;
    auto r = (*s)->call([&](Runtime& rt) {
      seen = std::this_thread::get_id();
      return rt.stats();
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->counters.requests, 7u);  // typed as the function returns it
    EXPECT_NE(seen, std::this_thread::get_id());
  }
  EXPECT_TRUE(fake->destroyed);
  EXPECT_NE(fake->destroyed_on, std::this_thread::get_id());
}

TEST(SchedulerTest, CachedTokensAreReported) {
  Fixture f;
  std::vector<TokenId> p(20);
  for (int i = 0; i < 20; ++i) p[i] = TokenId(i % 30 + 1);
  EXPECT_EQ(f.submit(p, 2)->wait_done().usage.report.cached_tokens, 0u);
  auto v = f.submit(p, 2)->wait_done();
  EXPECT_EQ(v.usage.report.cached_tokens, 16u);
}

// A request whose prompt plus completion could never fit the device pool,
// however long it waited, is refused at submit (it is never queued nor tried),
// and ordinary requests go on.
TEST(SchedulerTest, RequestThatCouldNeverFitThePoolIsRefusedAtSubmit) {
  Fixture f({}, [](FakeShared& s) { s.pool_tokens = 64; });
  EXPECT_EQ(f.sched->model().max_kv_tokens, 64u);
  GenerationRequest giant;
  giant.prompt.assign(100, 50);
  giant.max_tokens = 4;
  GenerationRequest long_tail;  // its prompt fits, its completion could not
  long_tail.prompt.assign(60, 50);
  long_tail.max_tokens = 8;
  std::vector<std::shared_ptr<RequestState>> ordinary;
  for (int i = 0; i < 8; ++i) {
    for (const GenerationRequest& g : {giant, long_tail}) {
      auto r = f.sched->submit(g);
      ASSERT_FALSE(r.ok());
      EXPECT_TRUE(r.status().is(StatusCode::kInvalidArgument)) << r.status().to_string();
      EXPECT_NE(r.status().message().find("device KV pool"), std::string::npos) << r.status().to_string();
    }
    ordinary.push_back(f.submit({TokenId(i + 1), 2, 3}, 2));
  }
  for (auto& st : ordinary) {
    auto v = st->wait_done(30s);
    ASSERT_TRUE(v.has_value()) << "an ordinary request never finished";
    EXPECT_TRUE(v->error.ok()) << v->error.to_string();
  }
  EXPECT_EQ(f.fake->busy_count(50), 0);
  EXPECT_EQ(f.sched->counts().waiting, 0u);
}

// A request that fits the pool but not beside what holds it now waits in
// place while requests that fit now pass it (no head-of-line blocking), and
// it is tried again only when room may have appeared (a sequence ended), not
// in a loop: counted by the runtime's Busy answers, not by time.
TEST(SchedulerTest, RequestWaitingForRoomLetsOthersPassWithoutSpinning) {
  SchedulerOptions o;
  o.retry_idle = std::chrono::hours(1);  // only ends retry it here, so the count below is exact
  Fixture f(o, [](FakeShared& s) {
    s.pool_tokens = 64;  // 16 pages
    s.held_tokens = 32;  // 8 of them held outside any sequence
  });
  auto big = f.submit(std::vector<TokenId>(40, 50), 2);  // 10 pages: fits the pool, not the 8 free
  ASSERT_TRUE(f.fake->wait_for([&] { return f.fake->busy.count(50) > 0; }));
  std::vector<std::shared_ptr<RequestState>> ordinary;
  for (int i = 0; i < 8; ++i) ordinary.push_back(f.submit({TokenId(i + 1), 2, 3}, 2));
  for (auto& st : ordinary) {
    auto v = st->wait_done(30s);
    ASSERT_TRUE(v.has_value()) << "an ordinary request waited behind the one that does not fit";
    EXPECT_TRUE(v->error.ok()) << v->error.to_string();
  }
  EXPECT_FALSE(big->wait_done(0ms).has_value());  // its pages are still held
  // Once on arrival, then at most once after each of the 8 ends.
  EXPECT_LE(f.fake->busy_count(50), 9);
  // Room appears; the next end retries the waiting request, first.
  f.fake->set_held_tokens(0);
  ASSERT_TRUE(f.submit({9, 2, 3}, 2)->wait_done(30s).has_value());
  auto v = big->wait_done(30s);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->error.ok()) << v->error.to_string();
  EXPECT_EQ(v->usage.completion_tokens, 2u);
}

// A request waiting for room is passed at most max_passes times; after that
// the others wait for it, so it cannot starve. With nothing running it is
// retried every retry_idle (room may come from outside any sequence).
TEST(SchedulerTest, RequestWaitingForRoomIsPassedAtMostMaxPassesTimes) {
  SchedulerOptions o;
  o.max_passes = 2;
  o.retry_idle = 5ms;
  Fixture f(o, [](FakeShared& s) {
    s.pool_tokens = 64;
    s.held_tokens = 32;
  });
  auto big = f.submit(std::vector<TokenId>(40, 50), 2);
  ASSERT_TRUE(f.fake->wait_for([&] { return f.fake->busy.count(50) > 0; }));
  for (TokenId first : {1, 2}) {
    auto v = f.submit({first, 2, 3}, 2)->wait_done(30s);
    ASSERT_TRUE(v.has_value());
    EXPECT_TRUE(v->error.ok());
  }
  auto third = f.submit({3, 2, 3}, 2);
  // Two more retries of the big one (the idle ones): the third had every chance to pass it.
  const int tried = f.fake->busy_count(50);
  ASSERT_TRUE(f.fake->wait_for([&] { return f.fake->busy[50] >= tried + 2; }));
  EXPECT_FALSE(third->wait_done(0ms).has_value());
  f.fake->set_held_tokens(0);
  auto v = third->wait_done(30s);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->error.ok());
  ASSERT_TRUE(big->wait_done(30s).has_value());
  std::lock_guard lk(f.fake->mu);
  EXPECT_EQ(f.fake->started, (std::vector<TokenId>{1, 2, 50, 3}));
}

TEST(SchedulerTest, OptionsAreValidated) {
  SchedulerOptions o;
  o.max_queue = 0;
  EXPECT_FALSE(Scheduler::create(o, std::make_unique<FakeRuntime>(std::make_shared<FakeShared>())).ok());
  o = {};
  o.prefill_chunk_tokens = 0;
  EXPECT_FALSE(Scheduler::create(o, std::make_unique<FakeRuntime>(std::make_shared<FakeShared>())).ok());
  o = {};
  o.retry_idle = 0ms;
  EXPECT_FALSE(Scheduler::create(o, std::make_unique<FakeRuntime>(std::make_shared<FakeShared>())).ok());
  EXPECT_FALSE(Scheduler::create({}, nullptr).ok());
}

}  // namespace
}  // namespace kvtier::server
