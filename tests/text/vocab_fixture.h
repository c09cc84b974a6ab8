// The llama.cpp tokenizer fixtures in tests/data/vocab (see its README):
// vocab-only GGUF files with test strings and llama.cpp's ids for them.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::text::testing {

inline std::string vocab_path(const std::string& name) {
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/data/vocab/ggml-vocab-" + name + ".gguf";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<TokenId> ids;
};

// Pairs each test string of NAME.gguf.inp with its line of NAME.gguf.out.
inline std::vector<VocabCase> vocab_cases(const std::string& name) {
  const std::string inp = read_file(vocab_path(name) + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t at = 0;
  while (at <= inp.size()) {
    size_t next = inp.find(sep, at);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(at, next - at));
    at = next + sep.size();
  }
  std::istringstream out(read_file(vocab_path(name) + ".out"));
  std::vector<VocabCase> cases;
  std::string line;
  for (const std::string& t : texts) {
    if (!std::getline(out, line)) break;
    VocabCase c{t, {}};
    std::istringstream ids(line);
    for (long id; ids >> id;) c.ids.push_back(TokenId(id));
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace kvtier::text::testing
