// Python's operators on jinja::Value, as jinja2 evaluates them: arithmetic
// (+ - * / // % ** with int overflow as an error), ~ concatenation,
// comparisons, `in`. Strings and lists built here respect the render's size
// caps (CallContext). Pure functions; safe from any thread.
#pragma once

#include <string_view>

#include "kvtier/status.h"
#include "text/jinja/jinja_interpreter.h"
#include "text/jinja/jinja_value.h"

namespace kvtier::text::jinja {

// op: + - * / // % ** ~ == != < <= > >= in "not in".
Result<Value> binary_operator(CallContext& context, std::string_view op, const Value& lhs, const Value& rhs);
// op: - +.
Result<Value> unary_operator(std::string_view op, const Value& operand);
// The error jinja2 raises when an undefined value is used.
Status undefined_error(const Value& undefined);

}  // namespace kvtier::text::jinja
