// Open-addressing hash tables for the tokenizers' hot lookups (token text →
// id, merge pair → rank): one probe sequence in one flat array, no node
// chasing. Built once, then read-only; safe to read from any thread.
// Internal to text/.
#pragma once

#include <xxhash.h>

#include <bit>
#include <cstdint>
#include <cstring>
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

 private:
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33, k *= 0xff51afd7ed558ccdULL, k ^= k >> 33;
    return k;
  }
  Slot& probe(uint64_t key) {
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_)
      if (slots_[i].key == key || slots_[i].key == kEmpty) return slots_[i];
  }
  void rehash(size_t expected) {
    const size_t n = std::bit_ceil(std::max<size_t>(16, expected * 2));
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    for (const Slot& s : old)
      if (s.key != kEmpty) probe(s.key) = s;
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
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
