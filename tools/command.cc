#include "command.h"

#include "engine/gguf.h"
#include "engine/synthetic.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

namespace kvtier::cli {

std::vector<std::pair<std::string, CommandSetup>>& registered_commands() {
  static std::vector<std::pair<std::string, CommandSetup>> cmds;
  return cmds;
}

CommandRegistration::CommandRegistration(std::string name, CommandSetup setup) {
  auto& cmds = registered_commands();
  cmds.emplace_back(std::move(name), std::move(setup));
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

Result<text::Vocab> vocab_of(const std::string& model) {
  if (auto preset = engine::model_preset(model); preset.ok()) return text::Vocab::synthetic(preset->vocab_size);
  return engine::load_gguf_vocab(model);
}

int report(const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "kvtier: error: %s\n", s.to_string().c_str());
  return 1;
}

Result<std::vector<uint32_t>> parse_uint_list(const std::string& text, std::string_view flag) {
  std::vector<uint32_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    if (!item.empty()) {
      char* rest = nullptr;
      const unsigned long v = std::strtoul(item.c_str(), &rest, 10);
      if (*rest != '\0' || v > UINT32_MAX)
        return Status::InvalidArgument(std::string(flag) + ": expected comma-separated numbers like 512,2048, got '" +
                                       text + "'");
      out.push_back(static_cast<uint32_t>(v));
    }
    start = end + 1;
  }
  return out;
}

Status parse_lengths_and_dtype(const std::string& lengths, std::string_view flag, std::vector<uint32_t>& lengths_out,
                               const std::string& kv_dtype, DType& kv_dtype_out) {
  KVTIER_ASSIGN_OR_RETURN(lengths_out, parse_uint_list(lengths, flag));
  KVTIER_ASSIGN_OR_RETURN(kv_dtype_out, parse_dtype(kv_dtype));
  return Status::Ok();
}

CLI::App& bench_group(CLI::App& root) {
  for (CLI::App* sub : root.get_subcommands([](CLI::App* a) { return a->get_name() == "bench"; })) return *sub;
  CLI::App* b = root.add_subcommand("bench", "Benchmarks (figures are reported as ratios to a limit measured in the same run)");
  b->require_subcommand(1);
  return *b;
}

void add_prompt_text_option(CLI::App* cmd, std::string& path) {
  cmd->add_option("--text", path,
                  "draw the prompts from this text (default: with a real tokenizer, tests/data/text/heldout.txt; "
                  "else random ids)");
}

}  // namespace kvtier::cli
