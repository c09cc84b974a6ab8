// The libFuzzer entry point of every target but GGUF: KVTIER_FUZZ_CHECK
// names the check (fuzz_checks.h) this executable runs. A broken invariant
// aborts, which libFuzzer reports with the input.
#include <cstdio>
#include <cstdlib>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string why = kvtier::fuzzing::KVTIER_FUZZ_CHECK({data, size});
  if (!why.empty()) {
    std::fprintf(stderr, "invariant broken: %s\n", why.c_str());
    std::abort();
  }
  return 0;
}
