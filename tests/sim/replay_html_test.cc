// The replay report page (sim/replay_html.h): the template embeds its CSS and
// script with one data placeholder; the filled page carries the data as one
// JSON object the script can parse (one report, or sweep series of points
// with the report of each), fetches nothing, and no string in the data can
// close its script element. Drawing is checked in a browser by
// tests/e2e/replay_report_browser_test.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/mooncake_trace.h"
#include "sim/replay.h"
#include "sim/replay_html.h"

namespace kvtier {
namespace {

using nlohmann::json;

std::string mc(double ts, uint32_t len, const std::string& ids) {
  return "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " + std::to_string(len) +
         ", \"output_length\": 4, \"hash_ids\": [" + ids + "]}\n";
}

ReplayTrace small_trace() {
  std::string text;
  for (int i = 0; i < 12; ++i) text += mc(i * 100.0, 2048, "0, 1, " + std::to_string(10 + i % 3) + ", " + std::to_string(20 + i));
  return parse_replay_trace(text, TraceReadOptions{}).value();
}

ReplayOptions options(EvictionPolicyKind eviction) {
  ReplayOptions o = default_replay_options();
  o.host = Capacity::tokens(8192);
  o.eviction = eviction;
  return o;
}

// The JSON between <script id="report-data" ...> and </script>.
std::string embedded_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const size_t begin = page.find(open);
  if (begin == std::string::npos) return {};
  const size_t end = page.find("</script>", begin);
  return page.substr(begin + open.size(), end - begin - open.size());
}

TEST(ReplayHtml, TemplateInlinesStyleAndScriptAroundOneDataMarker) {
  const std::string_view page = replay_report_template();
  EXPECT_EQ(page.find("/*KVTIER_STYLE*/"), std::string_view::npos);
  EXPECT_EQ(page.find("/*KVTIER_SCRIPT*/"), std::string_view::npos);
  const size_t marker = page.find(kReportDataMarker);
  ASSERT_NE(marker, std::string_view::npos);
  EXPECT_EQ(page.find(kReportDataMarker, marker + 1), std::string_view::npos);
  for (const char* id : {"id=\"page-errors\"", "id=\"hit-chart\"", "id=\"ttft-chart\"", "id=\"tier-chart\"",
                         "id=\"bytes-chart\"", "id=\"tier-table\"", "id=\"options\"", "function reportError"})
    EXPECT_NE(page.find(id), std::string_view::npos) << id;
  // Self-contained: nothing is fetched from anywhere (the one URL is the SVG namespace, a name).
  std::string text(page);
  const std::string svg_ns = "'http://www.w3.org/2000/svg'";
  for (size_t at = text.find(svg_ns); at != std::string::npos; at = text.find(svg_ns)) text.erase(at, svg_ns.size());
  for (const char* fetch : {"http://", "https://", "src=\"", "<link", "fetch(", "@import", "url(http"})
    EXPECT_EQ(text.find(fetch), std::string::npos) << fetch;
}

TEST(ReplayHtml, OneReplayIsOneReportObject) {
  const ReplayTrace trace = small_trace();
  ReplayReport report = run_replay(options(EvictionPolicyKind::kLru), trace).value();
  const std::string page = format_replay_html(report, "trace.jsonl · llama-3-8b");
  const json data = json::parse(embedded_data(page));
  EXPECT_EQ(data["kind"], "replay");
  EXPECT_EQ(data["title"], "trace.jsonl · llama-3-8b");
  EXPECT_EQ(data["report"], json::parse(format_replay_json(report)));
  EXPECT_EQ(data["report"]["requests"], 12);
  EXPECT_GT(data["report"]["token_hit_ratio"].get<double>(), 0);
  EXPECT_TRUE(data["report"]["ttft_ms"]["with_cache"].contains("p99"));
  EXPECT_EQ(page.find(kReportDataMarker), std::string::npos);
}

TEST(ReplayHtml, SweepHasOneSeriesPerPolicyWithAPointPerCapacity) {
  const ReplayTrace trace = small_trace();
  const std::vector<uint64_t> caps = {1024, 4096, 65536};
  std::vector<SweepSeries> series;
  for (EvictionPolicyKind eviction : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu}) {
    SweepSeries line;
    line.label = std::string(eviction_policy_name(eviction)) + " · write_through";
    line.points = run_capacity_sweep(options(eviction), trace, caps).value();
    series.push_back(std::move(line));
  }
  const json data = json::parse(embedded_data(format_sweep_html(series, "sweep")));
  EXPECT_EQ(data["kind"], "sweep");
  ASSERT_EQ(data["series"].size(), 2u);
  EXPECT_EQ(data["series"][1]["eviction"], "lfu");
  EXPECT_EQ(data["series"][1]["write_policy"], "write_through");
  for (const json& line : data["series"]) {
    ASSERT_EQ(line["points"].size(), caps.size());
    for (size_t i = 0; i < caps.size(); ++i) {
      EXPECT_EQ(line["points"][i]["capacity_tokens"], caps[i]);
      // The replay sizes the device no larger than the trace can use.
      EXPECT_LE(line["points"][i]["report"]["capacity_tokens"]["device"].get<uint64_t>(), caps[i]);
    }
  }
}

TEST(ReplayHtml, DataCannotCloseItsScriptElement) {
  const ReplayTrace trace = small_trace();
  const ReplayReport report = run_replay(options(EvictionPolicyKind::kLru), trace).value();
  const std::string title = "</script><script>alert(1)</script>";
  const std::string page = format_replay_html(report, title);
  const std::string data = embedded_data(page);
  EXPECT_EQ(data.find('<'), std::string::npos);
  EXPECT_EQ(json::parse(data)["title"], title);
  EXPECT_EQ(json::parse(sweep_html_data({}, title))["title"], title);
}

}  // namespace
}  // namespace kvtier
