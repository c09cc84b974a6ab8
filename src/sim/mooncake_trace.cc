#include "sim/mooncake_trace.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "common/file_text.h"
#include "common/strings.h"

namespace kvtier {

Status MooncakeReadOptions::validate() const {
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  return Status::Ok();
}

namespace {

Status line_error(size_t line, const std::string& what) {
  return Status::InvalidArgument("mooncake trace line " + std::to_string(line) + ": " + what);
}

Result<uint64_t> read_uint(const nlohmann::json& obj, const char* field, size_t line, uint64_t max) {
  auto it = obj.find(field);
  if (it == obj.end()) return line_error(line, std::string("missing \"") + field + "\"");
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
    return line_error(line, std::string("\"") + field + "\" must be a non-negative integer");
  const uint64_t v = it->get<uint64_t>();
  if (v > max) return line_error(line, std::string("\"") + field + "\" is too large");
  return v;
}

Status parse_line(std::string_view text, size_t line, const MooncakeReadOptions& o, MooncakeTrace& trace) {
  nlohmann::json obj = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return line_error(line, "not valid JSON");
  if (!obj.is_object()) return line_error(line, "not a JSON object");
  MooncakeRequest r;
  auto ts = obj.find("timestamp");
  if (ts == obj.end() || !ts->is_number()) return line_error(line, "missing or non-numeric \"timestamp\"");
  r.timestamp_ms = ts->get<double>();
  if (!(r.timestamp_ms >= 0)) return line_error(line, "\"timestamp\" must be >= 0");
  constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
  KVTIER_ASSIGN_OR_RETURN(uint64_t in, read_uint(obj, "input_length", line, kU32));
  if (in > kMaxTraceInputTokens)
    return line_error(line, "input_length " + std::to_string(in) + " is over 2^24 tokens, the most a request may have");
  KVTIER_ASSIGN_OR_RETURN(uint64_t out, read_uint(obj, "output_length", line, kU32));
  r.input_length = static_cast<uint32_t>(in);
  r.output_length = static_cast<uint32_t>(out);
  auto ids = obj.find("hash_ids");
  if (ids == obj.end() || !ids->is_array()) return line_error(line, "missing or non-array \"hash_ids\"");
  r.hash_offset = trace.hash_ids.size();
  for (const auto& id : *ids) {
    if (!id.is_number_unsigned() && !(id.is_number_integer() && id.get<int64_t>() >= 0))
      return line_error(line, "\"hash_ids\" must hold non-negative integers");
    trace.hash_ids.push_back(id.get<uint64_t>());
  }
  r.hash_count = static_cast<uint32_t>(ids->size());
  if (uint64_t(r.hash_count) * o.block_tokens < r.input_length)
    return line_error(line, "input_length " + std::to_string(r.input_length) + " exceeds " +
                                std::to_string(r.hash_count) + " hash ids of " + std::to_string(o.block_tokens) +
                                " tokens");
  trace.requests.push_back(r);
  return Status::Ok();
}

}  // namespace

Result<MooncakeTrace> parse_mooncake_trace(std::string_view text, const MooncakeReadOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  MooncakeTrace trace;
  Lines lines(text);
  for (std::string_view l; lines.next(l);) {
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    KVTIER_RETURN_IF_ERROR(parse_line(l, lines.number(), options, trace));
  }
  return trace;
}

Result<MooncakeTrace> read_mooncake_trace(const std::string& path, const MooncakeReadOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, read_file(path, "mooncake trace"));
  return parse_mooncake_trace(text, options);
}

namespace {

// A bijection on [0, 2^31): odd multipliers and xor-shifts are invertible
// modulo 2^31, so distinct inputs never collide (no wrap-around aliasing).
uint32_t permute31(uint32_t x) {
  constexpr uint32_t kMask = 0x7FFFFFFFu;
  x &= kMask;
  x = (x * 0x2C1B3C6Du) & kMask;
  x ^= x >> 13;
  x = (x * 0x297A2D39u) & kMask;
  x ^= x >> 16;
  x = (x * 0x5BD1E995u) & kMask;
  x ^= x >> 15;
  return x;
}

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

void expand_block(uint64_t hash_id, std::span<TokenId> out) {
  if (out.empty()) return;
  // The first token is a bijection of the id: different ids always differ there.
  out[0] = static_cast<TokenId>(permute31(static_cast<uint32_t>(hash_id & 0x7FFFFFFFu)));
  // The rest are independent hashes of (id, position): no serial dependency, so they pipeline.
  const uint64_t base = mix64(hash_id + 0x9E3779B97F4A7C15ull);
  for (size_t j = 1; j < out.size(); ++j)
    out[j] = static_cast<TokenId>(mix64(base + j * 0xD1B54A32D192ED03ull) & 0x7FFFFFFFu);
}

Status expand_prompt(const MooncakeTrace& trace, size_t i, uint32_t block_tokens, std::vector<TokenId>& out) {
  if (i >= trace.requests.size()) return Status::OutOfRange("request " + std::to_string(i) + " is not in the trace");
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  const MooncakeRequest& r = trace.requests[i];
  const auto ids = trace.ids(i);
  if (uint64_t(ids.size()) * block_tokens < r.input_length)
    return Status::InvalidArgument("request " + std::to_string(i) + ": input_length exceeds its hash ids");
  const size_t blocks = (size_t(r.input_length) + block_tokens - 1) / block_tokens;  // only what is kept
  out.resize(blocks * block_tokens);
  for (size_t b = 0; b < blocks; ++b) {
    if (ids[b] > kMaxExpandableHashId)
      return Status::InvalidArgument("request " + std::to_string(i) + ": hash id " + std::to_string(ids[b]) +
                                     " is above the expandable range");
    expand_block(ids[b], std::span<TokenId>(out.data() + b * block_tokens, block_tokens));
  }
  out.resize(r.input_length);
  return Status::Ok();
}

}  // namespace kvtier
