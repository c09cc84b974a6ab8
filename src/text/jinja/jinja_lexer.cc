#include "text/jinja/jinja_lexer.h"

#include <cerrno>
#include <cstdlib>

#include "text/jinja/jinja_strings.h"

namespace kvtier::text::jinja {
namespace {

Status syntax_error(int line, const std::string& what) {
  return Status::InvalidArgument("jinja: line " + std::to_string(line) + ": " + what);
}

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

// Skips a quoted string starting at `pos` (on its quote); false if it never closes.
bool skip_string(std::string_view text, size_t& pos) {
  const char quote = text[pos++];
  while (pos < text.size()) {
    if (text[pos] == '\\') {
      pos += 2;
    } else if (text[pos++] == quote) {
      return true;
    }
  }
  return false;
}

// Finds the closing `}}`/`%}` of a tag whose inside starts at `pos`, skipping
// strings and bracketed parts (a dict literal may contain "}}").
Result<size_t> find_tag_end(std::string_view source, size_t pos, char closer, int line) {
  int depth = 0;
  while (pos < source.size()) {
    const char c = source[pos];
    if (c == '\'' || c == '"') {
      if (!skip_string(source, pos)) return syntax_error(line, "unterminated string literal");
      continue;
    }
    if (depth == 0 && c == closer && pos + 1 < source.size() && source[pos + 1] == '}') return pos;
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    ++pos;
  }
  return syntax_error(line, std::string("unclosed tag (missing '") + closer + "}')");
}

void strip_trailing_whitespace(std::string& text) { text = py_strip(text, std::nullopt, false, true); }

size_t skip_leading_whitespace(std::string_view source, size_t pos) {
  while (pos < source.size()) {
    size_t next = pos;
    if (!is_python_space(decode_utf8(source, next))) break;
    pos = next;
  }
  return pos;
}

// lstrip_blocks: drops spaces/tabs between the line start and the tag.
void lstrip_line(std::string& text, bool line_starting) {
  const size_t newline = text.rfind('\n');
  const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
  if (newline == std::string::npos && !line_starting) return;
  if (text.find_first_not_of(" \t", line_start) != std::string::npos) return;
  text.resize(line_start);
}

int count_lines(std::string_view text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

}  // namespace

Result<std::vector<Segment>> split_template(std::string_view raw_source) {
  const std::string source = normalize_newlines(raw_source);
  std::vector<Segment> segments;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;  // the text so far ends at a line start
  while (pos <= source.size()) {
    size_t open = source.find('{', pos);
    while (open != std::string::npos && open + 1 < source.size() && source[open + 1] != '{' &&
           source[open + 1] != '%' && source[open + 1] != '#') {
      open = source.find('{', open + 1);
    }
    if (open == std::string::npos || open + 1 >= source.size()) {
      if (pos < source.size()) segments.push_back({Segment::Kind::kText, source.substr(pos), line});
      break;
    }
    std::string text = source.substr(pos, open - pos);
    line += count_lines(text);
    const char type = source[open + 1];
    const char marker = open + 2 < source.size() ? source[open + 2] : '\0';
    const bool block_like = type != '{';
    if (marker == '-') {
      strip_trailing_whitespace(text);
    } else if (block_like && marker != '+') {
      lstrip_line(text, line_starting);
    }
    if (!text.empty()) segments.push_back({Segment::Kind::kText, text, line - count_lines(text)});
    const size_t inner_begin = open + 2 + (marker == '-' || marker == '+' ? 1 : 0);
    size_t close = 0;  // position of the closing two characters
    if (type == '#') {
      close = source.find("#}", inner_begin);
      if (close == std::string::npos) return syntax_error(line, "unclosed comment");
    } else {
      KVTIER_ASSIGN_OR_RETURN(close, find_tag_end(source, inner_begin, type == '{' ? '}' : '%', line));
    }
    const char end_marker = close > inner_begin ? source[close - 1] : '\0';
    const bool strip_after = end_marker == '-';
    const size_t inner_end = (strip_after || (end_marker == '+' && block_like)) ? close - 1 : close;
    if (type != '#') {
      const auto kind = type == '{' ? Segment::Kind::kExpression : Segment::Kind::kStatement;
      segments.push_back({kind, source.substr(inner_begin, inner_end - inner_begin), line});
    }
    line += count_lines(std::string_view(source).substr(open, close + 2 - open));
    pos = close + 2;
    if (strip_after) {
      const size_t next = skip_leading_whitespace(source, pos);
      line += count_lines(std::string_view(source).substr(pos, next - pos));
      pos = next;
    } else if (block_like && end_marker != '+' && pos < source.size() && source[pos] == '\n') {
      ++pos;  // trim_blocks
      ++line;
    }
    line_starting = pos > 0 && source[pos - 1] == '\n';
    if (pos == source.size()) break;
  }
  return segments;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads `digits` hex digits at `pos`; -1 when malformed.
long read_hex(std::string_view text, size_t pos, int digits) {
  if (pos + static_cast<size_t>(digits) > text.size()) return -1;
  long value = 0;
  for (int i = 0; i < digits; ++i) {
    const int digit = hex_value(text[pos + static_cast<size_t>(i)]);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// One escape after a backslash at text[pos] (pos on the character after it), Python's unicode-escape rules.
Status unescape_one(std::string_view text, size_t& pos, std::string& out, int line) {
  const char c = text[pos++];
  switch (c) {
    case '\n': return Status::Ok();
    case '\\': out += '\\'; return Status::Ok();
    case '\'': out += '\''; return Status::Ok();
    case '"': out += '"'; return Status::Ok();
    case 'a': out += '\a'; return Status::Ok();
    case 'b': out += '\b'; return Status::Ok();
    case 'f': out += '\f'; return Status::Ok();
    case 'n': out += '\n'; return Status::Ok();
    case 'r': out += '\r'; return Status::Ok();
    case 't': out += '\t'; return Status::Ok();
    case 'v': out += '\v'; return Status::Ok();
    default: break;
  }
  if (c >= '0' && c <= '7') {
    int value = c - '0';
    for (int i = 0; i < 2 && pos < text.size() && text[pos] >= '0' && text[pos] <= '7'; ++i) {
      value = value * 8 + (text[pos++] - '0');
    }
    append_utf8(out, static_cast<char32_t>(value));
    return Status::Ok();
  }
  const int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
  if (digits == 0) {  // unknown escapes stay as written
    out += '\\';
    out += c;
    return Status::Ok();
  }
  long value = read_hex(text, pos, digits);
  if (value < 0 || value > 0x10FFFF) return syntax_error(line, std::string("malformed \\") + c + " escape");
  pos += static_cast<size_t>(digits);
  if (value >= 0xD800 && value < 0xDC00 && text.substr(pos, 2) == "\\u") {
    const long low = read_hex(text, pos + 2, 4);
    if (low >= 0xDC00 && low < 0xE000) {
      value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00);
      pos += 6;
    }
  }
  append_utf8(out, static_cast<char32_t>(value));
  return Status::Ok();
}

Result<std::string> read_string_literal(std::string_view text, size_t& pos, int line) {
  const char quote = text[pos++];
  std::string out;
  while (pos < text.size()) {
    const char c = text[pos];
    if (c == quote) {
      ++pos;
      return out;
    }
    if (c == '\\' && pos + 1 < text.size()) {
      ++pos;
      KVTIER_RETURN_IF_ERROR(unescape_one(text, pos, out, line));
      continue;
    }
    out += c;
    ++pos;
  }
  return syntax_error(line, "unterminated string literal");
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

Result<Token> read_number(std::string_view text, size_t& pos, int line, bool after_dot) {
  std::string digits;
  bool is_float = false;
  auto take_digits = [&] {
    while (pos < text.size() && (is_digit(text[pos]) || (text[pos] == '_' && pos + 1 < text.size() &&
                                                          is_digit(text[pos + 1])))) {
      if (text[pos] != '_') digits += text[pos];
      ++pos;
    }
  };
  take_digits();
  if (!after_dot && pos + 1 < text.size() && text[pos] == '.' && is_digit(text[pos + 1])) {
    is_float = true;
    digits += text[pos++];
    take_digits();
  }
  if (!after_dot && pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    size_t exponent = pos + 1;
    if (exponent < text.size() && (text[exponent] == '+' || text[exponent] == '-')) ++exponent;
    if (exponent < text.size() && is_digit(text[exponent])) {
      is_float = true;
      digits += text.substr(pos, exponent - pos);
      pos = exponent;
      take_digits();
    }
  }
  Token token{is_float ? Token::Kind::kFloat : Token::Kind::kInteger, digits, Value(), line};
  if (is_float) {
    token.literal = std::strtod(digits.c_str(), nullptr);
  } else {
    errno = 0;
    const long long value = std::strtoll(digits.c_str(), nullptr, 10);
    if (errno == ERANGE) return syntax_error(line, "integer literal out of range: " + digits);
    token.literal = static_cast<int64_t>(value);
  }
  return token;
}

}  // namespace

Result<std::vector<Token>> tokenize_expression(std::string_view text, int line) {
  static constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/",
                                                    "%",  "~",  "<",  ">",  "=",  "(",  ")", "[", "]", "{",
                                                    "}",  ",",  ".",  ":",  "|"};
  std::vector<Token> tokens;
  size_t pos = 0;
  while (pos < text.size()) {
    const char c = text[pos];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      line += c == '\n';
      ++pos;
    } else if (c == '\'' || c == '"') {
      const int start_line = line;
      const size_t start = pos;
      KVTIER_ASSIGN_OR_RETURN(std::string value, read_string_literal(text, pos, line));
      line += count_lines(text.substr(start, pos - start));
      tokens.push_back({Token::Kind::kString, "", Value(std::move(value)), start_line});
    } else if (is_digit(c)) {
      const bool after_dot = !tokens.empty() && tokens.back().kind == Token::Kind::kOperator &&
                             tokens.back().text == ".";
      KVTIER_ASSIGN_OR_RETURN(Token token, read_number(text, pos, line, after_dot));
      tokens.push_back(std::move(token));
    } else if (is_name_start(c)) {
      const size_t start = pos;
      while (pos < text.size() && (is_name_start(text[pos]) || is_digit(text[pos]))) ++pos;
      tokens.push_back({Token::Kind::kName, std::string(text.substr(start, pos - start)), Value(), line});
    } else {
      bool matched = false;
      for (std::string_view op : kOperators) {
        if (text.substr(pos, op.size()) == op) {
          tokens.push_back({Token::Kind::kOperator, std::string(op), Value(), line});
          pos += op.size();
          matched = true;
          break;
        }
      }
      if (!matched) return syntax_error(line, std::string("unexpected character '") + c + "'");
    }
  }
  tokens.push_back({Token::Kind::kEnd, "", Value(), line});
  return tokens;
}

}  // namespace kvtier::text::jinja
