#include "text/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>

#include "text/bpe.h"
#include "text/spm.h"

namespace kvtier::text {
namespace {

// Tokens llama.cpp also ends generation on, by their text, when a file has no EOT key.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",  "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>",      "_<EOT>",     "<|end_of_text|>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};

struct Special {
  std::string_view text;
  TokenId id;
  bool needs_parse_special;  // control/unknown: only with parse_special; user-defined: always
  int32_t prefix = -1;       // in its sorted list: the longest special that is a proper prefix of it (-1: none)
};

bool is_type(const Vocab& v, size_t id, TokenType t) { return v.types[id] == int32_t(t); }

void unescape_spaces(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "\xE2\x96\x81") == 0) out += ' ', i += 2;
    else out += s[i];
  }
  s = std::move(out);
}

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  TokenIndex index{vocab.tokens};
  std::optional<SpmModel> spm;
  std::optional<BpeModel> bpe;
  // Special tokens sorted by text (of equal texts the lowest id): all of them, and the user-defined
  // ones, which match even without parse_special; and the bytes any of them starts with.
  std::vector<Special> all_specials, user_specials;
  std::array<bool, 256> starts_special{};
  std::vector<std::string> pieces;
  std::vector<TokenId> eog;

  explicit Impl(const Vocab& v) : vocab(v) {}

  std::string piece_of(size_t id) const {
    const std::string& text = vocab.tokens[id];
    if (is_type(vocab, id, TokenType::kControl) || is_type(vocab, id, TokenType::kUnused)) return {};
    if (vocab.model == "llama") {
      if (is_type(vocab, id, TokenType::kByte)) {
        unsigned b = 0;
        char tail = 0;
        return std::sscanf(text.c_str(), "<0x%2X%c", &b, &tail) == 2 && tail == '>' ? std::string(1, char(b)) : text;
      }
      std::string s = text;
      unescape_spaces(s);
      return s;
    }
    std::string bytes;
    if (is_type(vocab, id, TokenType::kNormal) && gpt2_decode_text(text, bytes)) return bytes;
    return text;  // user-defined tokens (and anything outside the byte mapping) are their text
  }

  void build_specials() {
    for (size_t id = 0; id < vocab.tokens.size(); ++id) {
      const bool user = is_type(vocab, id, TokenType::kUserDefined);
      if (!user && !is_type(vocab, id, TokenType::kControl) && !is_type(vocab, id, TokenType::kUnknown)) continue;
      const std::string& text = vocab.tokens[id];
      if (text.empty()) continue;
      all_specials.push_back({text, TokenId(id), !user});
      if (user) user_specials.push_back(all_specials.back());
      starts_special[uint8_t(text[0])] = true;
    }
    for (auto* sorted : {&all_specials, &user_specials}) {  // ids ascend: stable sorting keeps the lowest first
      std::stable_sort(sorted->begin(), sorted->end(), [](const Special& a, const Special& b) { return a.text < b.text; });
      sorted->erase(std::unique(sorted->begin(), sorted->end(), [](const Special& a, const Special& b) { return a.text == b.text; }),
                    sorted->end());
      link_prefixes(*sorted);
    }
  }

  // Sorted, the specials that start with s follow s, together: a stack of the open prefixes gives
  // each its longest special prefix.
  static void link_prefixes(std::vector<Special>& sorted) {
    std::vector<int32_t> open;
    for (size_t i = 0; i < sorted.size(); ++i) {
      while (!open.empty() && !sorted[i].text.starts_with(sorted[size_t(open.back())].text)) open.pop_back();
      sorted[i].prefix = open.empty() ? -1 : open.back();
      open.push_back(int32_t(i));
    }
  }

  // The longest special of `sorted` that `text` starts with, or null. Every special that starts
  // `text` sorts between it and `text`, so it starts x, the greatest special not past `text`, too:
  // the answer is x or the first of x's special prefixes (Special::prefix) no longer than x's common
  // prefix with `text`. One binary search a position. (A scan of every special with the same first
  // byte cost 37 s for 100 KB with 10,000 long user tokens; a binary search per shorter probe, 30 s
  // for 100 KB with a chain of 1,000 nested ones.)
  static const Special* longest_prefix(const std::vector<Special>& sorted, std::string_view text) {
    auto it = std::upper_bound(sorted.begin(), sorted.end(), text,
                               [](std::string_view p, const Special& s) { return p < s.text; });
    if (it == sorted.begin()) return nullptr;
    int32_t i = int32_t(std::prev(it) - sorted.begin());
    const std::string_view x = sorted[size_t(i)].text;
    const size_t common = size_t(std::mismatch(x.begin(), x.end(), text.begin(), text.end()).first - x.begin());
    while (i >= 0 && sorted[size_t(i)].text.size() > common) i = sorted[size_t(i)].prefix;
    return i < 0 ? nullptr : &sorted[size_t(i)];
  }

  void build_eog() {
    for (TokenId id : {vocab.eos, vocab.eot, vocab.eom})
      if (id != kNoToken) eog.push_back(id);
    for (std::string_view text : kEndOfTurnTexts)
      if (TokenId id = index.find(text); id != kNoToken) eog.push_back(id);
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  }

  // Whether the encoder treats `id` as special (what follows it starts afresh).
  bool is_special(TokenId id) const {
    const size_t i = size_t(id);
    return id >= 0 && i < vocab.tokens.size() &&
           (is_type(vocab, i, TokenType::kControl) || is_type(vocab, i, TokenType::kUnknown) ||
            is_type(vocab, i, TokenType::kUserDefined));
  }

  const Special* special_at(std::string_view text, size_t at, bool parse_special) const {
    if (!starts_special[uint8_t(text[at])]) return nullptr;
    return longest_prefix(parse_special ? all_specials : user_specials, text.substr(at));
  }

  void encode_raw(std::string_view raw, bool after_special, std::vector<TokenId>& out) const {
    if (bpe) return bpe->encode(raw, out);
    std::string text;
    text.reserve(raw.size() * 3 / 2 + 3);
    if (vocab.add_space_prefix && after_special) text += "\xE2\x96\x81";
    for (char c : raw) {
      if (c == ' ') text += "\xE2\x96\x81";
      else text += c;
    }
    spm->encode(text, out);
  }
};

Result<Tokenizer> Tokenizer::create(const Vocab& vocab) {
  KVTIER_RETURN_IF_ERROR(vocab.validate(uint32_t(vocab.tokens.size())));
  auto impl = std::make_shared<Impl>(vocab);
  if (vocab.model == "llama") {
    KVTIER_ASSIGN_OR_RETURN(SpmModel spm, SpmModel::create(impl->vocab, impl->index));
    impl->spm.emplace(std::move(spm));
  } else {
    KVTIER_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::create(impl->vocab, impl->index));
    impl->bpe.emplace(std::move(bpe));
  }
  impl->build_specials();
  impl->build_eog();
  impl->pieces.resize(vocab.tokens.size());
  for (size_t id = 0; id < vocab.tokens.size(); ++id) impl->pieces[id] = impl->piece_of(id);
  return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos && m.vocab.add_bos) out.push_back(m.vocab.bos);
  // SentencePiece prefixes a space to text that starts the prompt or follows a special token.
  bool after_special = !options.follows || m.is_special(*options.follows);
  size_t raw_begin = 0;
  for (size_t at = 0; at < text.size();) {
    const Special* s = m.special_at(text, at, options.parse_special);
    if (!s) {
      ++at;
      continue;
    }
    if (at > raw_begin) m.encode_raw(text.substr(raw_begin, at - raw_begin), after_special, out), after_special = false;
    if (!(s->id == m.vocab.bos && out.size() == 1 && out[0] == m.vocab.bos && options.add_bos)) out.push_back(s->id);
    after_special = true;
    at += s->text.size();
    raw_begin = at;
  }
  if (raw_begin < text.size()) m.encode_raw(text.substr(raw_begin), after_special, out);
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool special) const {
  const Vocab& v = impl_->vocab;
  std::string out;
  for (TokenId id : ids) {
    if (special && id >= 0 && size_t(id) < v.tokens.size() && is_type(v, size_t(id), TokenType::kControl)) out += v.tokens[size_t(id)];
    else out += piece(id);
  }
  return out;
}

const std::string& Tokenizer::piece(TokenId id) const {
  static const std::string kEmpty;
  return id >= 0 && size_t(id) < impl_->pieces.size() ? impl_->pieces[size_t(id)] : kEmpty;
}

uint32_t Tokenizer::vocab_size() const { return uint32_t(impl_->vocab.tokens.size()); }
TokenId Tokenizer::bos() const { return impl_->vocab.bos; }
TokenId Tokenizer::eos() const { return impl_->vocab.eos; }
bool Tokenizer::adds_bos() const { return impl_->vocab.add_bos; }
std::string_view Tokenizer::model_name() const { return impl_->vocab.model; }
const std::vector<TokenId>& Tokenizer::end_of_generation_ids() const { return impl_->eog; }
bool Tokenizer::is_end_of_generation(TokenId id) const {
  return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}

}  // namespace kvtier::text
