// Small value types shared by every module: strong ids, page hashes, the KV
// dtype and the KV geometry. All are trivially copyable values, safe to use
// from any thread.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

using TokenId = int32_t;

// A strong integer id: ids of different kinds never convert into each other.
// The all-ones value is "invalid" (absent).
template <class Tag, class Rep = uint32_t>
class StrongId {
 public:
  using rep_type = Rep;
  static constexpr Rep kInvalid = std::numeric_limits<Rep>::max();

  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : v_(v) {}
  static constexpr StrongId invalid() { return StrongId(); }

  constexpr Rep value() const { return v_; }
  constexpr bool valid() const { return v_ != kInvalid; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  Rep v_ = kInvalid;
};

using PageId = StrongId<struct PageIdTag>;      // a page of the device BlockPool
using SlotId = StrongId<struct SlotIdTag>;      // a page slot of the HostTier arena
using LayerIdx = StrongId<struct LayerIdxTag>;  // a transformer layer
using RegionId = StrongId<struct RegionIdTag>;  // a DiskTier region file
using SeqId = StrongId<struct SeqIdTag, uint64_t>;

enum class TierKind : uint8_t { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
inline constexpr int kNumTiers = 4;
std::string_view tier_name(TierKind t);

// What happened to a page's (or a disk/remote chunk's) residency in a tier:
// the index records these, the tiers report them, and GET /v1/cache/events
// publishes them (tiers/kv_events.h).
enum class KvEventKind : uint8_t {
  kStored,   // gained a residency in the tier
  kMoved,    // its one residency went from one tier to another (device -> host: demotion)
  kRemoved,  // lost its residency in the tier
  kCleared,  // everything in the tier is gone (no per-page events follow)
};
std::string_view kv_event_kind_name(KvEventKind k);  // "stored" | "moved" | "removed" | "cleared"

// 128-bit page hash. Identifies a page *and its whole prefix* (DESIGN §4).
struct PageHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  constexpr auto operator<=>(const PageHash&) const = default;
  bool is_zero() const { return lo == 0 && hi == 0; }
  std::string to_hex() const;  // 32 lowercase hex digits, hi then lo
};

struct PageHashHasher {
  size_t operator()(const PageHash& h) const noexcept { return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull)); }
};

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
Result<DType> parse_dtype(std::string_view name);  // "f32" | "f16" | "bf16"

// The shape of the KV cache of one model. One page is one contiguous blob
// laid out [layer][k|v][page_tokens][num_kv_heads][head_dim] ("page-first").
struct KVGeometry {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kF32;
  uint32_t page_tokens = 16;

  Status validate() const;

  size_t elem_bytes() const { return dtype_size(dtype); }
  // Bytes of K (or V) for one token in one layer.
  size_t token_kv_half_bytes() const { return size_t(num_kv_heads) * head_dim * elem_bytes(); }
  // Bytes of K+V for one token across all layers.
  size_t bytes_per_token() const { return 2 * token_kv_half_bytes() * num_layers; }
  // Bytes of one layer's slice of a page: [k|v][P][H][D].
  size_t layer_slice_bytes() const { return 2 * page_tokens * token_kv_half_bytes(); }
  // Bytes of a whole page.
  size_t page_bytes() const { return layer_slice_bytes() * num_layers; }
  // Offset of layer l's slice inside a page.
  size_t layer_offset(uint32_t layer) const { return layer * layer_slice_bytes(); }
  // Offset of the V half inside a layer slice.
  size_t v_offset_in_layer() const { return page_tokens * token_kv_half_bytes(); }

  bool operator==(const KVGeometry&) const = default;
};

}  // namespace kvtier

template <class Tag, class Rep>
struct std::hash<kvtier::StrongId<Tag, Rep>> {
  size_t operator()(const kvtier::StrongId<Tag, Rep>& id) const noexcept { return std::hash<Rep>()(id.value()); }
};
template <>
struct std::hash<kvtier::PageHash> : kvtier::PageHashHasher {};
