// Quantisation (engine/quantize.h) against llama.cpp: round trips per type,
// the blocks llama-quantize wrote into tests/data/models/small-seed2-Q4_K_M.gguf
// (quantised from `kvtier model make --preset small --seed 2 --dtype f32`,
// which synthetic_tensor regenerates), its Q4_K_M type choices, and the
// streaming writer (`kvtier model make`, `kvtier model quantize`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "engine/gguf.h"
#include "engine/quantize.h"
#include "engine/synthetic.h"
#include "model_variants.h"
#include "test_data.h"

namespace kvtier::engine {
namespace {

namespace fs = std::filesystem;

constexpr GgufType kBlockTypes[] = {GgufType::kQ4_0, GgufType::kQ4_1, GgufType::kQ5_0, GgufType::kQ5_1,
                                    GgufType::kQ8_0, GgufType::kQ2_K, GgufType::kQ3_K, GgufType::kQ4_K,
                                    GgufType::kQ5_K, GgufType::kQ6_K};

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kvtier_quantize_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<std::byte> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), {});
  std::vector<std::byte> out(b.size());
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}

std::vector<std::byte> quantize(GgufType type, const std::vector<float>& x, uint64_t cols) {
  const size_t row_bytes = size_t(quant::row_bytes(quant::info(type), cols));
  std::vector<std::byte> out(x.size() / cols * row_bytes);
  for (size_t r = 0; r < x.size() / cols; ++r)
    EXPECT_TRUE(quantize_row(type, x.data() + r * cols, size_t(cols), out.data() + r * row_bytes).ok());
  return out;
}

std::vector<float> dequantize(GgufType type, std::span<const std::byte> bytes, size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(quant::dequantize_row(type, bytes, n, out.data()).ok());
  return out;
}

double sum_squared_error(std::span<const float> a, std::span<const float> b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return e;
}

// ---- round trips ---------------------------------------------------------------

// Gaussian rows with outliers (every 97th value 8x, as real weights have a
// few), a zero group and a constant one: each type's RMS error relative to the
// data's RMS stays within its bound, and the zero group decodes to zeros.
TEST(Quantize, RoundTripErrorPerType) {
  const uint64_t cols = 512;
  std::vector<float> x(16 * cols);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : x) v = normal(rng);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 8.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
  std::fill(x.begin() + 512, x.begin() + 544, 0.01f);
  double energy = 0;
  for (float v : x) energy += double(v) * v;
  // ~1.2x the reference algorithms' error on this data (theirs is reproduced bit for bit below).
  const std::map<GgufType, double> bound = {
      {GgufType::kQ8_0, 0.011}, {GgufType::kQ6_K, 0.033}, {GgufType::kQ5_0, 0.088}, {GgufType::kQ5_1, 0.058},
      {GgufType::kQ5_K, 0.056}, {GgufType::kQ4_0, 0.171}, {GgufType::kQ4_1, 0.117}, {GgufType::kQ4_K, 0.11},
      {GgufType::kQ3_K, 0.23},  {GgufType::kQ2_K, 0.41},  {GgufType::kF16, 0.0003}, {GgufType::kBF16, 0.002}};
  for (const auto& [type, max_error] : bound) {
    SCOPED_TRACE(quant::info(type).name);
    const std::vector<float> y = dequantize(type, quantize(type, x, cols), x.size());
    const double rel = std::sqrt(sum_squared_error(x, y) / energy);
    EXPECT_LT(rel, max_error);
    EXPECT_GT(rel, 0.0);  // the data is not representable exactly: the bound is not vacuous
    for (size_t i = 64; i < 96; ++i) EXPECT_EQ(y[i], 0.0f) << "an all-zero group stays zero";
  }
}

// A zero row encodes to zeros for every type; F32 is a copy; partial blocks are refused.
TEST(Quantize, RowContract) {
  const std::vector<float> zeros(256, 0.0f);
  for (GgufType type : kBlockTypes) {
    SCOPED_TRACE(quant::info(type).name);
    for (float v : dequantize(type, quantize(type, zeros, 256), 256)) EXPECT_EQ(v, 0.0f);
    std::vector<std::byte> out(1024);
    EXPECT_EQ(quantize_row(type, zeros.data(), quant::info(type).block_elems + 1, out.data()).code(),
              StatusCode::kInvalidArgument);
  }
  const std::vector<float> x = {1.5f, -2.25f, 3e-8f, 65504.0f};
  EXPECT_EQ(dequantize(GgufType::kF32, quantize(GgufType::kF32, x, 4), 4), x);
  EXPECT_EQ(dequantize(GgufType::kF16, quantize(GgufType::kF16, x, 4), 4)[1], -2.25f);
}

TEST(Quantize, ParsesWeightFormats) {
  for (const char* name : {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k",
                           "q5_k", "q6_k", "q4_k_m"}) {
    auto f = parse_weight_format(name);
    ASSERT_TRUE(f.ok()) << name;
    EXPECT_EQ(f->name(), name);
  }
  EXPECT_TRUE(parse_weight_format("q4_k_m")->q4_k_m);
  EXPECT_EQ(parse_weight_format("q4_k_m")->file_type(), 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  EXPECT_EQ(parse_weight_format("iq4_nl").status().code(), StatusCode::kInvalidArgument);
}

// ---- llama.cpp's blocks ---------------------------------------------------------------

// The blocks of tests/data/quant/quant-blocks.gguf (every block type) are llama-quantize's
// encoding of rows 0-3 of `small` seed 1's token_embd (output for Q6_K, blk.0.ffn_down for
// Q8_0, as llama.cpp's mixes store them): quantising the regenerated rows gives them bit for bit.
TEST(Quantize, QuantBlocksFixtureBitForBit) {
  const std::string path = testdata::test_data_path("quant/quant-blocks.gguf");
  auto tensors = load_gguf_tensors(path, /*dequantize=*/false);
  ASSERT_TRUE(tensors.ok()) << tensors.status().to_string();
  const std::vector<std::byte> bytes = read_all(path);
  const ModelConfig small = *model_preset("small");
  size_t checked = 0;
  for (const GgufTensor& t : *tensors) {
    if (!t.name.ends_with(".q")) continue;
    SCOPED_TRACE(t.name);
    const std::string source = t.type == GgufType::kQ6_K   ? "output.weight"
                               : t.type == GgufType::kQ8_0 ? "blk.0.ffn_down.weight"
                                                           : "token_embd.weight";
    auto all = synthetic_tensor(small, 1, source);
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(t.shape.size(), 2u);
    const std::vector<float> rows(all->begin(), all->begin() + t.shape[0] * t.shape[1]);
    const std::vector<std::byte> ours = quantize(t.type, rows, t.shape[0]);
    ASSERT_EQ(ours.size(), t.bytes);
    EXPECT_EQ(std::memcmp(ours.data(), bytes.data() + t.file_offset, t.bytes), 0);
    ++checked;
  }
  EXPECT_EQ(checked, std::size(kBlockTypes));
}

// ---- llama.cpp's file ---------------------------------------------------------------

class LlamaCppQ4KM : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testdata::test_data_path("models/small-seed2-Q4_K_M.gguf");
    auto tensors = load_gguf_tensors(path_, /*dequantize=*/false);
    ASSERT_TRUE(tensors.ok()) << tensors.status().to_string();
    tensors_ = std::move(*tensors);
    bytes_ = read_all(path_);
    config_ = *model_preset("small");
  }
  std::span<const std::byte> data(const GgufTensor& t) const {
    return std::span(bytes_).subspan(t.file_offset, t.bytes);
  }

  std::string path_;
  std::vector<GgufTensor> tensors_;
  std::vector<std::byte> bytes_;
  ModelConfig config_;
};

// What the comparison of one type found.
struct TypeReport {
  size_t tensors = 0, blocks = 0, identical = 0;
  double ours_sse = 0, llama_sse = 0;  // over the blocks that differ, against the f32 source
};

// Every matrix of the file, quantised here from the regenerated f32 source with
// the type llama.cpp chose for it, gives llama.cpp's blocks bit for bit; a
// block that differs must fit its source no worse than llama.cpp's does.
// (The F32 vectors are the source's values: the regeneration is exact.)
TEST_F(LlamaCppQ4KM, BlocksAreLlamaCppsBitForBit) {
  std::map<GgufType, TypeReport> report;
  for (const GgufTensor& t : tensors_) {
    SCOPED_TRACE(t.name);
    auto source = synthetic_tensor(config_, 2, t.name);
    ASSERT_TRUE(source.ok()) << source.status().to_string();
    if (t.type == GgufType::kF32) {
      ASSERT_EQ(t.bytes, source->size() * sizeof(float));
      EXPECT_EQ(std::memcmp(data(t).data(), source->data(), t.bytes), 0) << "the regenerated source differs";
      continue;
    }
    const quant::TypeInfo& info = quant::info(t.type);
    const std::vector<std::byte> ours = quantize(t.type, *source, t.shape[0]);
    ASSERT_EQ(ours.size(), t.bytes);
    TypeReport& r = report[t.type];
    ++r.tensors;
    for (size_t b = 0; b < ours.size() / info.block_bytes; ++b) {
      ++r.blocks;
      const auto mine = std::span(ours).subspan(b * info.block_bytes, info.block_bytes);
      const auto theirs = data(t).subspan(b * info.block_bytes, info.block_bytes);
      if (std::memcmp(mine.data(), theirs.data(), info.block_bytes) == 0) {
        ++r.identical;
        continue;
      }
      const auto x = std::span<const float>(*source).subspan(b * info.block_elems, info.block_elems);
      r.ours_sse += sum_squared_error(x, dequantize(t.type, mine, info.block_elems));
      r.llama_sse += sum_squared_error(x, dequantize(t.type, theirs, info.block_elems));
    }
  }
  ASSERT_EQ(report.size(), 4u);  // Q4_K, Q6_K, Q5_0, Q8_0
  for (const auto& [type, r] : report) {
    std::printf("[ llama.cpp ] %s: %zu tensors, %zu of %zu blocks bit-identical", quant::info(type).name.data(),
                r.tensors, r.identical, r.blocks);
    if (r.identical < r.blocks) std::printf(", differing blocks' SSE %.6g (llama.cpp %.6g)", r.ours_sse, r.llama_sse);
    std::printf("\n");
    EXPECT_EQ(r.identical, r.blocks) << quant::info(type).name;
    EXPECT_LE(r.ours_sse, r.llama_sse) << quant::info(type).name;
  }
}

// The Q4_K_M policy picks llama.cpp's type for every tensor of the file,
// including the fallbacks for the 1408-wide ffn_down (Q4_K → Q5_0, Q6_K → Q8_0).
TEST_F(LlamaCppQ4KM, PolicyReproducesTheFilesTypes) {
  const std::vector<GgufModelTensor> layout = gguf_model_tensors(config_);
  auto specs = gguf_tensor_specs(config_, layout, WeightFormat::Q4_K_M());
  ASSERT_TRUE(specs.ok()) << specs.status().to_string();
  ASSERT_EQ(specs->size(), tensors_.size());
  std::map<std::string, GgufType> file_types;
  for (const GgufTensor& t : tensors_) file_types[t.name] = t.type;
  for (const GgufTensorSpec& s : *specs) {
    ASSERT_TRUE(file_types.count(s.name)) << s.name;
    EXPECT_EQ(quant::info(s.type).name, quant::info(file_types[s.name]).name) << s.name;
  }
}

// llama.cpp's rules beyond what `small` exercises.
TEST(Quantize, Q4KMPolicy) {
  MatrixRole r{.name = "blk.0.attn_v.weight", .layer = 0, .n_layers = 32, .row_length = 4096};
  std::string more_bits;
  for (uint32_t i = 0; i < 32; ++i) {
    r.layer = i;
    if (q4_k_m_type(r) == GgufType::kQ6_K) more_bits += std::to_string(i) + " ";
  }
  EXPECT_EQ(more_bits, "0 1 2 3 6 9 12 15 18 21 24 27 28 29 30 31 ");  // use_more_bits for 32 layers
  r.layer = 4;
  EXPECT_EQ(q4_k_m_type(r), GgufType::kQ4_K);
  r.model_70b = true;
  EXPECT_EQ(q4_k_m_type(r), GgufType::kQ5_K);  // a 70B's attn_v gets more bits
  EXPECT_EQ(q4_k_m_type({.name = "token_embd.weight", .n_layers = 32, .row_length = 4096}), GgufType::kQ4_K);
  EXPECT_EQ(q4_k_m_type({.name = "token_embd.weight", .n_layers = 32, .row_length = 4096, .has_output = false}),
            GgufType::kQ6_K);  // tied: the embedding is the output projection
  EXPECT_EQ(q4_k_m_type({.name = "output.weight", .n_layers = 2, .row_length = 64}), GgufType::kQ8_0);
  EXPECT_EQ(q4_k_m_type({.name = "blk.1.attn_q.weight", .layer = 1, .n_layers = 2, .row_length = 64}), GgufType::kQ5_0);
  EXPECT_EQ(q4_k_m_type({.name = "blk.1.ffn_up.weight", .layer = 1, .n_layers = 2, .row_length = 48}), GgufType::kF16);
  // A file's block numbers are any uint32: 7 * n_layers overflowed an int (undefined; the sanitizer build stops on it).
  EXPECT_EQ(q4_k_m_type({.name = "blk.400000000.ffn_down.weight", .layer = 400000000, .n_layers = 400000001,
                         .row_length = 256}),
            GgufType::kQ6_K);
  EXPECT_EQ(q4_k_m_type({.name = "blk.4000000000.ffn_down.weight", .layer = 4000000000u, .n_layers = 4000000001u,
                         .row_length = 256}),
            GgufType::kQ6_K);
  EXPECT_TRUE(is_llama_cpp_70b([] {
    ModelConfig c = *model_preset("8b");
    c.num_layers = 80;
    return c;
  }()));
  EXPECT_FALSE(is_llama_cpp_70b(*model_preset("8b")));
  // Uniform types fall back as llama.cpp does; Q2_K/Q3_K have no fallback kvtier writes.
  EXPECT_EQ(*matrix_type(GgufType::kQ6_K, {.name = "blk.0.ffn_down.weight", .row_length = 1408}), GgufType::kQ8_0);
  EXPECT_EQ(*matrix_type(GgufType::kQ5_K, {.name = "blk.0.ffn_down.weight", .row_length = 1408}), GgufType::kQ5_1);
  EXPECT_EQ(matrix_type(GgufType::kQ3_K, {.name = "x", .row_length = 1408}).status().code(),
            StatusCode::kInvalidArgument);
}

// ---- synthetic tensors and the streaming writer --------------------------------------

// synthetic_tensor gives Model::synthetic's values exactly, for every tensor of every variant
// (biases, RoPE factors) and a tied model.
TEST(Synthetic, TensorsAreModelSynthetics) {
  std::vector<ModelConfig> configs;
  for (const std::string& v : testing::model_variant_names()) configs.push_back(*testing::model_variant_config(v));
  configs.push_back(configs[0]);
  configs.back().tied_embeddings = true;
  for (const ModelConfig& c : configs) {
    auto model = Model::synthetic(c, 11);
    ASSERT_TRUE(model.ok());
    const ModelWeights& w = (*model)->weights();
    auto expect = [&](std::string_view name, const std::vector<float>& want) {
      auto got = synthetic_tensor(c, 11, name);
      ASSERT_TRUE(got.ok()) << name;
      EXPECT_EQ(*got, want) << name;
    };
    auto rows = [](const Linear& m, uint64_t r0, uint64_t n) {
      std::vector<float> v(size_t(n * m.cols()));
      m.rows_f32(r0, n, v.data());
      return v;
    };
    expect("token_embd.weight", w.token_embd.to_f32());
    expect("output_norm.weight", w.output_norm);
    if (!c.tied_embeddings) expect("output.weight", w.output.to_f32());
    const uint32_t q = c.q_dim(), kv = c.kv_dim(), last = c.num_layers - 1;
    const LayerWeights& l = w.layers[last];
    const std::string p = "blk." + std::to_string(last) + ".";
    expect(p + "attn_norm.weight", l.attn_norm);
    expect(p + "attn_v.weight", rows(l.wqkv, q + kv, kv));
    expect(p + "attn_output.weight", l.wo.to_f32());
    expect(p + "ffn_norm.weight", l.ffn_norm);
    expect(p + "ffn_up.weight", rows(l.w_gate_up, c.ffn_size, c.ffn_size));
    expect(p + "ffn_down.weight", l.w_down.to_f32());
    if (c.has_qkv_bias()) expect(p + "attn_k.bias", std::vector<float>(l.bqkv.begin() + q, l.bqkv.begin() + q + kv));
    if (!c.rope_freq_factors.empty()) expect("rope_freqs.weight", c.rope_freq_factors);
  }
  EXPECT_EQ(synthetic_tensor(configs[0], 11, "blk.9.attn_q.weight").status().code(), StatusCode::kNotFound);
}

// Streaming a synthetic model tensor by tensor writes the very bytes write_gguf
// writes for Model::synthetic, in small chunks and several threads as in one.
TEST(Synthetic, StreamedFileIsWriteGgufsFile) {
  const ModelConfig c = *testing::model_variant_config("qwen2");
  auto model = Model::synthetic(c, 4);
  ASSERT_TRUE(model.ok());
  for (const WeightFormat& format : {WeightFormat(GgufType::kF32), WeightFormat::Q4_K_M()}) {
    SCOPED_TRACE(format.name());
    const std::string a = temp_path("model.gguf"), b = temp_path("stream.gguf");
    ASSERT_TRUE(write_gguf(**model, a, {.weight_type = format}).ok());
    const Status s = write_synthetic_gguf(c, 4, (*model)->vocab(), b, {.weight_type = format},
                                          {.threads = 3, .chunk_elements = 1000});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(read_all(a), read_all(b));
    fs::remove(a), fs::remove(b);
  }
}

// `model quantize`: an f16 file quantised to Q4_K_M has the tensors (and metadata)
// that making the model as Q4_K_M gives; a quantised input is refused by name.
TEST(Synthetic, QuantizeGgufMatchesMakingTheModelQuantised) {
  const ModelConfig c = *model_preset("tiny");
  auto model = Model::synthetic(c, 6);
  ASSERT_TRUE(model.ok());
  const std::string f16 = temp_path("f16.gguf"), made = temp_path("made.gguf"), converted = temp_path("conv.gguf");
  ASSERT_TRUE(write_gguf(**model, f16, {.weight_type = GgufType::kF16}).ok());
  ASSERT_TRUE(write_gguf(**model, made, {.weight_type = WeightFormat::Q4_K_M()}).ok());
  const Status s = quantize_gguf(f16, converted, WeightFormat::Q4_K_M());
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto want = load_gguf_tensors(made, false), got = load_gguf_tensors(converted, false);
  ASSERT_TRUE(want.ok() && got.ok());
  const auto want_bytes = read_all(made), got_bytes = read_all(converted);
  ASSERT_EQ(want->size(), got->size());
  for (size_t i = 0; i < want->size(); ++i) {
    const GgufTensor &w = (*want)[i], &g = (*got)[i];
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.type, w.type) << w.name;
    EXPECT_EQ(g.shape, w.shape) << w.name;
    ASSERT_EQ(g.bytes, w.bytes) << w.name;
    EXPECT_EQ(std::memcmp(got_bytes.data() + g.file_offset, want_bytes.data() + w.file_offset, w.bytes), 0) << w.name;
  }
  auto a = load_gguf(made), b = load_gguf(converted);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().to_string();
  EXPECT_EQ((*b)->config(), (*a)->config());
  EXPECT_EQ((*b)->vocab().tokens, (*a)->vocab().tokens);
  EXPECT_EQ((*b)->fingerprint(), (*a)->fingerprint());
  const Status again = quantize_gguf(made, temp_path("again.gguf"), GgufType::kQ8_0);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("is already"), std::string::npos) << again.message();
  EXPECT_FALSE(fs::exists(temp_path("again.gguf")));
  EXPECT_EQ(quantize_gguf(f16, f16, GgufType::kQ8_0).code(), StatusCode::kInvalidArgument);
  fs::remove(f16), fs::remove(made), fs::remove(converted);
}

// A weight that is NaN or infinite is refused by name, as the loader refuses it: quantize took a NaN
// to 0 and wrote a file that loaded (or, to f16, one that did not), exiting 0 either way.
TEST(Synthetic, QuantizeRefusesANonFiniteWeight) {
  const ModelConfig c = *model_preset("tiny");
  auto model = Model::synthetic(c, 6);
  ASSERT_TRUE(model.ok());
  const std::string f16 = temp_path("nan-f16.gguf"), out = temp_path("nan-q8.gguf");
  ASSERT_TRUE(write_gguf(**model, f16, {.weight_type = GgufType::kF16}).ok());
  auto tensors = load_gguf_tensors(f16, false);
  ASSERT_TRUE(tensors.ok());
  const GgufTensor& poisoned = tensors->back();
  {
    std::fstream io(f16, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(poisoned.file_offset + 2));  // its second value
    const unsigned char nan_f16[2] = {0x00, 0x7E};
    io.write(reinterpret_cast<const char*>(nan_f16), 2);
  }
  for (const WeightFormat& format : {WeightFormat(GgufType::kQ8_0), WeightFormat::Q4_K_M(), WeightFormat(GgufType::kF16)}) {
    const Status s = quantize_gguf(f16, out, format);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.to_string();
    EXPECT_NE(s.message().find("'" + poisoned.name + "' holds a NaN"), std::string::npos) << s.to_string();
    EXPECT_FALSE(fs::exists(out));
  }
  // A failed run leaves the file that was at the output, and a link's target, as they were; it
  // truncated them, or removed the link and left its target half written.
  const std::string kept = temp_path("kept.gguf"), link = temp_path("link.gguf");
  std::ofstream(kept, std::ios::binary) << "the previous output";
  fs::remove(link);
  fs::create_symlink(kept, link);
  for (const std::string& dest : {kept, link}) {
    EXPECT_EQ(quantize_gguf(f16, dest, GgufType::kQ8_0).code(), StatusCode::kCorruption);
    std::ifstream in(kept, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "the previous output") << dest;
    EXPECT_TRUE(fs::is_symlink(link));
  }
  size_t partials = 0;
  for (const auto& e : fs::directory_iterator(fs::path(kept).parent_path()))
    partials += e.path().filename().string().find(fs::path(kept).filename().string() + ".partial-") == 0;
  EXPECT_EQ(partials, 0u);
  // A whole run replaces the link's target, with the mode it had, and keeps the link; a link whose
  // target is not there yet gets its target written (the link itself was replaced by a file).
  const std::string good = temp_path("good-f16.gguf");
  ASSERT_TRUE(write_gguf(**model, good, {.weight_type = GgufType::kF16}).ok());
  fs::permissions(kept, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  ASSERT_TRUE(quantize_gguf(good, link, GgufType::kQ8_0).ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(load_gguf_tensors(kept, false).ok());
  EXPECT_EQ(fs::status(kept).permissions(), fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  const std::string dangling = temp_path("dangling.gguf"), later = temp_path("later.gguf");
  fs::remove(dangling), fs::remove(later);
  fs::create_symlink(later, dangling);
  ASSERT_TRUE(quantize_gguf(good, dangling, GgufType::kQ8_0).ok());
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_TRUE(load_gguf_tensors(later, false).ok());
  fs::remove(f16), fs::remove(good), fs::remove(link), fs::remove(kept), fs::remove(dangling), fs::remove(later);
}

// A finite weight that the output type cannot hold (1e7: past f16's 65504, and a q8_0 block's
// f16 scale of 1e7 / 127) is refused by name: quantize wrote an infinite value and exited 0,
// and the loader then refused the file.
TEST(Synthetic, QuantizeRefusesAWeightOutsideTheOutputTypesRange) {
  auto model = Model::synthetic(*model_preset("tiny"), 7);
  ASSERT_TRUE(model.ok());
  const std::string f32 = temp_path("big-f32.gguf"), out = temp_path("big-out.gguf");
  ASSERT_TRUE(write_gguf(**model, f32, {.weight_type = GgufType::kF32}).ok());
  auto tensors = load_gguf_tensors(f32, false);
  ASSERT_TRUE(tensors.ok());
  const GgufTensor* big = nullptr;
  for (const GgufTensor& t : *tensors)
    if (t.shape.size() == 2 && t.type == GgufType::kF32) big = &t;
  ASSERT_NE(big, nullptr);
  {
    std::fstream io(f32, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(big->file_offset + 4));  // its second value
    const float value = 1e7f;
    io.write(reinterpret_cast<const char*>(&value), sizeof value);
  }
  ASSERT_TRUE(load_gguf(f32).ok()) << "the input is a model the loader takes";
  for (const WeightFormat& format : {WeightFormat(GgufType::kQ8_0), WeightFormat(GgufType::kF16)}) {
    fs::remove(out);
    const Status s = quantize_gguf(f32, out, format);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << format.name() << ": " << s.to_string();
    EXPECT_NE(s.message().find("'" + big->name + "' holds a value outside the range of"), std::string::npos)
        << s.to_string();
    EXPECT_FALSE(fs::exists(out)) << format.name();
  }
  fs::remove(f32);
}

}  // namespace
}  // namespace kvtier::engine
