// Subcommand registry of the `kvtier` executable. A cmd_<name>.cc file
// defines a static CommandRegistration whose setup function adds a CLI11
// subcommand (with its flags and callback) to the root app. The callback
// sets the process exit code through the returned int reference.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/types.h"
#include "text/vocab.h"

namespace kvtier::cli {

// `setup(app, exit_code)` adds the subcommand; its callback stores the exit code.
using CommandSetup = std::function<void(CLI::App& root, int& exit_code)>;

struct CommandRegistration {
  CommandRegistration(std::string name, CommandSetup setup);
};

// Subcommands sorted by name (deterministic help output).
std::vector<std::pair<std::string, CommandSetup>>& registered_commands();

// Prints "kvtier: error: <status>" to stderr and returns 1, or 0 for OK.
int report(const Status& s);

// A model's tokenizer keys alone (`model tokenize`, `model chat-template`, `route`): a preset name gives
// that preset's synthetic vocabulary; anything else is read as a GGUF file.
Result<text::Vocab> vocab_of(const std::string& model);

// "512,2048" -> {512, 2048}; a clear InvalidArgument naming `flag` otherwise.
Result<std::vector<uint32_t>> parse_uint_list(const std::string& text, std::string_view flag);

// A bench's token-length list (`flag`, e.g. --prefix) and its --kv-dtype, parsed into its options.
Status parse_lengths_and_dtype(const std::string& lengths, std::string_view flag, std::vector<uint32_t>& lengths_out,
                               const std::string& kv_dtype, DType& kv_dtype_out);

// The "bench" parent subcommand shared by every `kvtier bench <what>`.
CLI::App& bench_group(CLI::App& root);

// `--text FILE` of the benches that draw prompts (bench/prompt_text.h).
void add_prompt_text_option(CLI::App* cmd, std::string& path);

// A bench's result printed as JSON or its table; an error reported. Returns the exit code.
template <class R>
int print_result(const Result<R>& r, bool json) {
  if (!r.ok()) return report(r.status());
  std::puts(json ? r->to_json().c_str() : r->to_table().c_str());
  return 0;
}

}  // namespace kvtier::cli
