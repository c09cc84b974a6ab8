// `kvtier replay --html` in a real browser: the real binary replays part of
// the shared Mooncake trace (a capacity sweep under two eviction policies,
// and one plain replay), and headless Chromium opens the written files. The
// page lists its own script errors in #page-errors; there must be none, and
// the DOM must hold a line per policy with a point per capacity, the TTFT
// bars, the per-tier rows. A page whose data is broken must say so in
// #page-errors. The screenshot lands in the build folder (docs/DASHBOARD.md
// shows it). Skips when Chromium is not installed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "e2e/headless_chromium.h"
#include "test_data.h"

namespace kvtier::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kTraceLines = 1500;  // enough reuse and evictions, small enough for a few seconds
constexpr int kPolicies = 2;       // --eviction lru,lfu
constexpr int kCapacities = 3;     // --sweep-capacity 1e5,1e6,1e7

class ScratchDir {
 public:
  ScratchDir() : path_(fs::temp_directory_path() / ("kvtier_report_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string kvtier_binary() {
  const char* binary = std::getenv("KVTIER_BINARY");
  return binary != nullptr ? binary : "kvtier";
}

// The build folder (KVTIER_BINARY is <build>/tools/kvtier).
std::string artefact(const std::string& name) { return (fs::path(kvtier_binary()).parent_path().parent_path() / name).string(); }

// The first lines of the shared trace, as a trace file of its own.
std::string write_trace_head(const ScratchDir& dir) {
  std::ifstream in(testdata::mooncake_trace_path());
  const std::string path = dir.file("trace.jsonl");
  std::ofstream out(path);
  std::string line;
  for (int i = 0; i < kTraceLines && std::getline(in, line); ++i) out << line << '\n';
  return path;
}

// Runs `kvtier replay --trace TRACE ARGS --html HTML`; false (with its output in `log`) when it failed.
bool replay(const std::string& trace, const std::string& args, const std::string& html, const ScratchDir& dir, std::string& log) {
  const std::string out = dir.file("replay.log");
  std::string cmd = "'";  // appended piece by piece: GCC 12 misreads a long chain of + (-Wrestrict)
  for (const std::string& part : {kvtier_binary(), std::string("' replay --trace '"), trace, std::string("' "), args,
                                  std::string(" --html '"), html, std::string("' >'"), out, std::string("' 2>&1")})
    cmd += part;
  const int rc = std::system(cmd.c_str());
  std::ifstream text(out);
  std::stringstream buffer;
  buffer << text.rdbuf();
  log = buffer.str();
  return rc == 0 && fs::exists(html);
}

Chromium browser(const ScratchDir& dir) {
  Chromium b;
  b.binary = find_chromium();
  b.profile_dir = dir.file("profile");
  b.virtual_time_ms = 5000;  // the page draws once, on load
  return b;
}

int errors_listed(const std::string& dom) { return std::stoi(attribute(tag_with(dom, "id=\"page-errors\""), "data-count").value_or("-1")); }

TEST(ReplayReportBrowser, SweepDrawsALinePerPolicyWithAPointPerCapacity) {
  if (find_chromium().empty()) GTEST_SKIP() << "Chromium is not installed (make deps installs the Debian package chromium)";
  ScratchDir dir;
  const std::string html = dir.file("sweep.html");
  std::string log;
  ASSERT_TRUE(replay(write_trace_head(dir), "--sweep-capacity 1e5,1e6,1e7 --eviction lru,lfu --host 5e5 --workers 64 --sweep-out '" +
                                                dir.file("sweep") + "'", html, dir, log)) << log;
  const Chromium chromium = browser(dir);
  const auto dom = chromium.dump_dom("file://" + html);
  ASSERT_TRUE(dom.has_value()) << "chromium did not run";
  EXPECT_EQ(errors_listed(*dom), 0) << "the page reported errors:\n" << *dom;
  EXPECT_EQ(attribute(tag_with(*dom, "<body"), "data-rendered").value_or(""), "1");
  EXPECT_FALSE(attribute(tag_with(*dom, "id=\"sweep-panel\""), "hidden").has_value());

  EXPECT_EQ(attribute(tag_with(*dom, "id=\"hit-chart\""), "data-series").value_or(""), std::to_string(kPolicies));
  const auto lines = tags_with(*dom, "class=\"series-line\"");
  ASSERT_EQ(int(lines.size()), kPolicies);
  std::set<std::string> policies;
  for (const std::string& line : lines) {
    EXPECT_EQ(attribute(line, "data-points").value_or(""), std::to_string(kCapacities)) << line;
    policies.insert(attribute(line, "data-series").value_or(""));
  }
  EXPECT_EQ(policies, (std::set<std::string>{"lru · write_through", "lfu · write_through"}));
  EXPECT_EQ(int(tags_with(*dom, "class=\"point").size()), kPolicies * kCapacities);
  EXPECT_EQ(int(tags_with(*dom, "class=\"point selected\"").size()), 1) << "one point's details are shown";
  EXPECT_EQ(int(tags_with(*dom, "id=\"unlimited-line\"").size()), 1);

  // The details of the selected point: TTFT bars, tier rows, bytes to the host.
  EXPECT_EQ(int(tags_with(*dom, "data-kind=\"with_cache\"").size()), 3);
  EXPECT_EQ(int(tags_with(*dom, "data-kind=\"without_cache\"").size()), 3);
  EXPECT_EQ(int(tags_with(*dom, "<tr data-tier=").size()), 4);
  EXPECT_EQ(int(tags_with(*dom, "data-direction=\"store\"").size()), 3) << "write_through stores to the host";
  EXPECT_EQ(int(tags_with(*dom, "<option").size()), kPolicies * kCapacities);

  EXPECT_TRUE(chromium.screenshot("file://" + html, artefact("replay-report.png")));
}

TEST(ReplayReportBrowser, OneReplayShowsItsDetailsWithoutTheSweepChart) {
  if (find_chromium().empty()) GTEST_SKIP() << "Chromium is not installed (make deps installs the Debian package chromium)";
  ScratchDir dir;
  const std::string html = dir.file("replay.html");
  std::string log;
  ASSERT_TRUE(replay(write_trace_head(dir), "--device 3e5 --host 5e5 --workers 64", html, dir, log)) << log;
  const auto dom = browser(dir).dump_dom("file://" + html);
  ASSERT_TRUE(dom.has_value()) << "chromium did not run";
  EXPECT_EQ(errors_listed(*dom), 0) << "the page reported errors:\n" << *dom;
  EXPECT_EQ(attribute(tag_with(*dom, "<body"), "data-rendered").value_or(""), "1");
  EXPECT_TRUE(attribute(tag_with(*dom, "id=\"sweep-panel\""), "hidden").has_value());
  EXPECT_EQ(int(tags_with(*dom, "class=\"bar\" data-kind=").size()), 6);
  EXPECT_NE(dom->find("llama-3-8b"), std::string::npos) << "the options name the model";

  // The same page with its data cut short reports the failure instead of drawing nothing silently.
  std::ifstream in(html);
  std::stringstream page;
  page << in.rdbuf();
  std::string broken = page.str();
  const size_t data = broken.find("id=\"report-data\">");
  ASSERT_NE(data, std::string::npos);
  broken.erase(data + 40, broken.find("</script>", data) - data - 40);
  const std::string broken_path = dir.file("broken.html");
  std::ofstream(broken_path) << broken;
  const auto broken_dom = browser(dir).dump_dom("file://" + broken_path);
  ASSERT_TRUE(broken_dom.has_value());
  EXPECT_EQ(errors_listed(*broken_dom), 1);
  EXPECT_EQ(attribute(tag_with(*broken_dom, "<body"), "data-rendered").value_or(""), "0");
}

}  // namespace
}  // namespace kvtier::testing
