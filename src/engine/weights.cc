#include "engine/weights.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace kvtier::engine {

namespace {

constexpr size_t kAlign = 64;

std::shared_ptr<std::byte> aligned_bytes(size_t n) {
  const size_t rounded = (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace

Result<WeightPart> WeightPart::from_bytes(GgufType type, uint64_t rows, uint64_t cols,
                                          std::span<const std::byte> bytes) {
  const quant::TypeInfo& t = quant::info(type);
  if (cols % t.block_elems != 0)
    return Status::InvalidArgument("weights: " + std::string(t.name) + " rows of " + std::to_string(cols) +
                                   " are not a multiple of " + std::to_string(t.block_elems));
  WeightPart p;
  p.type_ = type, p.rows_ = rows, p.cols_ = cols;
  if (bytes.size() != p.bytes())
    return Status::InvalidArgument("weights: " + std::to_string(bytes.size()) + " bytes for " + std::to_string(rows) +
                                   " rows of " + std::to_string(cols) + " " + std::string(t.name) + " (" +
                                   std::to_string(p.bytes()) + " expected)");
  p.data_ = aligned_bytes(bytes.size());
  std::memcpy(p.data_.get(), bytes.data(), bytes.size());
  return p;
}

WeightPart WeightPart::repacked(const WeightPart& from, uint64_t r0, uint64_t n, qdot::Packing p) {
  WeightPart out;
  out.type_ = from.type_, out.packing_ = p, out.rows_ = n, out.cols_ = from.cols_;
  out.data_ = aligned_bytes(out.bytes());
  std::vector<std::byte> scratch(from.row_bytes() * qdot::kGroupRows);
  if (p == qdot::Packing::kRows) {
    for (uint64_t r = 0; r < n; ++r)
      std::memcpy(out.data_.get() + r * out.row_bytes(), from.file_row(r0 + r, scratch.data()), out.row_bytes());
    return out;
  }
  const std::byte* rows[qdot::kGroupRows];
  for (uint64_t g = 0; g < n / qdot::kGroupRows; ++g) {
    for (uint32_t i = 0; i < qdot::kGroupRows; ++i)
      rows[i] = from.file_row(r0 + g * qdot::kGroupRows + i, scratch.data() + i * from.row_bytes());
    qdot::pack_group(p, rows, out.cols_, const_cast<std::byte*>(out.group(g)));
  }
  return out;
}

const std::byte* WeightPart::file_row(uint64_t r, std::byte* scratch) const {
  if (packing_ == qdot::Packing::kRows) return row(r);
  qdot::unpack_row(packing_, group(r / qdot::kGroupRows), cols_, uint32_t(r % qdot::kGroupRows), scratch);
  return scratch;
}

WeightPart WeightPart::from_f32(std::vector<float> values, uint64_t cols) {
  WeightPart p;
  p.type_ = GgufType::kF32, p.cols_ = cols, p.rows_ = cols ? values.size() / cols : 0;
  auto held = std::make_shared<std::vector<float>>(std::move(values));  // no copy: the part shares the vector
  p.data_ = std::shared_ptr<std::byte>(held, reinterpret_cast<std::byte*>(held->data()));
  return p;
}

Linear Linear::f32(std::vector<float> values, uint64_t cols) {
  Linear l;
  if (values.empty()) return l;
  l.parts_.push_back(WeightPart::from_f32(std::move(values), cols));
  l.rows_ = l.parts_[0].rows(), l.cols_ = cols;
  return l;
}

Status Linear::append(WeightPart part) {
  if (!parts_.empty() && part.cols() != cols_)
    return Status::InvalidArgument("weights: stacking rows of " + std::to_string(part.cols()) + " under rows of " +
                                   std::to_string(cols_));
  cols_ = part.cols();
  rows_ += part.rows();
  if (!parts_.empty() && parts_.back().type() == part.type() && parts_.back().packing() == qdot::Packing::kRows &&
      part.packing() == qdot::Packing::kRows) {  // one part per run of a type
    WeightPart& last = parts_.back();
    std::vector<std::byte> joined(last.bytes() + part.bytes());
    std::memcpy(joined.data(), last.row(0), last.bytes());
    std::memcpy(joined.data() + last.bytes(), part.row(0), part.bytes());
    KVTIER_ASSIGN_OR_RETURN(last, WeightPart::from_bytes(part.type(), last.rows() + part.rows(), cols_, joined));
    return Status::Ok();
  }
  parts_.push_back(std::move(part));
  return Status::Ok();
}

void Linear::pack(const qdot::Kernels& kernels) {
  std::vector<WeightPart> parts;
  for (WeightPart& p : parts_) {
    const qdot::Packing want = kernels.packing[uint32_t(p.type())];
    const uint64_t grouped = p.rows() / qdot::kGroupRows * qdot::kGroupRows;
    if (want == p.packing() || grouped == 0) {
      parts.push_back(std::move(p));
      continue;
    }
    parts.push_back(WeightPart::repacked(p, 0, grouped, want));
    if (grouped < p.rows()) parts.push_back(WeightPart::repacked(p, grouped, p.rows() - grouped, qdot::Packing::kRows));
    p = WeightPart();  // each part's old copy goes as soon as it is repacked
  }
  parts_ = std::move(parts);
}

uint64_t Linear::bytes() const {
  uint64_t n = 0;
  for (const WeightPart& p : parts_) n += p.bytes();
  return n;
}

void Linear::rows_f32(uint64_t r0, uint64_t n, float* out) const {
  uint64_t base = 0;
  std::vector<std::byte> scratch;
  for (const WeightPart& p : parts_) {
    const uint64_t lo = std::max(r0, base), hi = std::min(r0 + n, base + p.rows());
    if (p.packing() != qdot::Packing::kRows) scratch.resize(p.row_bytes());  // file rows need no copy
    for (uint64_t r = lo; r < hi; ++r) {
      float* dst = out + size_t(r - r0) * cols_;
      if (const float* f = p.f32()) {
        std::memcpy(dst, f + size_t(r - base) * cols_, cols_ * sizeof(float));
      } else {  // sizes hold by construction
        (void)quant::dequantize_row(p.type(), std::span(p.file_row(r - base, scratch.data()), p.row_bytes()), cols_,
                                    dst);
      }
    }
    base += p.rows();
  }
}

std::vector<float> Linear::to_f32() const {
  std::vector<float> out(size_t(rows_) * cols_);
  rows_f32(0, rows_, out.data());
  return out;
}

}  // namespace kvtier::engine
