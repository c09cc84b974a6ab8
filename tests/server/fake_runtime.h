// FakeRuntime: a small deterministic Runtime for scheduler and HTTP tests.
//
// Token t (1..vocab-1) detokenizes to the character kAlphabet[t % 36]; 0 is
// EOS. The first token after a prompt is prompt.back() % 35 + 1 and each
// decode step adds one (wrapping within 1..35), unless `eos_after` is set, in
// which case the n-th generated token is EOS. A prompt's cached tokens are
// its longest whole-page (4-token) prefix shared with an earlier finished
// prompt of the same tenant and salt, all reported as "host". Every call is logged;
// `gate_start` blocks start() until opened, so tests can hold the scheduler.
// With `pool_tokens` set, a device pool of that many tokens (4-token pages)
// is modelled: it is max_kv_tokens, a prompt longer than it is invalid, and
// start() is Busy when the prompt's pages do not fit beside those of the
// running prompts and `held_tokens` (pages held outside any sequence).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/runtime.h"

namespace kvtier::server::testing {

inline constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";

struct FakeShared {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> log;           // "start", "decode:N", "finish", "prefetch:<first token>"
  std::set<uint64_t> live, finished;
  size_t max_batch = 0;
  bool gate_closed = false;
  bool in_start = false;
  std::thread::id destroyed_on;
  bool destroyed = false;
  uint32_t eos_after = 0;                 // 0: never EOS
  std::chrono::microseconds decode_delay{0};
  bool fail_start = false;
  bool tokenize_gate_closed = false;      // text tokenization blocks until opened
  bool in_tokenize = false;
  uint32_t end_of_turn = 0;               // 0: none; else another end-of-generation id besides EOS
  uint32_t pool_tokens = 0;               // 0: no pool modelled (set before the runtime is made)
  uint32_t held_tokens = 0;               // pool tokens held outside sequences
  std::map<TokenId, int> busy;            // Busy answers by the prompt's first token
  std::vector<TokenId> started;           // the first token of each started prompt, in order
  size_t tokenize_calls = 0;

  static uint32_t pages(size_t tokens) { return uint32_t((tokens + 3) / 4); }
  void set_held_tokens(uint32_t tokens) {
    std::lock_guard lk(mu);
    held_tokens = tokens;
  }
  int busy_count(TokenId first) {
    std::lock_guard lk(mu);
    auto it = busy.find(first);
    return it == busy.end() ? 0 : it->second;
  }

  void open_gate() {
    std::lock_guard lk(mu);
    gate_closed = false;
    cv.notify_all();
  }
  void open_tokenize_gate() {
    std::lock_guard lk(mu);
    tokenize_gate_closed = false;
    cv.notify_all();
  }
  template <class Pred>
  bool wait_for(Pred p, std::chrono::milliseconds t = std::chrono::milliseconds(120000)) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, t, [&] { return p(); });
  }
};

class FakeRuntime final : public Runtime {
 public:
  explicit FakeRuntime(std::shared_ptr<FakeShared> shared, uint32_t vocab = 64, uint32_t context = 4096)
      : s_(std::move(shared)) {
    info_.name = "fake";
    info_.vocab_size = vocab;
    info_.max_context = context;
    info_.eos = 0;
    info_.end_of_generation = {0};
    if (s_->end_of_turn != 0) info_.end_of_generation.push_back(TokenId(s_->end_of_turn));
    info_.max_kv_tokens = s_->pool_tokens;
    info_.text.max_token_bytes = 1;  // one token per character
    info_.text.tokenize = [shared = s_](std::string_view text, const text::EncodeOptions&) {
      std::unique_lock lk(shared->mu);
      ++shared->tokenize_calls;
      shared->in_tokenize = true;
      shared->cv.notify_all();
      shared->cv.wait(lk, [&] { return !shared->tokenize_gate_closed; });
      shared->in_tokenize = false;
      return tokenize(text);
    };
    info_.text.detokenize = [](std::span<const TokenId> tokens) { return detokenize(tokens); };
    info_.text.detokenize_special = info_.text.detokenize;
  }
  ~FakeRuntime() override {
    std::lock_guard lk(s_->mu);
    s_->destroyed = true;
    s_->destroyed_on = std::this_thread::get_id();
    s_->cv.notify_all();
  }

  const ModelInfo& model() const override { return info_; }
  static std::vector<TokenId> tokenize(std::string_view text) {
    std::vector<TokenId> out;
    for (char c : text) {
      const char* p = std::find(kAlphabet, kAlphabet + 36, c);
      out.push_back(p == kAlphabet + 36 ? 1 : TokenId(p - kAlphabet) == 0 ? 36 : TokenId(p - kAlphabet));
    }
    return out;
  }
  static std::string detokenize(std::span<const TokenId> tokens) {
    std::string out;
    for (TokenId t : tokens) out += kAlphabet[t % 36];
    return out;
  }

  using Runtime::start;
  Result<Started> start(const PromptRequest& request, uint32_t chunk_tokens) override {
    const std::span<const TokenId> prompt = request.prompt;
    // The namespace as the real runtime forms it: the tenant, then the salt within it.
    const std::string salt = request.tenant + '\0' + request.cache_salt;
    std::unique_lock lk(s_->mu);
    s_->in_start = true;
    s_->cv.notify_all();
    s_->cv.wait(lk, [&] { return !s_->gate_closed; });
    s_->in_start = false;
    if (s_->fail_start) return Status::InvalidArgument("fake: start refused");
    for (TokenId t : prompt)
      if (t < 0 || uint32_t(t) >= info_.vocab_size) return Status::InvalidArgument("fake: token out of vocabulary");
    if (s_->pool_tokens != 0) {
      if (prompt.size() > s_->pool_tokens) return Status::InvalidArgument("fake: prompt larger than the pool");
      uint32_t used = FakeShared::pages(s_->held_tokens);
      for (const auto& [id, seq] : seqs_) used += FakeShared::pages(seq.prompt.size());
      if (used + FakeShared::pages(prompt.size()) > FakeShared::pages(s_->pool_tokens)) {
        ++s_->busy[prompt.front()];
        s_->cv.notify_all();
        return Status::Busy("fake: the pool is full");
      }
    }
    Started st;
    st.seq = SeqId(next_seq_++);
    st.report.prompt_tokens = uint32_t(prompt.size());
    const size_t best = cached_locked(prompt, salt);
    st.report.cached_tokens = uint32_t(best);
    st.report.cached_tokens_by_tier[int(TierKind::kHost)] = uint32_t(best);
    st.report.ttft_s = 0.001;
    seqs_[st.seq.value()] = Seq{std::vector<TokenId>(prompt.begin(), prompt.end()), salt, 0, 0, uint32_t(best)};
    s_->live.insert(st.seq.value());
    s_->started.push_back(prompt.front());
    s_->log.push_back("start");
    compute_locked(seqs_[st.seq.value()], chunk_tokens, st);
    s_->cv.notify_all();
    return st;
  }
  // The prompt is computed `chunk_tokens` positions a call past its cached prefix.
  Result<Started> prefill_more(SeqId seq, uint32_t chunk_tokens) override {
    std::lock_guard lk(s_->mu);
    auto it = seqs_.find(seq.value());
    if (it == seqs_.end() || it->second.computed >= it->second.prompt.size())
      return Status::FailedPrecondition("fake: not prefilling");
    Started st;
    st.seq = seq;
    compute_locked(it->second, chunk_tokens, st);
    s_->log.push_back("prefill:" + std::to_string(st.computed));
    s_->cv.notify_all();
    return st;
  }

  void set_tenant_quotas(std::map<std::string, TenantQuota>) override {}
  KVCacheStats::Tenant tenant_usage(const std::string& tenant) override { return {.name = tenant}; }
  // Preemption is not modelled: the fake's pages do not grow while decoding.
  Result<bool> preempt(SeqId) override { return Status::Unimplemented("fake: no preemption"); }
  using Runtime::resume;
  Result<Resumed> resume(SeqId, uint32_t) override { return Resumed{}; }

  uint32_t cached_prefix_tokens(const PromptRequest& request) override {
    std::lock_guard lk(s_->mu);
    return uint32_t(cached_locked(request.prompt, request.tenant + '\0' + request.cache_salt));
  }
  // The fake's cache: the longest common prefix with a finished prompt of the namespace, in pages of 4.
  size_t cached_locked(std::span<const TokenId> prompt, const std::string& salt) {
    size_t best = 0;
    for (const auto& old : done_prompts_[salt]) {
      size_t n = 0;
      while (n < old.size() && n < prompt.size() && old[n] == prompt[n]) ++n;
      best = std::max(best, n);
    }
    return prompt.empty() ? 0 : std::min(best, prompt.size() - 1) / 4 * 4;
  }

  Result<PrefetchReport> prefetch(const PromptRequest& request) override {
    const std::vector<TokenId>& prompt = request.prompt;
    std::lock_guard lk(s_->mu);
    s_->log.push_back("prefetch:" + std::to_string(prompt.empty() ? -1 : prompt.front()));
    for (const RetainHint& h : request.retain) s_->log.push_back("prefetch-hold:" + std::to_string(h.seconds));
    return PrefetchReport{};
  }

  Result<std::vector<TokenId>> decode(std::span<const SeqId> seqs) override {
    if (s_->decode_delay.count() > 0) std::this_thread::sleep_for(s_->decode_delay);
    std::lock_guard lk(s_->mu);
    std::vector<TokenId> out;
    for (SeqId id : seqs) {
      auto it = seqs_.find(id.value());
      if (it == seqs_.end() || !s_->live.count(id.value())) return Status::InvalidArgument("fake: unknown sequence");
      if (it->second.computed < it->second.prompt.size()) return Status::FailedPrecondition("fake: still prefilling");
      out.push_back(next_token(it->second, it->second.last));
    }
    s_->max_batch = std::max(s_->max_batch, seqs.size());
    s_->log.push_back("decode:" + std::to_string(seqs.size()));
    s_->cv.notify_all();
    return out;
  }

  uint32_t finish(SeqId seq) override {
    std::lock_guard lk(s_->mu);
    auto it = seqs_.find(seq.value());
    if (it != seqs_.end()) {
      done_prompts_[it->second.salt].push_back(it->second.prompt);
      seqs_.erase(it);
    }
    s_->live.erase(seq.value());
    s_->finished.insert(seq.value());
    s_->log.push_back("finish");
    s_->cv.notify_all();
    return 0;
  }

  // Recognisable values: 7 requests, 1 running, host tier of 1 slot.
  RuntimeStats stats() const override {
    RuntimeStats st;
    st.counters.requests = 7;
    st.cache.host_slots = 1;
    st.running = 1;
    return st;
  }
  Status flush() override {
    std::lock_guard lk(s_->mu);
    done_prompts_.clear();
    s_->log.push_back("flush");
    return {};
  }

 private:
  struct Seq {
    std::vector<TokenId> prompt;
    std::string salt;
    TokenId last;
    uint32_t generated;
    uint32_t computed;  // prompt positions computed (the cached prefix counts)
  };
  void compute_locked(Seq& s, uint32_t chunk_tokens, Started& st) {
    const uint32_t prompt = uint32_t(s.prompt.size());
    const uint32_t end = uint32_t(std::min<uint64_t>(prompt, uint64_t(s.computed) + std::max(chunk_tokens, 1u)));
    st.computed = end - s.computed;
    s.computed = end;
    st.prompt_left = prompt - end;
    if (st.prompt_left == 0) st.first_token = next_token(s, s.prompt.back());
  }
  TokenId next_token(Seq& s, TokenId prev) {
    ++s.generated;
    TokenId t = s.generated == 1 ? TokenId(prev % 35 + 1) : TokenId(prev % 35 + 1);
    if (s_->eos_after != 0 && s.generated == s_->eos_after) t = 0;
    s.last = t == 0 ? 1 : t;
    return t;
  }

  std::shared_ptr<FakeShared> s_;
  ModelInfo info_;
  uint64_t next_seq_ = 1;
  std::map<uint64_t, Seq> seqs_;
  std::map<std::string, std::vector<std::vector<TokenId>>> done_prompts_;
};

}  // namespace kvtier::server::testing
