#include "text/jinja/jinja_operators.h"

#include <cmath>

#include "common/strings.h"
#include "text/jinja/jinja_builtins.h"

namespace kvtier::text::jinja {
namespace {

Status type_error(std::string_view op, const Value& lhs, const Value& rhs) {
  return Status::InvalidArgument("unsupported operand type(s) for " + std::string(op) + ": '" +
                                 std::string(lhs.type_name()) + "' and '" + std::string(rhs.type_name()) + "'");
}

Status overflow_error() { return Status::OutOfRange("jinja: integer overflow"); }

// a × b, saturated: a repeat count near 2^63 must not wrap past the size checks.
uint64_t saturated_product(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}

// The bytes of the strings a list holds directly: what copying its items copies (nested lists and
// dicts are shared, not copied).
uint64_t string_bytes(const List& list) {
  uint64_t bytes = 0;
  for (const Value& item : list.items)
    if (item.is_string()) bytes += item.as_string().size();
  return bytes;
}

Result<Value> add(CallContext& context, const Value& lhs, const Value& rhs) {
  if (lhs.is_number() && rhs.is_number()) {
    if (lhs.is_float() || rhs.is_float()) return Value(lhs.to_double() + rhs.to_double());
    int64_t sum = 0;
    if (__builtin_add_overflow(lhs.to_int(), rhs.to_int(), &sum)) return overflow_error();
    return Value(sum);
  }
  if (lhs.is_string()) {
    if (!rhs.is_string()) {
      return Status::InvalidArgument("can only concatenate str (not \"" + std::string(rhs.type_name()) +
                                     "\") to str");
    }
    if (lhs.is_markup() || rhs.is_markup()) {  // Markup.__add__/__radd__ escape the plain operand
      std::string text = lhs.is_markup() ? lhs.as_string() : html_escape(lhs.as_string());
      text += rhs.is_markup() ? rhs.as_string() : html_escape(rhs.as_string());
      KVTIER_RETURN_IF_ERROR(context.check_size(text.size()));
      return Value::markup(std::move(text));
    }
    KVTIER_RETURN_IF_ERROR(context.check_size(lhs.as_string().size() + rhs.as_string().size()));
    return Value(lhs.as_string() + rhs.as_string());
  }
  if (lhs.is_list() && rhs.is_list() && lhs.as_list().tuple == rhs.as_list().tuple) {
    KVTIER_RETURN_IF_ERROR(context.check_items(lhs.as_list().items.size() + rhs.as_list().items.size()));
    KVTIER_RETURN_IF_ERROR(context.check_size(string_bytes(lhs.as_list()) + string_bytes(rhs.as_list())));
    std::vector<Value> items = lhs.as_list().items;
    items.insert(items.end(), rhs.as_list().items.begin(), rhs.as_list().items.end());
    return Value::list(std::move(items), lhs.as_list().tuple);
  }
  return type_error("+", lhs, rhs);
}

Result<Value> repeat(CallContext& context, const Value& sequence, int64_t count) {
  count = std::max<int64_t>(count, 0);
  if (sequence.is_string()) {
    const std::string& text = sequence.as_string();
    if (!text.empty()) KVTIER_RETURN_IF_ERROR(context.check_size(saturated_product(text.size(), uint64_t(count))));
    std::string out;
    for (int64_t i = 0; i < count && !text.empty(); ++i) out += text;
    return Value::string_like(std::move(out), sequence);
  }
  const List& list = sequence.as_list();
  if (!list.items.empty()) {
    KVTIER_RETURN_IF_ERROR(context.check_items(saturated_product(list.items.size(), uint64_t(count))));
    KVTIER_RETURN_IF_ERROR(context.check_size(saturated_product(string_bytes(list), uint64_t(count))));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < count && !list.items.empty(); ++i) items.insert(items.end(), list.items.begin(), list.items.end());
  return Value::list(std::move(items), list.tuple);
}

Result<Value> multiply(CallContext& context, const Value& lhs, const Value& rhs) {
  if (lhs.is_number() && rhs.is_number()) {
    if (lhs.is_float() || rhs.is_float()) return Value(lhs.to_double() * rhs.to_double());
    int64_t product = 0;
    if (__builtin_mul_overflow(lhs.to_int(), rhs.to_int(), &product)) return overflow_error();
    return Value(product);
  }
  const bool lhs_sequence = lhs.is_string() || lhs.is_list();
  const bool rhs_sequence = rhs.is_string() || rhs.is_list();
  if (lhs_sequence && (rhs.is_int() || rhs.is_bool())) return repeat(context, lhs, rhs.to_int());
  if (rhs_sequence && (lhs.is_int() || lhs.is_bool())) return repeat(context, rhs, lhs.to_int());
  return type_error("*", lhs, rhs);
}

Result<Value> divide(std::string_view op, const Value& lhs, const Value& rhs) {
  if (!lhs.is_number() || !rhs.is_number()) {
    if (op == "%" && lhs.is_string()) return Status::Unimplemented("jinja: string formatting with % is not supported");
    return type_error(op, lhs, rhs);
  }
  const bool integral = !lhs.is_float() && !rhs.is_float();
  if (integral ? rhs.to_int() == 0 : rhs.to_double() == 0.0) {
    return Status::InvalidArgument(op == "/" ? "division by zero" : "integer division or modulo by zero");
  }
  if (op == "/") return Value(lhs.to_double() / rhs.to_double());
  if (integral) {
    const int64_t a = lhs.to_int();
    const int64_t b = rhs.to_int();
    if (a == INT64_MIN && b == -1) return overflow_error();
    int64_t quotient = a / b;
    int64_t remainder = a % b;
    if (remainder != 0 && ((remainder < 0) != (b < 0))) {
      --quotient;
      remainder += b;
    }
    return op == "//" ? Value(quotient) : Value(remainder);
  }
  const double a = lhs.to_double();
  const double b = rhs.to_double();
  double remainder = std::fmod(a, b);
  if (remainder != 0.0 && ((remainder < 0) != (b < 0))) remainder += b;
  if (op == "%") return Value(remainder);
  return Value(std::floor(a / b));
}

Result<Value> power(const Value& lhs, const Value& rhs) {
  if (!lhs.is_number() || !rhs.is_number()) return type_error("**", lhs, rhs);
  if (lhs.is_float() || rhs.is_float() || rhs.to_int() < 0) return Value(std::pow(lhs.to_double(), rhs.to_double()));
  const int64_t base = lhs.to_int(), exponent = rhs.to_int();
  if (base == 0 || base == 1) return Value(exponent == 0 ? int64_t(1) : base);
  if (base == -1) return Value(exponent % 2 == 0 ? int64_t(1) : int64_t(-1));  // (-1) ** 3 was 1
  int64_t result = 1;
  for (int64_t e = exponent; e > 0; --e)  // |base| >= 2: an overflow within 63 steps
    if (__builtin_mul_overflow(result, base, &result)) return overflow_error();
  return Value(result);
}

Result<Value> compare(std::string_view op, const Value& lhs, const Value& rhs) {
  if (op == "==") return Value(equals(lhs, rhs));
  if (op == "!=") return Value(!equals(lhs, rhs));
  if (lhs.is_undefined()) return undefined_error(lhs);
  if (rhs.is_undefined()) return undefined_error(rhs);
  if (op == "<") {
    KVTIER_ASSIGN_OR_RETURN(bool result, less_than(lhs, rhs));
    return Value(result);
  }
  if (op == ">") {
    KVTIER_ASSIGN_OR_RETURN(bool result, less_than(rhs, lhs));
    return Value(result);
  }
  if (op == "<=") {
    KVTIER_ASSIGN_OR_RETURN(bool greater, less_than(rhs, lhs));
    return Value(!greater);
  }
  KVTIER_ASSIGN_OR_RETURN(bool less, less_than(lhs, rhs));
  return Value(!less);
}

}  // namespace

Status undefined_error(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return Status::InvalidArgument(hint.empty() ? "value is undefined" : hint);
}

Result<Value> binary_operator(CallContext& context, std::string_view op, const Value& lhs, const Value& rhs) {
  if (op == "~") {
    std::string text = to_str(lhs);
    std::string tail = to_str(rhs);
    KVTIER_RETURN_IF_ERROR(context.check_size(text.size() + tail.size()));
    return Value(text + tail);
  }
  if (op == "==" || op == "!=" || op == "<" || op == "<=" || op == ">" || op == ">=") return compare(op, lhs, rhs);
  if (op == "in" || op == "not in") {
    KVTIER_ASSIGN_OR_RETURN(bool found, contains(rhs, lhs));
    return Value(op == "in" ? found : !found);
  }
  if (lhs.is_undefined()) return undefined_error(lhs);
  if (rhs.is_undefined()) return undefined_error(rhs);
  if (op == "+") return add(context, lhs, rhs);
  if (op == "*") return multiply(context, lhs, rhs);
  if (op == "-") {
    if (!lhs.is_number() || !rhs.is_number()) return type_error("-", lhs, rhs);
    if (lhs.is_float() || rhs.is_float()) return Value(lhs.to_double() - rhs.to_double());
    int64_t difference = 0;
    if (__builtin_sub_overflow(lhs.to_int(), rhs.to_int(), &difference)) return overflow_error();
    return Value(difference);
  }
  if (op == "**") return power(lhs, rhs);
  return divide(op, lhs, rhs);
}

Result<Value> unary_operator(std::string_view op, const Value& operand) {
  if (operand.is_undefined()) return undefined_error(operand);
  if (!operand.is_number()) {
    return Status::InvalidArgument("bad operand type for unary " + std::string(op) + ": '" +
                                   std::string(operand.type_name()) + "'");
  }
  if (op == "+") return operand.is_bool() ? Value(operand.to_int()) : operand;
  if (operand.is_float()) return Value(-operand.as_float());
  if (operand.to_int() == INT64_MIN) return overflow_error();
  return Value(-operand.to_int());
}

}  // namespace kvtier::text::jinja
