#include "text/spm.h"

#include <algorithm>
#include <cstdio>

#include "text/unicode.h"

namespace kvtier::text {
namespace {

uint64_t pair_key(TokenId left, TokenId right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

struct Symbol {
  TokenId id;  // kNoToken while the text is not a token
  uint32_t begin, len;
  int32_t prev, next;
};

struct Bigram {
  float score;
  int32_t left, right;
  uint32_t len;
  TokenId id;
  // Max-heap order: best score first, then the leftmost.
  bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
};

}  // namespace

Result<SpmModel> SpmModel::create(const Vocab& vocab, const TokenIndex& index) {
  SpmModel m;
  m.index_ = &index;
  m.scores_ = vocab.scores;
  m.unk_ = vocab.unk;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.byte_tokens_[size_t(b)] = index.find(name);
  }
  for (int c = 0; c < 128; ++c) m.ascii_tokens_[size_t(c)] = index.find(std::string(1, char(c)));
  // Every way a token's text splits into two tokens at a character boundary.
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string_view text = vocab.tokens[id];
    const TokenId whole = index.find(text);
    for (size_t cut = utf8_lead_length(uint8_t(text[0])); cut < text.size(); cut += utf8_lead_length(uint8_t(text[cut]))) {
      const TokenId left = index.find(text.substr(0, cut)), right = index.find(text.substr(cut));
      if (left != kNoToken && right != kNoToken) m.pairs_.emplace(pair_key(left, right), whole);
    }
  }
  return m;
}

TokenId SpmModel::merged(TokenId left, TokenId right) const {
  auto it = pairs_.find(pair_key(left, right));
  return it == pairs_.end() ? kNoToken : it->second;
}

void SpmModel::emit_bytes(std::string_view text, std::vector<TokenId>& out) const {
  for (unsigned char b : text) {
    const TokenId id = byte_tokens_[b];
    if (id != kNoToken) out.push_back(id);
    else if (unk_ != kNoToken) out.push_back(unk_);
  }
}

void SpmModel::encode(std::string_view text, std::vector<TokenId>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const size_t len = std::min(text.size() - at, utf8_lead_length(uint8_t(text[at])));
    const unsigned char c = uint8_t(text[at]);
    const TokenId id = len == 1 && c < 128 ? ascii_tokens_[c] : index_->find(text.substr(at, len));
    const int32_t k = int32_t(symbols.size());
    symbols.push_back({id, uint32_t(at), uint32_t(len), k - 1, at + len < text.size() ? k + 1 : -1});
    at += len;
  }
  std::vector<Bigram> heap;
  heap.reserve(symbols.size());
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol &l = symbols[size_t(left)], &r = symbols[size_t(right)];
    TokenId id = kNoToken;
    if (l.id != kNoToken && r.id != kNoToken) id = merged(l.id, r.id);
    else id = index_->find(text.substr(l.begin, l.len + r.len));  // a character that is not a token itself
    if (id == kNoToken) return;
    heap.push_back({scores_[size_t(id)], left, right, l.len + r.len, id});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t k = 1; k < int32_t(symbols.size()); ++k) try_pair(k - 1, k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol &l = symbols[size_t(b.left)], &r = symbols[size_t(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // one side has merged since
    l.len += r.len, l.id = b.id, l.next = r.next;
    r.len = 0;
    if (r.next >= 0) symbols[size_t(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  for (int32_t k = symbols.empty() ? -1 : 0; k >= 0; k = symbols[size_t(k)].next) {
    const Symbol& s = symbols[size_t(k)];
    if (s.id != kNoToken) out.push_back(s.id);
    else emit_bytes(text.substr(s.begin, s.len), out);
  }
}

}  // namespace kvtier::text
