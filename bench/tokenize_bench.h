// The tokenizer benchmark behind `kvtier bench tokenize`: MB/s of
// Tokenizer::encode on one core over a corpus of documents (one prompt
// each). The default corpus is the project's own docs and sources plus a
// multilingual sample, written out so the same bytes can be reused with
// --corpus. Single-threaded; not for concurrent use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct TokenizeBenchOptions {
  std::string model;        // a GGUF file (only its tokenizer keys are read)
  std::string corpus;       // a text file; empty: build the default corpus
  std::string source_dir = ".";      // where the default corpus takes docs/ and src/ from
  std::string corpus_out = "build/tokenize-corpus.txt";  // where the default corpus is written
  uint32_t rounds = 5;
  bool parse_special = true;

  Status validate() const;
};

struct TokenizeBenchReport {
  std::string model, tokenizer;  // file; "llama" or "gpt2/<pre>"
  std::string corpus;            // path of the corpus used
  uint64_t corpus_bytes = 0, documents = 0, tokens = 0;
  std::vector<double> round_mb_per_s;
  double mb_per_s = 0;               // median of the rounds
  double cold_mb_per_s = 0;          // the first round: this thread's word cache starts empty
  double pretokenize_mb_per_s = 0;   // byte-level BPE only: the pre-tokenizer alone, same corpus (median)
};

Result<TokenizeBenchReport> run_tokenize_bench(const TokenizeBenchOptions& options);
std::string format_json(const TokenizeBenchReport& r);
std::string format_table(const TokenizeBenchReport& r);

}  // namespace kvtier::bench
