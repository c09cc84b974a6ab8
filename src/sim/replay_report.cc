// Capacity parsing and the replay's outputs: table, JSON, sweep CSV and SVG.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/option_values.h"
#include "common/strings.h"
#include "sim/replay.h"

namespace kvtier {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A finite, non-negative number at the front of `s` (decimal or scientific); rest in `unit`.
Result<double> leading_number(std::string_view s, std::string& unit) {
  std::string str(s);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(str, &used);
  } catch (...) {
    return Status::InvalidArgument("'" + str + "' does not start with a number");
  }
  if (!std::isfinite(v) || v < 0) return Status::InvalidArgument("'" + str + "' must be a finite number >= 0");
  unit = lower(str.substr(used));
  unit.erase(0, unit.find_first_not_of(' '));
  return v;
}

const char* kTierNames[kNumTiers] = {"device", "host", "disk", "remote"};

}  // namespace

Result<Capacity> parse_capacity(std::string_view text) {
  if (lower(text) == "unlimited" || lower(text) == "inf") return Capacity::infinite();
  std::string unit;
  KVTIER_ASSIGN_OR_RETURN(double v, leading_number(text, unit));
  if (unit.empty() || unit == "tok" || unit == "tokens") {  // a token count: its own kind, never bytes
    const double x = std::floor(v + 0.5);
    if (!(x >= 0) || x >= 1.8e19) return Status::InvalidArgument("capacity '" + std::string(text) + "' is out of range");
    return Capacity::tokens(static_cast<uint64_t>(x));
  }
  auto bytes = parse_size(text);  // the one grammar of byte sizes (common/option_values.h)
  if (!bytes.ok())
    return Status::InvalidArgument("capacity '" + std::string(text) + "': expected tokens (3e6, 3000000tok), bytes (80GiB, 8G, " +
                                   "1.5TB, 4096B) or unlimited");
  return Capacity::of_bytes(*bytes);
}

std::string Capacity::to_string() const {
  if (unlimited) return "unlimited";
  return std::to_string(value) + (bytes ? "B" : "tok");
}

Result<std::vector<uint64_t>> parse_capacity_list(std::string_view text) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string item(text.substr(pos, end - pos));
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    std::string unit;
    auto v = leading_number(item, unit);
    if (!v.ok() || !(unit.empty() || unit == "tok") || *v < 1 || *v >= 1.8e19)
      return Status::InvalidArgument("sweep capacity '" + item + "' must be a token count >= 1 (e.g. 3e6)");
    out.push_back(static_cast<uint64_t>(std::floor(*v + 0.5)));
    pos = end + 1;
  }
  return out;
}

std::string format_replay_table(const ReplayReport& r) {
  std::string s;
  char buf[512];
  auto line = [&](const char* k, const std::string& v) {
    std::snprintf(buf, sizeof(buf), "  %-30s %s\n", k, v.c_str());
    s += buf;
  };
  auto num = [&](double x, const char* fmt = "%.4f") {
    std::snprintf(buf, sizeof(buf), fmt, x);
    return std::string(buf);
  };
  const ReplayOptions& o = r.options;
  s += "kvtier replay (model " + o.model.name + ", page_tokens " + std::to_string(o.page_tokens()) + ", " +
       (o.timing ? o.profile.source : std::string("no timing")) + ", write " +
       std::string(write_policy_name(o.write_policy)) + ", eviction " +
       std::string(eviction_policy_name(o.eviction)) + ")\n";
  if (kv_codec_lossy(o.host_codec) || kv_codec_lossy(o.disk_codec) || kv_codec_lossy(o.remote_codec))
    line("codecs host / disk / remote", std::string(kv_codec_name(o.host_codec)) + " / " + std::string(kv_codec_name(o.disk_codec)) +
                                            " / " + std::string(kv_codec_name(o.remote_codec)));
  line("requests", std::to_string(r.requests));
  line("prompt tokens", std::to_string(r.tokens));
  if (r.skipped_lines) line("skipped bad lines", std::to_string(r.skipped_lines));
  if (r.refused_requests) line("refused (prompt larger than the device)", std::to_string(r.refused_requests));
  line("token hit ratio", num(r.token_hit_ratio));
  if (r.max_token_hit_ratio >= 0) line("max token hit ratio (unlimited)", num(r.max_token_hit_ratio));
  for (int k = 0; k < kNumTiers; ++k) {
    const std::string cap = r.capacity_pages[k] == UINT64_MAX ? "unlimited"
                            : r.capacity_pages[k] == 0        ? "absent"
                                                              : std::to_string(r.capacity_pages[k] * o.page_tokens()) +
                                                                    " tokens";
    line((std::string("  ") + kTierNames[k]).c_str(),
         num(r.hit_ratio_by_tier[k]) + "  (capacity " + cap + ", evicted " + std::to_string(r.evictions[k]) +
             (k < 2 ? " pages)" : " chunks)"));
  }
  if (r.retain_hints + r.prefetched_pages > 0)
    line("hints: retained / expired / yielded, pages prefetched",
         std::to_string(r.retain_hints) + " / " + std::to_string(r.retain_expiries) + " / " +
             std::to_string(r.retain_yields) + ", " + std::to_string(r.prefetched_pages));
  if (o.timing) {
    line("TTFT ms with cache mean/p50/p99", num(r.ttft_cached_s.mean * 1e3, "%.2f") + " / " +
                                                num(r.ttft_cached_s.p50 * 1e3, "%.2f") + " / " +
                                                num(r.ttft_cached_s.p99 * 1e3, "%.2f"));
    line("TTFT ms without mean/p50/p99", num(r.ttft_uncached_s.mean * 1e3, "%.2f") + " / " +
                                             num(r.ttft_uncached_s.p50 * 1e3, "%.2f") + " / " +
                                             num(r.ttft_uncached_s.p99 * 1e3, "%.2f"));
    line("prefill compute saved", num(r.prefill_compute_saved));
    line("cached tokens reused / recomputed",
         std::to_string(r.reused_tokens) + " / " + std::to_string(r.recomputed_cached_tokens));
  }
  for (int k = 1; k < kNumTiers; ++k) {
    if (r.bytes_loaded[k] == 0 && r.bytes_stored[k] == 0) continue;
    line((std::string("GB ") + kTierNames[k] + "->device / device->" + kTierNames[k]).c_str(),
         num(double(r.bytes_loaded[k]) / 1e9, "%.2f") + " / " + num(double(r.bytes_stored[k]) / 1e9, "%.2f"));
  }
  line("elapsed s", num(r.elapsed_s, "%.3f"));
  line("requests/s (simulator)", num(r.requests_per_s, "%.0f"));
  return s;
}

namespace {
nlohmann::json latency_json(const LatencySummary& l) {
  return {{"mean", l.mean * 1e3}, {"p50", l.p50 * 1e3}, {"p99", l.p99 * 1e3}};
}
}  // namespace

std::string format_replay_json(const ReplayReport& r) {
  const ReplayOptions& o = r.options;
  nlohmann::json j;
  j["requests"] = r.requests;
  j["tokens"] = r.tokens;
  j["hit_tokens"] = r.hit_tokens;
  j["token_hit_ratio"] = r.token_hit_ratio;
  j["max_token_hit_ratio"] = r.max_token_hit_ratio >= 0 ? nlohmann::json(r.max_token_hit_ratio) : nlohmann::json();
  for (int k = 0; k < kNumTiers; ++k) {
    j["hit_ratio_by_tier"][kTierNames[k]] = r.hit_ratio_by_tier[k];
    j["evictions"][kTierNames[k]] = r.evictions[k];
    j["capacity_tokens"][kTierNames[k]] = r.capacity_pages[k] == UINT64_MAX
                                              ? nlohmann::json("unlimited")
                                              : nlohmann::json(r.capacity_pages[k] * o.page_tokens());
    if (k > 0) {
      j["bytes_moved"][std::string(kTierNames[k]) + "_to_device"] = r.bytes_loaded[k];
      j["bytes_moved"][std::string("device_to_") + kTierNames[k]] = r.bytes_stored[k];
    }
  }
  j["hints"] = {{"retained", r.retain_hints},
                {"expired", r.retain_expiries},
                {"yielded", r.retain_yields},
                {"prefetched_pages", r.prefetched_pages}};
  if (o.timing) {
    j["ttft_ms"]["with_cache"] = latency_json(r.ttft_cached_s);
    j["ttft_ms"]["without_cache"] = latency_json(r.ttft_uncached_s);
    j["prefill_compute_saved"] = r.prefill_compute_saved;
    j["reused_tokens"] = r.reused_tokens;
    j["recomputed_cached_tokens"] = r.recomputed_cached_tokens;
    j["hardware"] = o.profile.source;
    j["workers"] = o.workers;
    j["time_scale"] = o.time_scale;
  } else {
    j["ttft_ms"] = nullptr;
  }
  j["model"] = o.model.name;
  j["page_tokens"] = o.page_tokens();
  j["chunk_pages"] = o.chunk_pages;
  j["write_policy"] = std::string(write_policy_name(o.write_policy));
  j["eviction"] = std::string(eviction_policy_name(o.eviction));
  j["codecs"] = {{"host", kv_codec_name(o.host_codec)}, {"disk", kv_codec_name(o.disk_codec)}, {"remote", kv_codec_name(o.remote_codec)}};
  j["skipped_lines"] = r.skipped_lines;
  j["refused_requests"] = r.refused_requests;
  j["elapsed_s"] = r.elapsed_s;
  j["requests_per_s"] = r.requests_per_s;
  return j.dump();
}

std::string format_sweep_csv(const std::vector<SweepPoint>& points) {
  std::string s =
      "capacity_tokens,token_hit_ratio,max_token_hit_ratio,device_evictions,ttft_mean_ms,ttft_p50_ms,ttft_p99_ms,"
      "ttft_uncached_mean_ms,elapsed_s\n";
  char buf[512];
  for (const SweepPoint& p : points) {
    const ReplayReport& r = p.report;
    std::snprintf(buf, sizeof(buf), "%llu,%.6f,%.6f,%llu,%.4f,%.4f,%.4f,%.4f,%.4f\n",
                  (unsigned long long)p.capacity_tokens, r.token_hit_ratio, r.max_token_hit_ratio,
                  (unsigned long long)r.evictions[0], r.ttft_cached_s.mean * 1e3, r.ttft_cached_s.p50 * 1e3,
                  r.ttft_cached_s.p99 * 1e3, r.ttft_uncached_s.mean * 1e3, r.elapsed_s);
    s += buf;
  }
  return s;
}

namespace {

// The sweep chart's frame: x is log10(capacity) over whole decades, y the hit ratio in [0, 1].
struct SweepPlot {
  static constexpr double W = 720, H = 440, left = 70, right = 20, top = 40, bottom = 60;
  static constexpr double pw = W - left - right, ph = H - top - bottom;
  double lo = 1, hi = 10;  // decades

  explicit SweepPlot(const std::vector<SweepPoint>& points) {
    if (points.empty()) return;
    lo = hi = std::log10(double(points.front().capacity_tokens));
    for (const SweepPoint& p : points) {
      lo = std::min(lo, std::log10(double(p.capacity_tokens)));
      hi = std::max(hi, std::log10(double(p.capacity_tokens)));
    }
    lo = std::floor(lo), hi = std::ceil(hi);
    if (hi <= lo) hi = lo + 1;
  }
  double x(double cap) const { return left + (std::log10(cap) - lo) / (hi - lo) * pw; }
  double y(double ratio) const { return top + (1.0 - std::clamp(ratio, 0.0, 1.0)) * ph; }
};

std::string svg_header(const std::string& title) {
  using P = SweepPlot;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                P::W, P::H, P::W, P::H);
  return std::string(buf) + "<text x=\"" + std::to_string(int(P::W / 2)) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" + html_escape(title) + "</text>\n";
}

// Axes, decade ticks on x, tenths on y, labels.
std::string svg_axes(const SweepPlot& p) {
  using P = SweepPlot;
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof(buf),
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                P::left, P::top + P::ph, P::left + P::pw, P::top + P::ph, P::left, P::top, P::left, P::top + P::ph);
  s += buf;
  for (double d = p.lo; d <= p.hi + 1e-9; d += 1) {
    const double x = p.x(std::pow(10.0, d));
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">1e%d</text>\n",
                  x, P::top, x, P::top + P::ph, x, P::top + P::ph + 18, int(d));
    s += buf;
  }
  for (int k = 0; k <= 10; k += 2) {
    const double y = p.y(k / 10.0);
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n",
                  P::left, y, P::left + P::pw, y, P::left - 6, y + 4, k / 10.0);
    s += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">cache capacity (tokens, log scale)</text>\n"
                "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
                "token hit ratio</text>\n",
                P::left + P::pw / 2, P::H - 14, P::top + P::ph / 2, P::top + P::ph / 2);
  return s + buf;
}

// The unlimited cache's ratio (dashed), the sweep's line and its points.
std::string svg_series(const std::vector<SweepPoint>& points, const SweepPlot& p) {
  using P = SweepPlot;
  char buf[512];
  std::string s;
  if (!points.empty() && points.front().report.max_token_hit_ratio >= 0) {
    const double y = p.y(points.front().report.max_token_hit_ratio);
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"gray\" stroke-dasharray=\"6 4\"/>\n"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"gray\">unlimited cache %.3f</text>\n",
                  P::left, y, P::left + P::pw, y, P::left + P::pw, y - 6, points.front().report.max_token_hit_ratio);
    s += buf;
  }
  std::string path;
  for (const SweepPoint& q : points) {
    std::snprintf(buf, sizeof(buf), "%s%.1f,%.1f", path.empty() ? "" : " ", p.x(double(q.capacity_tokens)),
                  p.y(q.report.token_hit_ratio));
    path += buf;
  }
  if (!path.empty()) s += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" + path + "\"/>\n";
  for (const SweepPoint& q : points) {
    std::snprintf(buf, sizeof(buf),
                  "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#1f77b4\">"
                  "<title>%llu tokens: %.4f</title></circle>\n",
                  p.x(double(q.capacity_tokens)), p.y(q.report.token_hit_ratio), (unsigned long long)q.capacity_tokens,
                  q.report.token_hit_ratio);
    s += buf;
  }
  return s;
}

}  // namespace

std::string format_sweep_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  const SweepPlot plot(points);
  return svg_header(title) + svg_axes(plot) + svg_series(points, plot) + "</svg>\n";
}

}  // namespace kvtier
