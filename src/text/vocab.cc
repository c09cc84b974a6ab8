#include "text/vocab.h"

#include <cmath>
#include <cstdio>

#include "text/pretokenizer.h"

namespace kvtier::text {

Result<Vocab> Vocab::synthetic(uint32_t vocab_size) {
  if (vocab_size < 260)
    return Status::InvalidArgument("synthetic vocabulary needs vocab_size >= 260 (3 specials, 256 byte tokens, ▁), got " +
                                   std::to_string(vocab_size));
  Vocab v;
  v.tokens.reserve(vocab_size);
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {int32_t(TokenType::kUnknown), int32_t(TokenType::kControl), int32_t(TokenType::kControl)};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.emplace_back(buf);
    v.types.push_back(int32_t(TokenType::kByte));
  }
  v.tokens.emplace_back("\xE2\x96\x81");  // "▁": a space is one token, not three bytes
  v.types.push_back(int32_t(TokenType::kNormal));
  for (uint32_t i = 260; i < vocab_size; ++i) {
    v.tokens.push_back("<unused" + std::to_string(i - 260) + ">");
    v.types.push_back(int32_t(TokenType::kUnused));
  }
  v.scores.assign(vocab_size, 0.0f);
  return v;
}

Vocab Vocab::defaults_for(std::string_view model, std::string_view pre) {
  Vocab v;
  v.model = std::string(model);
  v.pre = std::string(pre);
  if (model == "gpt2") {
    // llama.cpp: BOS = EOS = 11 and no UNK unless the file says otherwise; BOS only for Llama 3's pre-tokenizer.
    v.bos = 11, v.eos = 11, v.unk = kNoToken;
    v.add_space_prefix = false;
    auto kind = pre_tokenizer_from_name(pre);
    v.add_bos = kind.ok() && *kind == PreTokenizer::kLlama3;
  }
  return v;
}

Status Vocab::validate(uint32_t vocab_size) const {
  if (model != "llama" && model != "gpt2")
    return Status::Unimplemented("tokenizer model '" + model +
                                 "' (tokenizer.ggml.model) is not supported; supported: llama (SentencePiece), gpt2 (byte-level BPE)");
  if (model == "gpt2") {
    if (auto kind = pre_tokenizer_from_name(pre); !kind.ok()) return kind.status();
    if (merges.empty()) return Status::InvalidArgument("vocabulary: a gpt2 tokenizer needs tokenizer.ggml.merges");
  }
  if (tokens.size() != vocab_size || scores.size() != vocab_size || types.size() != vocab_size)
    return Status::InvalidArgument("vocabulary: " + std::to_string(tokens.size()) + " tokens, " +
                                   std::to_string(scores.size()) + " scores, " + std::to_string(types.size()) +
                                   " types; the model has vocab_size " + std::to_string(vocab_size));
  for (size_t id = 0; id < tokens.size(); ++id)
    if (tokens[id].size() > kMaxTokenBytes)
      return Status::InvalidArgument("vocabulary: token " + std::to_string(id) + " is " + std::to_string(tokens[id].size()) +
                                     " bytes long (at most " + std::to_string(kMaxTokenBytes) + ")");
  // A NaN score has no order: SentencePiece's merges would follow the heap's accidents.
  for (size_t id = 0; id < scores.size(); ++id)
    if (std::isnan(scores[id]))
      return Status::InvalidArgument("vocabulary: token " + std::to_string(id) + "'s score is NaN");
  for (size_t rank = 0; rank < merges.size(); ++rank)
    if (merges[rank].size() > 2 * kMaxTokenBytes + 1)
      return Status::InvalidArgument("vocabulary: merge " + std::to_string(rank) + " is " +
                                     std::to_string(merges[rank].size()) + " bytes long");
  auto in = [&](TokenId t) { return t >= 0 && uint32_t(t) < vocab_size; };
  auto in_or_none = [&](TokenId t) { return t == kNoToken || in(t); };
  if (!in(bos) || !in(eos)) return Status::InvalidArgument("vocabulary: BOS/EOS id out of range");
  if (!in_or_none(unk) || !in_or_none(eot) || !in_or_none(eom))
    return Status::InvalidArgument("vocabulary: UNK/EOT/EOM id out of range");
  return Status::Ok();
}

}  // namespace kvtier::text
