// Command-line flags from an option table (common/option_table.h) on a CLI11
// app: every row with a flag becomes one, grouped by its TOML section, its
// help ending in its default. A flag holds its text until apply(), which
// parses the given ones onto a config in table order, so flags can be laid
// over defaults or a config file. A bool row gets both spellings: its flag
// (`--blend`, `--no-cache`) and the opposite (`--no-blend`, `--cache`), which
// exclude each other. Not thread-safe: used once at startup;
// the table must outlive the OptionFlags.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <deque>
#include <optional>
#include <string>

#include "common/option_table.h"

namespace kvtier {

template <class T>
class OptionFlags {
 public:
  // Registers the rows offered in `scope` (kScopeServe: every row with a
  // flag), but for the TOML keys in `except` (a caller's own flags).
  void add(CLI::App& app, const OptionTable<T>& table, uint8_t scope = kScopeServe,
           std::initializer_list<std::string_view> except = {}) {
    for (const Option<T>& row : table) {
      if (row.info.flag.empty() || !(row.info.scopes & scope)) continue;
      if (std::find(except.begin(), except.end(), row.info.key) != except.end()) continue;
      Slot& s = slots_.emplace_back(Slot{&row});
      const std::string flag(row.info.flag), help = help_text(row);
      CLI::Option* o = nullptr;
      if (row.kind == OptionKind::kBool) {
        const bool negative = flag.starts_with("--no-");
        o = app.add_flag_callback(flag, [&s, negative] { s.text = negative ? "false" : "true"; }, help);
        app.add_flag_callback(opposite(flag), [&s, negative] { s.text = negative ? "true" : "false"; },
                              "the opposite of " + flag)
            ->group(group_name(row.section()))
            ->excludes(o);
      } else {
        o = app.add_option(flag, s.text, help);
      }
      o->group(group_name(row.section()));
    }
  }

  // Parses every flag that was given onto `config`; errors name the flag.
  Status apply(T& config) const {
    for (const Slot& s : slots_)
      if (s.text) KVTIER_RETURN_IF_ERROR(s.row->apply(config, *s.text, s.row->info.flag));
    return Status::Ok();
  }

  // "--no-x" for "--x" and "--x" for "--no-x".
  static std::string opposite(std::string_view flag) {
    return flag.starts_with("--no-") ? "--" + std::string(flag.substr(5)) : "--no-" + std::string(flag.substr(2));
  }

 private:
  struct Slot {
    const Option<T>* row;
    std::optional<std::string> text;  // a bool flag's "true"/"false"
  };

  static std::string help_text(const Option<T>& row) {
    std::string h(row.info.help);
    if (row.kind == OptionKind::kBool) return h;
    if (!row.choices.empty()) h += ": " + row.choices;
    const std::string d = row.default_text();
    if (!d.empty()) return h + " (default: " + d + ")";
    if (!row.info.unset.empty()) return h + " (default: " + std::string(row.info.unset) + ")";
    return h;
  }

  static std::string group_name(std::string_view section) {
    std::string g(section);
    if (!g.empty()) g[0] = char(std::toupper(static_cast<unsigned char>(g[0])));
    return g;
  }

  std::deque<Slot> slots_;  // stable addresses: CLI11 writes into them
};

}  // namespace kvtier
