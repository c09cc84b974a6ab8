#include "command.h"

#include <algorithm>
#include <cstdio>

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

int report(const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "kvtier: error: %s\n", s.to_string().c_str());
  return 1;
}

CLI::App& bench_group(CLI::App& root) {
  for (CLI::App* sub : root.get_subcommands([](CLI::App* a) { return a->get_name() == "bench"; })) return *sub;
  CLI::App* b = root.add_subcommand("bench", "Benchmarks (figures are reported as ratios to a limit measured in the same run)");
  b->require_subcommand(1);
  return *b;
}

}  // namespace kvtier::cli
