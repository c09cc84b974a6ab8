#include "text/jinja/jinja_parser.h"

#include <set>

#include "text/jinja/jinja_expr_parser.h"
#include "text/jinja/jinja_lexer.h"

namespace kvtier::text::jinja {
namespace {

Status syntax_error(int line, const std::string& what) {
  return Status::InvalidArgument("jinja: line " + std::to_string(line) + ": " + what);
}

// A statement tag: its keyword and a parser positioned after it.
struct Tag {
  std::string keyword;
  int line = 0;
  std::unique_ptr<ExprParser> parser;
};

class StatementParser {
 public:
  explicit StatementParser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  Result<std::shared_ptr<const Body>> parse_all() {
    Tag end_tag;
    KVTIER_ASSIGN_OR_RETURN(Body body, parse_body({}, end_tag));
    return std::make_shared<const Body>(std::move(body));
  }

 private:
  // Parses nodes until a statement whose keyword is in `terminators` (returned in `end_tag`)
  // or, when `terminators` is empty, the end of the template.
  Result<Body> parse_body(const std::set<std::string>& terminators, Tag& end_tag) {
    if (++depth_ > kMaxParseDepth) return syntax_error(current_line(), "statements nested too deeply");
    Body body;
    while (index_ < segments_.size()) {
      const Segment& segment = segments_[index_++];
      if (segment.kind == Segment::Kind::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->line = segment.line;
        node->text = segment.text;
        body.push_back(std::move(node));
        continue;
      }
      KVTIER_ASSIGN_OR_RETURN(auto tokens, tokenize_expression(segment.text, segment.line));
      auto parser = std::make_unique<ExprParser>(std::move(tokens));
      if (segment.kind == Segment::Kind::kExpression) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = segment.line;
        KVTIER_ASSIGN_OR_RETURN(node->expr, parser->parse_tuple());
        KVTIER_RETURN_IF_ERROR(parser->expect_end());
        body.push_back(std::move(node));
        continue;
      }
      KVTIER_ASSIGN_OR_RETURN(std::string keyword, parser->expect_identifier());
      Tag tag{keyword, segment.line, std::move(parser)};
      if (terminators.count(keyword) != 0) {
        end_tag = std::move(tag);
        --depth_;
        return body;
      }
      KVTIER_ASSIGN_OR_RETURN(NodePtr node, parse_statement(tag));
      body.push_back(std::move(node));
    }
    if (!terminators.empty()) {
      return syntax_error(current_line(), "missing {% " + *terminators.rbegin() + " %} at end of template");
    }
    --depth_;
    return body;
  }

  int current_line() const { return segments_.empty() ? 1 : segments_[std::min(index_, segments_.size() - 1)].line; }

  Result<NodePtr> parse_statement(Tag& tag) {
    const std::string& keyword = tag.keyword;
    if (keyword == "if") return parse_if(tag);
    if (keyword == "for") return parse_for(tag);
    if (keyword == "set") return parse_set(tag);
    if (keyword == "macro") return parse_macro(tag);
    if (keyword == "generation") return parse_scope(tag, "endgeneration");
    if (keyword == "break" || keyword == "continue") {
      if (loop_depth_ == 0) return syntax_error(tag.line, "'" + keyword + "' outside of a for loop");
      KVTIER_RETURN_IF_ERROR(tag.parser->expect_end());
      auto node = std::make_unique<Node>();
      node->kind = keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      node->line = tag.line;
      return NodePtr(std::move(node));
    }
    static const std::set<std::string> kEnds = {"endif", "endfor", "endset", "endmacro", "endgeneration", "elif", "else"};
    if (kEnds.count(keyword) != 0) return syntax_error(tag.line, "unexpected '" + keyword + "'");
    return syntax_error(tag.line, "unsupported statement '" + keyword + "'");
  }

  // A block whose body renders in a scope of its own, closed by `end`.
  Result<NodePtr> parse_scope(Tag& tag, const std::string& end) {
    KVTIER_RETURN_IF_ERROR(tag.parser->expect_end());
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kScope;
    node->line = tag.line;
    Tag end_tag;
    KVTIER_ASSIGN_OR_RETURN(node->body, parse_body({end}, end_tag));
    KVTIER_RETURN_IF_ERROR(end_tag.parser->expect_end());
    return NodePtr(std::move(node));
  }

  Result<NodePtr> parse_if(Tag& tag) {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kIf;
    node->line = tag.line;
    KVTIER_ASSIGN_OR_RETURN(ExprPtr condition, tag.parser->parse_tuple());
    KVTIER_RETURN_IF_ERROR(tag.parser->expect_end());
    for (;;) {
      Tag end_tag;
      KVTIER_ASSIGN_OR_RETURN(Body body, parse_body({"elif", "else", "endif"}, end_tag));
      node->branches.emplace_back(std::move(condition), std::move(body));
      if (end_tag.keyword == "elif") {
        KVTIER_ASSIGN_OR_RETURN(condition, end_tag.parser->parse_tuple());
        KVTIER_RETURN_IF_ERROR(end_tag.parser->expect_end());
        continue;
      }
      KVTIER_RETURN_IF_ERROR(end_tag.parser->expect_end());
      if (end_tag.keyword == "else") {
        Tag final_tag;
        KVTIER_ASSIGN_OR_RETURN(node->else_body, parse_body({"endif"}, final_tag));
        KVTIER_RETURN_IF_ERROR(final_tag.parser->expect_end());
      }
      return NodePtr(std::move(node));
    }
  }

  Status parse_targets(ExprParser& parser, std::vector<std::string>& targets) {
    const bool parenthesized = parser.accept_op("(");
    do {
      if (parenthesized && parser.is_op(")")) break;
      KVTIER_ASSIGN_OR_RETURN(std::string name, parser.expect_identifier());
      targets.push_back(std::move(name));
    } while (parser.accept_op(","));
    if (parenthesized) KVTIER_RETURN_IF_ERROR(parser.expect_op(")"));
    return Status::Ok();
  }

  Result<NodePtr> parse_for(Tag& tag) {
    ExprParser& parser = *tag.parser;
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kFor;
    node->line = tag.line;
    KVTIER_RETURN_IF_ERROR(parse_targets(parser, node->targets));
    if (!parser.accept_name("in")) return syntax_error(tag.line, "expected 'in' in for loop");
    KVTIER_ASSIGN_OR_RETURN(node->expr, parser.parse_expression(/*with_conditional=*/false));
    if (parser.accept_name("if")) {
      KVTIER_ASSIGN_OR_RETURN(node->condition, parser.parse_expression());
    }
    if (parser.accept_name("recursive")) return syntax_error(tag.line, "recursive for loops are not supported");
    KVTIER_RETURN_IF_ERROR(parser.expect_end());
    ++loop_depth_;
    Tag end_tag;
    KVTIER_ASSIGN_OR_RETURN(node->body, parse_body({"else", "endfor"}, end_tag));
    --loop_depth_;
    KVTIER_RETURN_IF_ERROR(end_tag.parser->expect_end());
    if (end_tag.keyword == "else") {
      Tag final_tag;
      KVTIER_ASSIGN_OR_RETURN(node->else_body, parse_body({"endfor"}, final_tag));
      KVTIER_RETURN_IF_ERROR(final_tag.parser->expect_end());
    }
    return NodePtr(std::move(node));
  }

  Result<NodePtr> parse_set(Tag& tag) {
    ExprParser& parser = *tag.parser;
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kSet;
    node->line = tag.line;
    KVTIER_ASSIGN_OR_RETURN(std::string first, parser.expect_identifier());
    node->targets.push_back(std::move(first));
    if (parser.accept_op(".")) {
      KVTIER_ASSIGN_OR_RETURN(node->attribute, parser.expect_identifier());
    } else {
      while (parser.accept_op(",")) {
        KVTIER_ASSIGN_OR_RETURN(std::string name, parser.expect_identifier());
        node->targets.push_back(std::move(name));
      }
    }
    if (parser.at_end()) {  // block set: {% set x %}...{% endset %}
      if (node->targets.size() != 1 || !node->attribute.empty()) {
        return syntax_error(tag.line, "block set takes one plain name");
      }
      node->kind = Node::Kind::kSetBlock;
      Tag end_tag;
      KVTIER_ASSIGN_OR_RETURN(node->body, parse_body({"endset"}, end_tag));
      KVTIER_RETURN_IF_ERROR(end_tag.parser->expect_end());
      return NodePtr(std::move(node));
    }
    if (parser.is_op("|")) return syntax_error(tag.line, "filtered block set is not supported");
    KVTIER_RETURN_IF_ERROR(parser.expect_op("="));
    KVTIER_ASSIGN_OR_RETURN(node->expr, parser.parse_tuple());
    KVTIER_RETURN_IF_ERROR(parser.expect_end());
    return NodePtr(std::move(node));
  }

  Result<NodePtr> parse_macro(Tag& tag) {
    ExprParser& parser = *tag.parser;
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kMacro;
    node->line = tag.line;
    KVTIER_ASSIGN_OR_RETURN(node->name, parser.expect_identifier());
    KVTIER_RETURN_IF_ERROR(parser.expect_op("("));
    while (!parser.accept_op(")")) {
      if (!node->params.empty()) KVTIER_RETURN_IF_ERROR(parser.expect_op(","));
      if (parser.accept_op(")")) break;
      MacroParam param;
      KVTIER_ASSIGN_OR_RETURN(param.name, parser.expect_identifier());
      if (parser.accept_op("=")) {
        KVTIER_ASSIGN_OR_RETURN(param.default_value, parser.parse_expression());
      } else if (!node->params.empty() && node->params.back().default_value) {
        return syntax_error(tag.line, "non-default argument follows default argument");
      }
      node->params.push_back(std::move(param));
    }
    KVTIER_RETURN_IF_ERROR(parser.expect_end());
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    Tag end_tag;
    KVTIER_ASSIGN_OR_RETURN(node->body, parse_body({"endmacro"}, end_tag));
    loop_depth_ = saved_loop_depth;
    KVTIER_RETURN_IF_ERROR(end_tag.parser->expect_end());
    return NodePtr(std::move(node));
  }

  std::vector<Segment> segments_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Body>> parse_template(std::string_view source) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<Segment> segments, split_template(source));
  StatementParser parser(std::move(segments));
  return parser.parse_all();
}

}  // namespace kvtier::text::jinja
