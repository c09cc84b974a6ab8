// Filters and tests (declared in jinja_builtins.h).
#include "text/jinja/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/strings.h"
#include "text/jinja/jinja_interpreter.h"
#include "text/jinja/jinja_operators.h"
#include "text/jinja/jinja_strings.h"

namespace kvtier::text::jinja {
namespace {

constexpr std::string_view kFilters[] = {
    "abs",   "attr",   "capitalize", "count",      "d",      "default", "escape", "e",       "first",
    "float", "indent", "int",        "items",      "join",   "last",    "length", "list",    "lower",
    "map",   "max",    "min",        "reject",     "rejectattr", "replace", "reverse", "round", "safe",
    "select", "selectattr", "sort",  "string",     "sum",    "title",   "tojson", "trim",    "unique",
    "upper", "wordcount"};

constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq",     "equalto", "escaped", "even",     "false",
    "float",   "ge",       "greaterthan", "gt",      "in",     "integer", "iterable", "le",      "lessthan",
    "lower",   "lt",       "mapping", "ne",          "none",   "number",  "odd",     "sameas",   "sequence",
    "string",  "true",     "undefined", "upper"};

Status filter_type_error(std::string_view filter, const Value& value) {
  return Status::InvalidArgument("filter '" + std::string(filter) + "' cannot take a value of type '" +
                                 std::string(value.type_name()) + "'");
}

Result<Value> length_filter(const Value& value) {
  if (value.is_string()) return Value(static_cast<int64_t>(code_point_count(value.as_string())));
  if (value.is_list()) return Value(static_cast<int64_t>(value.as_list().items.size()));
  if (value.is_dict()) return Value(static_cast<int64_t>(value.as_dict().entries.size()));
  if (value.is_undefined()) return Value(int64_t{0});
  return Status::InvalidArgument("object of type '" + std::string(value.type_name()) + "' has no len()");
}

// Parses Python int()/float() text (surrounding whitespace allowed, underscores between digits).
std::optional<Value> parse_number(std::string text, bool want_float) {
  text = py_strip(text, std::nullopt, true, true);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  if (!want_float) {
    errno = 0;
    const long long integer = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() + text.size() && errno == 0) return Value(static_cast<int64_t>(integer));
  }
  const double number = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  if (want_float) return Value(number);
  if (!std::isfinite(number) || std::fabs(number) >= 9.2e18) return std::nullopt;
  return Value(static_cast<int64_t>(number));
}

Result<Value> number_filter(std::string_view name, const Value& value, CallArgs& args) {
  const bool want_float = name == "float";
  KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"default", "base"}));
  const Value fallback = bound[0].is_undefined() ? (want_float ? Value(0.0) : Value(int64_t{0})) : bound[0];
  if (value.is_number()) {
    if (want_float) return Value(value.to_double());
    if (!value.is_float()) return Value(value.to_int());
    if (!std::isfinite(value.as_float()) || std::fabs(value.as_float()) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(value.as_float()));
  }
  if (value.is_string()) {
    if (auto parsed = parse_number(value.as_string(), want_float)) return *parsed;
  }
  return fallback;
}

Result<Value> first_or_last(std::string_view name, const Value& value) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  if (items.empty()) return Value::undefined("No " + std::string(name) + " item, sequence was empty.");
  return name == "first" ? items.front() : items.back();
}

// Looks up a dotted attribute path on an item, as jinja2's attribute getters do.
Result<Value> attribute_path(const Value& item, const Value& path) {
  if (path.is_int()) return get_item(item, path);
  if (!path.is_string()) return Status::InvalidArgument("attribute name must be a string");
  Value current = item;
  for (const std::string& part : py_split(path.as_string(), std::string("."), -1)) {
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    KVTIER_ASSIGN_OR_RETURN(current, numeric ? get_item(current, Value(static_cast<int64_t>(std::atoll(part.c_str()))))
                                             : get_item(current, Value(part)));
  }
  return current;
}

Result<Value> join_filter(CallContext& context, const Value& value, CallArgs& args) {
  KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments("join", args, {"d", "attribute"}));
  const std::string separator = bound[0].is_undefined() ? "" : to_str(bound[0]);
  KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!bound[1].is_undefined()) {
      KVTIER_ASSIGN_OR_RETURN(item, attribute_path(item, bound[1]));
    }
    if (i > 0) out += separator;
    out += to_str(item);
    KVTIER_RETURN_IF_ERROR(context.check_size(out.size()));
  }
  return Value(std::move(out));
}

// select/reject/selectattr/rejectattr: args are [attribute,] [test name, test args...].
Result<Value> select_filter(CallContext& context, std::string_view name, const Value& value, CallArgs& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep_passing = name == "select" || name == "selectattr";
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) return Status::InvalidArgument(std::string(name) + " needs an attribute");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return Status::InvalidArgument("test name must be a string");
    test = args.positional[next++].as_string();
    if (!is_known_test(test)) return Status::InvalidArgument("unsupported test '" + test + "'");
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  std::vector<Value> kept;
  for (const Value& item : items) {
    KVTIER_RETURN_IF_ERROR(context.charge(1));
    Value subject = item;
    if (by_attribute) {
      KVTIER_ASSIGN_OR_RETURN(subject, attribute_path(item, attribute));
    }
    bool passed = subject.truthy();
    if (!test.empty()) {
      KVTIER_ASSIGN_OR_RETURN(passed, apply_test(context, test, subject, test_args));
    }
    if (passed == keep_passing) kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

Result<Value> map_filter(CallContext& context, const Value& value, CallArgs& args) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  std::vector<Value> mapped;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [key, keyword_value] : args.keyword) {
    if (key == "attribute") attribute = &keyword_value;
    else if (key == "default") fallback = &keyword_value;
    else return Status::InvalidArgument("map() got an unexpected keyword argument '" + key + "'");
  }
  if (attribute == nullptr && (args.positional.empty() || !args.positional[0].is_string())) {
    return Status::InvalidArgument("map needs attribute= or a filter name");
  }
  // Each string of the result is its own copy: together they are held to the output cap, checked
  // as they come (200 copies of one 8 MB string took 3 GB).
  size_t bytes = 0;
  auto keep = [&](Value v) {
    const size_t n = v.is_string() ? v.as_string().size() : 0;
    bytes += n;
    KVTIER_RETURN_IF_ERROR(context.check_size(bytes));
    KVTIER_RETURN_IF_ERROR(context.charge(1 + n / 1024));
    mapped.push_back(std::move(v));
    return Status::Ok();
  };
  for (const Value& item : items) {
    if (attribute != nullptr) {
      KVTIER_ASSIGN_OR_RETURN(Value result, attribute_path(item, *attribute));
      KVTIER_RETURN_IF_ERROR(keep(result.is_undefined() && fallback != nullptr ? *fallback : std::move(result)));
      continue;
    }
    const std::string filter = args.positional[0].as_string();
    if (!is_known_filter(filter) || filter == "map") return Status::InvalidArgument("unsupported filter '" + filter + "'");
    CallArgs filter_args;
    filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
    KVTIER_ASSIGN_OR_RETURN(Value result, apply_filter(context, filter, item, filter_args));
    KVTIER_RETURN_IF_ERROR(keep(std::move(result)));
  }
  return Value::list(std::move(mapped));
}

// Sort key of jinja2's case-insensitive filters: strings lowered.
Value fold_case(const Value& value, bool case_sensitive) {
  return value.is_string() && !case_sensitive ? Value(py_lower(value.as_string())) : value;
}

Result<Value> ordering_filter(CallContext& context, std::string_view name, const Value& value, CallArgs& args) {
  const bool is_sort = name == "sort";
  KVTIER_ASSIGN_OR_RETURN(auto bound, is_sort ? bind_arguments(name, args, {"reverse", "case_sensitive", "attribute"})
                                              : bind_arguments(name, args, {"case_sensitive", "attribute"}));
  const bool reverse = is_sort && bound[0].truthy();
  const bool case_sensitive = bound[is_sort ? 1 : 0].truthy();
  const Value& attribute = bound[is_sort ? 2 : 1];
  KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = item;
    if (!attribute.is_undefined()) {
      KVTIER_ASSIGN_OR_RETURN(key, attribute_path(item, attribute));
    }
    keyed.emplace_back(fold_case(key, case_sensitive), item);
  }
  KVTIER_RETURN_IF_ERROR(context.charge(keyed.size()));
  Status status;
  auto less = [&status](const std::pair<Value, Value>& a, const std::pair<Value, Value>& b) {
    auto result = less_than(a.first, b.first);
    if (!result.ok()) status = result.status();
    return result.ok() && *result;
  };
  if (name == "min" || name == "max") {
    if (keyed.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto it = name == "min" ? std::min_element(keyed.begin(), keyed.end(), less)
                            : std::max_element(keyed.begin(), keyed.end(), less);
    KVTIER_RETURN_IF_ERROR(status);
    return it->second;
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) { return reverse ? less(b, a) : less(a, b); });
  KVTIER_RETURN_IF_ERROR(status);
  std::vector<Value> sorted;
  for (auto& entry : keyed) sorted.push_back(std::move(entry.second));
  return Value::list(std::move(sorted));
}

Result<Value> sum_filter(CallContext& context, const Value& value, CallArgs& args) {
  KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments("sum", args, {"attribute", "start"}));
  Value total = bound[1].is_undefined() ? Value(int64_t{0}) : bound[1];
  KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  for (const Value& item : items) {
    Value term = item;
    if (!bound[0].is_undefined()) {
      KVTIER_ASSIGN_OR_RETURN(term, attribute_path(item, bound[0]));
    }
    // Each `+` copies the total so far: charged by its length (a sum of lists was quadratic unbudgeted).
    KVTIER_RETURN_IF_ERROR(context.charge(1 + (total.is_list() ? total.as_list().items.size() / 64 : 0)));
    KVTIER_ASSIGN_OR_RETURN(total, binary_operator(context, "+", total, term));
  }
  return total;
}

Result<Value> indent_filter(CallContext& context, const Value& value, CallArgs& args) {
  KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments("indent", args, {"width", "first", "blank"}));
  std::string indentation = bound[0].is_string() ? bound[0].as_string()
                            : std::string(bound[0].is_undefined() ? 4 : static_cast<size_t>(std::clamp<int64_t>(bound[0].to_int(), 0, 1000)), ' ');
  std::vector<std::string> lines = py_split(py_replace(to_str(value), "\r\n", "\n", -1), std::string("\n"), -1);
  KVTIER_RETURN_IF_ERROR(context.check_size(to_str(value).size() + lines.size() * indentation.size()));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    const bool indent = (i > 0 || bound[1].truthy()) && (bound[2].truthy() || !lines[i].empty());
    if (indent) out += indentation;
    out += lines[i];
  }
  return Value::string_like(std::move(out), value);
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False): a plain
// string (not markup), arguments in that order.
Result<Value> tojson_filter(CallContext& context, const Value& value, CallArgs& args) {
  KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  JsonFormat f;
  f.ensure_ascii = bound[0].truthy();
  f.sort_keys = bound[3].truthy();
  if (bound[1].is_string()) f.indent = bound[1].as_string();
  else if (bound[1].is_int() || bound[1].is_bool()) f.indent = std::string(size_t(std::clamp<int64_t>(bound[1].to_int(), 0, 1000)), ' ');
  else if (given(bound[1])) return Status::InvalidArgument("tojson: indent must be an integer or a string");
  if (given(bound[2])) {
    const bool pair = bound[2].is_list() && bound[2].as_list().items.size() == 2 &&
                      bound[2].as_list().items[0].is_string() && bound[2].as_list().items[1].is_string();
    if (!pair) return Status::InvalidArgument("tojson: separators must be a pair of strings");
    f.item_separator_override = bound[2].as_list().items[0].as_string();
    f.key_separator = bound[2].as_list().items[1].as_string();
  }
  KVTIER_ASSIGN_OR_RETURN(std::string text, to_json_text(value, f));
  KVTIER_RETURN_IF_ERROR(context.check_size(text.size()));
  return Value(std::move(text));
}

Result<Value> string_filter(CallContext& context, std::string_view name, const Value& value, CallArgs& args) {
  if (name == "trim") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"chars"}));
    std::optional<std::string> chars;
    if (bound[0].is_string()) chars = bound[0].as_string();
    return Value::string_like(py_strip(to_str(value), chars, true, true), value);
  }
  if (name == "replace") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"old", "new", "count"}));
    const long long count = bound[2].is_int() ? bound[2].as_int() : -1;
    const std::string text = to_str(value), old_text = to_str(bound[0]), new_text = to_str(bound[1]);
    KVTIER_RETURN_IF_ERROR(context.check_size(py_replace_size(text, old_text, new_text, count)));
    return Value(py_replace(text, old_text, new_text, count));
  }
  KVTIER_RETURN_IF_ERROR(bind_arguments(name, args, {}).status());
  const std::string text = to_str(value);
  if (name == "upper") return Value::string_like(py_upper(text), value);
  if (name == "lower") return Value::string_like(py_lower(text), value);
  if (name == "title") return Value::string_like(py_title(text), value);
  if (name == "capitalize") return Value::string_like(py_capitalize(text), value);
  if (name == "escape" || name == "e") return value.is_markup() ? value : Value::markup(html_escape(text));
  if (name == "wordcount") return Value(static_cast<int64_t>(py_split(text, std::nullopt, -1).size()));
  return Value::string_like(text, value);  // string
}

Result<Value> collection_filter(CallContext& context, std::string_view name, const Value& value, CallArgs& args) {
  KVTIER_RETURN_IF_ERROR(bind_arguments(name, args, {}).status());
  if (name == "items") {
    if (value.is_undefined()) return Value::list({});
    if (!value.is_dict()) return Status::InvalidArgument("Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [key, item] : value.as_dict().entries) pairs.push_back(Value::list({Value(key), item}, true));
    return Value::list(std::move(pairs));
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
  if (name == "reverse") {
    if (value.is_string()) {
      std::u32string code_points = to_code_points(value.as_string());
      std::reverse(code_points.begin(), code_points.end());
      return Value(from_code_points(code_points));
    }
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    std::vector<Value> seen_keys;
    std::vector<Value> unique;
    for (const Value& item : items) {
      KVTIER_RETURN_IF_ERROR(context.charge(seen_keys.size() + 1));
      const Value key = fold_case(item, false);
      if (std::any_of(seen_keys.begin(), seen_keys.end(), [&](const Value& seen) { return equals(seen, key); })) continue;
      seen_keys.push_back(key);
      unique.push_back(item);
    }
    return Value::list(std::move(unique));
  }
  return Value::list(std::move(items));  // list
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Result<Value> apply_filter(CallContext& context, std::string_view name, const Value& value, CallArgs& args) {
  if (name == "default" || name == "d") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"default_value", "boolean"}));
    const bool use_default = value.is_undefined() || (bound[1].truthy() && !value.truthy());
    if (!use_default) return value;
    return bound[0].is_undefined() ? Value("") : bound[0];
  }
  if (name == "length" || name == "count") return length_filter(value);
  if (name == "safe") return value.is_markup() ? value : Value::markup(to_str(value));
  if (name == "tojson") return tojson_filter(context, value, args);
  if (name == "join") return join_filter(context, value, args);
  if (name == "first" || name == "last") return first_or_last(name, value);
  if (name == "int" || name == "float") return number_filter(name, value, args);
  if (name == "indent") return indent_filter(context, value, args);
  if (name == "map") return map_filter(context, value, args);
  if (name == "sum") return sum_filter(context, value, args);
  if (name == "sort" || name == "min" || name == "max") return ordering_filter(context, name, value, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return select_filter(context, name, value, args);
  }
  if (name == "attr") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"name"}));
    if (!bound[0].is_string()) return Status::InvalidArgument("attr() needs a string");
    return get_attribute(value, bound[0].as_string());
  }
  if (name == "abs" || name == "round") {
    if (value.is_undefined()) return undefined_error(value);
    if (!value.is_number()) return filter_type_error(name, value);
    if (name == "abs") return value.is_float() ? Value(std::fabs(value.as_float())) : unary_operator(value.to_int() < 0 ? "-" : "+", value);
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"precision", "method"}));
    const double scale = std::pow(10.0, bound[0].is_int() ? static_cast<double>(bound[0].as_int()) : 0.0);
    const std::string method = bound[1].is_string() ? bound[1].as_string() : "common";
    const double scaled = value.to_double() * scale;
    const double rounded = method == "floor" ? std::floor(scaled) : method == "ceil" ? std::ceil(scaled) : std::nearbyint(scaled);
    return Value(rounded / scale);
  }
  if (name == "items" || name == "reverse" || name == "unique" || name == "list") {
    return collection_filter(context, name, value, args);
  }
  return string_filter(context, name, value, args);
}

Result<bool> apply_test(CallContext& context, std::string_view name, const Value& value, CallArgs& args) {
  (void)context;
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "boolean") return value.is_bool();
  if (name == "true") return value.is_bool() && value.as_bool();
  if (name == "false") return value.is_bool() && !value.as_bool();
  if (name == "integer") return value.is_int();
  if (name == "float") return value.is_float();
  if (name == "number") return value.is_number();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable") return value.is_undefined() || value.is_string() || value.is_list() || value.is_dict();
  if (name == "sequence") return value.is_string() || value.is_list() || value.is_dict();
  if (name == "callable") return value.is_callable();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!value.is_string()) return false;
    return name == "lower" ? py_lower(value.as_string()) == value.as_string() : py_upper(value.as_string()) == value.as_string();
  }
  if (name == "even" || name == "odd") {
    if (!value.is_int() && !value.is_bool()) return filter_type_error(name, value);
    return (value.to_int() % 2 == 0) == (name == "even");
  }
  KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"other"}));
  const Value& other = bound[0];
  if (name == "divisibleby") {
    if (!value.is_number() || !other.is_number() || other.to_double() == 0) return filter_type_error(name, value);
    if (value.is_float() || other.is_float()) return std::fmod(value.to_double(), other.to_double()) == 0;
    if (other.to_int() == -1) return true;  // INT64_MIN % -1 traps
    return value.to_int() % other.to_int() == 0;
  }
  if (name == "in") return contains(other, value);
  if (name == "sameas") {
    if (value.is_list() && other.is_list()) return &value.as_list() == &other.as_list();
    if (value.is_dict() && other.is_dict()) return &value.as_dict() == &other.as_dict();
    if (value.is_list() || value.is_dict()) return false;
    return value.storage().index() == other.storage().index() && equals(value, other);
  }
  if (name == "eq" || name == "equalto") return equals(value, other);
  if (name == "ne") return !equals(value, other);
  std::string op = name == "lt" || name == "lessthan" ? "<" : name == "le" ? "<=" : name == "ge" ? ">=" : ">";
  KVTIER_ASSIGN_OR_RETURN(Value result, binary_operator(context, op, value, other));
  return result.truthy();
}

}  // namespace kvtier::text::jinja
