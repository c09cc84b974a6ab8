#include "sim/replay_html.h"
#include "common/json_text.h"

#include <nlohmann/json.hpp>

namespace kvtier {
namespace {

using nlohmann::json;

// JSON that is safe inside a <script> element: '<' only occurs inside strings,
// where \u003c means the same character.
std::string script_safe(const json& data) {
  const std::string text = json_text(data);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

json series_json(const SweepSeries& series) {
  json points = json::array();
  for (const SweepPoint& point : series.points)
    points.push_back({{"capacity_tokens", point.capacity_tokens},
                      {"report", json::parse(format_replay_json(point.report))}});
  json out = {{"label", series.label}, {"points", std::move(points)}};
  if (!series.points.empty()) {
    const ReplayOptions& options = series.points.front().report.options;
    out["eviction"] = std::string(eviction_policy_name(options.eviction));
    out["write_policy"] = std::string(write_policy_name(options.write_policy));
  }
  return out;
}

std::string fill(std::string_view data) {
  std::string page(replay_report_template());
  const size_t at = page.find(kReportDataMarker);
  if (at == std::string::npos) return page;  // replay_html_test checks the marker is there
  page.replace(at, kReportDataMarker.size(), data);
  return page;
}

}  // namespace

std::string replay_html_data(const ReplayReport& report, std::string_view title) {
  const json data = {{"kind", "replay"}, {"title", std::string(title)}, {"report", json::parse(format_replay_json(report))}};
  return script_safe(data);
}

std::string sweep_html_data(const std::vector<SweepSeries>& series, std::string_view title) {
  json lines = json::array();
  for (const SweepSeries& s : series) lines.push_back(series_json(s));
  const json data = {{"kind", "sweep"}, {"title", std::string(title)}, {"series", std::move(lines)}};
  return script_safe(data);
}

std::string format_replay_html(const ReplayReport& report, std::string_view title) {
  return fill(replay_html_data(report, title));
}

std::string format_sweep_html(const std::vector<SweepSeries>& series, std::string_view title) {
  return fill(sweep_html_data(series, title));
}

}  // namespace kvtier
