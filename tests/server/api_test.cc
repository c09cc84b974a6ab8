#include "server/api.h"
#include "server/chat_api.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

namespace kvtier::server {
namespace {

using nlohmann::json;

RequestLimits limits() {
  RequestLimits l;
  l.vocab_size = 100;
  l.max_context = 64;
  l.max_tokens = 32;
  l.default_max_tokens = 8;
  return l;
}

std::vector<TokenId> char_tokens(std::string_view s, bool parse_special = true) {
  std::vector<TokenId> out;
  if (!parse_special) out.push_back(99);  // marks that the request asked for plain text
  for (char c : s) out.push_back(TokenId(static_cast<unsigned char>(c) % 100));
  return out;
}

std::variant<CompletionRequest, ApiError> parse(const std::string& body, RequestLimits l = limits()) {
  return parse_completion_request(body, l, [](std::string_view s, const text::EncodeOptions& o) { return char_tokens(s, o.parse_special); });
}

ApiError error_of(const std::string& body, RequestLimits l = limits()) {
  auto r = parse(body, l);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(ApiParseTest, TextPromptAndDefaults) {
  auto r = parse(R"({"model":"m","prompt":"hi"})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  const auto& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.prompt, char_tokens("hi"));
  EXPECT_TRUE(c.prompt_is_text);
  EXPECT_EQ(c.max_tokens, 8u);
  EXPECT_FALSE(c.stream);
  EXPECT_EQ(c.sampling.temperature, 0.0f);
}

TEST(ApiParseTest, EveryField) {
  auto r = parse(R"({"prompt":[1,2,3],"max_tokens":5,"temperature":0.7,"top_p":0.9,"seed":42,"stop":["x","yz"],
                     "stream":true,"stream_options":{"include_usage":true},"cache_salt":"tenant-a","ignore_eos":true,
                     "user":"ignored","n":1})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  const auto& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.prompt, (std::vector<TokenId>{1, 2, 3}));
  EXPECT_EQ(c.max_tokens, 5u);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(c.sampling.top_p, 0.9f);
  EXPECT_EQ(c.sampling.seed, 42u);
  EXPECT_EQ(c.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.stream_include_usage);
  EXPECT_TRUE(c.ignore_eos);
  EXPECT_EQ(c.cache_salt, "tenant-a");
}

// logit_bias, presence_penalty, frequency_penalty and min_p reach the sampler (they were taken
// and ignored); out of range, a 400 naming the field.
TEST(ApiParseTest, LogitBiasAndPenalties) {
  auto r = parse(R"({"prompt":"hi","logit_bias":{"7":-100,"50":2.5},"presence_penalty":0.5,"frequency_penalty":-1,
                     "min_p":0.1})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  const auto& c = std::get<CompletionRequest>(r);
  auto bias = c.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<TokenId, float>>{{7, -100.0f}, {50, 2.5f}}));
  EXPECT_FLOAT_EQ(c.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(c.sampling.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(c.sampling.min_p, 0.1f);
  EXPECT_EQ(c.ignored_fields, 0u);
  EXPECT_EQ(error_of(R"({"prompt":"hi","logit_bias":{"7":-101}})").param, "logit_bias");
  EXPECT_EQ(error_of(R"({"prompt":"hi","logit_bias":{"x7":1}})").param, "logit_bias");
  EXPECT_EQ(error_of(R"({"prompt":"hi","logit_bias":{"7":100,"07":100}})").param, "logit_bias");  // +200 by adding
  EXPECT_EQ(error_of(R"({"prompt":"hi","logit_bias":{"1000000":1}})").param, "logit_bias");
  EXPECT_EQ(error_of(R"({"prompt":"hi","logit_bias":[1]})").param, "logit_bias");
  EXPECT_EQ(error_of(R"({"prompt":"hi","presence_penalty":3})").param, "presence_penalty");
  EXPECT_EQ(error_of(R"({"prompt":"hi","frequency_penalty":"high"})").param, "frequency_penalty");
  EXPECT_EQ(error_of(R"({"prompt":"hi","min_p":-0.1})").param, "min_p");
}

TEST(ApiParseTest, StopAsOneStringAndBatchOfOne) {
  auto r = parse(R"({"prompt":[[4,5]],"stop":"\n"})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<CompletionRequest>(r).prompt, (std::vector<TokenId>{4, 5}));
  EXPECT_EQ(std::get<CompletionRequest>(r).stop, (std::vector<std::string>{"\n"}));
}

// "kvtier": {"blend": bool}: unset, true or false; anything else is a 400 naming the field.
TEST(ApiParseTest, KvtierObject) {
  auto plain = parse(R"({"prompt":"hi"})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(plain));
  EXPECT_FALSE(std::get<CompletionRequest>(plain).blend.has_value());
  for (bool v : {true, false}) {
    auto r = parse(std::string(R"({"prompt":"hi","kvtier":{"blend":)") + (v ? "true" : "false") + "}}");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
    EXPECT_EQ(std::get<CompletionRequest>(r).blend, std::optional<bool>(v));
  }
  EXPECT_EQ(error_of(R"({"prompt":"hi","kvtier":{"blend":1}})").param, "kvtier.blend");
  EXPECT_EQ(error_of(R"({"prompt":"hi","kvtier":{"retian_s":5}})").param, "kvtier.retian_s");
  EXPECT_EQ(error_of(R"({"prompt":"hi","kvtier":[]})").param, "kvtier");
}

TEST(ApiParseTest, PrefetchReadyInMs) {
  const auto ready = [](const char* body) { return read_prefetch_ready_ms(nlohmann::json::parse(body)); };
  EXPECT_EQ(std::get<uint32_t>(ready(R"({"prompt":"hi"})")), 0u);
  EXPECT_EQ(std::get<uint32_t>(ready(R"({"prompt":"hi","ready_in_ms":400})")), 400u);
  EXPECT_EQ(std::get<uint32_t>(ready(R"({"prompt":"hi","ready_in_ms":3600000})")), kMaxPrefetchReadyMs);
  for (const char* bad : {R"({"ready_in_ms":-1})", R"({"ready_in_ms":3600001})", R"({"ready_in_ms":1.5})",
                          R"({"ready_in_ms":"400"})"}) {
    const auto r = ready(bad);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << bad;
    EXPECT_EQ(std::get<ApiError>(r).param, "ready_in_ms") << bad;
    EXPECT_EQ(std::get<ApiError>(r).http_status, 400) << bad;
  }
}

TEST(ApiParseTest, BadInputsAre400WithAParam) {
  struct Case {
    std::string body;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {"{not json", "", "invalid_json"},
      {"[1,2]", "", "invalid_json"},
      {R"({"max_tokens":3})", "prompt", "missing_field"},
      {R"({"prompt":42})", "prompt", "invalid_type"},
      {R"({"prompt":""})", "prompt", "empty_prompt"},
      {R"({"prompt":[]})", "prompt", "empty_prompt"},
      {R"({"prompt":[1,"a"]})", "prompt", "invalid_type"},
      {R"({"prompt":[1,2.5]})", "prompt", "invalid_type"},
      {R"({"prompt":[1,100]})", "prompt", "token_out_of_vocabulary"},
      {R"({"prompt":[-1]})", "prompt", "token_out_of_vocabulary"},
      {R"({"prompt":["a","b"]})", "prompt", "unsupported"},
      {R"({"prompt":"x","max_tokens":"5"})", "max_tokens", "invalid_type"},
      {R"({"prompt":"x","max_tokens":0})", "max_tokens", "invalid_value"},
      {R"({"prompt":"x","max_tokens":33})", "max_tokens", "too_many_tokens"},
      {R"({"prompt":"x","temperature":"hot"})", "temperature", "invalid_type"},
      {R"({"prompt":"x","temperature":3})", "temperature", "invalid_value"},
      {R"({"prompt":"x","top_p":0})", "top_p", "invalid_value"},
      {R"({"prompt":"x","seed":1.5})", "seed", "invalid_type"},
      {R"({"prompt":"x","stop":5})", "stop", "invalid_type"},
      {R"({"prompt":"x","stop":["a",1]})", "stop", "invalid_type"},
      {R"({"prompt":"x","stop":["a","b","c","d","e"]})", "stop", "invalid_value"},
      {R"({"prompt":"x","stream":"yes"})", "stream", "invalid_type"},
      {R"({"prompt":"x","cache_salt":7})", "cache_salt", "invalid_type"},
      {R"({"prompt":"x","cache_salt":")" + std::string(kMaxCacheSaltBytes + 1, 's') + R"("})", "cache_salt", "invalid_value"},
      {R"({"prompt":"x","n":2})", "n", "unsupported"},
      {R"({"prompt":"x","model":1})", "model", "invalid_type"},
      // Past INT64_MAX: refused, not wrapped to a negative (top_k -1 would turn top-k off).
      {R"({"prompt":"x","max_tokens":18446744073709551615})", "max_tokens", "invalid_type"},
      {R"({"prompt":"x","top_k":18446744073709551615})", "top_k", "invalid_type"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body;
    const json j = json::parse(error_json(e));
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
}

// Without a seed every request samples afresh (each got seed 0, so N requests for N candidates
// gave N copies of one); a top_p below the smallest float is the most likely token, not a late 400.
TEST(ApiParseTest, UnseededRequestsGetTheirOwnSeedsAndTinyTopPIsKept) {
  const auto seed_of = [](const char* body) { return std::get<CompletionRequest>(parse(body)).sampling.seed; };
  EXPECT_NE(seed_of(R"({"prompt":"x","temperature":1})"), seed_of(R"({"prompt":"x","temperature":1})"));
  EXPECT_EQ(seed_of(R"({"prompt":"x","seed":7})"), 7u);
  auto r = parse(R"({"prompt":"x","temperature":1,"top_p":1e-300})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_GT(std::get<CompletionRequest>(r).sampling.top_p, 0.0f);
}

// A seed is any 64-bit pattern, also one past INT64_MAX.
TEST(ApiParseTest, SeedTakesTheWholeUnsignedRange) {
  auto r = parse(R"({"prompt":"x","seed":18446744073709551615})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<CompletionRequest>(r).sampling.seed, UINT64_MAX);
}

// A body nested deeper than kMaxJsonDepth is refused before it is parsed; one
// 100,000 deep used to overflow the connection thread's stack when the chat
// parser copied it. At the limit it parses (the unknown field is ignored).
TEST(ApiParseTest, DeepNestingIsRefusedBeforeParsing) {
  auto nested = [](size_t depth) {
    return R"({"prompt":"x","x":)" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parse(nested(kMaxJsonDepth))));
  for (size_t depth : {kMaxJsonDepth + 1, size_t(100000)}) {
    const ApiError e = error_of(nested(depth));
    EXPECT_EQ(e.http_status, 400) << depth;
    EXPECT_EQ(e.code, "invalid_json") << depth;
    EXPECT_NE(e.message.find("128 deep"), std::string::npos) << e.message;
  }
}

// A body whose objects hold more keys than an insertion-ordered map parses quickly is refused
// before it is parsed: one object of 80,000 keys took 6.8 s in the chat parser (ordered_json), a
// 16 MiB body half an hour. An object of 4,096 keys (logit_bias at its limit is 1,024) parses.
TEST(ApiParseTest, ObjectsWithTooManyKeysAreRefusedBeforeParsing) {
  auto wide = [](int keys) {
    std::string x = "{";
    for (int i = 0; i < keys; ++i) x += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    return R"({"prompt":"x","x":)" + x + "}}";
  };
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parse(wide(4096))));
  const ApiError e = error_of(wide(4100));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_NE(e.message.find("too many keys"), std::string::npos) << e.message;
  const ApiError chat = std::get<ApiError>(parse_chat_request(
      R"({"messages":[{"role":"user","content":"hi"}],"x":)" + wide(80000) + "}", limits(),
      [](const text::ChatInput&, std::string_view, std::string&) -> Result<std::vector<TokenId>> { return std::vector<TokenId>{1}; }));
  EXPECT_NE(chat.message.find("too many keys"), std::string::npos) << chat.message;
}

// "segments": the prompt as pieces; reusable ones (the default) are marked by
// position; text pieces are tokenized one by one, BOS only before the first.
TEST(ApiParseTest, SegmentsMarkReusablePieces) {
  const Tokenizer bos_marking = [](std::string_view s, const text::EncodeOptions& o) {
    const bool special = o.parse_special, add_bos = o.add_bos;
    auto ids = char_tokens(s, special);
    if (add_bos) ids.insert(ids.begin(), 98);
    return ids;
  };
  auto r = parse_completion_request(
      R"({"segments": [{"text": "ab", "reuse": false}, {"tokens": [5, 6, 7]}, {"text": "cd"}, {"text": "e", "reuse": false}]})",
      limits(), bos_marking);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  const CompletionRequest& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.prompt, (std::vector<TokenId>{98, 97, 98, 5, 6, 7, 99, 0, 1}));
  ASSERT_EQ(c.segments.size(), 2u);
  EXPECT_EQ(c.segments[0].begin, 3u);
  EXPECT_EQ(c.segments[0].end, 6u);
  EXPECT_EQ(c.segments[1].begin, 6u);
  EXPECT_EQ(c.segments[1].end, 8u);
  for (const char* body : {R"({"prompt": "x", "segments": [{"text": "a"}]})", R"({"segments": []})",
                           R"({"segments": [{"text": "a", "tokens": [1]}]})", R"({"segments": [{"tokens": [100000]}]})",
                           R"({"segments": ["a"]})", R"({"segments": [{"text": "a", "reuse": 3}]})"}) {
    const ApiError e = error_of(body);
    EXPECT_FALSE(e.message.empty()) << body;
  }
}

TEST(ApiParseTest, ContextLimits) {
  std::string long_prompt(65, 'a');
  EXPECT_EQ(error_of(R"({"prompt":")" + long_prompt + R"("})").code, "context_length_exceeded");
  // A prompt filling the whole context leaves no position for the token after it: refused here,
  // not by the runtime after queueing (a streamed request got 200 and an error event).
  EXPECT_EQ(error_of(R"({"prompt":")" + std::string(64, 'a') + R"(","max_tokens":0,"echo":true})").code,
            "context_length_exceeded");
  // 60 prompt tokens + 8 max_tokens > 64: refused when the request asks for 8, cut to the 4 left
  // when 8 is the default (before, a request that sent no max_tokens was refused for it).
  EXPECT_EQ(error_of(R"({"prompt":")" + std::string(60, 'a') + R"(","max_tokens":8})").param, "max_tokens");
  auto cut = parse(R"({"prompt":")" + std::string(60, 'a') + R"("})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(cut));
  EXPECT_EQ(std::get<CompletionRequest>(cut).max_tokens, 4u);
  RequestLimits l = limits();
  l.max_prompt_tokens = 10;
  EXPECT_EQ(error_of(R"({"prompt":")" + std::string(11, 'a') + R"("})", l).code, "context_length_exceeded");
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parse(R"({"prompt":")" + std::string(10, 'a') + R"("})", l)));
}

// The device pool bounds the prompt and prompt + max_tokens; the limits
// derive from the model (its pool, its longest token) and the configuration.
TEST(ApiParseTest, KvPoolLimits) {
  ModelInfo model;
  model.vocab_size = 1000;
  model.max_context = 64;
  model.max_kv_tokens = 32;
  model.text.max_token_bytes = 3;
  RequestLimits configured = limits();
  configured.max_prompt_tokens = 40;
  const RequestLimits l = derive_limits(configured, model);
  EXPECT_EQ(max_prompt_tokens(l), 32u);  // the pool is the least of the three
  EXPECT_EQ(l.max_prompt_bytes, 32u * 3u);
  const ApiError too_long = error_of(R"({"prompt":")" + std::string(33, 'a') + R"("})", l);
  EXPECT_EQ(too_long.code, "context_length_exceeded");
  EXPECT_NE(too_long.message.find("device KV pool"), std::string::npos) << too_long.message;
  // The last sampled token is never fed back: 30 + 3 tokens need KV for 32.
  const ApiError tail = error_of(R"({"prompt":")" + std::string(30, 'a') + R"(","max_tokens":4})", l);
  EXPECT_EQ(tail.code, "kv_pool_exceeded");
  EXPECT_EQ(tail.param, "max_tokens");
  EXPECT_NE(tail.message.find("needs KV for 33 tokens"), std::string::npos) << tail.message;
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parse(R"({"prompt":")" + std::string(30, 'a') + R"(","max_tokens":3})", l)));
  auto cut = parse(R"({"prompt":")" + std::string(30, 'a') + R"("})", l);  // the default 8, cut to the pool's 3
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(cut));
  EXPECT_EQ(std::get<CompletionRequest>(cut).max_tokens, 3u);
  // A prompt of max_prompt_tokens (the whole pool) without max_tokens gets one token: it was
  // refused for the default it did not send.
  auto whole = parse(R"({"prompt":")" + std::string(32, 'a') + R"("})", l);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(whole)) << std::get<ApiError>(whole).message;
  EXPECT_EQ(std::get<CompletionRequest>(whole).max_tokens, 1u);
  // Over the byte bound: refused before tokenizing.
  const ApiError bytes = error_of(R"({"prompt":")" + std::string(97, 'a') + R"("})", l);
  EXPECT_NE(bytes.message.find("not tokenized"), std::string::npos) << bytes.message;
  const json m = json::parse(models_json("tiny", model, l, 0))["data"][0]["kvtier"];
  EXPECT_EQ(m["max_prompt_tokens"], 32);
  EXPECT_EQ(m["max_kv_tokens"], 32);
}

TEST(ApiStatusTest, StatusMapsToHttp) {
  EXPECT_EQ(error_from_status(Status::Busy("q")).http_status, 429);
  EXPECT_EQ(error_from_status(Status::Unavailable("s")).http_status, 503);
  EXPECT_EQ(error_from_status(Status::InvalidArgument("a")).http_status, 400);
  EXPECT_EQ(error_from_status(Status::Internal("x")).http_status, 500);
}

TEST(ApiFormatTest, CompletionCarriesUsageAndKvtierExtension) {
  CompletionUsage u;
  u.prompt_tokens = 40;
  u.completion_tokens = 3;
  u.report.cached_tokens = 32;
  u.report.cached_tokens_by_tier[int(TierKind::kHost)] = 16;
  u.report.cached_tokens_by_tier[int(TierKind::kDisk)] = 16;
  u.ttft_s = 0.0125;
  const json j = json::parse(completion_json({"cmpl-1", 1700000000, "tiny"}, "abc", "length", u));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 40);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 43);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(j["usage"]["kvtier"]["cached_tokens_by_tier"]["host"], 16);
  EXPECT_EQ(j["usage"]["kvtier"]["cached_tokens_by_tier"]["disk"], 16);
  EXPECT_EQ(j["usage"]["kvtier"]["cached_tokens_by_tier"]["device"], 0);
  EXPECT_DOUBLE_EQ(j["usage"]["kvtier"]["ttft_ms"].get<double>(), 12.5);
}

TEST(ApiFormatTest, StreamChunks) {
  const CompletionMeta m{"cmpl-2", 1, "tiny"};
  json mid = json::parse(stream_chunk_json(m, "ab", std::nullopt, nullptr));
  EXPECT_EQ(mid["choices"][0]["text"], "ab");
  EXPECT_TRUE(mid["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(mid.contains("usage"));
  CompletionUsage u;
  u.prompt_tokens = 2;
  json last = json::parse(stream_chunk_json(m, "", "stop", &u));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["usage"]["prompt_tokens"], 2);
  json usage_only = json::parse(stream_chunk_json(m, "", std::nullopt, &u, false));
  EXPECT_TRUE(usage_only["choices"].empty());
  EXPECT_EQ(sse_event("{}"), "data: {}\n\n");
}

TEST(ApiFormatTest, InvalidUtf8IsReplacedNotThrown) {
  const json j = json::parse(completion_json({"c", 1, "m"}, "\xff\xfe", "stop", {}));
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
}

TEST(ApiParseTest, LogprobsEchoAndTokenIds) {
  auto r = parse(R"({"prompt":"abc","logprobs":5,"echo":true,"max_tokens":0,"return_token_ids":true})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  const auto& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.logprobs, 5);
  EXPECT_TRUE(c.echo);
  EXPECT_EQ(c.max_tokens, 0u);
  EXPECT_TRUE(c.return_token_ids);
  EXPECT_EQ(c.sampling.logprobs, 5);
  EXPECT_TRUE(c.sampling.prompt_logprobs);  // echo + logprobs: the prompt's own logprobs
  EXPECT_EQ(error_of(R"({"prompt":"a","max_tokens":0})").param, "max_tokens");  // 0 only with echo
  EXPECT_EQ(error_of(R"({"prompt":"a","logprobs":21})").param, "logprobs");
  EXPECT_EQ(error_of(R"({"prompt":"a","logprobs":-1})").param, "logprobs");
  EXPECT_EQ(error_of(R"({"prompt":"a","logprobs":true})").code, "invalid_type");
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parse(R"({"prompt":"a","logprobs":1,"stream":true,"echo":true})")));
  auto plain = parse(R"({"prompt":"a","logprobs":0})");
  EXPECT_FALSE(std::get<CompletionRequest>(plain).sampling.prompt_logprobs);
}

TEST(ApiParseTest, SpecialFalseTokenizesAsPlainText) {
  auto r = parse(R"({"prompt":"ab","special":false})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<CompletionRequest>(r).prompt.front(), 99);
  auto d = parse(R"({"prompt":"ab"})");
  EXPECT_NE(std::get<CompletionRequest>(d).prompt.front(), 99);
}

TEST(ApiJsonTest, LogprobsObjectWithEcho) {
  CompletionRequest req;
  req.prompt = {1, 2};
  req.echo = true;
  req.logprobs = 1;
  req.return_token_ids = true;
  CompletionTokens t;
  t.ids = {3};
  t.logprobs = {{3, -0.5f, {{3, -0.5f}}}};
  t.prompt_logprobs = {{2, -1.0f, {{4, -0.25f}}}};
  CompletionDetail d{req.logprobs, req.return_token_ids, req.prompt, &t, 0, [](TokenId id) { return std::string(1, char('a' + id)); }};
  EXPECT_EQ(d.text_bytes(), 3u);
  const json j = json::parse(completion_json({"cmpl-1", 0, "m"}, "bcd", "length", {}, &d));
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"b", "c", "d"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // the first prompt token has no context
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), -1.0);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][2].get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][1]["e"].get<double>(), -0.25);
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(j["choices"][0]["token_ids"], json({3}));
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"], json({1, 2}));
  // A stream chunk carries its own tokens, offsets continuing from where the last chunk ended.
  CompletionTokens next;
  next.ids = {4};
  next.logprobs = {{4, -2.0f, {}}};
  CompletionDetail later{1, true, {}, &next, 3, d.piece};
  const json c = json::parse(stream_chunk_json({"cmpl-1", 0, "m"}, "e", std::nullopt, nullptr, true, &later));
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"], json({"e"}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], json({3}));
  EXPECT_EQ(c["choices"][0]["token_ids"], json({4}));
  EXPECT_FALSE(c["choices"][0].contains("prompt_token_ids"));
  // return_tokens_as_token_ids: tokens and top_logprobs keys name ids; offsets still count the text.
  CompletionDetail ids = d;
  ids.tokens_as_ids = true;
  const json k = json::parse(completion_json({"cmpl-1", 0, "m"}, "bcd", "length", {}, &ids));
  EXPECT_EQ(k["choices"][0]["logprobs"]["tokens"], json({"token_id:1", "token_id:2", "token_id:3"}));
  EXPECT_DOUBLE_EQ(k["choices"][0]["logprobs"]["top_logprobs"][1]["token_id:4"].get<double>(), -0.25);
  EXPECT_EQ(k["choices"][0]["logprobs"]["text_offset"], json({0, 1, 2}));
  auto asked = parse(R"({"prompt":[1,2],"logprobs":1,"return_tokens_as_token_ids":true})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(asked));
  EXPECT_TRUE(std::get<CompletionRequest>(asked).tokens_as_ids);
  EXPECT_EQ(std::get<CompletionRequest>(asked).ignored_fields, 0u);
  auto extra = parse(R"({"prompt":[1],"best_of":1,"suffix":"","echo":false,"user":"u"})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(extra));
  EXPECT_EQ(std::get<CompletionRequest>(extra).ignored_fields, 1u);  // user
  // Fields asking for an answer kvtier cannot give are refused, naming the field; their neutral values pass.
  for (const char* body : {R"({"prompt":[1],"response_format":{"type":"json_object"}})",
                           R"({"prompt":[1],"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})",
                           R"({"prompt":[1],"guided_json":{"type":"object"}})", R"({"prompt":[1],"grammar":"root ::= x"})",
                           R"({"prompt":[1],"best_of":2})", R"({"prompt":[1],"suffix":"x"})",
                           R"({"prompt":[1],"functions":[{"name":"f"}]})"}) {
    const ApiError e = error_of(body);
    EXPECT_EQ(e.code, "unsupported") << body;
    EXPECT_NE(std::string(body).find("\"" + e.param + "\""), std::string::npos) << body << " named " << e.param;
  }
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(
      parse(R"({"prompt":[1],"response_format":{"type":"text"},"best_of":null,"functions":[],"function_call":"none"})")));
  // A request that ran out its time is not for a client to retry on its own.
  const ApiError late = error_from_status(Status::DeadlineExceeded("the request timed out"));
  EXPECT_EQ(late.http_status, 503);
  EXPECT_EQ(late.code, "timeout");
  EXPECT_FALSE(late.retry);
  EXPECT_TRUE(error_from_status(Status::Busy("full")).retry);
  EXPECT_EQ(error_of(R"({"prompt":[1],"return_tokens_as_token_ids":1})").param, "return_tokens_as_token_ids");
  // Without the extras the shape is OpenAI's plain one.
  const json plain = json::parse(completion_json({"cmpl-1", 0, "m"}, "x", "stop", {}));
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
}

}  // namespace
}  // namespace kvtier::server
