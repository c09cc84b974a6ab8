#include "sim/kvtier_trace.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/file_text.h"
#include "common/strings.h"
#include "sim/mooncake_trace.h"

namespace kvtier {

Result<TraceFormat> parse_trace_format(std::string_view name) {
  if (name == "mooncake") return TraceFormat::kMooncake;
  if (name == "kvtier") return TraceFormat::kKvtier;
  return Status::InvalidArgument("unknown trace format '" + std::string(name) + "' (expected mooncake or kvtier)");
}

std::string_view trace_format_name(TraceFormat f) { return f == TraceFormat::kMooncake ? "mooncake" : "kvtier"; }

Status TraceReadOptions::validate() const {
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  return Status::Ok();
}

namespace {

constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();

struct LineError {
  std::string what;
};

bool is_uint(const nlohmann::json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

// Reads an optional non-negative integer field; `present` says whether it was there.
Status read_uint(const nlohmann::json& obj, const char* field, uint64_t max, bool required, uint64_t& out,
                 bool& present) {
  auto it = obj.find(field);
  present = it != obj.end();
  if (!present) {
    return required ? Status::InvalidArgument(std::string("missing \"") + field + "\"") : Status::Ok();
  }
  if (!is_uint(*it)) return Status::InvalidArgument(std::string("\"") + field + "\" must be a non-negative integer");
  out = it->get<uint64_t>();
  if (out > max) return Status::InvalidArgument(std::string("\"") + field + "\" is too large");
  return Status::Ok();
}

class LineParser {
 public:
  LineParser(const TraceReadOptions& o, ReplayTrace& t) : o_(o), t_(t) {}

  // Appends the request of one line, or leaves the trace untouched and says why not.
  Status parse(std::string_view text) {
    nlohmann::json obj = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return Status::InvalidArgument("not valid JSON");
    if (!obj.is_object()) return Status::InvalidArgument("not a JSON object");
    const bool mooncake = o_.format == TraceFormat::kMooncake;
    ReplayRequest r;
    auto ts = obj.find("timestamp");
    if (ts == obj.end() || !ts->is_number()) return Status::InvalidArgument("missing or non-numeric \"timestamp\"");
    r.timestamp_ms = ts->get<double>();
    if (!(r.timestamp_ms >= 0) || !std::isfinite(r.timestamp_ms))
      return Status::InvalidArgument("\"timestamp\" must be a finite number >= 0");
    uint64_t in = 0, out = 0;
    bool has_in = false, has_out = false;
    KVTIER_RETURN_IF_ERROR(read_uint(obj, "input_length", kU32, mooncake, in, has_in));
    KVTIER_RETURN_IF_ERROR(read_uint(obj, "output_length", kU32, mooncake, out, has_out));
    r.output_length = static_cast<uint32_t>(out);
    KVTIER_RETURN_IF_ERROR(read_hints(obj, r));

    auto ids = obj.find("hash_ids");
    auto toks = mooncake ? obj.end() : obj.find("tokens");
    if (ids != obj.end() && toks != obj.end())
      return Status::InvalidArgument("give either \"tokens\" or \"hash_ids\", not both");
    if (toks != obj.end()) {
      if (!toks->is_array()) return Status::InvalidArgument("\"tokens\" must be an array");
      if (toks->size() > kMaxTraceInputTokens)
        return Status::InvalidArgument("\"tokens\" holds more than 2^24 tokens, the most a replayed request may have");
      for (const auto& v : *toks)
        if (!is_uint(v) || v.get<uint64_t>() > uint64_t(std::numeric_limits<TokenId>::max()))
          return Status::InvalidArgument("\"tokens\" must hold token ids in [0, 2^31)");
      if (has_in && in != toks->size())
        return Status::InvalidArgument("\"input_length\" " + std::to_string(in) + " differs from the " +
                                       std::to_string(toks->size()) + " tokens given");
      r.has_tokens = true;
      r.offset = t_.tokens.size();
      r.count = static_cast<uint32_t>(toks->size());
      r.input_length = r.count;
      for (const auto& v : *toks) t_.tokens.push_back(static_cast<TokenId>(v.get<uint64_t>()));
    } else {
      if (ids == obj.end() || !ids->is_array())
        return Status::InvalidArgument(mooncake ? "missing or non-array \"hash_ids\""
                                                : "needs a \"tokens\" or a \"hash_ids\" array");
      for (const auto& v : *ids) {
        if (!is_uint(v)) return Status::InvalidArgument("\"hash_ids\" must hold non-negative integers");
        if (v.get<uint64_t>() > kMaxExpandableHashId)
          return Status::InvalidArgument("hash id " + std::to_string(v.get<uint64_t>()) + " is above 2^31-1");
      }
      if (ids->size() > kU32) return Status::InvalidArgument("\"hash_ids\" is too long");
      const uint64_t cap = uint64_t(ids->size()) * o_.block_tokens;
      if (!has_in) in = std::min<uint64_t>(cap, kU32);
      if (in > cap)
        return Status::InvalidArgument("input_length " + std::to_string(in) + " exceeds " +
                                       std::to_string(ids->size()) + " hash ids of " +
                                       std::to_string(o_.block_tokens) + " tokens");
      if (in > kMaxTraceInputTokens)
        return Status::InvalidArgument("input_length " + std::to_string(in) +
                                       " is over 2^24 tokens, the most a replayed request may have");
      r.input_length = static_cast<uint32_t>(in);
      r.offset = t_.hash_ids.size();
      r.count = static_cast<uint32_t>(ids->size());
      for (const auto& v : *ids) t_.hash_ids.push_back(v.get<uint64_t>());
    }

    if (!mooncake) {
      auto salt = obj.find("cache_salt");
      if (salt != obj.end() && !salt->is_null()) {
        if (!salt->is_string()) return Status::InvalidArgument("\"cache_salt\" must be a string");
        r.salt = salt_index(salt->get<std::string>());
      }
    }
    t_.requests.push_back(r);
    return Status::Ok();
  }

 private:
  static Status read_hints(const nlohmann::json& obj, ReplayRequest& r) {
    uint64_t retain = 0;
    bool has = false;
    KVTIER_RETURN_IF_ERROR(read_uint(obj, "retain_s", 86400, false, retain, has));
    r.retain_s = static_cast<uint32_t>(retain);
    auto at = obj.find("prefetch_at");
    if (at == obj.end() || at->is_null()) return Status::Ok();
    if (!at->is_number() || !std::isfinite(at->get<double>()) || at->get<double>() < 0 ||
        at->get<double>() > r.timestamp_ms)
      return Status::InvalidArgument("\"prefetch_at\" must be a number of ms in [0, timestamp]");
    r.prefetch_at_ms = at->get<double>();
    return Status::Ok();
  }

  uint32_t salt_index(const std::string& s) {
    if (s.empty()) return 0;
    auto [it, fresh] = salt_ids_.emplace(s, static_cast<uint32_t>(t_.salts.size()));
    if (fresh) t_.salts.push_back(s);
    return it->second;
  }

  const TraceReadOptions& o_;
  ReplayTrace& t_;
  std::unordered_map<std::string, uint32_t> salt_ids_;
};

}  // namespace

Result<ReplayTrace> parse_replay_trace(std::string_view text, const TraceReadOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  ReplayTrace trace;
  trace.block_tokens = options.block_tokens;
  LineParser parser(options, trace);
  const std::string fmt(trace_format_name(options.format));
  Lines lines(text);
  for (std::string_view l; lines.next(l);) {
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Status st = parser.parse(l);
    if (st.ok()) continue;
    const std::string msg = fmt + " trace line " + std::to_string(lines.number()) + ": " + st.message();
    if (!options.skip_bad_lines) return Status::InvalidArgument(msg);
    if (trace.skipped_lines++ == 0) trace.first_skipped = msg;
  }
  return trace;
}

Result<ReplayTrace> read_replay_trace(const std::string& path, const TraceReadOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, read_file(path, "trace", uint64_t{16} << 30));
  return parse_replay_trace(text, options);
}

Status expand_request(const ReplayTrace& trace, const ReplayRequest& r, std::vector<TokenId>& out) {
  if (r.has_tokens) {
    if (r.offset + r.count > trace.tokens.size() || r.input_length > r.count)
      return Status::InvalidArgument("request's tokens lie outside the trace");
    const auto p = trace.prompt(r);
    out.assign(p.begin(), p.begin() + r.input_length);
    return Status::Ok();
  }
  const uint32_t B = trace.block_tokens;
  if (B == 0 || r.offset + r.count > trace.hash_ids.size() || uint64_t(r.count) * B < r.input_length)
    return Status::InvalidArgument("request's input_length exceeds its hash ids");
  const auto ids = trace.ids(r);
  const size_t blocks = (size_t(r.input_length) + B - 1) / B;  // only what is kept
  out.resize(r.input_length);
  for (size_t b = 0; b < blocks; ++b) {
    if (ids[b] > kMaxExpandableHashId)
      return Status::InvalidArgument("hash id " + std::to_string(ids[b]) + " is above the expandable range");
    // Positions are hashed independently, so the last block's kept part alone is expanded (a
    // block of 2^32 tokens no longer allocates 16 GiB for a 100-token prompt).
    expand_block(ids[b], std::span<TokenId>(out.data() + b * B, std::min<size_t>(B, r.input_length - b * B)));
  }
  return Status::Ok();
}

}  // namespace kvtier
