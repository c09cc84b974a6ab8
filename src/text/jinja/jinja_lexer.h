// The Jinja lexer, in two steps. split_template cuts a template into text,
// `{{ … }}` and `{% … %}` segments with jinja2's whitespace rules applied as
// Hugging Face configures them: newlines normalized to \n, one trailing
// newline dropped, `-` markers strip all whitespace on their side, trim_blocks
// (a block or comment tag eats the newline after it) and lstrip_blocks
// (spaces and tabs between a line start and a block or comment tag go; `{%+`
// keeps them); comments vanish. tokenize_expression then cuts the inside of a
// tag into tokens. Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "text/jinja/jinja_value.h"

namespace kvtier::text::jinja {

struct Segment {
  enum class Kind { kText, kExpression, kStatement };
  Kind kind = Kind::kText;
  std::string text;  // the text, or the inside of the tag without its markers
  int line = 1;
};

Result<std::vector<Segment>> split_template(std::string_view source);

struct Token {
  enum class Kind { kName, kInteger, kFloat, kString, kOperator, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // kName and kOperator: the token itself
  Value literal;     // kInteger, kFloat, kString
  int line = 1;
};

// The tokens of one tag's inside, ending with a kEnd token.
Result<std::vector<Token>> tokenize_expression(std::string_view text, int line);

}  // namespace kvtier::text::jinja
