// ServerConfig: everything `kvtier serve` needs, from a TOML file and flags.
//
// The runtime part is a RuntimeOptions (model, the cache's CacheConfig,
// blend, batch); the server part is the listen address, the API key and the
// request limits. Each option is one row of server_option_table().
// Precedence: built-in defaults < config file < command-line flags (see
// config_flags.h). Every key is listed in docs/CONFIG.md (generated from the
// table); unknown keys are errors so a typo never silently falls back to a
// default.
// Plain values; safe to copy between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "runtime/runtime.h"
#include "server/reasoning.h"
#include "server/schedule_policy.h"
#include "server/tool_calls.h"

namespace kvtier::server {

struct ServerLimits {
  uint32_t max_queue = 256;            // requests waiting for a free sequence slot; more get 429
  uint32_t max_tokens = 4096;          // the most completion tokens one request may ask for
  uint32_t default_max_tokens = 16;    // when a /v1/completions request does not say (OpenAI's default)
  uint32_t max_prompt_tokens = 0;      // 0: the model's context length
  double request_timeout_s = 600;      // a request still running after this is cancelled
  double shutdown_grace_s = 10;        // SIGINT/SIGTERM: time in-flight requests get to finish
  uint32_t http_threads = 0;           // connection threads; 0: ServerConfig::connection_threads() derives them
  size_t max_body_bytes = size_t(16) << 20;
  SchedulePolicy schedule = SchedulePolicy::kFcfs;  // admission order (server/schedule_policy.h)
  uint32_t prefill_chunk_tokens = kDefaultPrefillChunkTokens;  // prompt positions between two decode steps

  Status validate() const;
};

struct ServerConfig {
  RuntimeOptions runtime;
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                // 0: any free port (the chosen one is printed)
  // Keys (server/auth.h). api_key is the legacy literal (argv or TOML: a
  // warning at start); the *_file fields name files of secrets.
  std::string api_key;                 // empty: none (nor KVTIER_API_KEY / api_key_file: no authentication)
  std::string api_key_file;            // the lone client key, from a file
  std::string admin_key_file;          // the admin key (else KVTIER_ADMIN_KEY)
  std::string api_keys_file;           // tenant keys: `KEY TENANT [device=SIZE] [host=SIZE] [disk=SIZE]` per line
  bool metrics_public = false;         // /metrics without the admin key (when keys are set)
  bool dashboard_labels = false;       // the tree's nodes labelled with their first words (admin only)
  std::string served_model_name;       // empty: the model option as given
  std::string chat_template_file;      // Jinja chat template; empty: the model's tokenizer.chat_template
  std::optional<ToolParser> tool_parser;  // tool calls in chat replies; nullopt: from the template ("auto")
  bool reply_splice = true;            // chat prompts reuse a reply's own ids (server/chat_prompt.h)
  ReasoningParser reasoning_parser = ReasoningParser::kNone;  // <think> → reasoning_content (server/reasoning.h)
  std::string blend_separator;         // splits plain prompts into reusable segments; empty: only "segments" requests
  ServerLimits limits;

  // Checks the server fields and the runtime fields this module understands
  // (RuntimeOptions::validate() runs again when the Runtime is created).
  Status validate() const;

  // Connection threads: limits.http_threads, or where that is 0 enough for every running and
  // queued request (each holds its connection's thread) plus a quarter more, which event
  // listeners may take at most a quarter of: so a request beyond the queue always finds a
  // thread to be refused with 429 on, and /health one to answer on.
  uint32_t connection_threads() const;
  // Event-stream listeners (GET /v1/cache/events) at once: a quarter of the connection threads.
  uint32_t max_event_listeners() const;
};

// Applies a TOML document on top of `config`. `origin` names the source in errors.
Status apply_toml(std::string_view toml_text, std::string_view origin, ServerConfig& config);
// Reads and applies a TOML file.
Status apply_toml_file(const std::string& path, ServerConfig& config);

// One row per option of `kvtier serve`: its own (sections [server] and
// [limits], model.chat_template, blend.separator) and every RuntimeOptions
// row (runtime_option_table()). Flags, TOML, --print-config and
// docs/CONFIG.md all come from it.
const OptionTable<ServerConfig>& server_option_table();

// The effective configuration as TOML (what `kvtier serve --print-config` shows).
std::string to_toml(const ServerConfig& config);

// docs/CONFIG.md: every row of server_option_table(), by section, with its
// flag, Python keyword, kind, default and help (`kvtier config --markdown`).
std::string config_markdown();

}  // namespace kvtier::server
