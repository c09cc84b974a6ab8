#include "text/jinja/jinja_expr_parser.h"

#include <algorithm>
#include <initializer_list>

#include "text/jinja/jinja_builtins.h"
#include "text/jinja/jinja_parser.h"

namespace kvtier::text::jinja {
namespace {

Status syntax_error(int line, const std::string& what) {
  return Status::InvalidArgument("jinja: line " + std::to_string(line) + ": " + what);
}

std::unique_ptr<Expr> make_expr(Expr::Kind kind, int line, std::string name = {}) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  expr->name = std::move(name);
  return expr;
}

// An operator chain (`1 + 1 + ...`, `x|f|f...`) is built in a loop, not by recursion: each link
// is checked here, so that no tree deeper than kMaxExprHeight is built (300,000 links overflowed
// the stack when the tree was freed, or evaluated).
Status check_height(const Expr& expr) {
  if (expr.height <= kMaxExprHeight) return Status::Ok();
  return syntax_error(expr.line, "expression nested too deeply");
}

Result<ExprPtr> make_binary(Expr::Kind kind, std::string op, ExprPtr lhs, ExprPtr rhs, int line) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  expr->name = std::move(op);
  expr->add(std::move(lhs));
  expr->add(std::move(rhs));
  KVTIER_RETURN_IF_ERROR(check_height(*expr));
  return ExprPtr(std::move(expr));
}

}  // namespace

bool ExprParser::is_op(std::string_view op, size_t ahead) const {
  return peek(ahead).kind == Token::Kind::kOperator && peek(ahead).text == op;
}

bool ExprParser::is_name(std::string_view name, size_t ahead) const {
  return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == name;
}

Status ExprParser::expect_op(std::string_view op) {
  if (accept_op(op)) return Status::Ok();
  return syntax_error(peek().line, "expected '" + std::string(op) + "', got " + describe(peek()));
}

Status ExprParser::expect_end() {
  if (at_end()) return Status::Ok();
  return syntax_error(peek().line, "unexpected " + describe(peek()));
}

Result<std::string> ExprParser::expect_identifier() {
  if (peek().kind != Token::Kind::kName) return syntax_error(peek().line, "expected a name, got " + describe(peek()));
  return tokens_[pos_++].text;
}

std::string ExprParser::describe(const Token& token) {
  switch (token.kind) {
    case Token::Kind::kEnd: return "end of tag";
    case Token::Kind::kString: return "a string";
    case Token::Kind::kInteger:
    case Token::Kind::kFloat: return "'" + token.text + "'";
    default: return "'" + token.text + "'";
  }
}

Result<ExprPtr> ExprParser::parse_tuple() {
  const int line = peek().line;
  KVTIER_ASSIGN_OR_RETURN(ExprPtr first, parse_expression());
  if (!is_op(",")) return first;
  auto tuple = make_expr(Expr::Kind::kTuple, line);
  tuple->add(std::move(first));
  while (accept_op(",")) {
    if (at_end() || is_op(")")) break;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
    tuple->add(std::move(item));
  }
  return ExprPtr(std::move(tuple));
}

Result<ExprPtr> ExprParser::parse_expression(bool with_conditional) {
  if (++depth_ > kMaxParseDepth) return syntax_error(peek().line, "expression nested too deeply");
  auto result = parse_conditional(with_conditional);
  --depth_;
  return result;
}

Result<ExprPtr> ExprParser::parse_conditional(bool with_conditional) {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
  while (with_conditional && is_name("if")) {
    const int line = peek().line;
    ++pos_;
    auto conditional = make_expr(Expr::Kind::kConditional, line);
    KVTIER_ASSIGN_OR_RETURN(ExprPtr condition, parse_or());
    ExprPtr otherwise;
    if (accept_name("else")) {
      KVTIER_ASSIGN_OR_RETURN(otherwise, parse_expression());
    }
    conditional->add(std::move(condition));
    conditional->add(std::move(expr));
    conditional->add(std::move(otherwise));
    expr = std::move(conditional);
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_or() {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr expr, parse_and());
  while (is_name("or")) {
    const int line = peek().line;
    ++pos_;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_and());
    KVTIER_ASSIGN_OR_RETURN(expr, make_binary(Expr::Kind::kOr, "or", std::move(expr), std::move(rhs), line));
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_and() {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr expr, parse_not());
  while (is_name("and")) {
    const int line = peek().line;
    ++pos_;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_not());
    KVTIER_ASSIGN_OR_RETURN(expr, make_binary(Expr::Kind::kAnd, "and", std::move(expr), std::move(rhs), line));
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_not() {
  if (is_name("not")) {
    const int line = peek().line;
    ++pos_;
    if (++depth_ > kMaxParseDepth) return syntax_error(line, "expression nested too deeply");
    KVTIER_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
    --depth_;
    auto expr = make_expr(Expr::Kind::kUnary, line, "not");
    expr->add(std::move(operand));
    return ExprPtr(std::move(expr));
  }
  return parse_compare();
}

// `a < b` is a binary node; `a < b <= c ...` (Python's chain: each operand evaluated once, the
// first false comparison ends it) a kCompareChain of every operand and operator.
Result<ExprPtr> ExprParser::parse_compare() {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
  const int line = peek().line;
  std::vector<std::string> ops;
  std::vector<ExprPtr> operands;
  for (std::string op = comparison_ahead(); !op.empty(); op = comparison_ahead()) {
    pos_ += op == "not in" ? 2 : 1;
    ops.push_back(op);
    KVTIER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
    operands.push_back(std::move(rhs));
    if (ops.size() > size_t(kMaxExprHeight)) return syntax_error(line, "expression nested too deeply");
  }
  if (ops.empty()) return first;
  if (ops.size() == 1) return make_binary(Expr::Kind::kBinary, ops[0], std::move(first), std::move(operands[0]), line);
  auto chain = make_expr(Expr::Kind::kCompareChain, line);
  chain->add(std::move(first));
  for (ExprPtr& operand : operands) chain->add(std::move(operand));
  chain->ops = std::move(ops);
  KVTIER_RETURN_IF_ERROR(check_height(*chain));
  return ExprPtr(std::move(chain));
}

std::string ExprParser::comparison_ahead() const {
  for (std::string_view candidate : {"==", "!=", "<", "<=", ">", ">="}) {
    if (is_op(candidate)) return std::string(candidate);
  }
  if (is_name("in")) return "in";
  if (is_name("not") && is_name("in", 1)) return "not in";
  return {};
}

Result<ExprPtr> ExprParser::parse_math1() {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr expr, parse_concat());
  while (is_op("+") || is_op("-")) {
    const Token& op = tokens_[pos_++];
    KVTIER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_concat());
    KVTIER_ASSIGN_OR_RETURN(expr, make_binary(Expr::Kind::kBinary, op.text, std::move(expr), std::move(rhs), op.line));
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_concat() {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr expr, parse_math2());
  while (is_op("~")) {
    const int line = tokens_[pos_++].line;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math2());
    KVTIER_ASSIGN_OR_RETURN(expr, make_binary(Expr::Kind::kBinary, "~", std::move(expr), std::move(rhs), line));
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_math2() {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr expr, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& op = tokens_[pos_++];
    KVTIER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_pow());
    KVTIER_ASSIGN_OR_RETURN(expr, make_binary(Expr::Kind::kBinary, op.text, std::move(expr), std::move(rhs), op.line));
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_pow() {
  KVTIER_ASSIGN_OR_RETURN(ExprPtr expr, parse_unary(true));
  while (is_op("**")) {
    const int line = tokens_[pos_++].line;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_unary(true));
    KVTIER_ASSIGN_OR_RETURN(expr, make_binary(Expr::Kind::kBinary, "**", std::move(expr), std::move(rhs), line));
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_unary(bool with_filter) {
  if (++depth_ > kMaxParseDepth) return syntax_error(peek().line, "expression nested too deeply");
  ExprPtr expr;
  if (is_op("-") || is_op("+")) {
    const Token& op = tokens_[pos_++];
    KVTIER_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
    auto unary = make_expr(Expr::Kind::kUnary, op.line, op.text);
    unary->add(std::move(operand));
    expr = std::move(unary);
  } else {
    KVTIER_ASSIGN_OR_RETURN(expr, parse_primary());
  }
  KVTIER_ASSIGN_OR_RETURN(expr, parse_postfix(std::move(expr)));
  if (with_filter) {
    KVTIER_ASSIGN_OR_RETURN(expr, parse_filters_and_tests(std::move(expr)));
  }
  --depth_;
  return expr;
}

Result<ExprPtr> ExprParser::parse_primary() {
  const Token& token = peek();
  switch (token.kind) {
    case Token::Kind::kString: {
      std::string text;
      while (peek().kind == Token::Kind::kString) text += tokens_[pos_++].literal.as_string();
      auto expr = make_expr(Expr::Kind::kLiteral, token.line);
      expr->literal = Value(std::move(text));
      return ExprPtr(std::move(expr));
    }
    case Token::Kind::kInteger:
    case Token::Kind::kFloat: {
      auto expr = make_expr(Expr::Kind::kLiteral, token.line);
      expr->literal = tokens_[pos_++].literal;
      return ExprPtr(std::move(expr));
    }
    case Token::Kind::kName: return parse_name();
    default: break;
  }
  if (accept_op("(")) {
    if (accept_op(")")) return ExprPtr(make_expr(Expr::Kind::kTuple, token.line));
    KVTIER_ASSIGN_OR_RETURN(ExprPtr inner, parse_tuple());
    KVTIER_RETURN_IF_ERROR(expect_op(")"));
    return inner;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  return syntax_error(token.line, "unexpected " + describe(token));
}

Result<ExprPtr> ExprParser::parse_name() {
  const Token& token = tokens_[pos_++];
  auto literal = make_expr(Expr::Kind::kLiteral, token.line);
  if (token.text == "true" || token.text == "True") {
    literal->literal = true;
  } else if (token.text == "false" || token.text == "False") {
    literal->literal = false;
  } else if (token.text == "none" || token.text == "None") {
    literal->literal = NoneType{};
  } else {
    return ExprPtr(make_expr(Expr::Kind::kName, token.line, token.text));
  }
  return ExprPtr(std::move(literal));
}

Result<ExprPtr> ExprParser::parse_list() {
  auto list = make_expr(Expr::Kind::kList, tokens_[pos_++].line);
  while (!is_op("]")) {
    if (!list->args.empty()) KVTIER_RETURN_IF_ERROR(expect_op(","));
    if (is_op("]")) break;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
    list->add(std::move(item));
  }
  ++pos_;
  return ExprPtr(std::move(list));
}

Result<ExprPtr> ExprParser::parse_dict() {
  auto dict = make_expr(Expr::Kind::kDict, tokens_[pos_++].line);
  while (!is_op("}")) {
    if (!dict->args.empty()) KVTIER_RETURN_IF_ERROR(expect_op(","));
    if (is_op("}")) break;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
    KVTIER_RETURN_IF_ERROR(expect_op(":"));
    KVTIER_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
    dict->add(std::move(key));
    dict->add(std::move(value));
  }
  ++pos_;
  return ExprPtr(std::move(dict));
}

Result<ExprPtr> ExprParser::parse_postfix(ExprPtr expr) {
  for (;;) {
    KVTIER_RETURN_IF_ERROR(check_height(*expr));
    const int line = peek().line;
    if (accept_op(".")) {
      if (peek().kind == Token::Kind::kInteger) {
        auto index = make_expr(Expr::Kind::kIndex, line);
        auto key = make_expr(Expr::Kind::kLiteral, line);
        key->literal = tokens_[pos_++].literal;
        index->add(std::move(expr));
        index->add(std::move(key));
        expr = std::move(index);
        continue;
      }
      KVTIER_ASSIGN_OR_RETURN(std::string name, expect_identifier());
      auto attribute = make_expr(Expr::Kind::kAttribute, line, name);
      attribute->add(std::move(expr));
      expr = std::move(attribute);
    } else if (is_op("[")) {
      KVTIER_ASSIGN_OR_RETURN(expr, parse_subscript(std::move(expr)));
    } else if (is_op("(")) {
      if (expr->kind == Expr::Kind::kAttribute && is_mutating_method(expr->name)) {
        return syntax_error(line, "method '" + expr->name + "' is not supported (values are immutable)");
      }
      auto call = make_expr(Expr::Kind::kCall, line);
      call->add(std::move(expr));
      KVTIER_RETURN_IF_ERROR(parse_call_args(*call));
      expr = std::move(call);
    } else {
      return expr;
    }
  }
}

Result<ExprPtr> ExprParser::parse_subscript(ExprPtr object) {
  const int line = tokens_[pos_++].line;  // '['
  ExprPtr parts[3];
  int part = 0;
  bool is_slice = false;
  while (!is_op("]")) {
    if (accept_op(":")) {
      is_slice = true;
      if (++part > 2) return syntax_error(line, "malformed slice");
      continue;
    }
    if (parts[part]) return syntax_error(line, "expected ']' in subscript");
    KVTIER_ASSIGN_OR_RETURN(parts[part], parse_expression());
  }
  ++pos_;
  auto expr = make_expr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kIndex, line);
  expr->add(std::move(object));
  if (!is_slice && !parts[0]) return syntax_error(line, "empty subscript");
  for (int i = 0; i < (is_slice ? 3 : 1); ++i) expr->add(std::move(parts[i]));
  return ExprPtr(std::move(expr));
}

Status ExprParser::parse_call_args(Expr& call) {
  KVTIER_RETURN_IF_ERROR(expect_op("("));
  while (!accept_op(")")) {
    if (call.args.size() > 1 || !call.keywords.empty()) KVTIER_RETURN_IF_ERROR(expect_op(","));
    if (accept_op(")")) break;
    if (is_op("*") || is_op("**")) return syntax_error(peek().line, "*args and **kwargs are not supported");
    if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
      std::string name = tokens_[pos_].text;
      pos_ += 2;
      KVTIER_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      call.add_keyword(std::move(name), std::move(value));
      continue;
    }
    if (!call.keywords.empty()) return syntax_error(peek().line, "positional argument after keyword argument");
    KVTIER_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
    call.add(std::move(value));
  }
  return Status::Ok();
}

Result<ExprPtr> ExprParser::parse_filters_and_tests(ExprPtr expr) {
  for (;;) {
    KVTIER_RETURN_IF_ERROR(check_height(*expr));
    const int line = peek().line;
    if (accept_op("|")) {
      KVTIER_ASSIGN_OR_RETURN(std::string name, expect_identifier());
      if (!is_known_filter(name)) return syntax_error(line, "unsupported filter '" + name + "'");
      auto filter = make_expr(Expr::Kind::kFilter, line, name);
      filter->add(std::move(expr));
      if (is_op("(")) KVTIER_RETURN_IF_ERROR(parse_call_args(*filter));
      expr = std::move(filter);
    } else if (accept_name("is")) {
      const bool negated = accept_name("not");
      KVTIER_ASSIGN_OR_RETURN(std::string name, expect_identifier());
      if (!is_known_test(name)) return syntax_error(line, "unsupported test '" + name + "'");
      auto test = make_expr(Expr::Kind::kTest, line, name);
      test->negated = negated;
      test->add(std::move(expr));
      if (is_op("(")) {
        KVTIER_RETURN_IF_ERROR(parse_call_args(*test));
      } else if (takes_bare_test_argument()) {
        KVTIER_ASSIGN_OR_RETURN(ExprPtr argument, parse_primary());
        KVTIER_ASSIGN_OR_RETURN(argument, parse_postfix(std::move(argument)));
        test->add(std::move(argument));
      }
      expr = std::move(test);
    } else {
      return expr;
    }
  }
}

bool ExprParser::takes_bare_test_argument() const {
  const Token& token = peek();
  if (token.kind == Token::Kind::kName) return token.text != "else" && token.text != "or" && token.text != "and";
  return token.kind == Token::Kind::kString || token.kind == Token::Kind::kInteger ||
         token.kind == Token::Kind::kFloat || is_op("[") || is_op("{");
}

}  // namespace kvtier::text::jinja
