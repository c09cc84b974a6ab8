#include "gguf_corpus.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kvtier::engine::fuzzing {

std::vector<uint8_t> valid_image(GgufType type) {
  ModelConfig c;
  c.name = "micro";
  c.vocab_size = 260, c.hidden_size = 32, c.num_layers = 1, c.num_heads = 2, c.num_kv_heads = 1;
  c.head_dim = 16, c.ffn_size = 32, c.max_context = 64;
  if (quant::info(type).block_elems == 256) c.hidden_size = 256, c.ffn_size = 256;  // K-quant rows: 256 elements
  auto model = Model::synthetic(c, 9);
  if (!model.ok()) return {};
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvtier_fuzz_seed_" + std::to_string(::getpid()) + ".gguf")).string();
  if (!write_gguf(**model, path, {.weight_type = type}).ok()) return {};
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), {});
  std::filesystem::remove(path);
  return bytes;
}

}  // namespace kvtier::engine::fuzzing
