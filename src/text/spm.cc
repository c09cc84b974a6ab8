#include "text/spm.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "text/unicode.h"
#include "text/word_cache.h"

namespace kvtier::text {
namespace {

uint64_t pair_key(TokenId left, TokenId right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

// The 1-4 bytes of one character as an integer.
uint32_t char_bits(const char* p, size_t len) {
  uint32_t v = 0;
  std::memcpy(&v, p, len);
  return v;
}

size_t char_len(std::string_view text, size_t at) { return std::min(text.size() - at, utf8_lead_length(uint8_t(text[at]))); }

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
  m.cache_owner_ = WordCache::new_owner();
  m.scores_ = vocab.scores;
  m.unk_ = vocab.unk;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.byte_tokens_[size_t(b)] = index.find(name);
  }
  for (int c = 0; c < 128; ++c) m.ascii_tokens_[size_t(c)] = index.find(std::string(1, char(c)));
  // Every way a token's text splits into two tokens at a character boundary,
  // and every pair of adjacent characters inside a token.
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string_view text = vocab.tokens[id];
    if (text.empty()) continue;
    const TokenId whole = index.find(text);
    for (size_t prev = 0, cut = char_len(text, 0); cut < text.size(); prev = cut, cut += char_len(text, cut)) {
      const TokenId left = index.find(text.substr(0, cut)), right = index.find(text.substr(cut));
      if (left != kNoToken && right != kNoToken) m.pairs_.insert(pair_key(left, right), whole);
      const uint64_t chars = uint64_t(char_bits(text.data() + prev, cut - prev)) << 32 |
                             char_bits(text.data() + cut, char_len(text, cut));
      m.joinable_.insert(chars, 1);
    }
  }
  return m;
}

TokenId SpmModel::merged(TokenId left, TokenId right) const {
  const TokenId* id = pairs_.find(pair_key(left, right));
  return id == nullptr ? kNoToken : *id;
}

void SpmModel::emit_bytes(std::string_view text, std::vector<TokenId>& out) const {
  for (unsigned char b : text) {
    const TokenId id = byte_tokens_[b];
    if (id != kNoToken) out.push_back(id);
    else if (unk_ != kNoToken) out.push_back(unk_);
  }
}

struct SpmModel::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

void SpmModel::encode(std::string_view text, std::vector<TokenId>& out) const {
  Scratch scratch;
  WordCache& cache = WordCache::for_thread(cache_owner_);
  auto segment = [&](std::string_view seg) {
    if (cache.lookup(seg, out)) return;
    const size_t before = out.size();
    encode_segment(seg, scratch, out);
    cache.store(seg, std::span(out).subspan(before));
  };
  size_t begin = 0;
  uint32_t prev_bits = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t len = char_len(text, at);
    const uint32_t bits = char_bits(text.data() + at, len);
    if (at > begin && !joinable(uint64_t(prev_bits) << 32 | bits)) {
      segment(text.substr(begin, at - begin));
      begin = at;
    }
    prev_bits = bits;
    at += len;
  }
  if (begin < text.size()) segment(text.substr(begin));
}

void SpmModel::encode_segment(std::string_view text, Scratch& scratch, std::vector<TokenId>& out) const {
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  for (size_t at = 0; at < text.size();) {
    const size_t len = char_len(text, at);
    const unsigned char c = uint8_t(text[at]);
    const TokenId id = len == 1 && c < 128 ? ascii_tokens_[c] : index_->find(text.substr(at, len));
    const int32_t k = int32_t(symbols.size());
    symbols.push_back({id, uint32_t(at), uint32_t(len), k - 1, at + len < text.size() ? k + 1 : -1});
    at += len;
  }
  std::vector<Bigram>& heap = scratch.heap;
  heap.clear();
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
