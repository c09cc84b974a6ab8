// One fuzz input through one parser, shared by each libFuzzer target
// (fuzz_entry.cc) and its corpus-replay test, so that `make test` checks
// exactly what the fuzzer checks. Each returns "" when the parser accepted
// the input consistently or refused it with a message, and otherwise says
// which invariant broke (the fuzzer aborts on it). A crash, a hang or an
// allocation without bound is a failure too (ASan / libFuzzer's -rss_limit_mb).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvtier::fuzzing {

using Input = std::span<const uint8_t>;

// A disk region file (tiers/disk_region_format.h): header verdict, then the entry scan.
std::string check_disk_region(Input data);
// A remote value (tiers/chunk_format.h decode_chunk_value), its layers, and a scatter/gather round trip.
std::string check_chunk_value(Input data);
// A POST /v1/completions body (server/api.h parse_completion_request).
std::string check_completion_request(Input data);
// POST /v1/chat/completions with tools: a described 4xx, or an accepted request whose tool-call
// arguments reach the template as objects.
std::string check_chat_request(Input data);
// Generated text through every tool-call parser: calls with names and object arguments, or the text whole.
std::string check_tool_calls(Input data);
// A chat template (text/chat_template.h): parsed, and rendered on a conversation with tools within
// bounded steps and output; a refusal or a render error carries a message.
std::string check_chat_template(Input data);
// Text through the byte-level BPE tokenizer of KVTIER_FUZZ_VOCAB (Qwen2's): ids inside the vocabulary;
// valid UTF-8 comes back whole from decode(encode(text)).
std::string check_tokenizer(Input data);
// A Mooncake JSON-lines trace (sim/kvtier_trace.h's reader), every prompt expanded.
std::string check_mooncake_trace(Input data);
// A kvtier JSON-lines trace (sim/kvtier_trace.h), strict and with skip_bad_lines.
std::string check_kvtier_trace(Input data);

// Valid inputs built by code, for the binary formats (the text formats' seeds
// are files under tests/fuzz/corpus/<target>/).
std::vector<std::vector<uint8_t>> disk_region_seeds();
std::vector<std::vector<uint8_t>> chunk_value_seeds();
// What the fuzzed readers make of an input (the replay tests check that the
// seeds are accepted, so that the mutations start from something valid).
size_t disk_region_entries(Input data);
bool chunk_value_verifies(Input data);

}  // namespace kvtier::fuzzing
