#include "server/metrics.h"

#include <cstdio>
#include <set>

#include "common/strings.h"

namespace kvtier::server {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void line(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += ' ';
  out += num(v);
  out += '\n';
}

std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

}  // namespace

LatencyHistogram::LatencyHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1, 0) {}

void LatencyHistogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++buckets_[i];
  ++count_;
  sum_ += v;
}

void LatencyHistogram::render(const std::string& name, std::string& out) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += buckets_[i];
    line(out, name + "_bucket", "le=\"" + num(bounds_[i]) + "\"", double(cum));
  }
  line(out, name + "_bucket", "le=\"+Inf\"", double(count_));
  line(out, name + "_sum", "", sum_);
  line(out, name + "_count", "", double(count_));
}

ServerMetrics::ServerMetrics()
    : ttft_(latency_bounds()), e2e_(latency_bounds()), queue_(latency_bounds()), prefill_(latency_bounds()) {}

void ServerMetrics::record_response(const std::string& endpoint, int status) {
  std::lock_guard lk(mu_);
  ++responses_[{endpoint, status}];
}

void ServerMetrics::record_completion(const CompletionUsage& u, const Status& outcome) {
  std::lock_guard lk(mu_);
  const bool ok = outcome.ok();
  const bool cancelled = outcome.code() == StatusCode::kCancelled || u.cut_short;
  ++(ok ? completions_ok_ : cancelled ? completions_cancelled_ : completions_failed_);
  prompt_tokens_ += u.prompt_tokens;
  completion_tokens_ += u.completion_tokens;
  cached_tokens_ += u.report.cached_tokens;
  recomputed_cached_tokens_ += u.report.recomputed_cached_tokens;
  for (int t = 0; t < kNumTiers; ++t) {
    cached_by_tier_[t] += u.report.cached_tokens_by_tier[t];
    bytes_by_tier_[t] += u.report.bytes_loaded_by_tier[t];
  }
  if (u.prompt_tokens > 0 && u.ttft_s > 0) {
    ttft_.observe(u.ttft_s);
    queue_.observe(u.queue_s);
    prefill_.observe(u.report.ttft_s);
  }
  if (ok) e2e_.observe(u.e2e_s);
}

void ServerMetrics::record_client_disconnect() {
  std::lock_guard lk(mu_);
  ++client_disconnects_;
}

void ServerMetrics::record_ignored_fields(uint32_t n) {
  if (n == 0) return;
  std::lock_guard lk(mu_);
  ignored_fields_ += n;
}

std::string ServerMetrics::render(const Gauges& g) const {
  std::lock_guard lk(mu_);
  std::string out;
  header(out, "kvtier_http_responses_total", "counter", "HTTP responses by endpoint and status code.");
  for (const auto& [key, n] : responses_)
    line(out, "kvtier_http_responses_total", "endpoint=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"",
         double(n));
  header(out, "kvtier_server_requests_total", "counter", "Generations that ran, by outcome.");
  line(out, "kvtier_server_requests_total", "outcome=\"ok\"", double(completions_ok_));
  line(out, "kvtier_server_requests_total", "outcome=\"cancelled\"", double(completions_cancelled_));
  line(out, "kvtier_server_requests_total", "outcome=\"failed\"", double(completions_failed_));
  header(out, "kvtier_server_client_disconnects_total", "counter",
         "Generations cancelled because their client went away before the end.");
  line(out, "kvtier_server_client_disconnects_total", "", double(client_disconnects_));
  header(out, "kvtier_request_ignored_fields_total", "counter",
         "Top-level request fields kvtier does not read (accepted and ignored, as vLLM does).");
  line(out, "kvtier_request_ignored_fields_total", "", double(ignored_fields_));
  header(out, "kvtier_server_prompt_tokens_total", "counter", "Prompt tokens of generations that ran.");
  line(out, "kvtier_server_prompt_tokens_total", "", double(prompt_tokens_));
  header(out, "kvtier_server_completion_tokens_total", "counter", "Generated tokens.");
  line(out, "kvtier_server_completion_tokens_total", "", double(completion_tokens_));
  header(out, "kvtier_server_cached_prompt_tokens_total", "counter", "Prompt tokens served from the cache, by tier.");
  for (int t = 0; t < kNumTiers; ++t)
    line(out, "kvtier_server_cached_prompt_tokens_total", "tier=\"" + std::string(tier_name(TierKind(t))) + "\"",
         double(cached_by_tier_[t]));
  header(out, "kvtier_server_recomputed_cached_tokens_total", "counter",
         "Prompt tokens that were cached but recomputed because the planner found that faster.");
  line(out, "kvtier_server_recomputed_cached_tokens_total", "", double(recomputed_cached_tokens_));
  header(out, "kvtier_server_prompt_bytes_loaded_total", "counter", "KV bytes loaded for prompts, by source tier.");
  for (int t = 0; t < kNumTiers; ++t)
    line(out, "kvtier_server_prompt_bytes_loaded_total", "tier=\"" + std::string(tier_name(TierKind(t))) + "\"",
         double(bytes_by_tier_[t]));
  header(out, "kvtier_server_prompt_cache_hit_ratio", "gauge", "Cached prompt tokens / prompt tokens since start.");
  line(out, "kvtier_server_prompt_cache_hit_ratio", "", prompt_tokens_ ? double(cached_tokens_) / double(prompt_tokens_) : 0.0);
  header(out, "kvtier_server_ttft_seconds", "histogram", "Time from arrival to the first token.");
  ttft_.render("kvtier_server_ttft_seconds", out);
  header(out, "kvtier_server_e2e_latency_seconds", "histogram", "Time from arrival to the last token.");
  e2e_.render("kvtier_server_e2e_latency_seconds", out);
  header(out, "kvtier_server_queue_seconds", "histogram", "Time from arrival to the start of prefill.");
  queue_.render("kvtier_server_queue_seconds", out);
  header(out, "kvtier_server_prefill_seconds", "histogram", "Cache lookup, loads and prefill compute of one prompt.");
  prefill_.render("kvtier_server_prefill_seconds", out);
  header(out, "kvtier_server_requests_waiting", "gauge", "Requests waiting for a sequence slot.");
  line(out, "kvtier_server_requests_waiting", "", double(g.waiting));
  header(out, "kvtier_server_requests_running", "gauge", "Sequences being decoded.");
  line(out, "kvtier_server_requests_running", "", double(g.running));
  header(out, "kvtier_server_draining", "gauge", "1 while the server is shutting down.");
  line(out, "kvtier_server_draining", "", g.draining ? 1.0 : 0.0);
  return out;
}

namespace {

std::string_view family_name(std::string_view sample_or_name) {
  const size_t end = sample_or_name.find_first_of("{ ");
  std::string_view n = sample_or_name.substr(0, end);
  return n;
}

}  // namespace

void append_prometheus_text(std::string& out, std::string_view extra) {
  std::set<std::string, std::less<>> declared;
  size_t pos = 0;
  while ((pos = out.find("# TYPE ", pos)) != std::string::npos) {
    pos += 7;
    declared.emplace(family_name(std::string_view(out).substr(pos)));
  }
  auto is_declared = [&](std::string_view name) {
    if (declared.count(name)) return true;
    for (std::string_view suf : {"_bucket", "_sum", "_count"})
      if (name.size() > suf.size() && name.substr(name.size() - suf.size()) == suf &&
          declared.count(name.substr(0, name.size() - suf.size())))
        return true;
    return false;
  };
  if (!out.empty() && out.back() != '\n') out += '\n';
  Lines lines(extra);
  for (std::string_view line; lines.next(line);) {
    std::string_view name;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) name = family_name(line.substr(7));
    else if (!line.empty() && line[0] != '#') name = family_name(line);
    if (!name.empty() && is_declared(name)) continue;
    out += line;
    out += '\n';
  }
}

}  // namespace kvtier::server
