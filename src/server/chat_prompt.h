// ChatPrompts: turns a chat's messages into prompt tokens (for the server's
// /v1/chat/completions and the demo), and keeps multi-turn chats on the
// prefix cache.
//
// build() renders the chat template (the --chat-template file, or the
// model's tokenizer.chat_template) with the chat's variables
// (text::ChatInput: messages, tools, chat_template_kwargs) and the model's
// bos_token/eos_token, then tokenizes the text.
//
// Re-tokenizing a conversation does not always give back the tokens the model
// generated for an earlier reply (BPE may merge a reply's text differently),
// and every token after the first difference misses the cache. So finished
// replies are remembered: remember() stores the ids of "rendered prompt +
// reply text" under a hash of that text and the request's cache_salt (a
// reply is spliced only into its own namespace's conversations). build() looks, at the end of each
// assistant message in the new rendering, for a remembered text that is
// exactly the rendering up to there; the longest one found supplies its ids
// (the model's own tokens for that text), and only the rest is tokenized.
// The splice is used only if it decodes, special tokens included, to exactly
// what the plain tokenization decodes to: the model always reads the
// conversation's text. Bounded (kMaxTokens ids in all, oldest dropped first).
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/runtime.h"
#include "text/chat_template.h"

namespace kvtier {

class ChatPrompts {
 public:
  static constexpr size_t kMaxTokens = size_t(1) << 22;  // remembered ids, all entries together

  // `template_source` empty: chat requests fail with a message saying how to give one.
  static Result<ChatPrompts> create(const TextCodec& codec, const std::string& template_source);
  // Chat requests fail with `reason` (e.g. the model's template did not parse).
  static ChatPrompts unavailable(const TextCodec& codec, std::string reason);

  bool has_template() const { return tmpl_.has_value(); }
  // The prompt tokens (BOS as the vocabulary asks) and, in `rendered`, its text.
  // OutOfRange, without tokenizing, when the text is longer than `max_text_bytes`.
  Result<std::vector<TokenId>> build(const text::ChatInput& chat, std::string& rendered,
                                     size_t max_text_bytes = SIZE_MAX, std::string_view cache_salt = {}) const;
  // A finished reply: `rendered` (its prompt's text, whose tokens are `prompt`) then `reply_text` (`reply`).
  void remember(const std::string& rendered, const std::string& reply_text, std::span<const TokenId> prompt,
                std::span<const TokenId> reply, std::string_view cache_salt = {});
  // Off: replies are not remembered, and every prompt is its rendering tokenized (the server's --no-reply-splice).
  void set_splicing(bool on) { splicing_ = on; }

  // The rendered text tokenized in pieces so that each of `segment_texts`,
  // found in order in `rendered`, is tokenized on its own (BOS only before
  // the first piece) and reported as a reusable segment; nullopt when one is
  // not found, or the pieces do not read as `plain` (the whole rendering's
  // tokens) does: a text found inside a control token's text splits it (then
  // the plain tokens stand). A document thus gives the same tokens wherever
  // it sits (the price: BPE does not merge across its edges).
  struct Segmented {
    std::vector<TokenId> tokens;
    std::vector<PromptSegment> segments;
  };
  std::optional<Segmented> segmented(const std::string& rendered, std::span<const std::string> segment_texts,
                                     std::span<const TokenId> plain) const;

  // Statistics for tests and metrics: builds that reused remembered ids.
  uint64_t spliced() const;

 private:
  struct Memo {
    std::mutex mu;
    std::unordered_map<uint64_t, std::vector<TokenId>> ids;  // by XXH3-64 of the text
    std::deque<uint64_t> order;                              // oldest first
    size_t tokens = 0;
    uint64_t spliced = 0;
  };

  ChatPrompts(const TextCodec* codec, std::optional<text::ChatTemplate> tmpl, std::string unavailable)
      : codec_(codec), tmpl_(std::move(tmpl)), unavailable_(std::move(unavailable)), memo_(std::make_unique<Memo>()) {}
  // Both read as the same text, with and without their control tokens' text.
  bool same_text(std::span<const TokenId> a, std::span<const TokenId> b) const;
  std::optional<std::vector<TokenId>> splice(const nlohmann::ordered_json& messages, const std::string& rendered,
                                             std::string_view cache_salt) const;

  const TextCodec* codec_;
  std::optional<text::ChatTemplate> tmpl_;
  std::string unavailable_;  // why build() fails when there is no template
  std::unique_ptr<Memo> memo_;
  bool splicing_ = true;
};

}  // namespace kvtier
