// /v1/chat/completions: request validation, response shapes, and ChatPrompts
// (template rendering, reuse of a reply's own token ids across turns).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/gguf.h"
#include "server/chat_api.h"
#include "server/chat_prompt.h"
#include "text/tokenizer.h"

namespace kvtier::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string source_path(const std::string& rel) {
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/" + rel;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RequestLimits limits() {
  RequestLimits l;
  l.vocab_size = 1000;
  l.max_context = 4096;
  l.max_tokens = 64;
  l.default_max_tokens = 8;
  return l;
}

// Renders as "role:content|" and spells each byte as a token.
ChatPromptBuilder simple_builder() {
  return [](const text::ChatInput& chat, std::string_view, std::string& rendered) -> Result<std::vector<TokenId>> {
    rendered.clear();
    for (const auto& m : chat.messages) rendered += m["role"].get<std::string>() + ":" + m["content"].get<std::string>() + "|";
    std::vector<TokenId> ids;
    for (unsigned char c : rendered) ids.push_back(TokenId(c));
    return ids;
  };
}

ApiError chat_error(const std::string& body) {
  auto r = parse_chat_request(body, limits(), simple_builder());
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

// Nesting past kMaxJsonDepth inside a message (the chat parser copies messages, one stack frame
// per level: 100,000 levels crashed the server) or inside a tool call's arguments string is a 400.
TEST(ChatApi, DeepNestingIsA400) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ApiError e = chat_error(R"({"messages":[{"role":"user","content":"hi","x":)" + deep + "}]}");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  json args = std::string(R"({"a":)") + deep + "}";
  e = chat_error(
      R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":)" +
      args.dump() + "}}]}]}");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_NE(e.param.find("arguments"), std::string::npos) << e.param;
}

TEST(ChatApi, ParsesMessagesAndGenerationFields) {
  auto r = parse_chat_request(
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
          {"role":"assistant","content":null,"tool_calls":[]}],
          "max_completion_tokens":5,"temperature":0.5,"logprobs":true,"top_logprobs":3,"stream":true})",
      limits(), simple_builder());
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const ChatRequest& c = std::get<ChatRequest>(r);
  EXPECT_EQ(c.rendered, "system:s|user:a\nb|assistant:|");  // text parts joined with a newline
  EXPECT_EQ(c.completion.prompt.size(), c.rendered.size());
  EXPECT_EQ(c.completion.max_tokens, 5u);
  EXPECT_EQ(c.completion.logprobs, 3);
  EXPECT_TRUE(c.completion.stream);
  EXPECT_FALSE(c.completion.sampling.prompt_logprobs);
  EXPECT_EQ(c.chat.messages[2].contains("tool_calls"), true);  // other fields reach the template
  EXPECT_TRUE(c.chat.tools.is_null());
  EXPECT_EQ(c.completion.ignored_fields, 0u);
  auto extra = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"user":"u1","repetition_penalty":1.1,"seed":3})",
                                  limits(), simple_builder());
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(extra));
  EXPECT_EQ(std::get<ChatRequest>(extra).completion.ignored_fields, 2u);  // user, repetition_penalty: accepted, not read
}

// A chat that does not send max_tokens generates to the end of the context, as OpenAI's does, at
// most --max-tokens (it got /v1/completions' default of 16, so a plain openai-client chat was cut
// off at 16 tokens, finish_reason "length"), and is never refused for a limit it did not send.
TEST(ChatApi, WithoutMaxTokensAChatMayUseTheRestOfTheContext) {
  auto plain = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}]})", limits(), simple_builder());
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(plain));
  EXPECT_EQ(std::get<ChatRequest>(plain).completion.max_tokens, 64u);  // limits().max_tokens, not the default 8
  RequestLimits l = limits();
  l.max_context = 40;
  const std::string body = R"({"messages":[{"role":"user","content":")" + std::string(30, 'a') + R"("}]})";
  auto near_end = parse_chat_request(body, l, simple_builder());  // "user:" + 30 + "|": 36 of the 40 positions
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(near_end)) << std::get<ApiError>(near_end).message;
  EXPECT_EQ(std::get<ChatRequest>(near_end).completion.max_tokens, 4u);
}

// Tools, tool calls and tool results as an agent sends them: arguments given as a JSON string
// reach the template as an object, key order kept.
TEST(ChatApi, ToolRequestsReachTheTemplate) {
  auto r = parse_chat_request(R"({"messages":[{"role":"user","content":"Weather?"},
      {"role":"assistant","content":"","tool_calls":[
        {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"c\"}"}},
        {"id":"call_2","type":"function","function":{"name":"get_time","arguments":{"tz":"CET"}}}]},
      {"role":"tool","tool_call_id":"call_1","content":"21"},{"role":"tool","tool_call_id":"call_2","content":"12:00"}],
      "tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object"}}},
               {"type":"function","function":{"name":"get_time"}}],
      "tool_choice":"auto","parallel_tool_calls":true,"chat_template_kwargs":{"enable_thinking":false}})",
                              limits(), simple_builder());
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const text::ChatInput& c = std::get<ChatRequest>(r).chat;
  const ojson& args = c.messages[1]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(args.dump(), R"({"city":"Paris","unit":"c"})");
  EXPECT_EQ(c.messages[1]["tool_calls"][1]["function"]["arguments"]["tz"], "CET");
  EXPECT_EQ(c.tools.size(), 2u);
  EXPECT_EQ(c.kwargs, ojson({{"enable_thinking", false}}));
  EXPECT_TRUE(std::holds_alternative<ChatRequest>(
      parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"})",
                         limits(), simple_builder())));
}

// The conversation is moved out of the parsed body, never copied: a 16 MiB body peaked at
// 912 MB when it was parsed twice and its messages copied, against 656 MB parsed once.
TEST(ChatApi, TheConversationIsTakenOutOfTheBodyNotCopied) {
  ojson doc = ojson::parse(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],
                              "chat_template_kwargs":{"k":1},"temperature":0})");
  std::vector<std::string> cacheable;
  auto in = read_chat_input(doc, cacheable);
  ASSERT_TRUE(std::holds_alternative<text::ChatInput>(in)) << std::get<ApiError>(in).message;
  EXPECT_EQ(std::get<text::ChatInput>(in).messages.size(), 1u);
  EXPECT_EQ(std::get<text::ChatInput>(in).tools.size(), 1u);
  EXPECT_TRUE(doc["messages"].is_null());
  EXPECT_TRUE(doc["tools"].is_null());
  EXPECT_TRUE(doc["chat_template_kwargs"].is_null());
  EXPECT_EQ(doc["temperature"], 0);  // the rest stays for the shared readers
}

TEST(ChatApi, TokensAsTokenIds) {
  auto r = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":1,
                                 "return_tokens_as_token_ids":true})", limits(), simple_builder());
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
  EXPECT_TRUE(std::get<ChatRequest>(r).completion.tokens_as_ids);
  CompletionTokens t;
  t.ids = {7};
  t.logprobs = {{7, -0.5f, {{7, -0.5f}, {9, -1.5f}}}};
  CompletionDetail d{1, false, {}, &t, 0, [](TokenId) { return std::string("ab"); }, true};
  const json j = json::parse(chat_completion_json({"chatcmpl-1", 0, "m"}, ParsedReply{"ab", {}}, "stop", {}, &d));
  const json& e = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(e["token"], "token_id:7");
  EXPECT_EQ(e["bytes"], json({97, 98}));  // the token's own bytes
  EXPECT_EQ(e["top_logprobs"][1]["token"], "token_id:9");
}

TEST(ChatApi, ToolCallsInTheResponse) {
  const ParsedReply reply = parse_tool_calls(
      ToolParser::kHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", std::vector<std::string>{"get_weather"});
  const json j = json::parse(chat_completion_json({"chatcmpl-42", 0, "m"}, reply, "stop", {}));
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_42_0");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  const json plain = json::parse(chat_completion_json({"chatcmpl-42", 0, "m"}, ParsedReply{"hi", {}}, "length", {}));
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "hi");
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(plain["choices"][0]["message"].contains("reasoning_content"));
  // --reasoning-parser think: the reasoning beside the content, whole and streamed.
  const json thought = json::parse(chat_completion_json({"chatcmpl-42", 0, "m"}, ParsedReply{"x = 1", {}, "x = 2 - 1"}, "stop", {}));
  EXPECT_EQ(thought["choices"][0]["message"]["reasoning_content"], "x = 2 - 1");
  EXPECT_EQ(thought["choices"][0]["message"]["content"], "x = 1");
  const json chunk = json::parse(chat_chunk_json({"chatcmpl-42", 0, "m"}, "", false, std::nullopt, nullptr, true, nullptr, "hmm"));
  EXPECT_EQ(chunk["choices"][0]["delta"]["reasoning_content"], "hmm");
  EXPECT_FALSE(chunk["choices"][0]["delta"].contains("content"));
}

TEST(ChatApi, ToolCallChunksSendTheNameThenTheArguments) {
  const auto chunks = chat_tool_call_chunks({"chatcmpl-7", 0, "m"}, {{"f", "{\"a\":1}"}, {"g", "{}"}});
  ASSERT_EQ(chunks.size(), 4u);
  const json first = json::parse(chunks[0])["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["id"], "call_7_0");
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "f");
  EXPECT_EQ(first["function"]["arguments"], "");
  const json args = json::parse(chunks[1])["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(args["index"], 0);
  EXPECT_FALSE(args.contains("id"));
  EXPECT_EQ(args["function"]["arguments"], "{\"a\":1}");
  EXPECT_EQ(json::parse(chunks[2])["choices"][0]["delta"]["tool_calls"][0]["id"], "call_7_1");
}

TEST(ChatApi, MalformedToolsAreClear400s) {
  const std::string user = R"({"role":"user","content":"x"})";
  const std::string tool_f = R"([{"type":"function","function":{"name":"f"}}])";
  auto err = [&](const std::string& rest) { return chat_error(R"({"messages":[)" + user + "]," + rest + "}"); };
  EXPECT_EQ(err(R"("tools":{"f":1})").param, "tools");
  EXPECT_EQ(err(R"("tools":[{"type":"function","function":{}}])").param, "tools[0].function.name");
  EXPECT_EQ(err(R"("tools":[{"type":"function","function":{"name":"f","parameters":[1]}}])").param, "tools[0].function.parameters");
  EXPECT_EQ(err(R"("tools":[{"type":"retrieval","function":{"name":"f"}}])").param, "tools[0].type");
  EXPECT_EQ(err(R"("tools":)" + tool_f + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})").code, "invalid_value");
  EXPECT_EQ(err(R"("tools":)" + tool_f + R"(,"tool_choice":{"type":"function","function":{"name":"f"}})").code, "unsupported");
  EXPECT_EQ(err(R"("tools":)" + tool_f + R"(,"tool_choice":"required")").code, "unsupported");
  EXPECT_EQ(err(R"("tool_choice":"sometimes")").param, "tool_choice");
  EXPECT_EQ(err(R"("tools":)" + tool_f + R"(,"tool_choice":{"type":1,"function":{"name":"f"}})").param, "tool_choice");
  EXPECT_EQ(err(R"("tools":)" + tool_f + R"(,"tool_choice":{"type":"function","function":{"name":7}})").param, "tool_choice");
  EXPECT_EQ(err(R"("parallel_tool_calls":"yes")").param, "parallel_tool_calls");
  EXPECT_EQ(err(R"("chat_template_kwargs":[1])").param, "chat_template_kwargs");
  EXPECT_EQ(err(R"("chat_template_kwargs":{"messages":[]})").param, "chat_template_kwargs");
  auto call = [&](const std::string& tool_call, const std::string& after = "") {
    return chat_error(R"({"messages":[)" + user + R"(,{"role":"assistant","content":null,"tool_calls":[)" + tool_call +
                      "]}" + after + "]}");
  };
  const ApiError not_json = call(R"({"id":"c1","type":"function","function":{"name":"f","arguments":"{oops"}})");
  EXPECT_EQ(not_json.param, "messages[1].tool_calls[0].function.arguments");
  EXPECT_NE(not_json.message.find("{oops"), std::string::npos);
  EXPECT_EQ(call(R"({"type":"function","function":{"name":"f","arguments":"{}"}})").param, "messages[1].tool_calls[0].id");
  EXPECT_EQ(call(R"({"id":"c1","function":{"arguments":"{}"}})").param, "messages[1].tool_calls[0].function.name");
  EXPECT_EQ(call(R"({"id":"c1","function":{"name":"f","arguments":"[1]"}})").param,
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(call(R"({"id":"c1","function":{"name":"f","arguments":"{}"}})", R"(,{"role":"tool","tool_call_id":"c9","content":"r"})").param,
            "messages[2].tool_call_id");
  EXPECT_EQ(call(R"({"id":"c1","function":{"name":"f","arguments":"{}"}})", R"(,{"role":"tool","content":"r"})").param,
            "messages[2].tool_call_id");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})").param, "messages[0].tool_calls");
}

TEST(ChatApi, MalformedMessagesAreClear400s) {
  EXPECT_EQ(chat_error(R"({"max_tokens":1})").code, "missing_field");
  EXPECT_EQ(chat_error(R"({"messages":[]})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages":[{"content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"wizard","content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user"}]})").code, "missing_field");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":7}]})").code, "invalid_type");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})").code, "unsupported");
  // Fields of the wrong JSON type where a string is compared (chat_fuzz found the first: it threw).
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":[{"type":true}]}]})").code, "unsupported");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":[{"type":["text"],"text":"x"}]}]})").code, "unsupported");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})").param, "top_logprobs");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})").param,
            "top_logprobs");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(chat_error("not json").code, "invalid_json");
  // A template error is the template's message.
  auto r = parse_chat_request(R"({"messages":[{"role":"user","content":"x"}]})", limits(),
                              [](const text::ChatInput&, std::string_view, std::string&) -> Result<std::vector<TokenId>> {
                                return Status::FailedPrecondition("Conversation roles must alternate");
                              });
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_NE(std::get<ApiError>(r).message.find("Conversation roles must alternate"), std::string::npos);
}

TEST(ChatApi, ResponseShapes) {
  CompletionTokens t;
  t.ids = {65};
  t.logprobs = {{65, -0.5f, {{65, -0.5f}, {66, -1.5f}}}};
  CompletionDetail d{2, false, {}, &t, 0, [](TokenId id) { return std::string(1, char(id)); }};
  const json whole = json::parse(chat_completion_json({"chatcmpl-1", 0, "m"}, ParsedReply{"A", {}}, "stop", {}, &d));
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "A");
  const json& lp = whole["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], "A");
  EXPECT_EQ(lp["bytes"], json({65}));
  EXPECT_EQ(lp["top_logprobs"][1]["token"], "B");
  const json first = json::parse(chat_chunk_json({"chatcmpl-1", 0, "m"}, "", true, std::nullopt, nullptr));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  const json last = json::parse(chat_chunk_json({"chatcmpl-1", 0, "m"}, "", false, "stop", nullptr));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const CompletionUsage u;
  const json usage = json::parse(chat_chunk_json({"chatcmpl-1", 0, "m"}, "", false, std::nullopt, &u, false));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_TRUE(usage.contains("usage"));
}

// Qwen2's vocabulary and Qwen2.5's template: the prompt is the template's
// rendering; a reply's own ids come back in the next turn even where
// re-tokenizing its text would merge differently.
class ChatPromptsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto vocab = engine::load_gguf_vocab(source_path("tests/data/vocab/ggml-vocab-qwen2.gguf"));
    ASSERT_TRUE(vocab.ok()) << vocab.status().to_string();
    auto tok = text::Tokenizer::create(*vocab);
    ASSERT_TRUE(tok.ok());
    codec_ = text_codec(*tok, *vocab);
    auto p = ChatPrompts::create(codec_, read(source_path("tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja")));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    prompts_ = std::make_unique<ChatPrompts>(std::move(p).value());
  }
  std::vector<TokenId> plain(std::string_view s, bool bos = false) { return codec_.tokenize(s, {.add_bos = bos}); }

  TextCodec codec_;
  std::unique_ptr<ChatPrompts> prompts_;
};

TEST_F(ChatPromptsTest, RendersAndReusesTheReplysOwnIds) {
  ojson messages = ojson::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi!"}}});
  std::string r1;
  auto p1 = prompts_->build({.messages = messages}, r1);
  ASSERT_TRUE(p1.ok());
  EXPECT_EQ(r1, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(*p1, plain(r1, true));
  // The model "generated" Hello world as Hel + lo + ' world': not how the text re-tokenizes.
  const std::string reply = "Hello world";
  std::vector<TokenId> reply_ids = plain("Hel");
  for (TokenId id : plain("lo world")) reply_ids.push_back(id);
  ASSERT_NE(reply_ids, plain(reply));
  prompts_->remember(r1, reply, *p1, reply_ids);
  std::vector<TokenId> all = *p1;
  all.insert(all.end(), reply_ids.begin(), reply_ids.end());

  messages.push_back({{"role", "assistant"}, {"content", reply}});
  messages.push_back({{"role", "user"}, {"content", "More?"}});
  std::string r2;
  auto p2 = prompts_->build({.messages = messages}, r2);
  ASSERT_TRUE(p2.ok());
  ASSERT_GE(p2->size(), all.size());
  EXPECT_TRUE(std::equal(all.begin(), all.end(), p2->begin())) << "turn 2 starts with turn 1's prompt and reply ids";
  EXPECT_EQ(codec_.detokenize_special(*p2), r2);
  EXPECT_EQ(prompts_->spliced(), 1u);

  // A reply that was never generated here is tokenized as text.
  messages[2]["content"] = "Hello there";
  std::string r3;
  auto p3 = prompts_->build({.messages = messages}, r3);
  EXPECT_EQ(*p3, plain(r3, true));
  EXPECT_EQ(prompts_->spliced(), 1u);

  // The memo is per namespace: another cache_salt's conversation gets no splice.
  messages[2]["content"] = reply;
  std::string r4;
  auto other_tenant = prompts_->build({.messages = messages}, r4, SIZE_MAX, "tenant-b");
  EXPECT_EQ(*other_tenant, plain(r4, true));
  EXPECT_EQ(prompts_->spliced(), 1u);
  // Switched off (--no-reply-splice): the same conversation is its text tokenized.
  prompts_->set_splicing(false);
  auto off = prompts_->build({.messages = messages}, r4);
  EXPECT_EQ(*off, plain(r4, true));
  EXPECT_EQ(prompts_->spliced(), 1u);
}

// A rendered conversation longer than the byte limit is refused before the
// tokenizer sees it, and the chat endpoint answers that with a clear 400.
TEST_F(ChatPromptsTest, RenderingTooLongIsRefusedBeforeTokenizing) {
  size_t tokenized = 0;
  TextCodec counting = codec_;
  counting.tokenize = [&, inner = codec_.tokenize](std::string_view s, const text::EncodeOptions& o) {
    ++tokenized;
    return inner(s, o);
  };
  auto p = ChatPrompts::create(counting, read(source_path("tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja")));
  ASSERT_TRUE(p.ok());
  const ojson messages = ojson::array({{{"role", "user"}, {"content", std::string(100000, 'a')}}});
  std::string rendered;
  auto ids = p->build({.messages = messages}, rendered, 4096);
  ASSERT_FALSE(ids.ok());
  EXPECT_TRUE(ids.status().is(StatusCode::kOutOfRange)) << ids.status().to_string();
  EXPECT_EQ(tokenized, 0u);
  EXPECT_TRUE(p->build({.messages = messages}, rendered).ok());  // no limit: tokenized
  EXPECT_EQ(tokenized, 1u);

  RequestLimits l = limits();
  l.max_prompt_bytes = 4096;
  ChatPromptBuilder build = [&](const text::ChatInput& c, std::string_view, std::string& r) { return p->build(c, r, l.max_prompt_bytes); };
  auto parsed = parse_chat_request(ojson{{"messages", messages}}.dump(), l, build);
  ASSERT_TRUE(std::holds_alternative<ApiError>(parsed));
  const ApiError& e = std::get<ApiError>(parsed);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("not tokenized"), std::string::npos) << e.message;
}

// Content parts marked cacheable become segments: each document is tokenized
// on its own, so it has the same tokens wherever the conversation puts it.
TEST_F(ChatPromptsTest, CacheablePartsAreSegmentsWithStableTokens) {
  const std::string doc_a = "Paris is the capital of France.", doc_b = "The Loire is France's longest river.";
  auto request = [&](const std::string& first, const std::string& second) {
    const ojson parts = ojson::array({{{"type", "text"}, {"text", "Documents:"}},
                                      {{"type", "text"}, {"text", first}, {"cacheable", true}},
                                      {{"type", "text"}, {"text", second}, {"cacheable", true}},
                                      {{"type", "text"}, {"text", "Which river is longest?"}}});
    const ojson body = {{"messages", ojson::array({{{"role", "user"}, {"content", parts}}})}};
    ChatPromptBuilder build = [&](const text::ChatInput& c, std::string_view, std::string& r) { return prompts_->build(c, r); };
    auto parsed = parse_chat_request(body.dump(), limits(), build);
    EXPECT_TRUE(std::holds_alternative<ChatRequest>(parsed));
    return std::get<ChatRequest>(parsed);
  };
  const ChatRequest ab = request(doc_a, doc_b), ba = request(doc_b, doc_a);
  ASSERT_EQ(ab.segment_texts, (std::vector<std::string>{doc_a, doc_b}));
  auto sa = prompts_->segmented(ab.rendered, ab.segment_texts, ab.completion.prompt);
  auto sb = prompts_->segmented(ba.rendered, ba.segment_texts, ba.completion.prompt);
  ASSERT_TRUE(sa && sb);
  ASSERT_EQ(sa->segments.size(), 2u);
  auto tokens_of = [](const ChatPrompts::Segmented& s, size_t i) {
    return std::vector<TokenId>(s.tokens.begin() + s.segments[i].begin, s.tokens.begin() + s.segments[i].end);
  };
  EXPECT_EQ(tokens_of(*sa, 0), plain(doc_a));
  EXPECT_EQ(tokens_of(*sa, 0), tokens_of(*sb, 1));
  EXPECT_EQ(tokens_of(*sa, 1), tokens_of(*sb, 0));
  EXPECT_EQ(codec_.detokenize_special(sa->tokens), ab.rendered);  // the model still reads the whole conversation
  EXPECT_FALSE(prompts_->segmented(ab.rendered, std::vector<std::string>{"not in the text"}, ab.completion.prompt));
  const auto bad = parse_chat_request(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"x","cacheable":"yes"}]}]})", limits(),
      [&](const text::ChatInput& c, std::string_view, std::string& r) { return prompts_->build(c, r); });
  EXPECT_TRUE(std::holds_alternative<ApiError>(bad));
}

// Tools reach a template that reads them (Qwen2.5 lists them in its system turn); a template
// that never mentions tools refuses them rather than dropping them.
TEST_F(ChatPromptsTest, ToolsRenderOrAreRefused) {
  const ojson tools = ojson::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather <now> & é",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  const ojson messages = ojson::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  std::string r;
  ASSERT_TRUE(prompts_->build({.messages = messages, .tools = tools}, r).ok());
  // transformers' tojson: keys in order, nothing escaped, non-ASCII kept.
  EXPECT_NE(r.find(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & é")"),
            std::string::npos) << r;
  auto plain_tmpl = ChatPrompts::create(codec_, "{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(plain_tmpl.ok());
  auto refused = plain_tmpl->build({.messages = messages, .tools = tools}, r);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().is(StatusCode::kUnimplemented));
  EXPECT_TRUE(plain_tmpl->build({.messages = messages}, r).ok());
  const ojson body = {{"messages", messages}, {"tools", tools}};
  auto parsed = parse_chat_request(body.dump(), limits(), [&](const text::ChatInput& c, std::string_view, std::string& out) {
    return plain_tmpl->build(c, out);
  });
  ASSERT_TRUE(std::holds_alternative<ApiError>(parsed));
  EXPECT_EQ(std::get<ApiError>(parsed).param, "tools");
  // chat_template_kwargs become template variables.
  auto kw = ChatPrompts::create(codec_, "{{ greeting }} {{ messages[0].content }}");
  ASSERT_TRUE(kw.ok());
  ASSERT_TRUE(kw->build({.messages = messages, .kwargs = {{"greeting", "Hello"}}}, r).ok());
  EXPECT_EQ(r, "Hello Weather in Paris?");
}

// Llama 2's SentencePiece vocabulary (a space prefixed to a text's start) and the trained
// fixture's [INST] template, which renders the system text inside the first user turn.
struct SpmChat {
  SpmChat() {
    auto vocab = engine::load_gguf_vocab(source_path("tests/data/vocab/ggml-vocab-llama-spm.gguf"));
    EXPECT_TRUE(vocab.ok()) << vocab.status().to_string();
    auto tok = text::Tokenizer::create(*vocab);
    EXPECT_TRUE(tok.ok());
    codec = text_codec(*tok, *vocab);
    limits.vocab_size = uint32_t(vocab->tokens.size());
    auto p = ChatPrompts::create(codec, read(source_path("tests/data/models/fixture-trained.jinja")));
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    prompts = std::make_unique<ChatPrompts>(std::move(p).value());
  }
  std::variant<ChatRequest, ApiError> parse(const std::string& body) const {
    return parse_chat_request(body, limits, [&](const text::ChatInput& c, std::string_view salt, std::string& out) {
      return prompts->build(c, out, SIZE_MAX, salt);
    });
  }
  TextCodec codec;
  RequestLimits limits = server::limits();
  std::unique_ptr<ChatPrompts> prompts;
};

// A mark on the system message still holds the prompt through the system text, and none of
// the user's, though the system message alone renders nothing of it with such a template.
TEST(ChatApi, ASystemMarkHoldsTheSystemTextWhereTheTemplateRendersItInTheFirstTurn) {
  const SpmChat spm;
  auto r = spm.parse(R"({"messages":[{"role":"system","content":"You answer in one line.","cache_control":{"type":"ephemeral"}},
                      {"role":"user","content":"  Where is the tokenizer defined?"}]})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const CompletionRequest& c = std::get<ChatRequest>(r).completion;
  ASSERT_EQ(c.retain.size(), 1u);
  ASSERT_LE(c.retain[0].tokens, c.prompt.size());
  const std::string held = spm.codec.detokenize_special(std::span(c.prompt).first(c.retain[0].tokens));
  EXPECT_NE(held.find("You answer in one line.\n<</SYS>>"), std::string::npos) << held;
  EXPECT_EQ(held.find("Where"), std::string::npos) << held;
}

// With a SentencePiece vocabulary a cacheable part reads as the rendered text: each piece of the
// segmented prompt took a space prefix of its own ("[INST]  hello world  [/INST]").
TEST(ChatApi, SegmentedPromptsReadAsTheRenderedText) {
  const SpmChat spm;
  auto r = spm.parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hello world","cacheable":true}]}]})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const ChatRequest& chat = std::get<ChatRequest>(r);
  auto seg = spm.prompts->segmented(chat.rendered, chat.segment_texts, chat.completion.prompt);
  ASSERT_TRUE(seg);
  EXPECT_EQ(spm.codec.detokenize_special(seg->tokens), spm.codec.detokenize_special(chat.completion.prompt));
  EXPECT_LE(seg->tokens.size(), chat.completion.prompt.size() + 1);
}

// A cacheable text found inside the template's markup split a control token: "s>" matched inside
// the "<s>" that renders BOS, which then reached the model as plain characters (the request's
// prompt and its logprobs changed). The plain tokens stand then.
TEST(ChatApi, ACacheableTextFoundInsideAControlTokensTextLeavesThePlainTokens) {
  const SpmChat spm;
  auto r = spm.parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"s>","cacheable":true}]}]})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const ChatRequest& chat = std::get<ChatRequest>(r);
  ASSERT_EQ(chat.rendered.find("s>"), 1u) << chat.rendered;  // inside "<s>"
  EXPECT_FALSE(spm.prompts->segmented(chat.rendered, chat.segment_texts, chat.completion.prompt));
  // Found where the message put it, the same text is a segment.
  auto later = spm.parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"Read: "},
                          {"type":"text","text":"[INST] is not here","cacheable":true}]}]})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(later));
  const ChatRequest& ok = std::get<ChatRequest>(later);
  EXPECT_TRUE(spm.prompts->segmented(ok.rendered, ok.segment_texts, ok.completion.prompt)) << ok.rendered;
}

// The reply's own ids are spliced into the next turn's prompt with Llama 2's layout too: the text
// after the reply was tokenized as a new text, took a space, and the splice was refused each time.
TEST(ChatApi, ARepliesIdsAreSplicedWithASentencePieceVocabulary) {
  SpmChat spm;
  const std::string turn1 = R"({"role":"user","content":"Tell me about files."})";
  auto first = spm.parse(R"({"messages":[)" + turn1 + "]}");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(first));
  const ChatRequest& c1 = std::get<ChatRequest>(first);
  const std::string reply = " Files hold bytes.";
  std::vector<TokenId> reply_ids;  // one character a token, as no tokenizer would spell it: the model's own ids
  for (char ch : reply) {
    const auto id = spm.codec.tokenize(std::string(1, ch), {.follows = c1.completion.prompt.back()});
    reply_ids.insert(reply_ids.end(), id.begin(), id.end());
  }
  spm.prompts->remember(c1.rendered, reply, c1.completion.prompt, reply_ids, "");
  auto second = spm.parse(R"({"messages":[)" + turn1 + R"(,{"role":"assistant","content":")" + reply +
                          R"("},{"role":"user","content":"again"}]})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(second)) << std::get<ApiError>(second).message;
  const auto& prompt = std::get<ChatRequest>(second).completion.prompt;
  EXPECT_EQ(spm.prompts->spliced(), 1u);
  ASSERT_GE(prompt.size(), c1.completion.prompt.size() + reply_ids.size());
  EXPECT_TRUE(std::equal(reply_ids.begin(), reply_ids.end(), prompt.begin() + ptrdiff_t(c1.completion.prompt.size())));
}

TEST_F(ChatPromptsTest, NoTemplateIsAClearError) {
  auto none = ChatPrompts::create(codec_, "");
  ASSERT_TRUE(none.ok());
  std::string r;
  auto ids = none->build({.messages = ojson::array({{{"role", "user"}, {"content", "x"}}})}, r);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("--chat-template"), std::string::npos);
  EXPECT_FALSE(ChatPrompts::create(codec_, "{% for %}").ok());
}

}  // namespace
}  // namespace kvtier::server

namespace kvtier::server {
namespace {

// cache_control marks the prompt through its message; "kvtier": {"retain_s"} the whole sequence.
TEST(ChatApi, RetentionHintsMarkTheirPrefix) {
  auto r = parse_chat_request(
      R"({"messages":[{"role":"system","content":"sys","cache_control":{"type":"ephemeral"}},
                      {"role":"user","content":[{"type":"text","text":"doc","cache_control":{"type":"ephemeral","ttl":"1h"}}]},
                      {"role":"user","content":"q"}],
          "kvtier":{"retain_s":30,"session":"s-1"}})",
      limits(), simple_builder());
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const CompletionRequest& c = std::get<ChatRequest>(r).completion;
  ASSERT_EQ(c.retain.size(), 3u);
  EXPECT_EQ(c.retain[0].tokens, UINT32_MAX);  // retain_s: everything committed
  EXPECT_EQ(c.retain[0].seconds, 30u);
  // Through the marked message and what any next message of that role begins with.
  EXPECT_EQ(c.retain[1].tokens, std::string("system:sys|user:").size());
  EXPECT_EQ(c.retain[1].seconds, 300u);  // the default ttl, 5m
  EXPECT_EQ(c.retain[2].tokens, std::string("system:sys|user:doc|user:").size());
  EXPECT_EQ(c.retain[2].seconds, 3600u);
  EXPECT_EQ(c.session, "s-1");
  EXPECT_EQ(c.ignored_fields, 0u);
}

TEST(ChatApi, BadRetentionHintsAre400s) {
  const std::string m = R"({"role":"user","content":"x"})";
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","cache_control":{"type":"ephemeral","ttl":"2d"}}]})").param,
            "messages[0].cache_control.ttl");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","cache_control":"yes"}]})").param,
            "messages[0].cache_control");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","cache_control":{"type":5}}]})").param,
            "messages[0].cache_control");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":"x","cache_control":{"type":"ephemeral","max":1}}]})").param,
            "messages[0].cache_control.max");
  std::string five = R"({"messages":[)";
  for (int i = 0; i < 5; ++i) five += std::string(i ? "," : "") + R"({"role":"user","content":"x","cache_control":{"type":"ephemeral"}})";
  EXPECT_EQ(chat_error(five + "]}").param, "messages[4].cache_control");
  EXPECT_EQ(chat_error(R"({"messages":[)" + m + R"(],"kvtier":{"retain_s":86401}})").param, "kvtier.retain_s");
  EXPECT_EQ(chat_error(R"({"messages":[)" + m + R"(],"kvtier":{"retain_s":1.5}})").param, "kvtier.retain_s");
  EXPECT_EQ(chat_error(R"({"messages":[)" + m + R"(],"kvtier":{"session":["a"]}})").param, "kvtier.session");
  EXPECT_EQ(chat_error(R"({"messages":[)" + m + R"(],"kvtier":{"pin":true}})").param, "kvtier.pin");
}

}  // namespace
}  // namespace kvtier::server
