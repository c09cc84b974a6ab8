// Open-addressing hash tables for the tokenizers' hot lookups (token text →
// id, merge pair → rank): one probe sequence in one flat array, no node
// chasing. Built once, then read-only; safe to read from any thread.
// Slots are chosen by a hash seeded once per process, so keys a vocabulary
// file chose cannot be made to share a slot: building a tokenizer from a
// hostile file stays linear (an unseeded mix is invertible, and keys chosen
// against it made every insert probe the whole run before it).
// Internal to text/.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::text {

// uint64 keys (any value but kEmpty) → V.
template <class V>
class FlatU64Map {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t(0);

  explicit FlatU64Map(size_t expected = 0) { rehash(expected); }

  // Inserts unless present; returns false when the key was already there (the first value stays).
  bool insert(uint64_t key, const V& value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size());
    Slot& s = probe(key);
    if (s.key == key) return false;
    s.key = key, s.value = value;
    ++size_;
    return true;
  }
  const V* find(uint64_t key) const {
    const Slot& s = const_cast<FlatU64Map*>(this)->probe(key);
    return s.key == key ? &s.value : nullptr;
  }
  size_t size() const { return size_; }
  // The longest distance of a key from its home slot (1 = found at home): what the slowest find probes.
  size_t longest_probe() const {
    size_t longest = 0;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].key != kEmpty) longest = std::max(longest, ((i - home(slots_[i].key)) & mask_) + 1);
    return longest;
  }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };
  // Multiply-shift with an odd multiplier drawn once per process: for any two keys fixed in advance, the
  // chance they share a home slot is at most 2 / slots (Dietzfelbinger et al.), one multiply per lookup.
  static uint64_t process_multiplier() {
    static const uint64_t a = [] {
      std::random_device rd;
      return ((uint64_t(rd()) << 32) ^ rd()) | 1;
    }();
    return a;
  }
  size_t home(uint64_t key) const { return size_t((key * multiplier_) >> shift_); }
  Slot& probe(uint64_t key) {
    for (size_t i = home(key);; i = (i + 1) & mask_)
      if (slots_[i].key == key || slots_[i].key == kEmpty) return slots_[i];
  }
  void rehash(size_t expected) {
    const size_t n = std::bit_ceil(std::max<size_t>(16, expected * 2));
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    shift_ = 64 - std::countr_zero(n);
    for (const Slot& s : old)
      if (s.key != kEmpty) probe(s.key) = s;
  }

  std::vector<Slot> slots_;
  uint64_t multiplier_ = process_multiplier();
  size_t mask_ = 0;
  int shift_ = 64;  // 64 - log2(slots): home() keeps the product's top bits
  size_t size_ = 0;
};

// String keys (copied into one arena) → int32 values.
class FlatStringMap {
 public:
  explicit FlatStringMap(size_t expected = 0) : index_(expected) {}

  // Sets the value of `key` (a later set wins, as llama.cpp's token_to_id).
  void set(std::string_view key, int32_t value) {
    const uint64_t h = hash(key);
    for (uint64_t probe_key = h;; ++probe_key) {
      const Entry* e = entry_for(probe_key, h, key);
      if (e == nullptr) break;
      if (e != &kMissing) {
        entries_[size_t(e - entries_.data())].value = value;
        return;
      }
    }
    entries_.push_back({h, uint32_t(arena_.size()), uint32_t(key.size()), value});
    arena_.append(key);
    index_.insert(free_key(h), uint32_t(entries_.size() - 1));
  }
  // The value of `key`, or `missing`.
  int32_t find(std::string_view key, int32_t missing = -1) const {
    const uint64_t h = hash(key);
    for (uint64_t probe_key = h;; ++probe_key) {
      const Entry* e = entry_for(probe_key, h, key);
      if (e == nullptr) return missing;
      if (e != &kMissing) return e->value;
    }
  }

 private:
  struct Entry {
    uint64_t hash;
    uint32_t offset, len;
    int32_t value;
  };
  static inline const Entry kMissing{};
  static uint64_t hash(std::string_view s) {
    const uint64_t h = XXH3_64bits(s.data(), s.size());
    return h == FlatU64Map<uint32_t>::kEmpty ? 0 : h;
  }
  // Keys of the index are the string hash, then hash+1, ... for collisions of the full 64 bits.
  uint64_t free_key(uint64_t h) const {
    while (index_.find(h) != nullptr) h = h + 1 == FlatU64Map<uint32_t>::kEmpty ? 0 : h + 1;
    return h;
  }
  // nullptr: no entry under probe_key (the key is absent); &kMissing: an entry for another string.
  const Entry* entry_for(uint64_t probe_key, uint64_t h, std::string_view key) const {
    const uint32_t* at = index_.find(probe_key == FlatU64Map<uint32_t>::kEmpty ? 0 : probe_key);
    if (at == nullptr) return nullptr;
    const Entry& e = entries_[*at];
    if (e.hash == h && e.len == key.size() && std::memcmp(arena_.data() + e.offset, key.data(), key.size()) == 0) return &e;
    return &kMissing;
  }

  FlatU64Map<uint32_t> index_;
  std::vector<Entry> entries_;
  std::string arena_;
};

}  // namespace kvtier::text
