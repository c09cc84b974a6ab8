#include "engine/tokenizer.h"

#include <cstdio>

namespace kvtier::engine {

Result<ByteTokenizer> ByteTokenizer::create(const Vocab& vocab) {
  ByteTokenizer t;
  t.byte_to_id_.fill(-1);
  t.pieces_.resize(vocab.tokens.size());
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string& s = vocab.tokens[id];
    const int32_t type = id < vocab.types.size() ? vocab.types[id] : int32_t(TokenType::kNormal);
    unsigned b = 0;
    char tail = 0;
    if (s.size() == 6 && std::sscanf(s.c_str(), "<0x%2X%c", &b, &tail) == 2 && tail == '>' && b < 256) {
      if (t.byte_to_id_[b] < 0) t.byte_to_id_[b] = TokenId(id);
      t.pieces_[id] = std::string(1, char(b));
    } else if (type == int32_t(TokenType::kNormal) || type == int32_t(TokenType::kUserDefined)) {
      std::string p;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s.compare(i, 3, "\xE2\x96\x81") == 0) p += ' ', i += 2;  // U+2581 "▁"
        else p += s[i];
      }
      t.pieces_[id] = std::move(p);
    }
  }
  for (int b = 0; b < 256; ++b)
    if (t.byte_to_id_[b] < 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "vocabulary has no byte token <0x%02X>", b);
      return Status::InvalidArgument(buf);
    }
  t.bos_ = vocab.bos, t.eos_ = vocab.eos;
  return t;
}

std::vector<TokenId> ByteTokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() + 1);
  if (add_bos) ids.push_back(bos_);
  for (unsigned char c : text) ids.push_back(byte_to_id_[c]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  for (TokenId id : ids)
    if (id >= 0 && size_t(id) < pieces_.size()) out += pieces_[size_t(id)];
  return out;
}

}  // namespace kvtier::engine
