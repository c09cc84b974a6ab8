#include "server/config.h"

#include <map>
#include <sstream>
#include <toml++/toml.h>

#include "common/file_text.h"

namespace kvtier::server {
namespace {

// --tool-parser: "auto" (nullopt: chosen from the chat template) or a parser's name.
Result<std::optional<ToolParser>> parse_tool_parser_choice(std::string_view s) {
  if (s == "auto") return std::optional<ToolParser>();
  if (auto p = parse_tool_parser_name(s)) return std::optional<ToolParser>(*p);
  return Status::InvalidArgument("unknown tool parser '" + std::string(s) + "' (auto, none, hermes, llama3_json, mistral)");
}
std::string_view tool_parser_choice_name(const std::optional<ToolParser>& p) { return p ? tool_parser_name(*p) : "auto"; }

using S = ServerConfig;

OptionTable<S> make_table() {
  OptionTable<S> t;
  t.push_back(string_option<S>({"server.host", "--host", {}, "Listen address"}, KVTIER_FIELD(host)));
  t.push_back(uint_option<S>({"server.port", "--port", {}, "Listen port; 0 picks a free one (printed at startup)"},
                             KVTIER_FIELD(port), 0, 65535));
  t.push_back(string_option<S>({"server.api_key", "--api-key", {},
                                "Legacy: one key for clients (and the admin without --admin-key-file), visible in ps; "
                                "prefer KVTIER_API_KEY or --api-key-file (docs/SECURITY.md)",
                                "none, no authentication", true},
                               KVTIER_FIELD(api_key)));
  t.push_back(string_option<S>({"server.api_key_file", "--api-key-file", {},
                                "File holding the one client key (not readable by every user); else KVTIER_API_KEY", "none"},
                               KVTIER_FIELD(api_key_file)));
  t.push_back(string_option<S>({"server.api_keys_file", "--api-keys-file", {},
                                "Tenant keys, one per line: KEY TENANT [device=SIZE] [host=SIZE] [disk=SIZE]; each "
                                "tenant's requests run in its own namespace; SIGHUP reloads it (docs/SECURITY.md)",
                                "none"},
                               KVTIER_FIELD(api_keys_file)));
  t.push_back(string_option<S>({"server.admin_key_file", "--admin-key-file", {},
                                "File holding the admin key, the only key for flush, the cache's views and /metrics; "
                                "else KVTIER_ADMIN_KEY",
                                "none"},
                               KVTIER_FIELD(admin_key_file)));
  t.push_back(bool_option<S>({"server.metrics_public", "--metrics-public", {},
                              "Serve /metrics without a key (else it needs the admin key when keys are set)"},
                             KVTIER_FIELD(metrics_public)));
  t.push_back(bool_option<S>({"server.dashboard_labels", "--dashboard-labels", {},
                              "Label the dashboard's tree with each node's first words (prompt text; admin only); "
                              "else token counts and hash prefixes"},
                             KVTIER_FIELD(dashboard_labels)));
  t.push_back(string_option<S>({"server.served_model_name", "--served-model-name", {},
                                "Name reported by /v1/models and in responses", "the model option as given"},
                               KVTIER_FIELD(served_model_name)));
  t.push_back(string_option<S>({"model.chat_template", "--chat-template", {},
                                "Jinja chat template file for /v1/chat/completions", "the model's tokenizer.chat_template"},
                               KVTIER_FIELD(chat_template_file)));
  t.push_back(enum_option<S>({"model.tool_parser", "--tool-parser", {},
                              "How tool calls are read out of chat replies: auto (from the chat template), none, hermes, "
                              "llama3_json, mistral (docs/SERVER.md)"},
                             KVTIER_FIELD(tool_parser), parse_tool_parser_choice, tool_parser_choice_name,
                             "auto, none, hermes, llama3_json, mistral"));
  t.push_back(enum_option<S>({"model.reasoning_parser", "--reasoning-parser", {},
                              "think: a chat reply's <think>...</think> goes out as reasoning_content (Qwen3, DeepSeek-R1); "
                              "none: all of it is content (docs/SERVER.md)"},
                             KVTIER_FIELD(reasoning_parser), parse_reasoning_parser, reasoning_parser_name, "none, think"));
  t.push_back(bool_option<S>({"model.reply_splice", "--no-reply-splice", {},
                              "Tokenize every chat prompt from its text instead of reusing the model's own ids for earlier "
                              "replies (whose text may re-tokenize differently and so miss the cache; docs/SERVER.md)"},
                             KVTIER_FIELD(reply_splice)));
  append_options(t, runtime_option_table(), KVTIER_FIELD(runtime));
  t.push_back(string_option<S>({"blend.separator", "--blend-separator", {},
                                "With --blend: text that splits the prompt of a request asking \"kvtier\": "
                                "{\"blend\": true} into reusable segments (its tokens are computed, not reused)",
                                "none"},
                               KVTIER_FIELD(blend_separator)));
  t.push_back(uint_option<S>({"limits.max_queue", "--max-queue", {}, "Waiting requests before 429"},
                             KVTIER_FIELD(limits.max_queue), 1, 1u << 24));
  t.push_back(enum_option<S>({"limits.schedule", "--schedule", {},
                              "Which waiting request starts next: fcfs (arrival order) or cached-first (the least left "
                              "to compute, the prefix cached on the device or host not counted; none waits past 64 "
                              "later ones)"},
                             KVTIER_FIELD(limits.schedule), parse_schedule_policy, schedule_policy_name,
                             "fcfs, cached-first"));
  t.push_back(uint_option<S>({"limits.prefill_chunk_tokens", "--prefill-chunk-tokens", {},
                              "Prompt positions computed between two decode steps, over all prompts (chunked "
                              "prefill): a long prompt holds the streams beside it this long at a time"},
                             KVTIER_FIELD(limits.prefill_chunk_tokens), 1, 1u << 24));
  t.push_back(uint_option<S>({"limits.max_tokens", "--max-tokens", {}, "Largest max_tokens a request may ask for"},
                             KVTIER_FIELD(limits.max_tokens), 1, 1u << 24));
  t.push_back(uint_option<S>({"limits.default_max_tokens", "--default-max-tokens", {}, "max_tokens when a /v1/completions request omits it (a chat request that omits it may generate to the end of the context, at most --max-tokens)"},
                             KVTIER_FIELD(limits.default_max_tokens), 1, 1u << 24));
  t.push_back(uint_option<S>({"limits.max_prompt_tokens", "--max-prompt-tokens", {}, "Longest prompt; 0 = model context"},
                             KVTIER_FIELD(limits.max_prompt_tokens), 0, 1u << 24));
  t.push_back(duration_option<S>({"limits.request_timeout_s", "--request-timeout", {},
                                  "Seconds before a request is cancelled (600, 90s, 10m)"},
                                 KVTIER_FIELD(limits.request_timeout_s)));
  t.push_back(duration_option<S>({"limits.shutdown_grace_s", "--shutdown-grace", {},
                                  "Seconds in-flight requests get after SIGINT/SIGTERM"},
                                 KVTIER_FIELD(limits.shutdown_grace_s)));
  t.push_back(uint_option<S>({"limits.http_threads",
                              "--http-threads",
                              {},
                              "HTTP connection threads, one per request in flight; 0: (max_sequences + max_queue) "
                              "x 4/3 + 8"},
                             KVTIER_FIELD(limits.http_threads), 0, 4096));
  t.push_back(size_option<S>({"limits.max_body_bytes", "--max-body", {}, "Largest request body"},
                             KVTIER_FIELD(limits.max_body_bytes), 1024));
  return t;
}

Status bad(std::string_view origin, std::string_view key, std::string_view what) {
  return Status::InvalidArgument(std::string(origin) + ": '" + std::string(key) + "' " + std::string(what));
}

// A TOML value as the text its row parses, once its TOML type fits the row's kind.
Result<std::string> node_text(const toml::node& n, OptionKind kind, std::string_view origin, std::string_view key) {
  switch (kind) {
    case OptionKind::kBool:
      if (!n.is_boolean()) return bad(origin, key, "must be true or false");
      return std::string(*n.value<bool>() ? "true" : "false");
    case OptionKind::kUint:
      if (!n.is_integer()) return bad(origin, key, "must be an integer");
      return std::to_string(*n.value<int64_t>());
    case OptionKind::kNumber:
    case OptionKind::kDuration:
      if (n.is_integer()) return std::to_string(*n.value<int64_t>());
      if (n.is_floating_point()) return format_number(*n.value<double>());
      if (kind == OptionKind::kDuration && n.is_string()) return *n.value<std::string>();
      return bad(origin, key, "must be a number");
    case OptionKind::kSize:
      if (n.is_integer()) return std::to_string(*n.value<int64_t>());
      if (n.is_string()) return *n.value<std::string>();
      return bad(origin, key, "must be a size (\"8GiB\") or an integer number of bytes");
    case OptionKind::kString:
    case OptionKind::kEnum:
      if (!n.is_string()) return bad(origin, key, "must be a string");
      return *n.value<std::string>();
  }
  return bad(origin, key, "has an unknown kind");
}

std::string toml_value(const Option<S>& row, const S& c) {
  const std::string v = row.shown(c);
  switch (row.kind) {
    case OptionKind::kBool:
    case OptionKind::kUint:
    case OptionKind::kNumber:
    case OptionKind::kDuration: return v;
    default: {
      std::ostringstream os;
      os << toml::value<std::string>(v);
      return os.str();
    }
  }
}

// The table's sections in order of first appearance.
std::vector<std::string_view> sections() {
  std::vector<std::string_view> out;
  for (const Option<S>& row : server_option_table())
    if (std::find(out.begin(), out.end(), row.section()) == out.end()) out.push_back(row.section());
  return out;
}

}  // namespace

const OptionTable<ServerConfig>& server_option_table() {
  static const OptionTable<ServerConfig> table = make_table();
  return table;
}

Status ServerLimits::validate() const {
  if (max_queue == 0) return Status::InvalidArgument("limits.max_queue must be at least 1");
  if (prefill_chunk_tokens == 0) return Status::InvalidArgument("limits.prefill_chunk_tokens must be at least 1");
  if (max_tokens == 0) return Status::InvalidArgument("limits.max_tokens must be at least 1");
  if (default_max_tokens == 0 || default_max_tokens > max_tokens)
    return Status::InvalidArgument("limits.default_max_tokens must be in [1, max_tokens]");
  if (!(request_timeout_s > 0 && request_timeout_s <= kMaxDurationSeconds))
    return Status::InvalidArgument("limits.request_timeout_s must be positive and at most 1e9");
  if (!(shutdown_grace_s >= 0 && shutdown_grace_s <= kMaxDurationSeconds))
    return Status::InvalidArgument("limits.shutdown_grace_s must be in [0, 1e9]");
  if (http_threads == 1) return Status::InvalidArgument("limits.http_threads must be 0 (derived) or at least 2");
  if (max_body_bytes < 1024) return Status::InvalidArgument("limits.max_body_bytes must be at least 1KiB");
  return Status::Ok();
}

namespace {

// Requests that hold a connection thread at once: the running and the queued.
uint64_t requests_in_flight(const ServerConfig& c) { return uint64_t(c.runtime.max_sequences) + c.limits.max_queue; }

}  // namespace

uint32_t ServerConfig::connection_threads() const {
  if (limits.http_threads != 0) return limits.http_threads;
  return uint32_t(std::min<uint64_t>(requests_in_flight(*this) * 4 / 3 + 8, 4096));
}

uint32_t ServerConfig::max_event_listeners() const { return std::max(1u, connection_threads() / 4); }

Status ServerConfig::validate() const {
  if (host.empty()) return Status::InvalidArgument("server.host must not be empty");
  KVTIER_RETURN_IF_ERROR(limits.validate());
  const uint64_t in_flight = requests_in_flight(*this);
  if (connection_threads() <= in_flight + max_event_listeners())
    return Status::InvalidArgument("limits.http_threads (" + std::to_string(connection_threads()) +
                                   ") must exceed max_sequences + max_queue (" + std::to_string(in_flight) +
                                   ") plus a quarter for event listeners: a request beyond the queue must find a "
                                   "thread to be refused with 429 on (0 derives enough)");
  KVTIER_RETURN_IF_ERROR(require_authenticated_remote(runtime));
  return runtime.validate();
}

Status apply_toml(std::string_view toml_text, std::string_view origin, ServerConfig& config) {
  toml::table doc;
  try {
    doc = toml::parse(toml_text, std::string(origin));
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return Status::InvalidArgument(os.str());
  }
  // Apply onto a copy so a failing file leaves `config` untouched.
  ServerConfig next = config;
  const auto known = sections();
  for (const auto& [name, node] : doc) {
    if (std::find(known.begin(), known.end(), name.str()) == known.end())
      return Status::InvalidArgument(std::string(origin) + ": unknown section [" + std::string(name.str()) +
                                     "] (see docs/CONFIG.md)");
    const toml::table* tbl = node.as_table();
    if (tbl == nullptr) return Status::InvalidArgument(std::string(origin) + ": '" + std::string(name.str()) + "' must be a table");
    for (const auto& [key, value] : *tbl) {
      const std::string full = std::string(name.str()) + "." + std::string(key.str());
      const Option<S>* row = find_option(server_option_table(), full);
      if (row == nullptr) return Status::InvalidArgument(std::string(origin) + ": unknown key '" + full + "'");
      KVTIER_ASSIGN_OR_RETURN(const std::string text, node_text(value, row->kind, origin, full));
      KVTIER_RETURN_IF_ERROR(row->apply(next, text, std::string(origin) + ": '" + full + "'"));
    }
  }
  config = std::move(next);
  return {};
}

Status apply_toml_file(const std::string& path, ServerConfig& config) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, read_file(path, "config file"));
  return apply_toml(text, path, config);
}

std::string to_toml(const ServerConfig& c) {
  std::ostringstream os;
  for (std::string_view section : sections()) {
    os << (os.tellp() > 0 ? "\n[" : "[") << section << "]\n";
    for (const Option<S>& row : server_option_table())
      if (row.section() == section) os << row.name() << " = " << toml_value(row, c) << '\n';
  }
  return os.str();
}

std::string config_markdown() {
  std::ostringstream os;
  os << "# Configuration\n\n"
        "<!-- Generated by `kvtier config --markdown` from the option tables (src/common/option_table.h); do not edit: "
        "a test fails when this file is stale. -->\n\n"
        "Every option of `kvtier serve` is one row of one table: its TOML key (in the file given with `--config`), its "
        "flag (flags override the file), its keyword in `kvtier.Cache(...)` (Python) where the cache's library offers "
        "it, and the `kvtier replay` flags marked *replay*. `kvtier serve --print-config` prints the effective "
        "configuration as TOML; `GET /v1/cache/stats` returns it under `config`, numbers and booleans typed (secrets as `<set>`).\n\n"
        "Value kinds: *size* is bytes: `4096`, `64KiB`, `8MiB`, `2GiB` (`K`/`M`/`G`/`T` are binary units too; `KB`, "
        "`MB`, `GB`, `TB` decimal), an integer in TOML or Python; *duration* is seconds: `600`, `90s`, `250ms`, `10m`, "
        "`2h`; every *bool* option has two flags, `--x` (on) and `--no-x` (off); the table names the one that changes the default. Replay tier capacities are their own kind "
        "(tokens or bytes; docs/REPLAY.md).\n";
  for (std::string_view section : sections())
    os << "\n## [" << section << "]\n\n" << option_rows_markdown(server_option_table(), section);
  return os.str();
}

}  // namespace kvtier::server
