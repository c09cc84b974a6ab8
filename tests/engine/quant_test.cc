// Dequantisation against llama.cpp: tests/data/quant/quant-blocks.gguf holds,
// for each block type T, rows quantised by llama-quantize (`T.q`) and their
// dequantisation by gguf-py's reference code (`T.f32`); see its README.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "engine/gguf.h"
#include "engine/quant.h"
#include "test_data.h"

namespace kvtier::engine {
namespace {

std::string fixture(std::string_view relative) { return testdata::test_data_path(relative); }

std::map<std::string, GgufTensor> quant_blocks() {
  auto tensors = load_gguf_tensors(fixture("quant/quant-blocks.gguf"), /*dequantize=*/true);
  EXPECT_TRUE(tensors.ok()) << tensors.status().to_string();
  std::map<std::string, GgufTensor> by_name;
  if (tensors.ok())
    for (GgufTensor& t : *tensors) by_name.emplace(t.name, std::move(t));
  return by_name;
}

TEST(Quant, TypeTableMatchesGgml) {
  const std::map<GgufType, std::pair<uint32_t, uint32_t>> ggml = {
      {GgufType::kQ4_0, {32, 18}},  {GgufType::kQ4_1, {32, 20}},  {GgufType::kQ5_0, {32, 22}},
      {GgufType::kQ5_1, {32, 24}},  {GgufType::kQ8_0, {32, 34}},  {GgufType::kQ2_K, {256, 84}},
      {GgufType::kQ3_K, {256, 110}}, {GgufType::kQ4_K, {256, 144}}, {GgufType::kQ5_K, {256, 176}},
      {GgufType::kQ6_K, {256, 210}}, {GgufType::kF32, {1, 4}},     {GgufType::kF16, {1, 2}},
      {GgufType::kBF16, {1, 2}}};
  ASSERT_EQ(quant::all_types().size(), ggml.size());
  for (const quant::TypeInfo& t : quant::all_types()) {
    ASSERT_TRUE(ggml.count(t.type)) << t.name;
    EXPECT_EQ(t.block_elems, ggml.at(t.type).first) << t.name;
    EXPECT_EQ(t.block_bytes, ggml.at(t.type).second) << t.name;
    EXPECT_EQ(quant::find_type(uint32_t(t.type)), &t);
  }
  EXPECT_EQ(quant::find_type(9), nullptr);   // Q8_1
  EXPECT_EQ(quant::find_type(15), nullptr);  // Q8_K
}

// Every row of every type equals llama.cpp's reference bit for bit (both sides
// compute in f32 without fused multiply-adds; the f16 scales widen exactly).
TEST(Quant, EveryRowReproducesLlamaCppReference) {
  const auto tensors = quant_blocks();
  const char* types[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
  for (const char* type : types) {
    SCOPED_TRACE(type);
    ASSERT_TRUE(tensors.count(std::string(type) + ".q") && tensors.count(std::string(type) + ".f32"));
    const GgufTensor& q = tensors.at(std::string(type) + ".q");
    const GgufTensor& ref = tensors.at(std::string(type) + ".f32");
    EXPECT_EQ(quant::info(q.type).name, type);
    ASSERT_EQ(q.shape, ref.shape);
    ASSERT_EQ(q.values.size(), ref.values.size());
    size_t differing = 0;
    for (size_t k = 0; k < q.values.size(); ++k)
      if (std::memcmp(&q.values[k], &ref.values[k], sizeof(float)) != 0) ++differing;
    EXPECT_EQ(differing, 0u) << "of " << q.values.size() << " elements";
    float range = 0;
    for (float v : ref.values) range = std::max(range, std::fabs(v));
    EXPECT_GT(range, 0.0f) << "reference is all zeros: the fixture proves nothing";
  }
}

// Tensor sizes follow the type table; dequantize_row refuses partial blocks and short input.
TEST(Quant, RowContract) {
  auto raw = load_gguf_tensors(fixture("quant/quant-blocks.gguf"), /*dequantize=*/false);
  ASSERT_TRUE(raw.ok()) << raw.status().to_string();
  for (const GgufTensor& t : *raw) {
    const quant::TypeInfo& info = quant::info(t.type);
    EXPECT_EQ(t.bytes, quant::row_bytes(info, t.shape[0]) * t.shape[1]) << t.name;
    EXPECT_TRUE(t.values.empty());
  }
  std::vector<std::byte> block(210);
  std::vector<float> out(256);
  EXPECT_FALSE(quant::dequantize_row(GgufType::kQ4_K, block, 100, out.data()).ok());   // not whole blocks
  EXPECT_FALSE(quant::dequantize_row(GgufType::kQ4_K, std::span(block).first(143), 256, out.data()).ok());
  EXPECT_TRUE(quant::dequantize_row(GgufType::kQ6_K, block, 256, out.data()).ok());  // zeros decode to zeros
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// A block whose f16 scale is NaN or infinite decodes to non-finite values:
// the reader refuses the file instead of handing them on.
TEST(Quant, NonFiniteScaleRefusesTheFile) {
  const std::string path = fixture("quant/quant-blocks.gguf");
  auto table = load_gguf_tensors(path, /*dequantize=*/false);
  ASSERT_TRUE(table.ok()) << table.status().to_string();
  std::vector<std::byte> image;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    image.resize(200000);
    image.resize(std::fread(image.data(), 1, image.size(), f));
    std::fclose(f);
  }
  ASSERT_TRUE(parse_gguf_tensors(image, /*dequantize=*/true).ok());
  for (const GgufTensor& t : *table) {
    if (t.name != "Q4_K.q" && t.name != "Q6_K.q" && t.name != "Q4_0.q") continue;
    // The scale d is the first field of Q4_0/Q4_K blocks and the last of Q6_K's.
    const size_t at = t.file_offset + (t.type == GgufType::kQ6_K ? 208 : 0);
    for (uint16_t bad : {uint16_t(0x7e00), uint16_t(0xfc00)}) {  // NaN, -inf
      auto edited = image;
      std::memcpy(&edited[at], &bad, 2);
      auto r = parse_gguf_tensors(edited, /*dequantize=*/true, "edited");
      ASSERT_FALSE(r.ok()) << t.name;
      EXPECT_NE(r.status().message().find("NaN or infinite"), std::string::npos) << r.status().message();
      EXPECT_TRUE(parse_gguf_tensors(edited, /*dequantize=*/false).ok()) << "the table alone stays readable";
    }
  }
}

}  // namespace
}  // namespace kvtier::engine
