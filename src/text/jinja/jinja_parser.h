// The Jinja parser: template text → syntax tree (jinja_ast.h), with jinja2's
// grammar and operator precedence. It accepts the statements chat templates
// use (if/elif/else, for with else/filter/unpacking, break/continue, set in
// its three forms, macro) and rejects anything else at parse time with a
// message naming the construct: other statements (include, extends, call,
// filter blocks, raw...), unknown filters and tests, and the mutating methods
// (append, update, pop...) that Hugging Face's immutable sandbox forbids.
// Nesting is capped so a hostile template cannot exhaust the stack.
// Pure function; safe from any thread.
#pragma once

#include <memory>
#include <string_view>

#include "kvtier/status.h"
#include "text/jinja/jinja_ast.h"

namespace kvtier::text::jinja {

inline constexpr int kMaxParseDepth = 128;
// The deepest expression tree (Expr::height): chains of operators, filters and calls are built
// in loops, so kMaxParseDepth alone does not bound them.
inline constexpr int kMaxExprHeight = 256;

Result<std::shared_ptr<const Body>> parse_template(std::string_view source);

}  // namespace kvtier::text::jinja
