// AlignedBuffer: an owned, zero-filled heap buffer whose address is aligned
// (4096 by default) so that it can be the target of O_DIRECT I/O.
// A plain move-only value; not synchronised.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>

namespace kvtier {

inline constexpr size_t kIoAlign = 4096;  // O_DIRECT alignment of offsets, lengths and addresses

inline constexpr size_t align_up(size_t v, size_t a = kIoAlign) { return (v + a - 1) / a * a; }
inline constexpr size_t align_down(size_t v, size_t a = kIoAlign) { return v / a * a; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, size_t alignment = kIoAlign) : size_(bytes) {
    if (bytes == 0) return;
    data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, align_up(bytes, alignment)));
    if (data_) std::memset(data_, 0, bytes);
    else size_ = 0;
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> span() { return {data_, size_}; }
  std::span<const std::byte> span() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier
