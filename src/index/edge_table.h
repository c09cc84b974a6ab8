// EdgeTable: the child links of every PrefixIndex node in one flat
// open-addressing table, keyed by (parent node, 64-bit key of the child's
// first page). One table instead of a container per node keeps nodes small
// and a child lookup one probe sequence long. Keys may collide (two first
// pages with the same 64-bit key under one parent), so lookups confirm each
// candidate with a caller-supplied predicate and equal keys may coexist.
// Internal to src/index; not thread-safe (owned by the index).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::index_detail {

class EdgeTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  EdgeTable() { slots_.resize(16); }

  // The child under `parent` whose key is `key` and for which match(child) holds, or kNone.
  template <class Match>
  uint32_t find(uint32_t parent, uint64_t key, Match&& match) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_of(parent, key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.child == kNone) return kNone;
      if (s.key == key && s.parent == parent && match(s.child)) return s.child;
    }
  }

  void insert(uint32_t parent, uint64_t key, uint32_t child) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    place(Slot{key, parent, child});
    ++size_;
  }

  // Re-points the edge (parent, key) → old_child at new_child.
  void replace(uint32_t parent, uint64_t key, uint32_t old_child, uint32_t new_child) {
    slots_[index_of(parent, key, old_child)].child = new_child;
  }

  void erase(uint32_t parent, uint64_t key, uint32_t child) {
    // Backward-shift deletion keeps every probe sequence gap-free without tombstones.
    const size_t mask = slots_.size() - 1;
    size_t hole = index_of(parent, key, child);
    for (size_t i = (hole + 1) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.child == kNone) break;
      const size_t home = slot_of(s.parent, s.key) & mask;
      // Move s into the hole when the hole lies on s's probe path (cyclically in [home, i)).
      if (((i - home) & mask) >= ((i - hole) & mask)) {
        slots_[hole] = s;
        hole = i;
      }
    }
    slots_[hole] = Slot{};
    --size_;
  }

  void clear() {
    slots_.assign(16, Slot{});
    size_ = 0;
  }
  size_t size() const { return size_; }
  size_t bytes() const { return slots_.capacity() * sizeof(Slot); }

  // Calls f(parent, key, child) for every edge (for invariant checks).
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.child != kNone) f(s.parent, s.key, s.child);
  }

 private:
  struct Slot {
    uint64_t key = 0;
    uint32_t parent = 0;
    uint32_t child = kNone;
  };

  static size_t slot_of(uint32_t parent, uint64_t key) {
    uint64_t x = key ^ (uint64_t{parent} * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return static_cast<size_t>(x);
  }

  size_t index_of(uint32_t parent, uint64_t key, uint32_t child) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_of(parent, key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.child == child && s.parent == parent && s.key == key) return i;
    }
  }

  void place(const Slot& in) {
    const size_t mask = slots_.size() - 1;
    size_t i = slot_of(in.parent, in.key) & mask;
    while (slots_[i].child != kNone) i = (i + 1) & mask;
    slots_[i] = in;
  }

  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.child != kNone) place(s);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace kvtier::index_detail
