// What every corpus-replay test does: run a fuzz check (fuzz_checks.h) over
// the committed corpus (tests/fuzz/corpus/<target>/: seeds and every input a
// fuzzer once broke), over seeds built by code, and over deterministic
// mutations of them all. Each result must be "" (accepted consistently or
// refused with a message); ASan/UBSan builds also catch memory errors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "byte_mutator.h"
#include "fuzz_checks.h"

namespace kvtier::fuzzing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr uint64_t kReplayMutations = 100;
#else
inline constexpr uint64_t kReplayMutations = 500;
#endif

using NamedInput = std::pair<std::string, std::vector<uint8_t>>;

// Every file of tests/fuzz/corpus/<target>/, by name.
inline std::vector<NamedInput> corpus_files(const std::string& target) {
  std::vector<NamedInput> out;
  const std::filesystem::path dir = std::filesystem::path(KVTIER_FUZZ_CORPUS_DIR) / target;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    out.emplace_back(e.path().filename().string(), std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {}));
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::vector<NamedInput> named(const std::vector<std::vector<uint8_t>>& seeds, const std::string& prefix) {
  std::vector<NamedInput> out;
  for (size_t i = 0; i < seeds.size(); ++i) out.emplace_back(prefix + std::to_string(i), seeds[i]);
  return out;
}

template <class Check>
void replay(const std::vector<NamedInput>& inputs, Check check, uint64_t mutations = kReplayMutations) {
  ASSERT_FALSE(inputs.empty());
  for (const auto& [name, bytes] : inputs) {
    EXPECT_EQ(check(Input(bytes)), "") << name;
    for (uint64_t k = 0; k < mutations; ++k) {
      const auto m = mutate(bytes, k);
      EXPECT_EQ(check(Input(m)), "") << name << " mutation " << k;
    }
  }
}

}  // namespace kvtier::fuzzing
