// Fuzz checks of both trace readers: any text is a trace whose requests
// point inside its arrays, or an error naming a line.
#include <cmath>
#include <string_view>

#include "fuzz_checks.h"
#include "sim/kvtier_trace.h"
#include "sim/mooncake_trace.h"

namespace kvtier::fuzzing {
namespace {

constexpr uint32_t kBlockTokens = 16;

std::string_view as_text(Input data) { return {reinterpret_cast<const char*>(data.data()), data.size()}; }

std::string check_replay_trace(const ReplayTrace& t) {
  for (const ReplayRequest& r : t.requests) {
    if (!(r.timestamp_ms >= 0) || !std::isfinite(r.timestamp_ms)) return "accepted a bad timestamp";
    if (r.salt >= t.salts.size()) return "salt index outside the salts";
    if (r.has_tokens) {
      if (r.offset + r.count > t.tokens.size() || r.input_length != r.count) return "token range inconsistent";
      continue;
    }
    if (r.offset + r.count > t.hash_ids.size()) return "hash id range outside the array";
    if (uint64_t(r.input_length) > uint64_t(r.count) * t.block_tokens) return "input_length beyond its hash ids";
    for (uint64_t id : t.ids(r))
      if (id > kMaxExpandableHashId) return "accepted a hash id above 2^31-1";
  }
  return {};
}

}  // namespace

std::string check_mooncake_trace(Input data) {
  auto t = parse_replay_trace(as_text(data), {.format = TraceFormat::kMooncake, .block_tokens = kBlockTokens});
  if (!t.ok()) return t.status().message().find("line ") == std::string::npos ? "an error that names no line" : "";
  if (auto why = check_replay_trace(*t); !why.empty()) return why;
  std::vector<TokenId> prompt;
  for (const ReplayRequest& r : t->requests) {
    if (!expand_request(*t, r, prompt).ok()) return "a request the reader took does not expand";
    if (prompt.size() != r.input_length) return "expanded prompt of the wrong length";
  }
  return {};
}

std::string check_kvtier_trace(Input data) {
  const std::string_view text = as_text(data);
  auto strict = parse_replay_trace(text, {.format = TraceFormat::kKvtier, .block_tokens = kBlockTokens});
  if (!strict.ok() && strict.status().message().find("line ") == std::string::npos) return "an error that names no line";
  if (strict.ok())
    if (auto why = check_replay_trace(*strict); !why.empty()) return why;
  // Skipping bad lines never fails, and keeps exactly the lines the strict reader accepts.
  auto lenient = parse_replay_trace(text, {.format = TraceFormat::kKvtier, .block_tokens = kBlockTokens, .skip_bad_lines = true});
  if (!lenient.ok()) return "skip_bad_lines refused a trace";
  if (auto why = check_replay_trace(*lenient); !why.empty()) return why;
  if (strict.ok() && (lenient->skipped_lines != 0 || lenient->requests.size() != strict->requests.size()))
    return "strict and lenient readings differ";
  // The same text read as a Mooncake trace by the replay reader.
  auto moon = parse_replay_trace(text, {.format = TraceFormat::kMooncake, .block_tokens = kBlockTokens});
  if (moon.ok()) return check_replay_trace(*moon);
  return {};
}

}  // namespace kvtier::fuzzing
