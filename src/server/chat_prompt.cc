#include "server/chat_prompt.h"

#include <xxhash.h>

#include <memory>
#include <utility>

#include "common/strings.h"

namespace kvtier {
namespace {

// The memo's key: the text, seeded by the namespace's salt.
uint64_t text_hash(std::string_view text, std::string_view salt) {
  return XXH3_64bits_withSeed(text.data(), text.size(), XXH3_64bits(salt.data(), salt.size()));
}

// The token a piece of text tokenized after `ids` follows.
std::optional<TokenId> last(std::span<const TokenId> ids) {
  return ids.empty() ? std::nullopt : std::optional(ids.back());
}

}  // namespace

Result<ChatPrompts> ChatPrompts::create(const TextCodec& codec, const std::string& template_source) {
  if (template_source.empty())
    return unavailable(codec, "this model has no chat template (tokenizer.chat_template); start the server with "
                              "--chat-template FILE");
  auto tmpl = text::ChatTemplate::parse(template_source);
  if (!tmpl.ok()) return Status::InvalidArgument("chat template: " + tmpl.status().message());
  return ChatPrompts(&codec, std::move(tmpl).value(), {});
}

ChatPrompts ChatPrompts::unavailable(const TextCodec& codec, std::string reason) {
  return ChatPrompts(&codec, std::nullopt, std::move(reason));
}

Result<std::vector<TokenId>> ChatPrompts::build(const text::ChatInput& chat, std::string& rendered,
                                                size_t max_text_bytes, std::string_view cache_salt) const {
  if (!tmpl_) return Status::InvalidArgument(unavailable_);
  KVTIER_ASSIGN_OR_RETURN(rendered, tmpl_->render_chat(chat, codec_->bos_token, codec_->eos_token));
  if (rendered.size() > max_text_bytes)
    return Status::OutOfRange("the rendered conversation has " + std::to_string(rendered.size()) +
                              " bytes, more than the " + std::to_string(max_text_bytes) + " accepted");
  std::vector<TokenId> plain = codec_->tokenize(rendered, {.add_bos = true, .parse_special = true});
  auto spliced = splicing_ ? splice(chat.messages, rendered, cache_salt) : std::nullopt;
  if (!spliced || *spliced == plain || !same_text(*spliced, plain)) return plain;
  std::lock_guard lk(memo_->mu);
  ++memo_->spliced;
  return *std::move(spliced);
}

// Equal texts with control tokens as their text and without them: a control token and its text
// spelled as plain characters (a "<s>" the tokenizer did not see whole) read alike in the first.
bool ChatPrompts::same_text(std::span<const TokenId> a, std::span<const TokenId> b) const {
  return codec_->detokenize_special(a) == codec_->detokenize_special(b) && codec_->detokenize(a) == codec_->detokenize(b);
}

std::optional<ChatPrompts::Segmented> ChatPrompts::segmented(const std::string& rendered,
                                                             std::span<const std::string> segment_texts,
                                                             std::span<const TokenId> plain) const {
  Segmented out;
  size_t from = 0;
  auto append = [&](std::string_view piece) {
    const auto ids = codec_->tokenize(piece, {.add_bos = out.tokens.empty(), .parse_special = true, .follows = last(out.tokens)});
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
  };
  for (const std::string& text : segment_texts) {
    const size_t at = find_text(rendered, text, from);
    if (at == std::string::npos) return std::nullopt;
    append(std::string_view(rendered).substr(from, at - from));
    const uint32_t begin = uint32_t(out.tokens.size());
    append(text);
    out.segments.push_back({begin, uint32_t(out.tokens.size())});
    from = at + text.size();
  }
  append(std::string_view(rendered).substr(from));
  // A text found inside the template's markup (its special tokens' text) splits a control token.
  if (!same_text(out.tokens, plain)) return std::nullopt;
  return out;
}

// The remembered ids of the longest rendering prefix that ends an assistant message, then the rest tokenized.
// One pass: the prefixes are hashed as one stream (a digest at each assistant message's end), and the
// memo is asked under its lock once (hashing each prefix anew was quadratic in the messages, under the
// lock every chat request shares: 100,000 one-letter replies took 3.8 s).
std::optional<std::vector<TokenId>> ChatPrompts::splice(const nlohmann::ordered_json& messages,
                                                        const std::string& rendered, std::string_view cache_salt) const {
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state || XXH3_64bits_reset_withSeed(state.get(), XXH3_64bits(cache_salt.data(), cache_salt.size())) != XXH_OK)
    return std::nullopt;
  std::vector<std::pair<uint64_t, size_t>> ends;  // (text_hash of the prefix, its end), in order
  // A reply the template renders otherwise (trimmed) is not found, and each miss scans the rest of
  // the rendering: after a few, the search stops (a conversation of such replies was quadratic).
  constexpr int kMaxMisses = 8;
  size_t from = 0;
  int misses = 0;
  for (const auto& m : messages) {
    if (m["role"] != "assistant" || !m["content"].is_string()) continue;
    const std::string& content = m["content"].get_ref<const std::string&>();
    if (content.empty()) continue;
    const size_t at = find_text(rendered, content, from);  // linear: a client's reply is the needle
    if (at == std::string::npos && ++misses == kMaxMisses) break;
    if (at == std::string::npos) continue;
    (void)XXH3_64bits_update(state.get(), rendered.data() + from, at + content.size() - from);
    from = at + content.size();
    ends.emplace_back(XXH3_64bits_digest(state.get()), from);
  }
  std::optional<std::vector<TokenId>> best;
  size_t best_end = 0;
  {
    std::lock_guard lk(memo_->mu);
    for (auto e = ends.rbegin(); e != ends.rend() && !best; ++e)
      if (auto it = memo_->ids.find(e->first); it != memo_->ids.end()) best = it->second, best_end = e->second;
  }
  if (!best) return std::nullopt;
  const auto rest = codec_->tokenize(std::string_view(rendered).substr(best_end),
                                     {.add_bos = false, .parse_special = true, .follows = last(*best)});
  best->insert(best->end(), rest.begin(), rest.end());
  return best;
}

void ChatPrompts::remember(const std::string& rendered, const std::string& reply_text, std::span<const TokenId> prompt,
                           std::span<const TokenId> reply, std::string_view cache_salt) {
  if (!splicing_ || prompt.size() + reply.size() > kMaxTokens) return;
  std::vector<TokenId> ids(prompt.begin(), prompt.end());
  ids.insert(ids.end(), reply.begin(), reply.end());
  const uint64_t key = text_hash(rendered + reply_text, cache_salt);
  std::lock_guard lk(memo_->mu);
  Memo& m = *memo_;
  if (auto it = m.ids.find(key); it != m.ids.end()) {  // already queued: replace in place
    m.tokens = m.tokens - it->second.size() + ids.size();
    it->second = std::move(ids);
    return;
  }
  while (!m.order.empty() && m.tokens + ids.size() > kMaxTokens) {
    if (auto it = m.ids.find(m.order.front()); it != m.ids.end()) {
      m.tokens -= it->second.size();
      m.ids.erase(it);
    }
    m.order.pop_front();
  }
  m.tokens += ids.size();
  m.order.push_back(key);
  m.ids.emplace(key, std::move(ids));
}

uint64_t ChatPrompts::spliced() const {
  std::lock_guard lk(memo_->mu);
  return memo_->spliced;
}

}  // namespace kvtier
