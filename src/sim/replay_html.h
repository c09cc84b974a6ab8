// `kvtier replay --html`: a self-contained HTML report of a replay or of a
// capacity sweep. The page (src/sim/report/: HTML, CSS and JavaScript,
// compiled in by cmake/embed_page.cmake) carries its data as one JSON object
// in <script id="report-data" type="application/json"> and draws SVG charts
// from it in the browser: hit ratio vs device capacity (one line per swept
// policy), TTFT with and without the cache, hit ratio by tier, bytes loaded
// and stored per tier, evictions, and the replay's options. It fetches
// nothing, so it can be mailed or archived as one file.
//
// The data object (docs/REPLAY.md, "HTML report"):
//   {"kind": "replay", "title": ..., "report": <format_replay_json>}
//   {"kind": "sweep",  "title": ..., "series": [{"label", "eviction",
//     "write_policy", "points": [{"capacity_tokens", "report"}, ...]}, ...]}
// Every '<' in it is written as \u003c, so no string in the data can close
// the script element.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sim/replay.h"

namespace kvtier {

// One line of a sweep: the same capacities replayed under one policy pair.
struct SweepSeries {
  std::string label;  // e.g. "lru · write_through"
  std::vector<SweepPoint> points;
};

// The data objects the page draws, as compact JSON text.
std::string replay_html_data(const ReplayReport& report, std::string_view title);
std::string sweep_html_data(const std::vector<SweepSeries>& series, std::string_view title);

// The complete page: the embedded template with the data object filled in.
std::string format_replay_html(const ReplayReport& report, std::string_view title);
std::string format_sweep_html(const std::vector<SweepSeries>& series, std::string_view title);

// The page as compiled in, with the data placeholder (kReportDataMarker) not yet filled.
std::string_view replay_report_template();
inline constexpr std::string_view kReportDataMarker = "/*KVTIER_REPORT_DATA*/";

}  // namespace kvtier
