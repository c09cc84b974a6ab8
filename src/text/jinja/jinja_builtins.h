// The builtins of the Jinja interpreter: filters (`x | trim`), tests
// (`x is defined`), methods of str/dict/list values (`s.startswith(...)`,
// `d.items()`), attribute lookup as jinja2 does it, and the names the parser
// checks a template against at load time. Pure functions of their arguments
// (plus the CallContext of the render for limits); safe from any thread.
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "text/jinja/jinja_value.h"

namespace kvtier::text::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
// Methods jinja2 would call but this interpreter refuses (they mutate a value).
bool is_mutating_method(std::string_view name);

Result<Value> apply_filter(CallContext& context, std::string_view name, const Value& subject, CallArgs& args);
Result<bool> apply_test(CallContext& context, std::string_view name, const Value& subject, CallArgs& args);

// `object.name`: a dict key, a method of str/dict/list (bound), a namespace
// attribute; otherwise undefined. Fails only for undefined/None objects, as jinja2 does.
Result<Value> get_attribute(const Value& object, const std::string& name);
// `object[key]`: lists/strings by int (negative from the end), dicts by key,
// falling back to attributes for string keys; undefined when missing.
Result<Value> get_item(const Value& object, const Value& key);
// Python slicing of lists, tuples and strings (by code point).
Result<Value> get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// The items `for` iterates: list items, dict keys, string characters; undefined iterates as empty.
Result<std::vector<Value>> iterate(const Value& value);

// Python's `in`: substring, list membership, dict key.
Result<bool> contains(const Value& container, const Value& item);

// Binds call arguments to parameter names, Python style: one slot per name
// (undefined when not passed). Fails on surplus or unknown arguments.
Result<std::vector<Value>> bind_arguments(std::string_view function, const CallArgs& args,
                                          std::initializer_list<std::string_view> names);

}  // namespace kvtier::text::jinja
