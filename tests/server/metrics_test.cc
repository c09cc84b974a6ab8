#include "server/metrics.h"

#include <gtest/gtest.h>

#include "e2e/prom_check.h"

namespace kvtier::server {
namespace {

TEST(PromCheckTest, AcceptsValidAndRejectsInvalidText) {
  using kvtier::testing::parse_prometheus_text;
  EXPECT_TRUE(parse_prometheus_text("# HELP a x\n# TYPE a counter\na 1\na{b=\"c\\\"d\"} 2.5e3\n").ok());
  EXPECT_FALSE(parse_prometheus_text("a 1").ok());                        // no newline at the end
  EXPECT_FALSE(parse_prometheus_text("1a 1\n").ok());                     // bad name
  EXPECT_FALSE(parse_prometheus_text("a{b=c} 1\n").ok());                 // unquoted label
  EXPECT_FALSE(parse_prometheus_text("a one\n").ok());                    // bad value
  EXPECT_FALSE(parse_prometheus_text("a 1\n# TYPE a counter\n").ok());    // TYPE after samples
  EXPECT_FALSE(parse_prometheus_text("a 1\nb 1\na 2\n").ok());            // interleaved families
  EXPECT_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n").ok());
  EXPECT_FALSE(parse_prometheus_text("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n").ok());
}

TEST(ServerMetricsTest, RendersValidPrometheusText) {
  ServerMetrics m;
  m.record_response("/v1/completions", 200);
  m.record_response("/v1/completions", 400);
  CompletionUsage u;
  u.prompt_tokens = 100;
  u.completion_tokens = 4;
  u.report.cached_tokens = 64;
  u.report.cached_tokens_by_tier[int(TierKind::kDisk)] = 64;
  u.report.bytes_loaded_by_tier[int(TierKind::kDisk)] = 4096;
  u.ttft_s = 0.02;
  u.e2e_s = 0.5;
  m.record_completion(u, Status::Ok());
  m.record_completion(CompletionUsage{}, Status::Cancelled("the client went away"));
  m.record_completion(CompletionUsage{}, Status::Internal("the engine failed"));
  m.record_completion(CompletionUsage{.cut_short = true}, Status::DeadlineExceeded("the request timed out"));  // cancelled
  m.record_ignored_fields(2);
  m.record_ignored_fields(0);
  const std::string text = m.render({3, 2, false});
  const auto p = kvtier::testing::parse_prometheus_text(text);
  ASSERT_TRUE(p.ok()) << p.errors.front() << "\n" << text;
  EXPECT_EQ(p.value("kvtier_http_responses_total", {{"code", "400"}}), 1);
  EXPECT_EQ(p.value("kvtier_server_prompt_tokens_total"), 100);
  EXPECT_EQ(p.value("kvtier_server_cached_prompt_tokens_total", {{"tier", "disk"}}), 64);
  EXPECT_EQ(p.value("kvtier_server_cached_prompt_tokens_total", {{"tier", "host"}}), 0);
  EXPECT_DOUBLE_EQ(p.value("kvtier_server_prompt_cache_hit_ratio"), 0.64);
  EXPECT_EQ(p.value("kvtier_server_ttft_seconds_count"), 1);
  EXPECT_EQ(p.value("kvtier_server_ttft_seconds_bucket", {{"le", "0.01"}}), 0);
  EXPECT_EQ(p.value("kvtier_server_ttft_seconds_bucket", {{"le", "0.025"}}), 1);
  EXPECT_EQ(p.value("kvtier_server_requests_waiting"), 3);
  // A client that hangs up, a deadline that passes, are not failures of the server.
  EXPECT_EQ(p.value("kvtier_server_requests_total", {{"outcome", "ok"}}), 1);
  EXPECT_EQ(p.value("kvtier_server_requests_total", {{"outcome", "cancelled"}}), 2);
  EXPECT_EQ(p.value("kvtier_server_requests_total", {{"outcome", "failed"}}), 1);
  EXPECT_EQ(p.types.at("kvtier_server_e2e_latency_seconds"), "histogram");
  EXPECT_EQ(p.value("kvtier_request_ignored_fields_total"), 2);
}

TEST(ServerMetricsTest, AppendDropsFamiliesAlreadyDeclared) {
  std::string out = "# HELP a x\n# TYPE a counter\na 1\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n";
  append_prometheus_text(out, "# HELP a dup\n# TYPE a counter\na 2\n# TYPE h histogram\nh_count 5\n# TYPE b gauge\nb 3");
  const auto p = kvtier::testing::parse_prometheus_text(out);
  ASSERT_TRUE(p.ok()) << p.errors.front() << "\n" << out;
  EXPECT_EQ(p.value("a"), 1);
  EXPECT_EQ(p.value("h_count"), 1);
  EXPECT_EQ(p.value("b"), 3);
}

}  // namespace
}  // namespace kvtier::server
