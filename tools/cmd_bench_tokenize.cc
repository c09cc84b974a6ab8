// `kvtier bench tokenize`: tokenizer MB/s on one core (bench/tokenize_bench.h).
#include <cstdio>
#include <memory>

#include "command.h"
#include "tokenize_bench.h"

namespace kvtier::cli {
namespace {

const CommandRegistration kRegistration("bench tokenize", [](CLI::App& root, int& exit_code) {
  auto o = std::make_shared<bench::TokenizeBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto no_special = std::make_shared<bool>(false);
  CLI::App* cmd = bench_group(root).add_subcommand("tokenize", "Tokenizer throughput (MB/s on one core) of a GGUF vocabulary");
  cmd->add_option("--model", o->model, "GGUF file (only the tokenizer keys are read)")->required();
  cmd->add_option("--corpus", o->corpus, "text file (documents separated by form feeds); default: built from docs/ and src/");
  cmd->add_option("--source-dir", o->source_dir, "project root for the default corpus")->capture_default_str();
  cmd->add_option("--corpus-out", o->corpus_out, "where the default corpus is written")->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "timed passes over the corpus (the median is reported)")->capture_default_str();
  cmd->add_flag("--no-special", *no_special, "treat special-token text as plain text");
  cmd->add_flag("--json", *json, "print one JSON object");
  cmd->callback([o, json, no_special, &exit_code] {
    o->parse_special = !*no_special;
    auto r = bench::run_tokenize_bench(*o);
    if (!r.ok()) return void(exit_code = report(r.status()));
    std::fputs((*json ? bench::format_json(*r) + "\n" : bench::format_table(*r)).c_str(), stdout);
    exit_code = 0;
  });
});

}  // namespace
}  // namespace kvtier::cli
