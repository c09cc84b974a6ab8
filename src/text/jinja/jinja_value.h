// jinja::Value: the dynamic value of the Jinja interpreter behind ChatTemplate.
//
// It models the Python objects a chat template sees: undefined (jinja2's
// default Undefined: renders as "", is falsy, iterates as empty, fails on
// attribute access and arithmetic), None, bool, int (int64, overflow is an
// error), float, str (UTF-8; lengths and slices count code points), list and
// tuple, dict (string keys, insertion order), callables (macros, builtins,
// bound methods) and namespace objects. str(), repr(), ==, < and tojson
// follow Python and jinja2 byte for byte for the values JSON can express.
//
// Lists and dicts are immutable once built (as in the sandbox Hugging Face
// renders with) and shared by copies, so values cannot form cycles; the one
// mutable object, a namespace, is owned by the render that created it and a
// Value only points at it. Values belong to one render on one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/status.h"

namespace kvtier::text::jinja {

class Value;
struct List;
struct Dict;
struct Callable;
struct Namespace;
class CallContext;  // the render a callable runs in (jinja_interpreter.h)

struct Undefined {
  std::string hint;  // why it is undefined, for the error when it is used
};
struct NoneType {};

using ListPtr = std::shared_ptr<const List>;
using DictPtr = std::shared_ptr<const Dict>;
using CallablePtr = std::shared_ptr<const Callable>;

class Value {
 public:
  using Storage = std::variant<Undefined, NoneType, bool, int64_t, double, std::string, ListPtr, DictPtr,
                               CallablePtr, Namespace*>;

  Value() = default;  // undefined
  Value(Undefined u) : v_(std::move(u)) {}     // NOLINT(implicit)
  Value(NoneType n) : v_(n) {}                 // NOLINT(implicit)
  Value(bool b) : v_(b) {}                     // NOLINT(implicit)
  Value(int64_t i) : v_(i) {}                  // NOLINT(implicit)
  Value(int i) : v_(int64_t{i}) {}             // NOLINT(implicit)
  Value(double d) : v_(d) {}                   // NOLINT(implicit)
  Value(std::string s) : v_(std::move(s)) {}   // NOLINT(implicit)
  Value(const char* s) : v_(std::string(s)) {} // NOLINT(implicit)
  Value(ListPtr l) : v_(std::move(l)) {}       // NOLINT(implicit)
  Value(DictPtr d) : v_(std::move(d)) {}       // NOLINT(implicit)
  Value(CallablePtr c) : v_(std::move(c)) {}   // NOLINT(implicit)
  Value(Namespace* n) : v_(n) {}               // NOLINT(implicit)

  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  // A string marked safe (jinja2's Markup: what tojson, safe and escape return).
  // `+` with a markup string HTML-escapes the other operand, as Markup does.
  static Value markup(std::string text) {
    Value value(std::move(text));
    value.markup_ = true;
    return value;
  }
  // `text` as a string that is markup when `like` is (for methods Markup preserves).
  static Value string_like(std::string text, const Value& like) {
    return like.is_markup() ? markup(std::move(text)) : Value(std::move(text));
  }
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(std::vector<std::pair<std::string, Value>> entries);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<NoneType>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_markup() const { return markup_ && is_string(); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v_); }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v_); }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(v_); }
  bool is_namespace() const { return std::holds_alternative<Namespace*>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }  // also for a bool: 0/1 (see to_int)
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<ListPtr>(v_); }
  const Dict& as_dict() const { return *std::get<DictPtr>(v_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(v_); }
  Namespace& as_namespace() const { return *std::get<Namespace*>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

  // Numbers widened: bool and int to int64 (only for is_bool/is_int), any number to double.
  int64_t to_int() const { return is_bool() ? int64_t{as_bool()} : as_int(); }
  double to_double() const { return is_float() ? as_float() : double(to_int()); }

  // Python truthiness (undefined and None are false).
  bool truthy() const;
  // Python's type name ("str", "int", "dict"...), for error messages.
  std::string_view type_name() const;

  const Storage& storage() const { return v_; }

 private:
  Storage v_;
  bool markup_ = false;
};

struct List {
  std::vector<Value> items;
  bool tuple = false;  // prints with parentheses
  int depth = 1;       // container nesting, including this one
};

struct Dict {
  std::vector<std::pair<std::string, Value>> entries;  // insertion order, unique keys
  int depth = 1;
  const Value* find(std::string_view key) const;
};

// Containers nest at most this deep where a template could keep nesting them
// (namespace attributes); repr, tojson and == give up beyond it.
inline constexpr int kMaxValueNesting = 200;
// How deeply `value` nests containers (0 for scalars).
int nesting_depth(const Value& value);

struct Namespace {
  std::vector<std::pair<std::string, Value>> attributes;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;  // for errors and str(): "<Macro 'name'>" / "<built-in function name>"
  bool is_macro = false;
  std::function<Result<Value>(CallContext&, CallArgs&)> call;
};

// Python str(): what `{{ value }}` prints ("" for undefined, "None", "True", repr of containers).
std::string to_str(const Value& value);
// Python repr().
std::string to_repr(const Value& value);
// Python ==.
bool equals(const Value& lhs, const Value& rhs);
// Python <: numbers, strings (code point order), lists/tuples lexicographically;
// anything else fails as Python's TypeError does.
Result<bool> less_than(const Value& lhs, const Value& rhs);
// Python repr() of a float: shortest round trip, "1.0", "1e+16", "inf".
std::string float_repr(double value);

// Python's json.dumps(value, ensure_ascii=, indent=, separators=, sort_keys=).
// The defaults are transformers' chat-template tojson (keys in insertion
// order, non-ASCII kept, nothing HTML-escaped), which every HF/vLLM server
// renders with; jinja2's own filter differs (sorted keys, <>&' escaped).
struct JsonFormat {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // per level; none: one line
  std::optional<std::string> item_separator_override;  // separators[0]
  std::string key_separator = ": ";                     // separators[1]
  bool sort_keys = false;
  // json.dumps' default item separator: ", " on one line, "," with an indent.
  std::string item_separator() const { return item_separator_override.value_or(indent ? "," : ", "); }
};
Result<std::string> to_json_text(const Value& value, const JsonFormat& format = {});

// JSON → Value (objects keep the json type's key order) and back.
Value from_json(const nlohmann::json& json);
Value from_json(const nlohmann::ordered_json& json);
Result<nlohmann::ordered_json> to_json(const Value& value);

}  // namespace kvtier::text::jinja
