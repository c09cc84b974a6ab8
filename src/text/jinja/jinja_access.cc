// Attribute, item and slice access, iteration, `in`, and the methods of
// str/dict/list values (declared in jinja_builtins.h).
#include <algorithm>

#include "text/jinja/jinja_builtins.h"
#include "text/jinja/jinja_interpreter.h"
#include "text/jinja/jinja_operators.h"
#include "text/jinja/jinja_strings.h"

namespace kvtier::text::jinja {
namespace {

bool is_one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool is_string_method(std::string_view name) {
  return is_one_of(name, {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower", "title",
                          "capitalize", "replace", "find", "count", "join", "isdigit", "isalpha", "isspace",
                          "isupper", "islower", "splitlines"});
}
bool is_dict_method(std::string_view name) { return is_one_of(name, {"items", "keys", "values", "get", "copy"}); }
bool is_list_method(std::string_view name) { return is_one_of(name, {"index", "count", "copy"}); }

std::string owner_name(const Value& object) {
  if (object.is_none()) return "None";
  return std::string(object.type_name()) + " object";
}

Value missing_attribute(const Value& object, const std::string& name) {
  return Value::undefined("'" + owner_name(object) + "' has no attribute '" + name + "'");
}

Result<std::optional<std::string>> optional_string(const Value& value, std::string_view function) {
  if (value.is_undefined() || value.is_none()) return std::optional<std::string>();
  if (!value.is_string()) return Status::InvalidArgument(std::string(function) + " arg must be None or str");
  return std::optional<std::string>(value.as_string());
}

Result<Value> string_affix_test(const std::string& text, const Value& affix, bool prefix) {
  std::vector<Value> candidates;
  if (affix.is_list()) candidates = affix.as_list().items;
  else candidates.push_back(affix);
  for (const Value& candidate : candidates) {
    if (!candidate.is_string()) return Status::InvalidArgument("startswith/endswith arg must be str or a tuple of str");
    const std::string& part = candidate.as_string();
    if (part.size() > text.size()) continue;
    if (prefix ? text.compare(0, part.size(), part) == 0 : text.compare(text.size() - part.size(), part.size(), part) == 0) {
      return Value(true);
    }
  }
  return Value(false);
}

Result<Value> string_predicate(const std::string& text, std::string_view name) {
  if (text.empty()) return Value(false);
  bool any_cased = false;
  for (char c : text) {
    const bool digit = c >= '0' && c <= '9';
    const bool upper = c >= 'A' && c <= 'Z';
    const bool lower = c >= 'a' && c <= 'z';
    const bool space = c == ' ' || (c >= '\t' && c <= '\r');
    any_cased = any_cased || upper || lower;
    if (name == "isdigit" && !digit) return Value(false);
    if (name == "isalpha" && !upper && !lower) return Value(false);
    if (name == "isspace" && !space) return Value(false);
    if (name == "isupper" && lower) return Value(false);
    if (name == "islower" && upper) return Value(false);
  }
  return Value(name == "isupper" || name == "islower" ? any_cased : true);
}

Result<Value> call_string_method(CallContext& context, const std::string& text, std::string_view name, CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"chars"}));
    KVTIER_ASSIGN_OR_RETURN(auto chars, optional_string(bound[0], name));
    return Value(py_strip(text, chars, name != "rstrip", name != "lstrip"));  // markup: see bound_method
  }
  if (name == "split" || name == "splitlines") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"sep", "maxsplit"}));
    std::optional<std::string> separator;
    if (name == "splitlines") separator = "\n";
    else {
      KVTIER_ASSIGN_OR_RETURN(separator, optional_string(bound[0], name));
    }
    if (separator && separator->empty()) return Status::InvalidArgument("empty separator");
    const long long max_split = bound[1].is_int() ? bound[1].as_int() : -1;
    std::vector<std::string> parts = py_split(text, separator, max_split);
    if (name == "splitlines" && !parts.empty() && parts.back().empty()) parts.pop_back();
    KVTIER_RETURN_IF_ERROR(context.check_items(parts.size()));
    std::vector<Value> items(parts.begin(), parts.end());
    return Value::list(std::move(items));
  }
  if (name == "startswith" || name == "endswith") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"prefix"}));
    return string_affix_test(text, bound[0], name == "startswith");
  }
  if (name == "upper") return Value(py_upper(text));
  if (name == "lower") return Value(py_lower(text));
  if (name == "title") return Value(py_title(text));
  if (name == "capitalize") return Value(py_capitalize(text));
  if (name == "replace") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"old", "new", "count"}));
    if (!bound[0].is_string() || !bound[1].is_string()) return Status::InvalidArgument("replace() takes strings");
    const long long count = bound[2].is_int() ? bound[2].as_int() : -1;
    KVTIER_RETURN_IF_ERROR(context.check_size(py_replace_size(text, bound[0].as_string(), bound[1].as_string(), count)));
    return Value(py_replace(text, bound[0].as_string(), bound[1].as_string(), count));
  }
  if (name == "find" || name == "count") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"sub"}));
    if (!bound[0].is_string()) return Status::InvalidArgument(std::string(name) + "() takes a string");
    const std::string& needle = bound[0].as_string();
    if (name == "find") {
      const size_t found = find_text(text, needle);
      if (found == std::string::npos) return Value(-1);
      return Value(static_cast<int64_t>(code_point_count(std::string_view(text).substr(0, found))));
    }
    if (needle.empty()) return Value(static_cast<int64_t>(code_point_count(text) + 1));
    int64_t count = 0;
    for (size_t pos = find_text(text, needle); pos != std::string::npos; pos = find_text(text, needle, pos + needle.size()))
      ++count;
    return Value(count);
  }
  if (name == "join") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"iterable"}));
    KVTIER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(bound[0]));
    std::string result;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return Status::InvalidArgument("sequence item " + std::to_string(i) + ": expected str instance");
      if (i > 0) result += text;
      result += items[i].as_string();
      KVTIER_RETURN_IF_ERROR(context.check_size(result.size()));
    }
    return Value(std::move(result));
  }
  return string_predicate(text, name);
}

Result<Value> call_dict_method(const Value& object, std::string_view name, CallArgs& args) {
  const Dict& dict = object.as_dict();
  if (name == "get") {
    KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"key", "default"}));
    const Value* found = bound[0].is_string() ? dict.find(bound[0].as_string()) : nullptr;
    if (found != nullptr) return *found;
    return bound[1].is_undefined() ? Value(NoneType{}) : bound[1];
  }
  KVTIER_RETURN_IF_ERROR(bind_arguments(name, args, {}).status());
  if (name == "copy") return object;
  std::vector<Value> items;
  for (const auto& [key, value] : dict.entries) {
    if (name == "keys") items.emplace_back(key);
    else if (name == "values") items.push_back(value);
    else items.push_back(Value::list({Value(key), value}, /*tuple=*/true));
  }
  return Value::list(std::move(items));
}

Result<Value> call_list_method(const Value& object, std::string_view name, CallArgs& args) {
  if (name == "copy") return object;
  KVTIER_ASSIGN_OR_RETURN(auto bound, bind_arguments(name, args, {"value"}));
  const auto& items = object.as_list().items;
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], bound[0])) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return Status::InvalidArgument(to_repr(bound[0]) + " is not in list");
  return Value(count);
}

Value bound_method(const Value& object, const std::string& name) {
  auto method = std::make_shared<Callable>();
  method->name = "method " + name + " of " + std::string(object.type_name()) + " object";
  method->call = [object, name](CallContext& context, CallArgs& args) -> Result<Value> {
    if (object.is_string()) {
      KVTIER_ASSIGN_OR_RETURN(Value result, call_string_method(context, object.as_string(), name, args));
      // Markup's wrapped methods return Markup.
      const bool keeps_markup = name == "strip" || name == "lstrip" || name == "rstrip" || name == "upper" ||
                                name == "lower" || name == "title" || name == "capitalize" || name == "replace";
      return keeps_markup && result.is_string() ? Value::string_like(result.as_string(), object) : result;
    }
    if (object.is_dict()) return call_dict_method(object, name, args);
    return call_list_method(object, name, args);
  };
  return CallablePtr(std::move(method));
}

// Python's slice.indices(length) for one bound.
int64_t slice_bound(const Value& bound, int64_t length, int64_t step, bool is_start) {
  if (bound.is_undefined() || bound.is_none()) {
    if (step > 0) return is_start ? 0 : length;
    return is_start ? length - 1 : -1;
  }
  int64_t index = bound.to_int();
  if (index < 0) {
    index += length;
    if (index < 0) index = step > 0 ? 0 : -1;
  } else if (index >= length) {
    index = step > 0 ? length : length - 1;
  }
  return index;
}

}  // namespace

bool is_mutating_method(std::string_view name) {
  return is_one_of(name, {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
                          "setdefault", "popitem", "add", "discard"});
}

Result<std::vector<Value>> bind_arguments(std::string_view function, const CallArgs& args,
                                          std::initializer_list<std::string_view> names) {
  std::vector<Value> bound(names.size());
  if (args.positional.size() > names.size()) {
    return Status::InvalidArgument(std::string(function) + "() takes at most " + std::to_string(names.size()) +
                                   " argument(s)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return Status::InvalidArgument(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
    }
    bound[static_cast<size_t>(it - names.begin())] = value;
  }
  return bound;
}

Result<Value> get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) return undefined_error(object);
  if (object.is_dict()) {
    if (is_dict_method(name)) return bound_method(object, name);
    if (const Value* found = object.as_dict().find(name)) return *found;
  } else if (object.is_namespace()) {
    if (const Value* found = object.as_namespace().find(name)) return *found;
  } else if (object.is_string() && is_string_method(name)) {
    return bound_method(object, name);
  } else if (object.is_list() && is_list_method(name)) {
    return bound_method(object, name);
  }
  return missing_attribute(object, name);
}

Result<Value> get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) return undefined_error(object);
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    const bool is_list = object.is_list();
    std::u32string code_points;
    if (!is_list) code_points = to_code_points(object.as_string());
    const auto length = static_cast<int64_t>(is_list ? object.as_list().items.size() : code_points.size());
    int64_t index = key.to_int();
    if (index < 0) index += length;
    if (index < 0 || index >= length) {
      return Value::undefined("'" + owner_name(object) + "' has no element " + std::to_string(key.to_int()));
    }
    if (is_list) return object.as_list().items[static_cast<size_t>(index)];
    std::string character;
    append_utf8(character, code_points[static_cast<size_t>(index)]);
    return Value::string_like(std::move(character), object);
  }
  if (object.is_dict() && key.is_string()) {
    if (const Value* found = object.as_dict().find(key.as_string())) return *found;
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined("'" + owner_name(object) + "' has no element " + to_repr(key));
}

Result<Value> get_slice(const Value& object, const Value& start, const Value& stop, const Value& step_value) {
  if (object.is_undefined()) return undefined_error(object);
  for (const Value* bound : {&start, &stop, &step_value}) {
    if (!bound->is_undefined() && !bound->is_none() && !bound->is_int() && !bound->is_bool()) {
      return Status::InvalidArgument("slice indices must be integers or None");
    }
  }
  const int64_t step = step_value.is_undefined() || step_value.is_none() ? 1 : step_value.to_int();
  if (step == 0) return Status::InvalidArgument("slice step cannot be zero");
  if (!object.is_list() && !object.is_string()) {
    return Status::InvalidArgument("'" + std::string(object.type_name()) + "' object is not subscriptable");
  }
  const std::u32string code_points = object.is_string() ? to_code_points(object.as_string()) : std::u32string();
  const auto length = static_cast<int64_t>(object.is_list() ? object.as_list().items.size() : code_points.size());
  const int64_t first = slice_bound(start, length, step, true);
  const int64_t last = slice_bound(stop, length, step, false);
  // Counted first, as CPython does: `i += step` overflowed for steps near 2^63 and read outside.
  const uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
  const uint64_t span = step > 0 ? (last > first ? uint64_t(last - first) : 0) : (first > last ? uint64_t(first - last) : 0);
  const uint64_t count = span == 0 ? 0 : (span - 1) / stride + 1;
  std::vector<Value> items;
  std::u32string text;
  for (uint64_t k = 0; k < count; ++k) {
    const auto i = static_cast<size_t>(step > 0 ? uint64_t(first) + k * stride : uint64_t(first) - k * stride);
    if (object.is_list()) items.push_back(object.as_list().items[i]);
    else text.push_back(code_points[i]);
  }
  if (object.is_string()) return Value::string_like(from_code_points(text), object);
  return Value::list(std::move(items), object.as_list().tuple);
}

Result<std::vector<Value>> iterate(const Value& value) {
  if (value.is_undefined()) return std::vector<Value>();
  if (value.is_list()) return value.as_list().items;
  std::vector<Value> items;
  if (value.is_dict()) {
    for (const auto& entry : value.as_dict().entries) items.emplace_back(entry.first);
    return items;
  }
  if (value.is_string()) {
    const std::string& text = value.as_string();
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      decode_utf8(text, pos);
      items.emplace_back(text.substr(start, pos - start));
    }
    return items;
  }
  return Status::InvalidArgument("'" + std::string(value.type_name()) + "' object is not iterable");
}

Result<bool> contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return Status::InvalidArgument("'in <string>' requires string as left operand, not " +
                                     std::string(item.type_name()));
    }
    return find_text(container.as_string(), item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
  if (container.is_list()) {
    for (const Value& element : container.as_list().items) {
      if (equals(element, item)) return true;
    }
    return false;
  }
  if (container.is_undefined()) return false;
  return Status::InvalidArgument("argument of type '" + std::string(container.type_name()) + "' is not iterable");
}

}  // namespace kvtier::text::jinja
