// Tool calls parsed out of generated text, per format; text that does not
// parse (including every cut-off prefix of a real call) stays content.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include "common/strings.h"
#include "engine/gguf.h"
#include "runtime/runtime.h"
#include "text/tokenizer.h"

#include <fstream>
#include <sstream>

namespace kvtier::server {
namespace {

// The functions the requests in these tests declare.
const std::vector<std::string> kTools = {"get_weather", "get_time", "f", "g"};

std::string read_path(const std::string& rel) {
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  return std::string(src ? src : KVTIER_SOURCE_DIR) + "/" + rel;
}

std::string read(const std::string& rel) {
  std::ifstream in(read_path(rel), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// In Mistral's vocabularies [TOOL_CALLS] is a control token (id 5 in v0.3's), which a reply
// decodes as nothing: no call was ever found. A reply whose calls are parsed shows its format's
// markers (GenerationRequest::shown_specials), and only those.
TEST(ToolCalls, AMarkerThatIsAControlTokenIsShownInTheReply) {
  auto v = engine::load_gguf_vocab(read_path("tests/data/vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  v->tokens.push_back("[TOOL_CALLS]");
  v->scores.push_back(0);
  v->types.push_back(int32_t(text::TokenType::kControl));
  auto tok = text::Tokenizer::create(*v);
  ASSERT_TRUE(tok.ok());
  const TextCodec codec = text_codec(*tok, *v);
  const TokenId marker = TokenId(v->tokens.size() - 1);
  const std::vector<TokenId> ids =
      codec.tokenize("Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]</s>",
                     {.add_bos = false, .parse_special = true});
  ASSERT_NE(std::find(ids.begin(), ids.end(), marker), ids.end());
  EXPECT_TRUE(parse_tool_calls(ToolParser::kMistral, codec.detokenize(ids), kTools).calls.empty()) << "what replies were";
  const std::vector<TokenId> shown{marker};
  const std::string reply = codec.detokenize_showing(ids, shown);
  EXPECT_EQ(reply.find("</s>"), std::string::npos) << "other control tokens still decode as nothing";
  const ParsedReply r = parse_tool_calls(ToolParser::kMistral, reply, kTools);
  ASSERT_EQ(r.calls.size(), 1u) << reply;
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(trim(r.content), "Sure.");
  EXPECT_EQ(tool_call_markers(ToolParser::kMistral), std::vector<std::string_view>{"[TOOL_CALLS]"});
}

TEST(ToolCalls, Hermes) {
  const auto r = parse_tool_calls(ToolParser::kHermes,
                                  "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n"
                                  "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Zürich\"}");
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.content, "Let me check.");
}

TEST(ToolCalls, Llama3Json) {
  auto r = parse_tool_calls(ToolParser::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"a\": \"x;y\"}}", kTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"a\":\"x;y\"}");
  EXPECT_TRUE(r.content.empty());
  r = parse_tool_calls(ToolParser::kLlama3Json,
                       "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 1}\"}", kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "g");
  EXPECT_EQ(r.calls[1].arguments, "{\"b\":1}");
  EXPECT_EQ(parse_tool_calls(ToolParser::kLlama3Json, "The answer is {x}.", kTools).calls.size(), 0u);
  EXPECT_EQ(parse_tool_calls(ToolParser::kLlama3Json, "{\"name\": \"f\", \"parameters\": {}}; ", kTools).calls.size(), 1u);
  // Cut off by max_tokens inside a string of many ';': content, found in one pass (trying each ';'
  // in turn re-parsed ever longer pieces: 12 s for 32,768 of them).
  std::string cut = "{\"name\": \"f\", \"parameters\": {\"code\": \"";
  for (int i = 0; i < 100000; ++i) cut += "x;";
  r = parse_tool_calls(ToolParser::kLlama3Json, cut, kTools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, cut);
}

TEST(ToolCalls, Mistral) {
  const auto r = parse_tool_calls(ToolParser::kMistral,
                                  "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"q\": 1}}, {\"name\": \"g\", \"arguments\": {}}]", kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, "{\"q\":1}");
  EXPECT_TRUE(r.content.empty());
}

TEST(ToolCalls, WhatDoesNotParseIsContent) {
  for (const std::string text : {"<tool_call>{not json}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
                                 "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "plain text <tool_call>"}) {
    const auto r = parse_tool_calls(ToolParser::kHermes, text, kTools);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
  EXPECT_TRUE(parse_tool_calls(ToolParser::kMistral, "[TOOL_CALLS][{\"name\": 3}]", kTools).calls.empty());
  EXPECT_TRUE(parse_tool_calls(ToolParser::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>", kTools).calls.empty());
  // A model's JSON nested past kMaxJsonDepth is content too (its arguments are copied recursively).
  const std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(100000, '[') +
                           std::string(100000, ']') + "}}</tool_call>";
  EXPECT_TRUE(parse_tool_calls(ToolParser::kHermes, deep, kTools).calls.empty());
}

// A reply is a call only of a function the request declared, and for llama3_json (where the whole
// reply is the call) only with its arguments: a JSON answer with a "name" was taken for a call of
// an undeclared function, its other fields dropped and content null (found through the OpenAI SDK).
TEST(ToolCalls, OnlyDeclaredFunctionsAreCalled) {
  const std::string answer = "{\"name\": \"Bob\", \"age\": 3}";
  for (const auto& tools : {kTools, std::vector<std::string>{"Bob"}}) {
    const ParsedReply r = parse_tool_calls(ToolParser::kLlama3Json, answer, tools);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, answer);
  }
  const std::string undeclared = "Sure. <tool_call>{\"name\": \"rm_rf\", \"arguments\": {\"x\": 1}}</tool_call>";
  EXPECT_TRUE(parse_tool_calls(ToolParser::kHermes, undeclared, kTools).calls.empty());
  EXPECT_EQ(parse_tool_calls(ToolParser::kHermes, undeclared, kTools).content, undeclared);
  EXPECT_EQ(parse_tool_calls(ToolParser::kHermes, undeclared, std::vector<std::string>{"rm_rf"}).calls.size(), 1u);
  EXPECT_TRUE(parse_tool_calls(ToolParser::kHermes, undeclared, {}).calls.empty()) << "no tools, no calls";
  // Inside its markers a call may leave out the arguments of a function that takes none.
  EXPECT_EQ(parse_tool_calls(ToolParser::kHermes, "<tool_call>{\"name\": \"f\"}</tool_call>", kTools).calls.size(), 1u);
  ToolCallStream stream(ToolParser::kLlama3Json, kTools);
  const std::string live = stream.push(answer);
  const ParsedReply end = stream.finish();
  EXPECT_TRUE(end.calls.empty());
  EXPECT_EQ(live + end.content, answer);
}

// A reply cut at every byte (max_tokens, a disconnect) is either a whole call or plain content.
TEST(ToolCalls, EveryPrefixIsSafe) {
  const std::pair<ToolParser, std::string> replies[] = {
      {ToolParser::kHermes, "ok <tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"é;}\"}}\n</tool_call>"},
      {ToolParser::kLlama3Json, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"s\": \"é;}\"}}"},
      {ToolParser::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"s\": \"é;}\"}}]"}};
  for (const auto& [parser, reply] : replies) {
    for (size_t n = 0; n <= reply.size(); ++n) {
      const std::string prefix = reply.substr(0, n);
      const ParsedReply r = parse_tool_calls(parser, prefix, kTools);
      if (r.calls.empty()) {
        EXPECT_EQ(r.content, prefix);
      } else {
        ASSERT_EQ(r.calls.size(), 1u) << prefix;
        EXPECT_EQ(r.calls[0].arguments, "{\"s\":\"é;}\"}");
      }
    }
    EXPECT_EQ(parse_tool_calls(parser, reply, kTools).calls.size(), 1u) << tool_parser_name(parser);
  }
}

// A reply streamed one byte at a time: no byte of a tool call is sent as content, plain text
// all is (whitespace with what follows it), the calls found at the end are the whole reply's, and
// the content streamed is the whole reply's content.
TEST(ToolCalls, StreamHoldsBackOnlyWhatMayBeACall) {
  struct Case {
    ToolParser parser;
    std::string reply, live, rest;
    size_t calls;
  };
  const Case cases[] = {
      {ToolParser::kHermes, "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone.",
       "Let me check.", "\n\nDone.", 1},
      {ToolParser::kHermes, "a <tool b <tool_cal", "a <tool b", " <tool_cal", 0},
      {ToolParser::kLlama3Json, "  {\"name\": \"f\", \"parameters\": {\"x\": 1}}", "", "", 1},
      {ToolParser::kLlama3Json, "{not a call}", "", "{not a call}", 0},
      {ToolParser::kLlama3Json, "Hello {x}", "Hello {x}", "", 0},
      {ToolParser::kMistral, "ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", "ok", "", 1},
      {ToolParser::kHermes, "\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "", "", 1},
      {ToolParser::kHermes, "Sure. <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> done", "Sure.", "  done", 1},
      {ToolParser::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>", "", 0}};
  for (const Case& c : cases) {
    ToolCallStream stream(c.parser, kTools);
    std::string live;
    for (char ch : c.reply) live += stream.push(std::string_view(&ch, 1));
    const ParsedReply end = stream.finish();
    EXPECT_EQ(live, c.live) << c.reply;
    EXPECT_EQ(end.content, c.rest) << c.reply;
    EXPECT_EQ(end.calls.size(), c.calls) << c.reply;
    EXPECT_EQ(live + end.content, parse_tool_calls(c.parser, c.reply, kTools).content) << "streamed and whole content differ";
    if (c.calls == 0) {
      EXPECT_EQ(live + end.content, c.reply);
    }
  }
}

TEST(ToolCalls, ParserChosenFromTheTemplate) {
  const std::string dir = "tests/data/chat-templates/";
  EXPECT_EQ(tool_parser_for_template(read(dir + "Qwen-Qwen2.5-7B-Instruct.jinja")), ToolParser::kHermes);
  EXPECT_EQ(tool_parser_for_template(read(dir + "Qwen-Qwen3-0.6B.jinja")), ToolParser::kHermes);
  EXPECT_EQ(tool_parser_for_template(read(dir + "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")), ToolParser::kHermes);
  EXPECT_EQ(tool_parser_for_template(read(dir + "meta-llama-Llama-3.1-8B-Instruct.jinja")), ToolParser::kLlama3Json);
  EXPECT_EQ(tool_parser_for_template(read(dir + "meta-llama-Llama-3.2-3B-Instruct.jinja")), ToolParser::kLlama3Json);
  EXPECT_EQ(tool_parser_for_template(read(dir + "mistralai-Mistral-Nemo-Instruct-2407.jinja")), ToolParser::kMistral);
  EXPECT_EQ(tool_parser_for_template(read(dir + "google-gemma-2-2b-it.jinja")), ToolParser::kNone);
  EXPECT_EQ(parse_tool_parser_name("llama3_json"), ToolParser::kLlama3Json);
  EXPECT_FALSE(parse_tool_parser_name("auto"));
}

}  // namespace
}  // namespace kvtier::server
