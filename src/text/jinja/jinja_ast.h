// The syntax tree of a parsed Jinja template (jinja_parser.h builds it,
// jinja_interpreter.h runs it). Plain immutable data once built; a parsed
// template is shared by every render, on any thread.
#pragma once

#include <algorithm>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/jinja_value.h"

namespace kvtier::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<const Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal (a scalar or string)
    kName,       // name
    kList,       // args: items
    kTuple,      // args: items
    kDict,       // args: key0, value0, key1, value1...
    kAttribute,  // args[0].name
    kIndex,      // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]] (absent parts are null)
    kCall,       // args[0](args[1:], keywords)
    kFilter,     // args[0] | name(args[1:], keywords)
    kTest,       // args[0] is [not] name(args[1:])
    kUnary,      // name ("-", "+", "not") args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~ == != < <= > >= in "not in"
    kAnd,
    kOr,
    kConditional,  // args[1] if args[0] else args[2] (args[2] may be null)
    kCompareChain,  // args[0] ops[0] args[1] ops[1] args[2] ...: Python's chained comparison
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;  // kCompareChain: the comparison between args[i] and args[i + 1]
  // The longest path from here to a leaf, in nodes: evaluating and freeing recurse that deep, so
  // the parser bounds it (kMaxExprHeight). Kept by add() and add_keyword(), the only ways in.
  int height = 1;

  void add(ExprPtr child) {  // null: an absent part (a slice's)
    if (child) height = std::max(height, child->height + 1);
    args.push_back(std::move(child));
  }
  void add_keyword(std::string key, ExprPtr child) {
    height = std::max(height, child->height + 1);
    keywords.emplace_back(std::move(key), std::move(child));
  }
};

struct Node;
using NodePtr = std::unique_ptr<const Node>;
using Body = std::vector<NodePtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (condition, body); else_body
    kFor,       // for targets in expr [if condition]: body [else: else_body]
    kSet,       // set targets[0][.attribute] = expr; or set (t0, t1...) = expr
    kSetBlock,  // set targets[0] %} body {% endset
    kMacro,     // macro name(params): body
    kScope,     // body in a scope of its own ({% generation %}: transformers' assistant-span marker)
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;  // kSet on a namespace: `set ns.attribute = ...`
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<MacroParam> params;
};

}  // namespace kvtier::text::jinja
