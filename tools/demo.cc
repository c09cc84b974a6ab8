#include "demo.h"

#include "server/chat_prompt.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <cctype>
#include <random>
#include <sstream>

namespace kvtier {

Status DemoOptions::validate() const {
  if (conversations == 0 || turns == 0) return Status::InvalidArgument("demo: conversations and turns must be > 0");
  if (system_tokens == 0 || user_tokens == 0 || answer_tokens == 0)
    return Status::InvalidArgument("demo: token counts must be > 0");
  if (disk_dir.empty()) return Status::InvalidArgument("demo: a disk directory is required");
  return Status::Ok();
}

namespace {

constexpr const char* kWords[] = {
    "the", "cache", "keeps", "every", "prefix", "that", "a", "request", "has", "seen", "and", "loads", "it", "back",
    "when", "next", "prompt", "starts", "with", "same", "words", "so", "model", "does", "not", "compute", "again",
    "memory", "disk", "host", "device", "tier", "layer", "token", "answer", "question", "system", "user", "please",
    "explain", "why", "how", "long", "short", "fast", "slow", "today", "data", "page", "chunk", "write", "read",
    "conversation", "history", "document", "summary", "agent", "tool", "result", "file", "name", "number", "time",
};

struct Prose {
  std::string text;
  std::vector<TokenId> ids;
};

// Sentences from kWords of at least `min_tokens` tokens by the model's own tokenizer.
Prose prose(std::mt19937_64& rng, const TextCodec& codec, uint32_t min_tokens, bool add_bos) {
  Prose p;
  size_t words_in_sentence = 0;
  while (true) {
    for (int k = 0; k < 8; ++k) {
      std::string w = kWords[rng() % std::size(kWords)];
      if (words_in_sentence == 0) w[0] = char(std::toupper(uint8_t(w[0])));
      p.text += (p.text.empty() ? "" : " ") + w;
      if (++words_in_sentence >= 6 + rng() % 8) p.text += rng() % 4 == 0 ? "?" : ".", words_in_sentence = 0;
    }
    p.ids = codec.tokenize(p.text, {.add_bos = add_bos});
    if (p.ids.size() >= min_tokens) return p;
  }
}

// The first `n` bytes of `s` on one line (whole UTF-8 characters, newlines shown as spaces).
std::string snippet(std::string_view s, size_t n) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < n; ++i) out += (s[i] == '\n' || s[i] == '\r' || s[i] == '\t') ? ' ' : s[i];
  while (!out.empty() && (uint8_t(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && (uint8_t(out.back()) & 0xC0) == 0xC0) out.pop_back();
  return out;
}

struct Answer {
  std::vector<TokenId> tokens;
  PrefillReport report;
};

Result<Answer> ask(Runtime& rt, std::span<const TokenId> prompt, uint32_t n) {
  KVTIER_ASSIGN_OR_RETURN(auto s, rt.start(prompt, {}));
  Answer a{{s.first_token}, s.report};
  while (a.tokens.size() < n) {
    auto d = rt.decode(std::span(&s.seq, 1));
    if (!d.ok()) {
      rt.finish(s.seq);
      return d.status();
    }
    a.tokens.push_back((*d)[0]);
  }
  rt.finish(s.seq);
  return a;
}

void draw_progress(std::FILE* f, size_t done, size_t total) {
  if (!f) return;
  const int width = 30;
  const int filled = total ? int(width * done / total) : width;
  std::fprintf(f, "\r  [%.*s%*s] %zu/%zu requests", filled, "##############################", width - filled, "", done,
               total);
  if (done == total) std::fputc('\n', f);
  std::fflush(f);
}

// One conversation's history. With a chat template its messages are rendered
// by ChatPrompts (which gives answers back as their own ids); without one,
// the history is the plain concatenation of token ids.
struct Conversation {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::vector<TokenId> ids;
  std::string rendered;  // chat: the last prompt's text
};

Result<std::vector<TokenId>> next_prompt(Conversation& conv, const ChatPrompts* chat, const Prose& user) {
  if (chat == nullptr) {
    conv.ids.insert(conv.ids.end(), user.ids.begin(), user.ids.end());
    return conv.ids;
  }
  conv.messages.push_back({{"role", "user"}, {"content", user.text}});
  return chat->build(text::ChatInput{.messages = conv.messages}, conv.rendered);
}

void add_answer(Conversation& conv, ChatPrompts* chat, const TextCodec& codec, std::span<const TokenId> prompt,
                const std::vector<TokenId>& answer) {
  if (chat == nullptr) {
    conv.ids.insert(conv.ids.end(), answer.begin(), answer.end());
    return;
  }
  const std::string reply = codec.detokenize(answer);
  chat->remember(conv.rendered, reply, prompt, answer);
  conv.messages.push_back({{"role", "assistant"}, {"content", reply}});
}

DemoTurn record_turn(uint32_t c, uint32_t turn, size_t prompt_tokens, const Answer& hit, const Answer& none,
                     DemoResult& res) {
  DemoTurn t;
  t.conversation = c;
  t.turn = turn;
  t.prompt_tokens = static_cast<uint32_t>(prompt_tokens);
  for (int k = 0; k < kNumTiers; ++k) {
    t.cached_by_tier[k] = hit.report.cached_tokens_by_tier[k];
    res.cached_by_tier[k] += hit.report.cached_tokens_by_tier[k];
    res.bytes_loaded_by_tier[k] += hit.report.bytes_loaded_by_tier[k];
  }
  t.ttft_cache_s = hit.report.ttft_s;
  t.ttft_nocache_s = none.report.ttft_s;
  t.same_output = hit.tokens == none.tokens;
  res.all_same &= t.same_output;
  res.ttft_cache_s += t.ttft_cache_s;
  res.ttft_nocache_s += t.ttft_nocache_s;
  res.prompt_tokens += t.prompt_tokens;
  res.turns.push_back(t);
  return t;
}

void print_turn(std::FILE* out, std::FILE* progress, const DemoTurn& t, const std::string& user, const std::string& answer) {
  if (!out) return;
  char cached_s[32];
  std::snprintf(cached_s, sizeof(cached_s), "%u/%u/%u", t.cached_by_tier[0], t.cached_by_tier[1], t.cached_by_tier[2]);
  if (progress) std::fputc('\r', progress);
  std::fprintf(out, "%-5u %-4u %7u  %21s  %8.1f ms %8.1f ms %7.1fx  %-5s %s ... -> %s\n", t.conversation, t.turn + 1,
               t.prompt_tokens, cached_s, t.ttft_cache_s * 1e3, t.ttft_nocache_s * 1e3,
               t.ttft_cache_s > 0 ? t.ttft_nocache_s / t.ttft_cache_s : 0.0, t.same_output ? "yes" : "NO",
               snippet(user, 24).c_str(), snippet(answer, 24).c_str());
  std::fflush(out);
}

struct DemoRuntimes {
  std::unique_ptr<Runtime> cached, plain;
};

// The runtime with the tiered cache, and one without any cache (the baseline).
Result<DemoRuntimes> make_runtimes(const DemoOptions& o) {
  RuntimeOptions ro;
  ro.model = o.model;
  ro.device = o.device;
  ro.kv_dtype = o.kv_dtype;
  ro.device_bytes = o.device_bytes;
  ro.host_bytes = o.host_bytes;
  ro.disk_bytes = o.disk_bytes;
  ro.disk_dir = o.disk_dir;
  DemoRuntimes r;
  KVTIER_ASSIGN_OR_RETURN(r.cached, Runtime::create(ro));
  RuntimeOptions base = ro;
  base.cache_enabled = false;
  base.disk_dir.clear();
  base.host_bytes = 0;
  const size_t max_prompt = o.system_tokens + size_t(o.turns) * (o.user_tokens + o.answer_tokens) + 256;
  base.device_bytes = std::max<size_t>(o.device_bytes, max_prompt * (size_t(64) << 10));  // one sequence always fits (64 KiB/token covers the presets)
  KVTIER_ASSIGN_OR_RETURN(r.plain, Runtime::create(base));
  return r;
}

void print_header(std::FILE* out, const DemoOptions& o, Runtime& rt, bool chat) {
  if (!out) return;
  const std::string profile = rt.stats().profile.source;
  std::fprintf(out,
               "  %u conversations x %u turns, system prompt %u tokens, user turns %u tokens, answers %u tokens%s\n"
               "  device pool %.0f MiB, host tier %.0f MiB, disk tier %s (cost profile: %s)\n\n",
               o.conversations, o.turns, o.system_tokens, o.user_tokens, o.answer_tokens,
               chat ? ", prompts rendered with the model's chat template" : "", o.device_bytes / 1048576.0,
               o.host_bytes / 1048576.0, o.disk_dir.c_str(), profile.c_str());
  std::fprintf(out, "%-5s %-4s %7s  %21s  %11s %11s %8s  %-5s %s\n", "conv", "turn", "prompt", "cached dev/host/disk",
               "TTFT cache", "TTFT none", "speed-up", "same", "user says ... -> model answers");
}

}  // namespace

Result<DemoResult> run_demo(const DemoOptions& o, std::FILE* out, std::FILE* progress) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  std::error_code ec;
  std::filesystem::remove_all(o.disk_dir, ec);
  if (out) std::fprintf(out, "kvtier demo: model %s, starting a runtime with the tiered cache (calibrating)...\n", o.model.c_str());
  KVTIER_ASSIGN_OR_RETURN(DemoRuntimes rts, make_runtimes(o));
  const TextCodec& codec = rts.cached->model().text;
  KVTIER_ASSIGN_OR_RETURN(ChatPrompts chat_prompts, ChatPrompts::create(codec, codec.chat_template));
  ChatPrompts* chat = chat_prompts.has_template() ? &chat_prompts : nullptr;
  print_header(out, o, *rts.cached, chat != nullptr);

  std::mt19937_64 rng(o.seed);
  const Prose system = prose(rng, codec, o.system_tokens, true);
  Conversation start;
  start.ids = system.ids;
  start.messages.push_back({{"role", "system"}, {"content", system.text}});
  std::vector<Conversation> conversations(o.conversations, start);
  DemoResult res;
  res.text_bytes = system.text.size(), res.text_tokens = system.ids.size();
  const size_t total = size_t(o.conversations) * o.turns;
  draw_progress(progress, 0, total);
  for (uint32_t turn = 0; turn < o.turns; ++turn) {
    for (uint32_t c = 0; c < o.conversations; ++c) {
      const Prose user = prose(rng, codec, o.user_tokens, false);
      res.text_bytes += user.text.size(), res.text_tokens += user.ids.size();
      KVTIER_ASSIGN_OR_RETURN(const std::vector<TokenId> prompt, next_prompt(conversations[c], chat, user));
      KVTIER_ASSIGN_OR_RETURN(Answer none, ask(*rts.plain, prompt, o.answer_tokens));
      KVTIER_ASSIGN_OR_RETURN(Answer hit, ask(*rts.cached, prompt, o.answer_tokens));
      const DemoTurn t = record_turn(c, turn, prompt.size(), hit, none, res);
      add_answer(conversations[c], chat, codec, prompt, hit.tokens);  // the answer joins the history
      print_turn(out, progress, t, user.text, codec.detokenize(hit.tokens));
      draw_progress(progress, res.turns.size(), total);
    }
  }
  const KVCacheStats stats = rts.cached->stats().cache;
  res.plan_in_place = stats.plan_pages[0];
  res.plan_load = stats.plan_pages[1];
  res.plan_recompute = stats.plan_pages[2];
  return res;
}

std::string demo_summary(const DemoResult& r) {
  std::ostringstream s;
  uint64_t cached = 0;
  for (uint64_t c : r.cached_by_tier) cached += c;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "\nprompt tokens %llu, served from cache %llu (%.1f%%): device %llu, host %llu, disk %llu\n"
                "bytes loaded: host %.1f MiB, disk %.1f MiB\n"
                "planner decisions (pages): in place %llu, load %llu, recompute %llu\n"
                "prompt text (system prompt and user turns): %llu bytes -> %llu tokens, %.2f bytes per token\n",
                (unsigned long long)r.prompt_tokens, (unsigned long long)cached,
                r.prompt_tokens ? 100.0 * double(cached) / double(r.prompt_tokens) : 0.0,
                (unsigned long long)r.cached_by_tier[0], (unsigned long long)r.cached_by_tier[1],
                (unsigned long long)r.cached_by_tier[2], r.bytes_loaded_by_tier[1] / 1048576.0,
                r.bytes_loaded_by_tier[2] / 1048576.0, (unsigned long long)r.plan_in_place,
                (unsigned long long)r.plan_load, (unsigned long long)r.plan_recompute,
                (unsigned long long)r.text_bytes, (unsigned long long)r.text_tokens,
                r.text_tokens ? double(r.text_bytes) / double(r.text_tokens) : 0.0);
  s << buf;
  std::snprintf(buf, sizeof(buf),
                "kvtier demo: total TTFT %.2f s with the tiered cache vs %.2f s without: %.1fx faster; outputs "
                "identical: %s\n",
                r.ttft_cache_s, r.ttft_nocache_s, r.speedup(), r.all_same ? "yes" : "NO");
  s << buf;
  return s.str();
}

}  // namespace kvtier
