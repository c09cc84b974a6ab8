// AlignedBuffer: an owned, zero-filled heap buffer whose address is aligned
// (4096 by default) so that it can be the target of O_DIRECT I/O. Buffers of
// kHugePage bytes or more are aligned to kHugePage and advised for
// transparent huge pages: direct I/O then maps one 2 MiB page where it would
// map 512 small ones, which halved the time of a 128 MiB layer-wise load on
// the development VM (docs/PERF.md, bench ttft). A plain move-only value; not
// synchronised.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>

namespace kvtier {

inline constexpr size_t kIoAlign = 4096;  // O_DIRECT alignment of offsets, lengths and addresses
inline constexpr size_t kHugePage = size_t(2) << 20;

inline constexpr size_t align_up(size_t v, size_t a = kIoAlign) { return (v + a - 1) / a * a; }
inline constexpr size_t align_down(size_t v, size_t a = kIoAlign) { return v / a * a; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, size_t alignment = kIoAlign) : size_(bytes) {
    if (bytes == 0) return;
    if (bytes >= kHugePage && alignment < kHugePage) alignment = kHugePage;
    const size_t n = align_up(bytes, alignment);
    data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, n));
    if (!data_) {
      size_ = 0;
      return;
    }
    if (alignment >= kHugePage) madvise(data_, n, MADV_HUGEPAGE);  // advice only: small pages if refused
    std::memset(data_, 0, bytes);
  }
  // A buffer that direct I/O will target, of at least `bytes`: rounded up to
  // whole huge pages, so that a small I/O buffer too maps one 2 MiB page rather
  // than a small page per 4 KiB (encoded disk loads read into 136-256 KiB
  // buffers of small pages took up to a quarter longer than the same bytes
  // into a huge page; docs/PERF.md, "The lower tiers' data path").
  static AlignedBuffer for_io(size_t bytes) { return AlignedBuffer(align_up(bytes == 0 ? 1 : bytes, kHugePage)); }
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
