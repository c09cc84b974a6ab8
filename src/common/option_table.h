// Option tables: each operator-facing option declared once, as one row.
//
// A row names the option everywhere it can be given — its TOML key
// ("section.name"), its command-line flag, its Python keyword — with its
// help text, its value kind, how to parse and print it, and whether it is a
// secret. The flag parser (common/option_flags.h), the server's TOML reader
// and writer and `--print-config`, the stats' `config` block, the Python
// bindings, `kvtier replay` and `kvtier config --markdown` (docs/CONFIG.md)
// all iterate the same rows, so an option cannot drift between them. The
// models are llama.cpp's common/arg.cpp and RocksDB's OptionTypeInfo.
//
// Parsing validates the value itself (range, choices); rules that relate
// options to each other live in the config struct's validate(). Defaults
// are the config struct's member initializers: a row's default is its print
// of a default-constructed struct. Secret rows print as "<set>" or "".
// Tables are immutable after construction and safe to read from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/option_values.h"
#include "kvtier/status.h"

namespace kvtier {

// The kind decides the TOML type a key takes and how docs show the value.
enum class OptionKind : uint8_t { kString, kBool, kUint, kNumber, kSize, kDuration, kEnum };

// Where a row is offered besides the server (which offers every row).
enum OptionScope : uint8_t { kScopeServe = 1, kScopeReplay = 2 };

struct OptionInfo {
  std::string_view key;          // TOML "section.name"; the name is the stats' config key
  std::string_view flag;         // "--disk-codec"; a bool's "--x" sets true, "--no-x" false; empty: none
  std::string_view python = {};  // kvtier.Cache keyword; empty: not offered there
  std::string_view help = {};    // a bool's help says what its flag does
  std::string_view unset = {};   // what an empty default means, for help and docs ("none: no disk tier")
  bool secret = false;           // never printed, logged or returned: shown as "<set>"
  uint8_t scopes = kScopeServe;
};

template <class T>
struct Option {
  OptionInfo info;
  OptionKind kind = OptionKind::kString;
  std::string choices;  // enums: "none, q8, q4"
  std::function<Status(T&, std::string_view)> parse;
  std::function<std::string(const T&)> print;

  std::string_view section() const { return info.key.substr(0, info.key.find('.')); }
  std::string_view name() const { return info.key.substr(info.key.find('.') + 1); }
  // The value as it may be shown: secrets hidden.
  std::string shown(const T& c) const {
    if (!info.secret) return print(c);
    return print(c).empty() ? "" : "<set>";
  }
  std::string default_text() const {
    const T defaults;  // not T{}: GCC 12 misreports aggregate bases under -Wmaybe-uninitialized
    return shown(defaults);
  }
  // Parses `text` into `c`; errors name the option as `origin` calls it.
  Status apply(T& c, std::string_view text, std::string_view origin) const {
    // What --print-config shows in place of a secret is not one: a printed config read back made
    // "<set>" the API key, which then let anyone in.
    if (info.secret && text == "<set>")
      return Status::InvalidArgument(std::string(origin) + ": '" + std::string(text) +
                                     "' is the placeholder printed for a secret, not the secret: give it (or its file)");
    Status st = parse(c, text);
    if (st.ok()) return st;
    return Status::InvalidArgument(std::string(origin) + ": " + st.message());
  }
};

template <class T>
using OptionTable = std::vector<Option<T>>;

// A field of the config: `KVTIER_FIELD(host_bytes)`, for the row makers.
#define KVTIER_FIELD(member) [](auto& c) -> auto& { return c.member; }

template <class T, class Get>
Option<T> string_option(OptionInfo info, Get get) {
  return {info, OptionKind::kString, {},
          [get](T& c, std::string_view s) {
            get(c) = std::string(s);
            return Status::Ok();
          },
          [get](const T& c) { return std::string(get(c)); }};
}

template <class T, class Get>
Option<T> bool_option(OptionInfo info, Get get) {
  return {info, OptionKind::kBool, {},
          [get](T& c, std::string_view s) -> Status {
            KVTIER_ASSIGN_OR_RETURN(get(c), parse_bool(s));
            return Status::Ok();
          },
          [get](const T& c) { return std::string(get(c) ? "true" : "false"); }};
}

template <class T, class Get>
Option<T> uint_option(OptionInfo info, Get get, uint64_t lo, uint64_t hi) {
  return {info, OptionKind::kUint, {},
          [get, lo, hi](T& c, std::string_view s) -> Status {
            KVTIER_ASSIGN_OR_RETURN(const uint64_t v, parse_uint(s, lo, hi));
            get(c) = static_cast<std::remove_reference_t<decltype(get(c))>>(v);
            return Status::Ok();
          },
          [get](const T& c) { return std::to_string(get(c)); }};
}

template <class T, class Get>
Option<T> number_option(OptionInfo info, Get get, double lo, double hi) {
  return {info, OptionKind::kNumber, {},
          [get, lo, hi](T& c, std::string_view s) -> Status {
            KVTIER_ASSIGN_OR_RETURN(const double v, parse_number(s, lo, hi));
            get(c) = static_cast<std::remove_reference_t<decltype(get(c))>>(v);
            return Status::Ok();
          },
          [get](const T& c) { return format_number(get(c)); }};
}

// Bytes, at least `lo`.
template <class T, class Get>
Option<T> size_option(OptionInfo info, Get get, uint64_t lo = 0) {
  return {info, OptionKind::kSize, {},
          [get, lo](T& c, std::string_view s) -> Status {
            KVTIER_ASSIGN_OR_RETURN(const uint64_t v, parse_size(s));
            if (v < lo) return Status::InvalidArgument(format_size(v) + " is below the minimum " + format_size(lo));
            get(c) = static_cast<std::remove_reference_t<decltype(get(c))>>(v);
            return Status::Ok();
          },
          [get](const T& c) { return format_size(get(c)); }};
}

// Seconds.
template <class T, class Get>
Option<T> duration_option(OptionInfo info, Get get) {
  return {info, OptionKind::kDuration, {},
          [get](T& c, std::string_view s) -> Status {
            KVTIER_ASSIGN_OR_RETURN(get(c), parse_duration(s));
            return Status::Ok();
          },
          [get](const T& c) { return format_number(get(c)); }};
}

// An enum through its own parse and name functions; `choices` lists the names.
template <class T, class Get, class Parse, class Name>
Option<T> enum_option(OptionInfo info, Get get, Parse parse, Name name, std::string choices) {
  return {info, OptionKind::kEnum, std::move(choices),
          [get, parse](T& c, std::string_view s) -> Status {
            KVTIER_ASSIGN_OR_RETURN(get(c), parse(s));
            return Status::Ok();
          },
          [get, name](const T& c) { return std::string(name(get(c))); }};
}

// The rows of a table of `Inner`, reached inside an `Outer` through `get`.
template <class Outer, class Inner, class Get>
void append_options(OptionTable<Outer>& out, const OptionTable<Inner>& rows, Get get) {
  for (const Option<Inner>& r : rows)
    out.push_back(Option<Outer>{r.info, r.kind, r.choices,
                                [p = r.parse, get](Outer& c, std::string_view s) { return p(get(c), s); },
                                [p = r.print, get](const Outer& c) { return p(get(c)); }});
}

// The row of `table` with this TOML key ("cache.disk_codec"); null when none.
template <class T>
const Option<T>* find_option(const OptionTable<T>& table, std::string_view key) {
  for (const Option<T>& r : table)
    if (r.info.key == key) return &r;
  return nullptr;
}

// The row offered to Python as `keyword`; null when none.
template <class T>
const Option<T>* find_python_option(const OptionTable<T>& table, std::string_view keyword) {
  for (const Option<T>& r : table)
    if (!r.info.python.empty() && r.info.python == keyword) return &r;
  return nullptr;
}

std::string_view option_kind_name(OptionKind kind);

// docs/CONFIG.md: text safe in a Markdown table cell, and the same as code (empty stays empty).
std::string markdown_cell(std::string_view text);
std::string markdown_code(std::string_view text);
// The rows of `table` in TOML section `section` as a Markdown table
// (key, flag, Python, kind, default, what), with its header.
template <class T>
std::string option_rows_markdown(const OptionTable<T>& table, std::string_view section) {
  std::string out = "| key | flag | Python | kind | default | what |\n|---|---|---|---|---|---|\n";
  for (const Option<T>& row : table) {
    if (row.section() != section) continue;
    std::string what = markdown_cell(row.info.help);
    if (!row.choices.empty()) what += " (" + markdown_cell(row.choices) + ")";
    if (row.info.secret) what += " Secret: never printed, logged or returned.";
    if (row.info.scopes & kScopeReplay) what += " *replay*";
    const std::string d = row.default_text();
    std::string dflt = markdown_code(d);
    if (d.empty() && !row.info.unset.empty()) (dflt = "(") += markdown_cell(row.info.unset) + ")";
    out += "| `" + std::string(row.name()) + "` | " + markdown_code(row.info.flag) + " | " + markdown_code(row.info.python) +
           " | " + std::string(option_kind_name(row.kind)) + " | " + dflt + " | " + what + " |\n";
  }
  return out;
}

}  // namespace kvtier
