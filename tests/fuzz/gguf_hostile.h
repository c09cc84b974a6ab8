// Hand-built GGUF images whose headers lie: huge hyper-parameters over tiny
// tensors, impossible or overflowing shapes, data offsets past the end,
// overlapping or misaligned data, huge metadata counts. The reader must
// refuse each with a message, without allocating for what the header claims
// (gguf_replay_test asserts it; gguf_fuzz_seed writes them as seeds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier::engine::fuzzing {

struct HostileGguf {
  std::string name;
  std::vector<uint8_t> bytes;
  std::string expect;  // a fragment the error message must contain
};

// A valid micro llama image built by the same code as the hostile ones (the
// control: the reader must accept it).
std::vector<uint8_t> spelled_out_micro_image();

std::vector<HostileGguf> hostile_images();

}  // namespace kvtier::engine::fuzzing
