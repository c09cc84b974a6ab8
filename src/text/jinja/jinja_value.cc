#include "text/jinja/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/jinja/jinja_strings.h"

namespace kvtier::text::jinja {
namespace {

// Containers nest at most this deep in repr/tojson/==; deeper is an error, not a stack overflow.
constexpr int kMaxNesting = kMaxValueNesting;
// repr and tojson stop (and fail) beyond this many bytes, whatever the render's own cap.
constexpr size_t kMaxTextBytes = size_t{64} << 20;

bool python_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  return true;
}

void append_hex(std::string& out, const char* prefix, uint32_t value, int digits) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%0*x", digits, value);
  out += prefix;
  out += buffer;
}

std::string string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const char32_t c = decode_utf8(text, pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!python_printable(c)) {
      if (c < 0x100) append_hex(out, "\\x", c, 2);
      else if (c < 0x10000) append_hex(out, "\\u", c, 4);
      else append_hex(out, "\\U", c, 8);
    } else {
      out += text.substr(start, pos - start);
    }
  }
  out += quote;
  return out;
}

Status nesting_error() { return Status::InvalidArgument("jinja: value nested too deeply"); }

bool repr_into(std::string& out, const Value& value, int depth);

bool repr_sequence(std::string& out, const List& list, int depth) {
  out += list.tuple ? '(' : '[';
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) out += ", ";
    if (!repr_into(out, list.items[i], depth + 1)) return false;
  }
  if (list.tuple && list.items.size() == 1) out += ',';
  out += list.tuple ? ')' : ']';
  return true;
}

bool repr_entries(std::string& out, const std::vector<std::pair<std::string, Value>>& entries, int depth) {
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ", ";
    out += string_repr(entries[i].first);
    out += ": ";
    if (!repr_into(out, entries[i].second, depth + 1)) return false;
  }
  out += '}';
  return true;
}

// Appends repr(value); false when nested deeper than kMaxNesting (the output is then cut short).
bool repr_into(std::string& out, const Value& value, int depth) {
  if (depth > kMaxNesting || out.size() > kMaxTextBytes) return false;
  if (value.is_string()) {
    if (value.is_markup()) out += "Markup(";
    out += string_repr(value.as_string());
    if (value.is_markup()) out += ")";
  } else if (value.is_list()) {
    return repr_sequence(out, value.as_list(), depth);
  } else if (value.is_dict()) {
    return repr_entries(out, value.as_dict().entries, depth);
  } else if (value.is_namespace()) {
    out += "<Namespace ";
    const bool ok = repr_entries(out, value.as_namespace().attributes, depth);
    out += '>';
    return ok;
  } else if (value.is_undefined()) {
    out += "Undefined";
  } else {
    out += to_str(value);
  }
  return true;
}

// Python's json string encoder: ensure_ascii escapes everything outside 0x20..0x7E (astral code
// points as surrogate pairs); without it only '"', '\\' and control characters are escaped.
void json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  out += '"';
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const char32_t c = decode_utf8(text, pos);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          append_hex(out, "\\u", c, 4);
        } else if (c < 0x7F || !ensure_ascii) {
          out.append(text.substr(start, pos - start));
        } else if (c < 0x10000) {
          append_hex(out, "\\u", c, 4);
        } else {  // a surrogate pair
          const char32_t offset = c - 0x10000;
          append_hex(out, "\\u", 0xD800 + (offset >> 10), 4);
          append_hex(out, "\\u", 0xDC00 + (offset & 0x3FF), 4);
        }
    }
  }
  out += '"';
}

void json_newline(std::string& out, const JsonFormat& f, int depth) {
  if (!f.indent) return;
  out += '\n';
  for (int i = 0; i < depth; ++i) out += *f.indent;
}

Status json_into(std::string& out, const Value& value, const JsonFormat& f, int depth);

Status json_object(std::string& out, const std::vector<std::pair<std::string, Value>>& entries, const JsonFormat& f,
                   int depth) {
  if (entries.empty()) {
    out += "{}";
    return Status::Ok();
  }
  std::vector<const std::pair<std::string, Value>*> order;
  for (const auto& entry : entries) order.push_back(&entry);
  if (f.sort_keys) std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });
  out += '{';
  for (size_t i = 0; i < order.size(); ++i) {
    if (i > 0) out += f.item_separator();
    json_newline(out, f, depth + 1);
    json_string(out, order[i]->first, f.ensure_ascii);
    out += f.key_separator;
    KVTIER_RETURN_IF_ERROR(json_into(out, order[i]->second, f, depth + 1));
  }
  json_newline(out, f, depth);
  out += '}';
  return Status::Ok();
}

Status json_array(std::string& out, const List& list, const JsonFormat& f, int depth) {
  if (list.items.empty()) {
    out += "[]";
    return Status::Ok();
  }
  out += '[';
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) out += f.item_separator();
    json_newline(out, f, depth + 1);
    KVTIER_RETURN_IF_ERROR(json_into(out, list.items[i], f, depth + 1));
  }
  json_newline(out, f, depth);
  out += ']';
  return Status::Ok();
}

Status json_into(std::string& out, const Value& value, const JsonFormat& f, int depth) {
  if (depth > kMaxNesting) return nesting_error();
  if (out.size() > kMaxTextBytes) return Status::OutOfRange("jinja: tojson output too large");
  if (value.is_none()) {
    out += "null";
  } else if (value.is_bool()) {
    out += value.as_bool() ? "true" : "false";
  } else if (value.is_int()) {
    out += std::to_string(value.as_int());
  } else if (value.is_float()) {
    const double number = value.as_float();
    if (std::isnan(number)) out += "NaN";
    else if (std::isinf(number)) out += number > 0 ? "Infinity" : "-Infinity";
    else out += float_repr(number);
  } else if (value.is_string()) {
    json_string(out, value.as_string(), f.ensure_ascii);
  } else if (value.is_list()) {
    return json_array(out, value.as_list(), f, depth);
  } else if (value.is_dict()) {
    return json_object(out, value.as_dict().entries, f, depth);
  } else {
    const std::string type = value.is_undefined() ? "Undefined" : std::string(value.type_name());
    return Status::InvalidArgument("Object of type " + type + " is not JSON serializable");
  }
  return Status::Ok();
}

bool equals_at(const Value& lhs, const Value& rhs, int depth);

bool entries_equal(const Dict& lhs, const Dict& rhs, int depth) {
  if (lhs.entries.size() != rhs.entries.size()) return false;
  for (const auto& [key, value] : lhs.entries) {
    const Value* other = rhs.find(key);
    if (other == nullptr || !equals_at(value, *other, depth + 1)) return false;
  }
  return true;
}

bool equals_at(const Value& lhs, const Value& rhs, int depth) {
  if (depth > kMaxNesting) return false;
  if (lhs.is_number() && rhs.is_number()) {
    if (lhs.is_float() || rhs.is_float()) return lhs.to_double() == rhs.to_double();
    return lhs.to_int() == rhs.to_int();
  }
  if (lhs.storage().index() != rhs.storage().index()) return false;
  if (lhs.is_undefined() || lhs.is_none()) return true;
  if (lhs.is_string()) return lhs.as_string() == rhs.as_string();
  if (lhs.is_list()) {
    const List& a = lhs.as_list();
    const List& b = rhs.as_list();
    if (a.tuple != b.tuple || a.items.size() != b.items.size()) return false;
    for (size_t i = 0; i < a.items.size(); ++i) {
      if (!equals_at(a.items[i], b.items[i], depth + 1)) return false;
    }
    return true;
  }
  if (lhs.is_dict()) return entries_equal(lhs.as_dict(), rhs.as_dict(), depth);
  if (lhs.is_callable()) return &lhs.as_callable() == &rhs.as_callable();
  return &lhs.as_namespace() == &rhs.as_namespace();
}

template <class Json>
Value from_json_impl(const Json& json, int depth) {
  if (depth > kMaxNesting) return Value::undefined("JSON nested too deeply");
  switch (json.type()) {
    case nlohmann::json::value_t::null: return NoneType{};
    case nlohmann::json::value_t::boolean: return json.template get<bool>();
    case nlohmann::json::value_t::number_integer: return json.template get<int64_t>();
    case nlohmann::json::value_t::number_unsigned: {
      const auto number = json.template get<uint64_t>();
      if (number > static_cast<uint64_t>(INT64_MAX)) return static_cast<double>(number);
      return static_cast<int64_t>(number);
    }
    case nlohmann::json::value_t::number_float: return json.template get<double>();
    case nlohmann::json::value_t::string: return json.template get<std::string>();
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      for (const auto& item : json) items.push_back(from_json_impl(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> entries;
      for (auto it = json.begin(); it != json.end(); ++it) {
        entries.emplace_back(it.key(), from_json_impl(it.value(), depth + 1));
      }
      return Value::dict(std::move(entries));
    }
    default: return NoneType{};
  }
}

Result<nlohmann::ordered_json> to_json_at(const Value& value, int depth) {
  if (depth > kMaxNesting) return nesting_error();
  if (value.is_none()) return nlohmann::ordered_json(nullptr);
  if (value.is_bool()) return nlohmann::ordered_json(value.as_bool());
  if (value.is_int()) return nlohmann::ordered_json(value.as_int());
  if (value.is_float()) return nlohmann::ordered_json(value.as_float());
  if (value.is_string()) return nlohmann::ordered_json(value.as_string());
  if (value.is_list()) {
    auto array = nlohmann::ordered_json::array();
    for (const Value& item : value.as_list().items) {
      KVTIER_ASSIGN_OR_RETURN(auto converted, to_json_at(item, depth + 1));
      array.push_back(std::move(converted));
    }
    return array;
  }
  if (value.is_dict()) {
    auto object = nlohmann::ordered_json::object();
    for (const auto& [key, item] : value.as_dict().entries) {
      KVTIER_ASSIGN_OR_RETURN(auto converted, to_json_at(item, depth + 1));
      object[key] = std::move(converted);
    }
    return object;
  }
  return Status::InvalidArgument("Object of type " + std::string(value.type_name()) + " is not JSON serializable");
}

}  // namespace

int nesting_depth(const Value& value) {
  if (value.is_list()) return value.as_list().depth;
  if (value.is_dict()) return value.as_dict().depth;
  return 0;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, nesting_depth(item));
  return Value(std::make_shared<const List>(List{std::move(items), tuple, depth + 1}));
}

Value Value::dict(std::vector<std::pair<std::string, Value>> entries) {
  int depth = 0;
  for (const auto& entry : entries) depth = std::max(depth, nesting_depth(entry.second));
  return Value(std::make_shared<const Dict>(Dict{std::move(entries), depth + 1}));
}

bool Value::truthy() const {
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_float() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().items.empty();
  if (is_dict()) return !as_dict().entries.empty();
  return is_callable() || is_namespace();
}

std::string_view Value::type_name() const {
  static constexpr std::string_view kNames[] = {"Undefined", "NoneType", "bool", "int",      "float",
                                                "str",       "list",     "dict", "function", "Namespace"};
  if (is_list() && as_list().tuple) return "tuple";
  return kNames[v_.index()];
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

const Value* Namespace::find(std::string_view key) const {
  for (const auto& entry : attributes) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void Namespace::set(const std::string& key, Value value) {
  for (auto& entry : attributes) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  attributes.emplace_back(key, std::move(value));
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);  // "-d.ddde+XX"
  const bool negative = scientific[0] == '-';
  if (negative) scientific.erase(0, 1);
  const size_t e_pos = scientific.find('e');
  const int exponent = std::stoi(scientific.substr(e_pos + 1));
  std::string digits = scientific.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exponent_text[16];
  std::snprintf(exponent_text, sizeof exponent_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exponent_text;
}

std::string to_str(const Value& value) {
  if (value.is_undefined()) return "";
  if (value.is_none()) return "None";
  if (value.is_bool()) return value.as_bool() ? "True" : "False";
  if (value.is_int()) return std::to_string(value.as_int());
  if (value.is_float()) return float_repr(value.as_float());
  if (value.is_string()) return value.as_string();
  if (value.is_callable()) {
    const Callable& callable = value.as_callable();
    return callable.is_macro ? "<Macro '" + callable.name + "'>" : "<built-in function " + callable.name + ">";
  }
  return to_repr(value);
}

std::string to_repr(const Value& value) {
  std::string out;
  if (!repr_into(out, value, 0)) out += "...";
  return out;
}

bool equals(const Value& lhs, const Value& rhs) { return equals_at(lhs, rhs, 0); }

Result<bool> less_than(const Value& lhs, const Value& rhs) {
  if (lhs.is_number() && rhs.is_number()) {
    if (lhs.is_float() || rhs.is_float()) return lhs.to_double() < rhs.to_double();
    return lhs.to_int() < rhs.to_int();
  }
  if (lhs.is_string() && rhs.is_string()) return lhs.as_string() < rhs.as_string();
  if (lhs.is_list() && rhs.is_list()) {
    const auto& a = lhs.as_list().items;
    const auto& b = rhs.as_list().items;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (equals(a[i], b[i])) continue;
      return less_than(a[i], b[i]);
    }
    return a.size() < b.size();
  }
  return Status::InvalidArgument("'<' not supported between instances of '" + std::string(lhs.type_name()) +
                                 "' and '" + std::string(rhs.type_name()) + "'");
}

Result<std::string> to_json_text(const Value& value, const JsonFormat& format) {
  std::string out;
  KVTIER_RETURN_IF_ERROR(json_into(out, value, format, 0));
  return out;
}

Value from_json(const nlohmann::json& json) { return from_json_impl(json, 0); }
Value from_json(const nlohmann::ordered_json& json) { return from_json_impl(json, 0); }

Result<nlohmann::ordered_json> to_json(const Value& value) {
  return to_json_at(value, 0);
}

}  // namespace kvtier::text::jinja
