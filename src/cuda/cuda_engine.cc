#include "cuda/cuda_engine.h"

#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/cuda_memory.h"
#include "cuda/engine_kernels.h"
#include "engine/engine_checks.h"
#include "engine/half.h"

namespace kvtier::cuda {

using engine::Logits;
using engine::Model;
using engine::ModelConfig;
using engine::RopeStyle;
using engine::arch_name;
using engine::rope_cos_sin;
using engine::PrefillOptions;
using engine::SequenceKV;

namespace {

using SteadyClock = std::chrono::steady_clock;
double seconds_since(SteadyClock::time_point t0) { return std::chrono::duration<double>(SteadyClock::now() - t0).count(); }

Status blas_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(what) + ": cuBLAS status " + std::to_string(int(st)));
}

// A device buffer that grows on demand (old contents are not kept).
struct DevBuf {
  std::unique_ptr<DeviceMemory> mem;
  Status reserve(size_t bytes) {
    if (mem && mem->size() >= bytes) return Status::Ok();
    if (mem) {
      // Enqueued kernels may still read the old buffer.
      KVTIER_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
      mem.reset();
    }
    DeviceMemoryOptions o;
    o.backend = MemoryBackend::kCuda;
    o.alignment = 256;
    KVTIER_ASSIGN_OR_RETURN(mem, allocate_device(std::max<size_t>(bytes, 256), o));
    return Status::Ok();
  }
  template <class T>
  T* as() const { return reinterpret_cast<T*>(mem->data()); }
};

Result<DevBuf> upload(const void* src, size_t bytes) {
  DevBuf b;
  KVTIER_RETURN_IF_ERROR(b.reserve(bytes));
  KVTIER_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.mem->data(), src, bytes, cudaMemcpyHostToDevice));
  return b;
}

// Query rows [row0, row0 + n) of one sequence at positions pos0.., page table at tables + table_off.
struct Span {
  uint32_t row0, n, pos0, table_off;
};

}  // namespace

Status CudaEngineOptions::validate() const {
  if (prefill_chunk == 0 || prefill_chunk > 65536)
    return Status::InvalidArgument("CudaEngineOptions: prefill_chunk must be in [1, 65536]");
  if (weights != DType::kF32 && weights != DType::kBF16)
    return Status::InvalidArgument("CudaEngineOptions: weights must be f32 or bf16");
  return Status::Ok();
}

struct CudaEngine::Impl {
  struct Matrix {
    DevBuf buf;
    uint32_t rows = 0, cols = 0;  // [rows = out][cols = in]
  };
  struct Layer {
    DevBuf attn_norm, ffn_norm;
    Matrix wqkv, wo, gate_up, down;
  };

  ~Impl() {
    if (blas) cublasDestroy(blas);
    if (stream) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
    }
  }

  Result<Matrix> matrix(const float* w, uint32_t rows, uint32_t cols) {
    Matrix m;
    m.rows = rows, m.cols = cols;
    const size_t n = size_t(rows) * cols;
    if (wdt == DType::kF32) {
      KVTIER_ASSIGN_OR_RETURN(m.buf, upload(w, n * sizeof(float)));
    } else {
      std::vector<uint16_t> b(n);
      engine::f32_to_bf16(w, b.data(), n);
      KVTIER_ASSIGN_OR_RETURN(m.buf, upload(b.data(), n * sizeof(uint16_t)));
    }
    return m;
  }

  // Y[m][W.rows] = X[m][W.cols] · W^T + beta · Y. cuBLAS is column-major:
  // Y^T = W · X^T with W read transposed from its row-major [out][in] storage.
  Status gemm(const float* x, uint32_t m, const Matrix& w, float* y, float beta) {
    const float alpha = 1.0f;
    const int n = int(w.rows), k = int(w.cols);
    if (wdt == DType::kF32)
      return blas_status(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, int(m), k, &alpha, w.buf.as<float>(), k, x, k,
                                     &beta, y, n),
                         "cublasSgemm");
    KVTIER_CUDA_RETURN_IF_ERROR(launch_to_bf16(x, xb.as<uint16_t>(), size_t(m) * k, stream));
    return blas_status(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, int(m), k, &alpha, w.buf.mem->data(),
                                    CUDA_R_16BF, k, xb.mem->data(), CUDA_R_16BF, k, &beta, y, CUDA_R_32F, n,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx");
  }

  Status reserve(uint32_t m) {
    const ModelConfig& c = cfg;
    const size_t W = size_t(c.q_dim()) + 2 * c.kv_dim();
    KVTIER_RETURN_IF_ERROR(h.reserve(size_t(m) * c.hidden_size * 4));
    KVTIER_RETURN_IF_ERROR(qkv.reserve(size_t(m) * W * 4));
    KVTIER_RETURN_IF_ERROR(attn.reserve(size_t(m) * c.q_dim() * 4));
    KVTIER_RETURN_IF_ERROR(gu.reserve(size_t(m) * 2 * c.ffn_size * 4));
    KVTIER_RETURN_IF_ERROR(act.reserve(size_t(m) * c.ffn_size * 4));
    if (wdt == DType::kBF16) {
      const size_t widest = std::max({c.hidden_size, c.q_dim(), c.ffn_size});
      KVTIER_RETURN_IF_ERROR(xb.reserve(size_t(m) * widest * 2));
    }
    return Status::Ok();
  }

  template <class T>
  Status put(DevBuf& b, const std::vector<T>& v) {
    KVTIER_RETURN_IF_ERROR(b.reserve(v.size() * sizeof(T)));
    // Pageable source: the call returns once the bytes are staged, so `v` may change afterwards.
    KVTIER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.mem->data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    return Status::Ok();
  }

  KVPoolView view(BlockPool& pool, uint32_t layer) const {
    const KVGeometry& g = pool.geometry();
    return KVPoolView{.base = pool.memory().data(),
                      .page_bytes = g.page_bytes(),
                      .layer_offset = g.layer_offset(layer),
                      .v_offset = g.v_offset_in_layer(),
                      .token_bytes = g.token_kv_half_bytes(),
                      .page_tokens = g.page_tokens,
                      .dtype = int(g.dtype)};
  }

  // One layer over rows [row0, row0 + m) of x (row-indexed arrays cs/pos/table_off share row0).
  Status layer_pass(BlockPool& pool, uint32_t l, uint32_t row0, uint32_t m, std::span<const Span> spans) {
    const ModelConfig& c = cfg;
    const uint32_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_size, W = Q + 2 * KV;
    const Layer& L = layers[l];
    KVTIER_RETURN_IF_ERROR(reserve(m));
    float* xr = x.as<float>() + size_t(row0) * H;
    KVTIER_CUDA_RETURN_IF_ERROR(launch_rmsnorm(xr, L.attn_norm.as<float>(), h.as<float>(), m, H, c.rms_eps, stream));
    KVTIER_RETURN_IF_ERROR(gemm(h.as<float>(), m, L.wqkv, qkv.as<float>(), 0.0f));
    const KVPoolView kv = view(pool, l);
    const RopeStoreArgs rs{.qkv = qkv.as<float>(),
                           .rows = m,
                           .row_stride = W,
                           .num_heads = c.num_heads,
                           .num_kv_heads = c.num_kv_heads,
                           .head_dim = c.head_dim,
                           .cs = cs.as<float>() + size_t(row0) * c.head_dim,
                           .pos = pos.as<uint32_t>() + row0,
                           .table_off = table_off.as<uint32_t>() + row0,
                           .tables = tables.as<uint32_t>(),
                           .kv = kv};
    KVTIER_CUDA_RETURN_IF_ERROR(launch_rope_store(rs, stream));
    for (const Span& s : spans) {
      const AttentionArgs a{.q = qkv.as<float>() + size_t(s.row0 - row0) * W,
                            .q_stride = W,
                            .out = attn.as<float>() + size_t(s.row0 - row0) * Q,
                            .out_stride = Q,
                            .n_tokens = s.n,
                            .pos0 = s.pos0,
                            .num_heads = c.num_heads,
                            .num_kv_heads = c.num_kv_heads,
                            .head_dim = c.head_dim,
                            .scale = 1.0f / std::sqrt(float(c.head_dim)),
                            .table = tables.as<uint32_t>() + s.table_off,
                            .kv = kv};
      KVTIER_CUDA_RETURN_IF_ERROR(launch_attention(a, stream));
    }
    KVTIER_RETURN_IF_ERROR(gemm(attn.as<float>(), m, L.wo, xr, 1.0f));
    KVTIER_CUDA_RETURN_IF_ERROR(launch_rmsnorm(xr, L.ffn_norm.as<float>(), h.as<float>(), m, H, c.rms_eps, stream));
    KVTIER_RETURN_IF_ERROR(gemm(h.as<float>(), m, L.gate_up, gu.as<float>(), 0.0f));
    KVTIER_CUDA_RETURN_IF_ERROR(launch_swiglu(gu.as<float>(), act.as<float>(), m, F, stream));
    return gemm(act.as<float>(), m, L.down, xr, 1.0f);
  }

  // Final norm and output projection of rows [first, first + rows) → host logits.
  Status head(uint32_t first, uint32_t rows, Logits& out) {
    const ModelConfig& c = cfg;
    KVTIER_RETURN_IF_ERROR(reserve(rows));
    KVTIER_RETURN_IF_ERROR(logits.reserve(size_t(rows) * c.vocab_size * 4));
    KVTIER_CUDA_RETURN_IF_ERROR(launch_rmsnorm(x.as<float>() + size_t(first) * c.hidden_size, out_norm.as<float>(),
                                               h.as<float>(), rows, c.hidden_size, c.rms_eps, stream));
    KVTIER_RETURN_IF_ERROR(gemm(h.as<float>(), rows, output, logits.as<float>(), 0.0f));
    out.vocab = c.vocab_size;
    out.rows = rows;
    out.data.resize(size_t(rows) * c.vocab_size);
    KVTIER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data.data(), logits.mem->data(), out.data.size() * 4,
                                                cudaMemcpyDeviceToHost, stream));
    KVTIER_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return Status::Ok();
  }

  ModelConfig cfg;
  DType wdt = DType::kF32;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<Layer> layers;
  DevBuf embd, out_norm;
  Matrix output;
  DevBuf x, h, qkv, attn, gu, act, xb, logits;  // activations
  DevBuf tokens, cs, pos, table_off, tables;     // per-call inputs
};

CudaEngine::CudaEngine(std::shared_ptr<const Model> model, BlockPool& pool, const CudaEngineOptions& options)
    : model_(std::move(model)), pool_(pool), geometry_(pool.geometry()), options_(options) {}

CudaEngine::~CudaEngine() = default;

cudaStream_t CudaEngine::stream() const { return impl_->stream; }

Result<std::unique_ptr<CudaEngine>> CudaEngine::create(std::shared_ptr<const Model> model, BlockPool& pool,
                                                       const CudaEngineOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  register_cuda_memory();
  if (!model) return Status::InvalidArgument("CudaEngine: no model");
  // What the kernels implement is checked first, so it is refused the same way with or without a GPU.
  if (model->config().rope_style() != RopeStyle::kAdjacentPairs || model->config().has_qkv_bias())
    return Status::Unimplemented("CudaEngine: the '" + std::string(arch_name(model->config().arch)) +
                                 "' architecture (rotate-half RoPE, QKV biases) is not implemented on the GPU; "
                                 "serve it with the CPU engine (--device cpu)");
  if (pool.memory().backend() != MemoryBackend::kCuda)
    return Status::InvalidArgument("CudaEngine: the block pool must live in CUDA device memory");
  const ModelConfig& c = model->config();
  const KVGeometry& g = pool.geometry();
  if (g != c.kv_geometry(g.dtype, g.page_tokens))
    return Status::InvalidArgument("CudaEngine: block pool geometry does not match the model");
  if (!attention_supported(c.head_dim, c.group_size()))
    return Status::Unimplemented("CudaEngine: head_dim " + std::to_string(c.head_dim) + " / group size " +
                                 std::to_string(c.group_size()) + " not supported (head_dim 16, 32, 64 or 128; group <= 64)");
  if (!device_present()) return Status::Unavailable("CudaEngine: " + device_description());

  std::unique_ptr<CudaEngine> e(new CudaEngine(std::move(model), pool, options));
  e->impl_ = std::make_unique<Impl>();
  Impl& im = *e->impl_;
  im.cfg = c;
  im.wdt = options.weights;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&im.stream, cudaStreamNonBlocking));
  KVTIER_RETURN_IF_ERROR(blas_status(cublasCreate(&im.blas), "cublasCreate"));
  KVTIER_RETURN_IF_ERROR(blas_status(cublasSetStream(im.blas, im.stream), "cublasSetStream"));
  // Plain f32 math: TF32 tensor cores would cost ~1e-3 relative error per GEMM.
  KVTIER_RETURN_IF_ERROR(blas_status(cublasSetMathMode(im.blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));

  const engine::ModelWeights& w = e->model_->weights();
  const uint32_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_size;
  // Weights go up as f16/f32 (options.weights), dequantized one tensor at a time (docs/GPU.md).
  const std::vector<float> embd = w.token_embd.to_f32();
  KVTIER_ASSIGN_OR_RETURN(im.embd, upload(embd.data(), embd.size() * 4));
  KVTIER_ASSIGN_OR_RETURN(im.out_norm, upload(w.output_norm.data(), w.output_norm.size() * 4));
  KVTIER_ASSIGN_OR_RETURN(im.output, im.matrix(e->model_->output_matrix().to_f32().data(), c.vocab_size, H));
  for (const engine::LayerWeights& lw : w.layers) {
    Impl::Layer L;
    KVTIER_ASSIGN_OR_RETURN(L.attn_norm, upload(lw.attn_norm.data(), lw.attn_norm.size() * 4));
    KVTIER_ASSIGN_OR_RETURN(L.ffn_norm, upload(lw.ffn_norm.data(), lw.ffn_norm.size() * 4));
    KVTIER_ASSIGN_OR_RETURN(L.wqkv, im.matrix(lw.wqkv.to_f32().data(), Q + 2 * KV, H));
    KVTIER_ASSIGN_OR_RETURN(L.wo, im.matrix(lw.wo.to_f32().data(), H, Q));
    KVTIER_ASSIGN_OR_RETURN(L.gate_up, im.matrix(lw.w_gate_up.to_f32().data(), 2 * F, H));
    KVTIER_ASSIGN_OR_RETURN(L.down, im.matrix(lw.w_down.to_f32().data(), H, F));
    im.layers.push_back(std::move(L));
  }
  return e;
}

Result<Logits> CudaEngine::prefill(SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                                   const PrefillOptions& options) {
  const ModelConfig& c = model_->config();
  KVTIER_RETURN_IF_ERROR(check_prefill(c, pool_, seq, tokens, start_pos));
  if (options.blend) return Status::Unimplemented("CudaEngine: selective recompute (blending) is not implemented; the planner prefills in full");
  const uint32_t n_total = uint32_t(tokens.size());

  const auto t_start = SteadyClock::now();
  Impl& im = *impl_;
  seq.num_tokens = start_pos;  // KV past start_pos is rewritten from here on
  const uint32_t n = n_total - start_pos, H = c.hidden_size;
  std::vector<uint32_t> pos(n), zeros(n, 0), table(pages_for(n_total));
  for (uint32_t i = 0; i < n; ++i) pos[i] = start_pos + i;
  for (size_t i = 0; i < table.size(); ++i) table[i] = seq.pages[i].value();
  std::vector<float> cs;
  rope_cos_sin(c, pos.data(), pos.size(), cs);
  std::vector<int32_t> tok(tokens.begin() + start_pos, tokens.end());
  KVTIER_RETURN_IF_ERROR(im.put(im.tokens, tok));
  KVTIER_RETURN_IF_ERROR(im.put(im.pos, pos));
  KVTIER_RETURN_IF_ERROR(im.put(im.table_off, zeros));
  KVTIER_RETURN_IF_ERROR(im.put(im.tables, table));
  KVTIER_RETURN_IF_ERROR(im.put(im.cs, cs));
  KVTIER_RETURN_IF_ERROR(im.x.reserve(size_t(n) * H * 4));
  KVTIER_CUDA_RETURN_IF_ERROR(launch_embed(im.embd.as<float>(), im.tokens.as<int32_t>(), n, H, im.x.as<float>(), im.stream));

  const uint32_t chunk = options_.prefill_chunk;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    if (options.layer_hook) KVTIER_RETURN_IF_ERROR(options.layer_hook(LayerIdx(l)));
    for (uint32_t c0 = 0; c0 < n; c0 += chunk) {
      const uint32_t m = std::min(chunk, n - c0);
      const Span span{c0, m, start_pos + c0, 0};
      KVTIER_RETURN_IF_ERROR(im.layer_pass(pool_, l, c0, m, std::span(&span, 1)));
    }
  }
  Logits out;
  const uint32_t rows = options.all_logits ? n : 1;
  KVTIER_RETURN_IF_ERROR(im.head(n - rows, rows, out));
  seq.num_tokens = n_total;

  profile_.prefill_seconds += seconds_since(t_start);
  profile_.prefill_tokens += n;
  profile_.prefill_flops += c.layer_flops_per_token() * n + c.attention_flops(start_pos, n_total) + c.head_flops() * rows;
  return out;
}

Result<Logits> CudaEngine::decode(std::span<SequenceKV* const> seqs, std::span<const TokenId> tokens) {
  const ModelConfig& c = model_->config();
  KVTIER_RETURN_IF_ERROR(check_decode(c, pool_, seqs, tokens));
  const auto t_start = SteadyClock::now();
  Impl& im = *impl_;
  const uint32_t b = uint32_t(seqs.size());
  std::vector<uint32_t> pos(b), table_off(b), tables;
  std::vector<Span> spans(b);
  for (uint32_t i = 0; i < b; ++i) {
    pos[i] = seqs[i]->num_tokens;
    table_off[i] = uint32_t(tables.size());
    for (uint32_t p = 0; p < pages_for(pos[i] + 1); ++p) tables.push_back(seqs[i]->pages[p].value());
    spans[i] = Span{i, 1, pos[i], table_off[i]};
  }
  std::vector<float> cs;
  rope_cos_sin(c, pos.data(), pos.size(), cs);
  std::vector<int32_t> tok(tokens.begin(), tokens.end());
  KVTIER_RETURN_IF_ERROR(im.put(im.tokens, tok));
  KVTIER_RETURN_IF_ERROR(im.put(im.pos, pos));
  KVTIER_RETURN_IF_ERROR(im.put(im.table_off, table_off));
  KVTIER_RETURN_IF_ERROR(im.put(im.tables, tables));
  KVTIER_RETURN_IF_ERROR(im.put(im.cs, cs));
  KVTIER_RETURN_IF_ERROR(im.x.reserve(size_t(b) * c.hidden_size * 4));
  KVTIER_CUDA_RETURN_IF_ERROR(
      launch_embed(im.embd.as<float>(), im.tokens.as<int32_t>(), b, c.hidden_size, im.x.as<float>(), im.stream));
  for (uint32_t l = 0; l < c.num_layers; ++l) KVTIER_RETURN_IF_ERROR(im.layer_pass(pool_, l, 0, b, spans));
  Logits out;
  KVTIER_RETURN_IF_ERROR(im.head(0, b, out));
  for (SequenceKV* s : seqs) ++s->num_tokens;
  profile_.decode_seconds += seconds_since(t_start);
  profile_.decode_tokens += b;
  return out;
}

void register_cuda_engine() {
  engine::register_accelerator_engine(
      [](std::shared_ptr<const engine::Model> model, BlockPool& pool,
         const engine::EngineOptions&) -> Result<std::unique_ptr<engine::Forward>> {
        KVTIER_ASSIGN_OR_RETURN(auto e, CudaEngine::create(std::move(model), pool));
        return std::unique_ptr<engine::Forward>(std::move(e));
      });
}

}  // namespace kvtier::cuda
