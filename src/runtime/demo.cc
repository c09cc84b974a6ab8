#include "runtime/demo.h"

#include <filesystem>
#include <nlohmann/json.hpp>
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

std::vector<TokenId> random_tokens(std::mt19937_64& rng, uint32_t n, uint32_t vocab) {
  std::vector<TokenId> t(n);
  // Skip the control and byte tokens at the bottom of the vocabulary.
  for (auto& x : t) x = static_cast<TokenId>(300 + rng() % (vocab - 300));
  return t;
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

}  // namespace

Result<DemoResult> run_demo(const DemoOptions& o, std::FILE* out, std::FILE* progress) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  std::error_code ec;
  std::filesystem::remove_all(o.disk_dir, ec);

  RuntimeOptions ro;
  ro.model = o.model;
  ro.device = o.device;
  ro.kv_dtype = o.kv_dtype;
  ro.device_bytes = o.device_bytes;
  ro.host_bytes = o.host_bytes;
  ro.disk_bytes = o.disk_bytes;
  ro.disk_dir = o.disk_dir;
  if (out) std::fprintf(out, "kvtier demo: model %s, starting a runtime with the tiered cache (calibrating)...\n", o.model.c_str());
  KVTIER_ASSIGN_OR_RETURN(auto cached, Runtime::create(ro));
  RuntimeOptions base = ro;
  base.cache_enabled = false;
  base.disk_dir.clear();
  base.host_bytes = 0;
  const size_t max_prompt = o.system_tokens + size_t(o.turns) * (o.user_tokens + o.answer_tokens) + 64;
  base.device_bytes = std::max<size_t>(o.device_bytes, max_prompt * (size_t(64) << 10));  // one sequence always fits (64 KiB/token covers the presets)
  KVTIER_ASSIGN_OR_RETURN(auto plain, Runtime::create(base));
  const uint32_t vocab = cached->model().vocab_size;

  if (out) {
    auto cfg = nlohmann::json::parse(cached->stats_json());
    std::fprintf(out,
                 "  %u conversations x %u turns, system prompt %u tokens, user turns %u tokens, answers %u tokens\n"
                 "  device pool %.0f MiB, host tier %.0f MiB, disk tier %s (cost profile: %s)\n\n",
                 o.conversations, o.turns, o.system_tokens, o.user_tokens, o.answer_tokens, o.device_bytes / 1048576.0,
                 o.host_bytes / 1048576.0, o.disk_dir.c_str(), cfg["profile"].value("source", "").c_str());
    std::fprintf(out, "%-5s %-4s %7s  %21s  %11s %11s %8s  %s\n", "conv", "turn", "prompt", "cached dev/host/disk",
                 "TTFT cache", "TTFT none", "speed-up", "same output");
  }

  std::mt19937_64 rng(o.seed);
  const auto system = random_tokens(rng, o.system_tokens, vocab);
  std::vector<std::vector<TokenId>> history(o.conversations, system);
  DemoResult res;
  const size_t total = size_t(o.conversations) * o.turns;
  draw_progress(progress, 0, total);
  for (uint32_t turn = 0; turn < o.turns; ++turn) {
    for (uint32_t c = 0; c < o.conversations; ++c) {
      auto user = random_tokens(rng, o.user_tokens, vocab);
      auto& prompt = history[c];
      prompt.insert(prompt.end(), user.begin(), user.end());
      KVTIER_ASSIGN_OR_RETURN(Answer none, ask(*plain, prompt, o.answer_tokens));
      KVTIER_ASSIGN_OR_RETURN(Answer hit, ask(*cached, prompt, o.answer_tokens));
      DemoTurn t;
      t.conversation = c;
      t.turn = turn;
      t.prompt_tokens = static_cast<uint32_t>(prompt.size());
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
      prompt.insert(prompt.end(), hit.tokens.begin(), hit.tokens.end());  // the answer joins the history
      if (out) {
        char cached_s[32];
        std::snprintf(cached_s, sizeof(cached_s), "%u/%u/%u", t.cached_by_tier[0], t.cached_by_tier[1],
                      t.cached_by_tier[2]);
        if (progress) std::fputc('\r', progress);
        std::fprintf(out, "%-5u %-4u %7u  %21s  %8.1f ms %8.1f ms %7.1fx  %s\n", c, turn + 1, t.prompt_tokens,
                     cached_s, t.ttft_cache_s * 1e3, t.ttft_nocache_s * 1e3,
                     t.ttft_cache_s > 0 ? t.ttft_nocache_s / t.ttft_cache_s : 0.0, t.same_output ? "yes" : "NO");
        std::fflush(out);
      }
      draw_progress(progress, res.turns.size(), total);
    }
  }
  auto stats = nlohmann::json::parse(cached->stats_json());
  res.plan_in_place = stats["planner_pages"]["in_place"];
  res.plan_load = stats["planner_pages"]["load"];
  res.plan_recompute = stats["planner_pages"]["recompute"];
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
                "planner decisions (pages): in place %llu, load %llu, recompute %llu\n",
                (unsigned long long)r.prompt_tokens, (unsigned long long)cached,
                r.prompt_tokens ? 100.0 * double(cached) / double(r.prompt_tokens) : 0.0,
                (unsigned long long)r.cached_by_tier[0], (unsigned long long)r.cached_by_tier[1],
                (unsigned long long)r.cached_by_tier[2], r.bytes_loaded_by_tier[1] / 1048576.0,
                r.bytes_loaded_by_tier[2] / 1048576.0, (unsigned long long)r.plan_in_place,
                (unsigned long long)r.plan_load, (unsigned long long)r.plan_recompute);
  s << buf;
  std::snprintf(buf, sizeof(buf),
                "kvtier demo: total TTFT %.2f s with the tiered cache vs %.2f s without: %.1fx faster; outputs "
                "identical: %s\n",
                r.ttft_cache_s, r.ttft_nocache_s, r.speedup(), r.all_same ? "yes" : "NO");
  s << buf;
  return s.str();
}

}  // namespace kvtier
