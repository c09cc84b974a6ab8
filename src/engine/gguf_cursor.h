// Internal to the GGUF reader: a bounds-checked cursor over a GGUF file's
// bytes that decodes the header's metadata values. Every read checks the
// remaining length first; a value that does not fit is a Corrupt status
// naming the file (`what`), never a read past the end. Not thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "engine/gguf_format.h"
#include "kvtier/status.h"

namespace kvtier::engine::gguf_detail {

using gguf::ValueType;

// One metadata value. Arrays keep strings or numbers (where asked); nested arrays are walked but not kept.
struct Value {
  ValueType type = ValueType::kU8;
  bool is_int = false;
  int64_t i = 0;  // integer scalars (u64 above 2^63 saturate; never a valid hyper-parameter)
  double f = 0;   // numeric scalars
  std::string str;
  ValueType elem = ValueType::kU8;
  std::vector<std::string> strs;
  std::vector<double> nums;
};

// The fewest bytes one value of type `t` takes in the file.
inline uint64_t min_encoded_bytes(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: case ValueType::kString: return 8;  // strings: the length
    case ValueType::kArray: return 12;  // element type and count
  }
  return 1;
}

class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, std::string_view what) : p_(p), n_(n), what_(what) {}

  Status corrupt(const std::string& m) const {
    return Status::Corruption(what_ + ": " + m + " (at byte " + std::to_string(off_) + ")");
  }
  size_t offset() const { return off_; }
  size_t remaining() const { return n_ - off_; }

  template <class T>
  Status pod(T& v, const char* what) {
    if (remaining() < sizeof(T)) return corrupt(std::string("truncated file while reading ") + what);
    std::memcpy(&v, p_ + off_, sizeof(T));
    off_ += sizeof(T);
    return Status::Ok();
  }
  Status str(std::string& s, const char* what) {
    uint64_t len = 0;
    KVTIER_RETURN_IF_ERROR(pod(len, what));
    if (len > remaining()) return corrupt(std::string("truncated file: string of ") + std::to_string(len) +
                                          " bytes in " + what);
    s.assign(reinterpret_cast<const char*>(p_ + off_), size_t(len));
    off_ += size_t(len);
    return Status::Ok();
  }

  // `keep_array`: an array's elements are kept (else only checked and walked: a key nothing reads,
  // whose bytes would cost several times their size in memory). A kept array holds at most
  // kMaxKeptArray elements (the most tokens a vocabulary may have), so what is kept is bounded
  // whatever the file's size; the elements of an array of arrays are never kept.
  static constexpr uint64_t kMaxKeptArray = uint64_t(1) << 24;
  Status value(ValueType t, Value& v, int depth, bool keep_array = false) {
    v.type = t;
    switch (t) {
      case ValueType::kU8: return num<uint8_t>(v);
      case ValueType::kI8: return num<int8_t>(v);
      case ValueType::kU16: return num<uint16_t>(v);
      case ValueType::kI16: return num<int16_t>(v);
      case ValueType::kU32: return num<uint32_t>(v);
      case ValueType::kI32: return num<int32_t>(v);
      case ValueType::kU64: return num<uint64_t>(v);
      case ValueType::kI64: return num<int64_t>(v);
      case ValueType::kF32: return num<float>(v);
      case ValueType::kF64: return num<double>(v);
      case ValueType::kBool: {
        uint8_t b = 0;
        KVTIER_RETURN_IF_ERROR(pod(b, "bool"));
        if (b > 1) return corrupt("bool value " + std::to_string(b));
        v.is_int = true, v.i = b, v.f = b;
        return Status::Ok();
      }
      case ValueType::kString: return str(v.str, "string value");
      case ValueType::kArray: {
        if (depth > 2) return corrupt("arrays nested too deeply");
        uint32_t et = 0;
        uint64_t count = 0;
        KVTIER_RETURN_IF_ERROR(pod(et, "array type"));
        KVTIER_RETURN_IF_ERROR(pod(count, "array length"));
        if (et > uint32_t(ValueType::kF64)) return corrupt("array of unknown value type " + std::to_string(et));
        v.elem = ValueType(et);
        // Refuse lengths the file cannot hold, or too many to keep, before reserving anything.
        const bool keep = keep_array && v.elem != ValueType::kArray;
        if (keep && count > kMaxKeptArray)
          return corrupt("array of " + std::to_string(count) + " elements, more than the " +
                         std::to_string(kMaxKeptArray) + " a vocabulary may have");
        if (count > remaining() / min_encoded_bytes(v.elem))
          return corrupt("truncated file: array of " + std::to_string(count) + " elements past the end");
        if (keep && v.elem == ValueType::kString) v.strs.reserve(size_t(count));
        if (keep && v.elem != ValueType::kString) v.nums.reserve(size_t(count));
        for (uint64_t k = 0; k < count; ++k) {
          Value e;
          KVTIER_RETURN_IF_ERROR(value(v.elem, e, depth + 1));
          if (!keep) continue;
          if (v.elem == ValueType::kString) v.strs.push_back(std::move(e.str));
          else v.nums.push_back(e.f);
        }
        return Status::Ok();
      }
    }
    return corrupt("unknown metadata value type " + std::to_string(uint32_t(t)));
  }

 private:
  template <class T>
  Status num(Value& v) {
    T x{};
    KVTIER_RETURN_IF_ERROR(pod(x, "number"));
    v.f = double(x);
    v.is_int = std::is_integral_v<T>;
    if constexpr (std::is_integral_v<T>) {
      v.i = (std::is_unsigned_v<T> && uint64_t(x) > uint64_t(INT64_MAX)) ? INT64_MAX : int64_t(x);
    }
    return Status::Ok();
  }

  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
  std::string what_;
};

}  // namespace kvtier::engine::gguf_detail
