#include "text/bpe.h"

#include <algorithm>

#include "text/unicode.h"
#include "text/word_cache.h"

namespace kvtier::text {

const std::array<uint32_t, 256>& gpt2_byte_to_codepoint() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

bool gpt2_decode_text(std::string_view text, std::string& bytes) {
  static const std::unordered_map<uint32_t, uint8_t> inverse = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    for (uint32_t b = 0; b < 256; ++b) m[gpt2_byte_to_codepoint()[b]] = uint8_t(b);
    return m;
  }();
  bytes.clear();
  for (size_t at = 0; at < text.size();) {
    uint32_t cp = 0;
    at += utf8_decode(text.data() + at, text.size() - at, &cp);
    auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    bytes += char(it->second);
  }
  return true;
}

namespace {

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

std::string encode_bytes(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes) utf8_append(s, gpt2_byte_to_codepoint()[b]);
  return s;
}

}  // namespace

struct BpeModel::Scratch {
  struct Symbol {
    int32_t piece;  // -1: a stand-in character that no merge or token knows
    uint32_t begin, len;
    int32_t prev, next;
  };
  struct Bigram {
    int32_t rank, left, right, left_piece, right_piece, result;
    // Max-heap order inverted: lowest rank first, then the leftmost.
    bool operator<(const Bigram& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };
  std::vector<std::string_view> words;
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

int32_t BpeModel::piece(std::string_view text) {
  if (TokenId id = index_->find(text); id != kNoToken) return id;
  auto [it, fresh] = extra_pieces_.try_emplace(std::string(text), int32_t(vocab_size_ + extra_pieces_.size()));
  return it->second;
}

Result<BpeModel> BpeModel::create(const Vocab& vocab, const TokenIndex& index) {
  BpeModel m;
  m.index_ = &index;
  m.cache_owner_ = WordCache::new_owner();
  KVTIER_ASSIGN_OR_RETURN(m.pre_, pre_tokenizer_from_name(vocab.pre));
  m.ignore_merges_ = m.pre_ == PreTokenizer::kLlama3;
  m.vocab_size_ = uint32_t(vocab.tokens.size());
  m.merges_ = FlatU64Map<Merge>(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& line = vocab.merges[rank];
    const size_t space = line.find(' ', 1);
    if (space == std::string::npos)
      return Status::InvalidArgument("tokenizer.ggml.merges[" + std::to_string(rank) + "] = '" + line +
                                     "' is not two pieces separated by a space");
    const std::string_view left = std::string_view(line).substr(0, space), right = std::string_view(line).substr(space + 1);
    const int32_t lp = m.piece(left), rp = m.piece(right);
    const int32_t result = m.piece(std::string(left) + std::string(right));
    m.merges_.insert(pair_key(lp, rp), Merge{int32_t(rank), result});
  }
  for (uint32_t b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, gpt2_byte_to_codepoint()[b]);
    const TokenId id = index.find(ch);
    auto extra = m.extra_pieces_.find(ch);
    m.byte_pieces_[b] = id != kNoToken ? id : extra != m.extra_pieces_.end() ? extra->second : -1;
  }
  if (m.ignore_merges_) {
    std::string bytes;
    for (size_t id = 0; id < vocab.tokens.size(); ++id)
      if (gpt2_decode_text(vocab.tokens[id], bytes) && index.find(vocab.tokens[id]) == TokenId(id))
        m.raw_tokens_.set(bytes, TokenId(id));
  }
  return m;
}

void BpeModel::encode(std::string_view text, std::vector<TokenId>& out) const {
  Scratch scratch;
  pre_tokenize(pre_, text, scratch.words);
  WordCache& cache = WordCache::for_thread(cache_owner_);
  for (std::string_view word : scratch.words) {
    if (cache.lookup(word, out)) continue;
    const size_t before = out.size();
    encode_word(word, scratch, out);
    cache.store(word, std::span(out).subspan(before));
  }
}

// A symbol that is not a token: each byte of its stand-in text that is a one-byte token (llama.cpp's fallback).
void BpeModel::emit_fallback(std::string_view word_bytes, std::vector<TokenId>& out) const {
  const std::string text = encode_bytes(word_bytes);
  for (char c : text)
    if (TokenId id = index_->find(std::string_view(&c, 1)); id != kNoToken) out.push_back(id);
}

void BpeModel::encode_word(std::string_view word, Scratch& s, std::vector<TokenId>& out) const {
  if (ignore_merges_) {
    if (const TokenId id = raw_tokens_.find(word, kNoToken); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  s.symbols.clear();
  s.heap.clear();
  for (size_t k = 0; k < word.size(); ++k)
    s.symbols.push_back({byte_pieces_[uint8_t(word[k])], uint32_t(k), 1, int32_t(k) - 1,
                         k + 1 < word.size() ? int32_t(k + 1) : -1});
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t lp = s.symbols[size_t(left)].piece, rp = s.symbols[size_t(right)].piece;
    if (lp < 0 || rp < 0) return;
    const Merge* m = merges_.find(pair_key(lp, rp));
    if (m == nullptr) return;
    s.heap.push_back({m->rank, left, right, lp, rp, m->result});
    std::push_heap(s.heap.begin(), s.heap.end());
  };
  for (int32_t k = 1; k < int32_t(word.size()); ++k) try_pair(k - 1, k);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end());
    const auto b = s.heap.back();
    s.heap.pop_back();
    auto &l = s.symbols[size_t(b.left)], &r = s.symbols[size_t(b.right)];
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.piece != b.left_piece || r.piece != b.right_piece) continue;
    l.len += r.len, l.piece = b.result, l.next = r.next;
    r.len = 0;
    if (r.next >= 0) s.symbols[size_t(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  for (int32_t k = word.empty() ? -1 : 0; k >= 0; k = s.symbols[size_t(k)].next) {
    const auto& sym = s.symbols[size_t(k)];
    if (sym.piece >= 0 && uint32_t(sym.piece) < vocab_size_) out.push_back(sym.piece);
    else emit_fallback(word.substr(sym.begin, sym.len), out);
  }
}

}  // namespace kvtier::text
