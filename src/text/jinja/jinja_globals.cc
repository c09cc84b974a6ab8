#include "text/jinja/jinja_globals.h"

#include <cstdio>
#include <ctime>
#include <unordered_map>

#include "text/jinja/jinja_interpreter.h"

namespace kvtier::text::jinja {
namespace {

Value make_builtin(std::string name, std::function<Result<Value>(CallContext&, CallArgs&)> body) {
  auto callable = std::make_shared<Callable>();
  callable->name = std::move(name);
  callable->call = std::move(body);
  return CallablePtr(std::move(callable));
}

Result<int64_t> int_argument(const Value& value, std::string_view function) {
  if (value.is_int() || value.is_bool()) return value.to_int();
  std::string message = "'";
  message += value.type_name();
  message += "' object cannot be interpreted as an integer (";
  message += function;
  message += ")";
  return Status::InvalidArgument(std::move(message));
}

Result<Value> range_function(CallContext& context, CallArgs& args) {
  if (args.positional.empty() || args.positional.size() > 3 || !args.keyword.empty()) {
    return Status::InvalidArgument("range expected 1 to 3 positional arguments");
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(bounds[i], int_argument(args.positional[i], "range"));
  }
  if (args.positional.size() == 1) std::swap(bounds[0], bounds[1]);
  const auto [start, stop, step] = bounds;
  if (step == 0) return Status::InvalidArgument("range() arg 3 must not be zero");
  // Counting in __int128 cannot overflow for any int64 bounds.
  const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
  const __int128 magnitude = step > 0 ? step : -__int128{step};
  const __int128 count = span <= 0 ? 0 : (span + magnitude - 1) / magnitude;
  if (count > static_cast<__int128>(SIZE_MAX)) return context.check_items(SIZE_MAX);
  KVTIER_RETURN_IF_ERROR(context.check_items(static_cast<size_t>(count)));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (__int128 i = 0; i < count; ++i) items.emplace_back(static_cast<int64_t>(start + i * step));
  return Value::list(std::move(items));
}

Result<Value> namespace_function(CallContext& context, CallArgs& args) {
  Namespace* space = context.make_namespace();
  auto set = [&](const std::string& key, const Value& value) {  // kept, so bounded as `set` bounds it
    if (nesting_depth(value) > kMaxValueNesting) return Status::InvalidArgument("jinja: value nested too deeply");
    space->set(key, value);
    return Status::Ok();
  };
  for (const Value& positional : args.positional) {
    if (!positional.is_dict()) return Status::InvalidArgument("namespace() takes mappings as positional arguments");
    for (const auto& [key, value] : positional.as_dict().entries) KVTIER_RETURN_IF_ERROR(set(key, value));
  }
  for (const auto& [key, value] : args.keyword) KVTIER_RETURN_IF_ERROR(set(key, value));
  return Value(space);
}

Result<Value> dict_function(CallContext&, CallArgs& args) {
  std::vector<std::pair<std::string, Value>> entries;
  if (args.positional.size() > 1 || (args.positional.size() == 1 && !args.positional[0].is_dict())) {
    return Status::InvalidArgument("dict() takes one mapping and keyword arguments");
  }
  if (!args.positional.empty()) entries = args.positional[0].as_dict().entries;
  for (const auto& [key, value] : args.keyword) {
    bool replaced = false;
    for (auto& entry : entries) {
      if (entry.first == key) entry.second = value, replaced = true;
    }
    if (!replaced) entries.emplace_back(key, value);
  }
  return Value::dict(std::move(entries));
}

Result<Value> raise_exception_function(CallContext&, CallArgs& args) {
  const std::string message = args.positional.empty() ? std::string() : to_str(args.positional[0]);
  return Status::FailedPrecondition(message);
}

Result<Value> strftime_now_function(CallContext& context, CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string()) {
    return Status::InvalidArgument("strftime_now(format) takes one string");
  }
  std::string text = format_utc_time(args.positional[0].as_string(), context.now_unix_seconds());
  KVTIER_RETURN_IF_ERROR(context.check_size(text.size()));
  return Value(std::move(text));
}

void append_number(std::string& out, int value, int width, char pad = '0') {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, pad == '0' ? "%0*d" : "%*d", width, value);
  out += buffer;
}

}  // namespace

const Value* find_global(const std::string& name) {
  static const auto* const kGlobals = new std::unordered_map<std::string, Value>{
      {"range", make_builtin("range", range_function)},
      {"namespace", make_builtin("namespace", namespace_function)},
      {"dict", make_builtin("dict", dict_function)},
      {"raise_exception", make_builtin("raise_exception", raise_exception_function)},
      {"strftime_now", make_builtin("strftime_now", strftime_now_function)},
  };
  auto it = kGlobals->find(name);
  return it == kGlobals->end() ? nullptr : &it->second;
}

std::string format_utc_time(std::string_view format, int64_t unix_seconds) {
  static constexpr const char* kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
  static constexpr const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                            "July",    "August",   "September", "October", "November", "December"};
  const auto seconds = static_cast<std::time_t>(unix_seconds);
  std::tm time{};
  gmtime_r(&seconds, &time);
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size()) {
      out += format[i];
      continue;
    }
    const char directive = format[++i];
    switch (directive) {
      case 'a': out += std::string(kDays[time.tm_wday]).substr(0, 3); break;
      case 'A': out += kDays[time.tm_wday]; break;
      case 'b': out += std::string(kMonths[time.tm_mon]).substr(0, 3); break;
      case 'B': out += kMonths[time.tm_mon]; break;
      case 'd': append_number(out, time.tm_mday, 2); break;
      case 'e': append_number(out, time.tm_mday, 2, ' '); break;
      case 'H': append_number(out, time.tm_hour, 2); break;
      case 'I': append_number(out, time.tm_hour % 12 == 0 ? 12 : time.tm_hour % 12, 2); break;
      case 'j': append_number(out, time.tm_yday + 1, 3); break;
      case 'm': append_number(out, time.tm_mon + 1, 2); break;
      case 'M': append_number(out, time.tm_min, 2); break;
      case 'p': out += time.tm_hour < 12 ? "AM" : "PM"; break;
      case 'S': append_number(out, time.tm_sec, 2); break;
      case 'y': append_number(out, (time.tm_year + 1900) % 100, 2); break;
      case 'Y': append_number(out, time.tm_year + 1900, 1); break;
      case 'Z': out += "UTC"; break;
      case 'z': out += "+0000"; break;
      case 'F': out += format_utc_time("%Y-%m-%d", unix_seconds); break;
      case 'T': out += format_utc_time("%H:%M:%S", unix_seconds); break;
      case 'D': out += format_utc_time("%m/%d/%y", unix_seconds); break;
      case '%': out += '%'; break;
      default: out += '%'; out += directive;
    }
  }
  return out;
}

}  // namespace kvtier::text::jinja
