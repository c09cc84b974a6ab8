// ExprParser: the expression grammar of jinja2 over the tokens of one tag
// (jinja_lexer.h), lowest precedence first: conditional `a if c else b`, or,
// and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then
// primaries with attribute/subscript/slice/call postfixes, filters and tests.
// Used by the statement parser (jinja_parser.cc); one instance per tag, one thread.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "text/jinja/jinja_ast.h"
#include "text/jinja/jinja_lexer.h"

namespace kvtier::text::jinja {

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  bool at_end() const { return peek().kind == Token::Kind::kEnd; }
  bool is_op(std::string_view op, size_t ahead = 0) const;
  bool is_name(std::string_view name, size_t ahead = 0) const;
  bool accept_op(std::string_view op) { return is_op(op) ? (++pos_, true) : false; }
  bool accept_name(std::string_view name) { return is_name(name) ? (++pos_, true) : false; }
  Status expect_op(std::string_view op);
  Status expect_end();
  Result<std::string> expect_identifier();
  static std::string describe(const Token& token);

  // expression (',' expression)*: a bare tuple when there is a comma.
  Result<ExprPtr> parse_tuple();
  // with_conditional=false stops before `if` (the filter of a for loop).
  Result<ExprPtr> parse_expression(bool with_conditional = true);

 private:
  Result<ExprPtr> parse_conditional(bool with_conditional);
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  // The comparison operator at the cursor ("==", ..., "in", "not in"), or empty.
  std::string comparison_ahead() const;
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_name();
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr expr);
  Result<ExprPtr> parse_subscript(ExprPtr object);
  Status parse_call_args(Expr& call);
  Result<ExprPtr> parse_filters_and_tests(ExprPtr expr);
  // jinja2 reads `x is divisibleby 3` / `x is sameas none`: one argument without parentheses.
  bool takes_bare_test_argument() const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace kvtier::text::jinja
