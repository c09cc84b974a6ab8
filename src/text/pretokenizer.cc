#include "text/pretokenizer.h"

#include <array>
#include <cstdint>
#include <string>

#include "text/unicode.h"

namespace kvtier::text {

Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  if (name.empty() || name == "default") return PreTokenizer::kDefault;
  if (name == "gpt-2" || name == "gpt2" || name == "phi-2") return PreTokenizer::kGpt2;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::kLlama3;
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::kQwen2;
  return Status::Unimplemented("pre-tokenizer '" + std::string(name) +
                               "' (tokenizer.ggml.pre) is not supported; supported: default, gpt-2, llama-bpe, qwen2");
}

std::string_view pre_tokenizer_name(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kDefault: return "default";
    case PreTokenizer::kGpt2: return "gpt-2";
    case PreTokenizer::kLlama3: return "llama-bpe";
    case PreTokenizer::kQwen2: return "qwen2";
  }
  return "?";
}

namespace {

// The text as code points with their classes; offsets[i] is the byte where code point i starts.
struct Codepoints {
  std::vector<uint32_t> cps;
  std::vector<uint8_t> classes;
  std::vector<uint32_t> offsets;  // size() + 1 entries

  explicit Codepoints(std::string_view text) {
    static const std::array<uint8_t, 128> ascii = [] {
      std::array<uint8_t, 128> t{};
      for (uint32_t c = 0; c < 128; ++c) t[c] = codepoint_classes(c);
      return t;
    }();
    cps.resize(text.size()), classes.resize(text.size()), offsets.resize(text.size() + 1);
    size_t n = 0;
    for (size_t at = 0; at < text.size(); ++n) {
      const unsigned char c = uint8_t(text[at]);
      offsets[n] = uint32_t(at);
      if (c < 0x80) {  // most text: no decoding, no table miss
        cps[n] = c, classes[n] = ascii[c];
        ++at;
        continue;
      }
      uint32_t cp = 0;
      at += utf8_decode(text.data() + at, text.size() - at, &cp);
      cps[n] = cp, classes[n] = codepoint_classes(cp);
    }
    offsets[n] = uint32_t(text.size());
    cps.resize(n), classes.resize(n), offsets.resize(n + 1);
  }
};

constexpr uint32_t kOutside = 0xFFFFFFFF;

// One segment [begin, end) of code points being split; `ends` receives word ends.
class Splitter {
 public:
  Splitter(const Codepoints& c, size_t begin, size_t end, std::vector<size_t>& ends)
      : c_(c), begin_(begin), end_(end), ends_(ends), prev_(begin) {}

  uint32_t cp(size_t pos) const { return pos >= begin_ && pos < end_ ? c_.cps[pos] : kOutside; }
  // Classes, with bit 0x80 marking "inside the segment" so that no-class code points still count.
  uint8_t cls(size_t pos) const { return pos >= begin_ && pos < end_ ? uint8_t(c_.classes[pos] | 0x80) : 0; }
  static bool other(uint8_t cls) { return cls != 0 && !(cls & (kWhitespace | kLetter | kNumber)); }
  size_t end() const { return end_; }

  // Ends a word at `pos`; returns its length in code points.
  size_t emit(size_t pos) {
    const size_t len = pos - prev_;
    if (len > 0) ends_.push_back(pos);
    prev_ = pos;
    return len;
  }

  // 's 't 're 've 'm 'll 'd at pos (case-insensitive when `fold`): the length matched, 0 if none.
  size_t contraction(size_t pos, bool fold) const {
    if (cp(pos) != '\'' || pos + 1 >= end_) return 0;
    auto lower = [&](uint32_t x) { return fold && x >= 'A' && x <= 'Z' ? x + 32 : x; };
    const uint32_t a = lower(cp(pos + 1));
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= end_) return 0;
    const uint32_t b = lower(cp(pos + 2));
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  // \s+(?!\S) then \s+ at pos, given `run` whitespace code points there.
  void whitespace(size_t& pos, size_t run) {
    if (run > 1 && cp(pos + run) != kOutside) {
      pos += run - 1;  // leave the last one to prefix the next word
      emit(pos);
    } else if (run > 0) {
      pos += run;
      emit(pos);
    } else {
      emit(++pos);
    }
  }

 private:
  const Codepoints& c_;
  size_t begin_, end_;
  std::vector<size_t>& ends_;
  size_t prev_;
};

void split_gpt2(const Codepoints& c, size_t begin, size_t end, std::vector<size_t>& ends) {
  Splitter s(c, begin, end, ends);
  for (size_t pos = begin; pos < end;) {
    if (size_t n = s.contraction(pos, false)) {
      pos += s.emit(pos + n);
      continue;
    }
    const bool space = s.cp(pos) == ' ';
    const uint8_t next = space ? s.cls(pos + 1) : s.cls(pos);
    if (next & (kLetter | kNumber)) {  // ?\p{L}+ | ?\p{N}+
      const uint8_t want = next & kLetter ? kLetter : kNumber;
      pos += space;
      while (s.cls(pos) & want) ++pos;
      s.emit(pos);
      continue;
    }
    if (Splitter::other(next)) {  // ?[^\s\p{L}\p{N}]+
      pos += space;
      while (Splitter::other(s.cls(pos))) ++pos;
      s.emit(pos);
      continue;
    }
    size_t run = 0;
    while (s.cls(pos + run) & kWhitespace) ++run;
    s.whitespace(pos, run);
  }
}

void split_llama3(const Codepoints& c, size_t begin, size_t end, size_t max_digits, std::vector<size_t>& ends) {
  Splitter s(c, begin, end, ends);
  for (size_t pos = begin; pos < end;) {
    const uint32_t cp = s.cp(pos);
    const uint8_t cls = s.cls(pos);
    if (size_t n = s.contraction(pos, true)) {
      pos += s.emit(pos + n);
      continue;
    }
    if (cp != '\r' && cp != '\n' && !(cls & kNumber) && ((cls & kLetter) || (s.cls(pos + 1) & kLetter))) {
      ++pos;  // [^\r\n\p{L}\p{N}]?\p{L}+
      while (s.cls(pos) & kLetter) ++pos;
      s.emit(pos);
      continue;
    }
    if (cls & kNumber) {  // \p{N}{1,max_digits}
      size_t start = pos;
      while (s.cls(pos) & kNumber) {
        if (++pos - start >= max_digits) s.emit(pos), start = pos;
      }
      s.emit(pos);
      continue;
    }
    const uint8_t next = cp == ' ' ? s.cls(pos + 1) : cls;
    if (Splitter::other(next)) {  // ?[^\s\p{L}\p{N}]+[\r\n]*
      pos += cp == ' ';
      while (Splitter::other(s.cls(pos))) ++pos;
      while (s.cp(pos) == '\r' || s.cp(pos) == '\n') ++pos;
      s.emit(pos);
      continue;
    }
    size_t run = 0, last_newline_end = 0;
    for (; s.cls(pos + run) & kWhitespace; ++run)
      if (s.cp(pos + run) == '\r' || s.cp(pos + run) == '\n') last_newline_end = pos + run + 1;
    if (last_newline_end > 0) {  // \s*[\r\n]+
      pos = last_newline_end;
      s.emit(pos);
      continue;
    }
    s.whitespace(pos, run);
  }
}

using Segments = std::vector<size_t>;  // word ends; a segment starts where the previous one ends

// Splits each segment of `in` into runs matching `match` and the gaps between them.
template <class Match>
Segments split_runs(const Codepoints& c, const Segments& in, Match match) {
  Segments out;
  size_t begin = 0;
  for (size_t end : in) {
    size_t pos = begin;
    while (pos < end) {
      size_t run_end = match(c, pos, end);
      if (run_end == pos) {  // a gap: up to the next match
        while (run_end < end && match(c, run_end, end) == run_end) ++run_end;
      }
      out.push_back(run_end);
      pos = run_end;
    }
    begin = end;
  }
  return out;
}

bool default_punct(const Codepoints& c, size_t pos) {
  const uint32_t cp = c.cps[pos];
  return (c.classes[pos] & kPunctuation) || cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' ||
         cp == '^' || cp == '~' || cp == '|';
}

Segments split_default(const Codepoints& c) {
  Segments all{c.cps.size()};
  // [\p{P}\$\+<=>\^~\|]+
  Segments s = split_runs(c, all, [](const Codepoints& cc, size_t pos, size_t end) {
    while (pos < end && default_punct(cc, pos)) ++pos;
    return pos;
  });
  Segments gpt2;
  size_t begin = 0;
  for (size_t end : s) split_gpt2(c, begin, end, gpt2), begin = end;
  // \p{N}+
  s = split_runs(c, gpt2, [](const Codepoints& cc, size_t pos, size_t end) {
    while (pos < end && (cc.classes[pos] & kNumber)) ++pos;
    return pos;
  });
  // [0-9][0-9][0-9]
  return split_runs(c, s, [](const Codepoints& cc, size_t pos, size_t end) {
    auto digit = [&](size_t k) { return k < end && cc.cps[k] >= '0' && cc.cps[k] <= '9'; };
    return digit(pos) && digit(pos + 1) && digit(pos + 2) ? pos + 3 : pos;
  });
}

}  // namespace

void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& words) {
  if (text.empty()) return;
  const Codepoints c(text);
  Segments ends;
  switch (kind) {
    case PreTokenizer::kDefault: ends = split_default(c); break;
    case PreTokenizer::kGpt2: split_gpt2(c, 0, c.cps.size(), ends); break;
    case PreTokenizer::kLlama3: split_llama3(c, 0, c.cps.size(), 3, ends); break;
    case PreTokenizer::kQwen2: split_llama3(c, 0, c.cps.size(), 1, ends); break;
  }
  size_t begin = 0;
  for (size_t end : ends) {
    words.push_back(text.substr(c.offsets[begin], c.offsets[end] - c.offsets[begin]));
    begin = end;
  }
}

}  // namespace kvtier::text
