// Writes the GGUF fuzzer's seed corpus: gguf_fuzz_seed <dir>.
#include <cstdio>
#include <fstream>
#include <string>

#include "gguf_corpus.h"
#include "gguf_hostile.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_fuzz_seed <corpus-dir>\n");
    return 2;
  }
  using kvtier::engine::GgufType;
  for (GgufType t : {GgufType::kF32, GgufType::kF16, GgufType::kBF16, GgufType::kQ8_0, GgufType::kQ4_0,
                    GgufType::kQ5_1, GgufType::kQ4_K, GgufType::kQ6_K}) {
    const auto b = kvtier::engine::fuzzing::valid_image(t);
    std::ofstream(std::string(argv[1]) + "/seed_" + std::string(kvtier::engine::gguf_type_name(t)) + ".gguf",
                  std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  for (const auto& h : kvtier::engine::fuzzing::hostile_images())
    std::ofstream(std::string(argv[1]) + "/hostile_" + h.name + ".gguf", std::ios::binary)
        .write(reinterpret_cast<const char*>(h.bytes.data()), std::streamsize(h.bytes.size()));
  return 0;
}
