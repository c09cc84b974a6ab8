#include "gguf_corpus.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvtier::engine::fuzzing {

std::vector<uint8_t> valid_image(GgufType type) {
  ModelConfig c;
  c.name = "micro";
  c.vocab_size = 260, c.hidden_size = 32, c.num_layers = 1, c.num_heads = 2, c.num_kv_heads = 1;
  c.head_dim = 16, c.ffn_size = 32, c.max_context = 64;
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

std::vector<uint8_t> mutate(const std::vector<uint8_t>& base, uint64_t k) {
  std::mt19937_64 rng(k * 0x9E3779B97F4A7C15ull + 1);
  std::vector<uint8_t> b = base;
  if (b.empty()) return b;
  // Most interesting bytes are in the header and tensor table: bias positions there.
  auto pos = [&]() -> size_t {
    const size_t head = std::min<size_t>(b.size(), 8192);
    return (rng() % 4 != 0) ? rng() % head : rng() % b.size();
  };
  const int n_mut = 1 + int(rng() % 4);
  for (int m = 0; m < n_mut && !b.empty(); ++m) {
    switch (rng() % 6) {
      case 0: b[pos()] ^= uint8_t(1u << (rng() % 8)); break;
      case 1: b[pos()] = uint8_t(rng()); break;
      case 2: {  // smash a 32- or 64-bit field with an extreme value
        static const uint64_t extremes[] = {0, 1, 0xff, 0xffff, 0x7fffffff, 0xffffffff, 0x8000000000000000ull,
                                            0xffffffffffffffffull, 31, 33, 4096};
        const uint64_t v = extremes[rng() % std::size(extremes)];
        const size_t w = (rng() % 2) ? 4 : 8;
        const size_t at = pos();
        if (at + w <= b.size()) std::memcpy(&b[at], &v, w);
        break;
      }
      case 3: b.resize(rng() % b.size()); break;
      case 4: {
        const size_t at = pos();
        b.insert(b.begin() + long(at), size_t(1 + rng() % 16), uint8_t(rng()));
        break;
      }
      case 5: {
        const size_t from = pos(), len = std::min<size_t>(b.size() - from, 1 + rng() % 64), to = pos();
        std::vector<uint8_t> chunk(b.begin() + long(from), b.begin() + long(from + len));
        b.insert(b.begin() + long(std::min(to, b.size())), chunk.begin(), chunk.end());
        break;
      }
    }
  }
  return b;
}

}  // namespace kvtier::engine::fuzzing
