// `kvtier model make|quantize|info`: write a synthetic model as GGUF (streamed a tensor at a
// time, in any weight type), convert a GGUF file to a quantised type, or describe a GGUF file.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/synthetic.h"
#include "server/chat_api.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace kvtier::cli {
namespace {

void print_model(const engine::Model& m) {
  const auto& c = m.config();
  std::printf("name %s\nvocab %u, hidden %u, layers %u, heads %u, kv heads %u, head dim %u, ffn %u\n", c.name.c_str(),
              c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.ffn_size);
  std::string scaling = "none";
  if (!c.rope_freq_factors.empty()) scaling = "per-pair factors (rope_freqs.weight)";
  if (c.rope_freq_scale != 1.0f) scaling += ", linear x" + std::to_string(1.0f / c.rope_freq_scale);
  std::printf("architecture %s (%s RoPE%s), rope scaling %s\n", std::string(engine::arch_name(c.arch)).c_str(),
              c.rope_style() == engine::RopeStyle::kRotateHalf ? "rotate-half" : "adjacent-pair",
              c.has_qkv_bias() ? ", QKV biases" : "", scaling.c_str());
  std::printf("rope theta %g, rms eps %g, tied embeddings %s, max context %u\nparameters %llu\nfingerprint %s\n",
              double(c.rope_theta), double(c.rms_eps), c.tied_embeddings ? "yes" : "no", c.max_context,
              static_cast<unsigned long long>(c.num_params()), m.fingerprint().to_hex().c_str());
  const text::Vocab& v = m.vocab();
  std::printf("tokenizer %s%s%s, %zu tokens, %zu merges, BOS %d (%s), EOS %d, chat template %s\n", v.model.c_str(),
              v.pre.empty() ? "" : "/", v.pre.c_str(), v.tokens.size(), v.merges.size(), v.bos,
              v.add_bos ? "added" : "not added", v.eos,
              v.chat_template.empty() ? "none" : (std::to_string(v.chat_template.size()) + " bytes").c_str());
}

// "tensor types 45 Q4_K, 5 Q6_K, ... (N MiB in the file, M MiB resident once loaded)": matrices
// stay in their file types; `resident` is what the loaded model holds.
void print_tensor_types(const std::vector<engine::GgufTensor>& tensors, uint64_t resident) {
  std::map<engine::GgufType, size_t> counts;
  uint64_t file_bytes = 0;
  for (const engine::GgufTensor& t : tensors) {
    ++counts[t.type];
    file_bytes += t.bytes;
  }
  std::string line;
  for (const auto& [type, n] : counts)
    line += (line.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(engine::quant::info(type).name);
  std::printf("tensor types %s (%.1f MiB in the file, %.1f MiB resident once loaded)\n", line.c_str(),
              double(file_bytes) / (1 << 20), double(resident) / (1 << 20));
}

struct Make {
  std::string preset = "small", out, dtype = "f32", vocab, chat_template, arch = "llama", rope_scaling = "none";
  uint64_t seed = 1;
  unsigned threads = 0;
};

struct Quantize {
  std::string in, out, dtype;
  unsigned threads = 0;
};

struct Tokenize {
  std::string model, text, file;
  bool no_special = false, bos = false, json = false;
};

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}


// The preset's shape with the architecture and RoPE scaling asked for.
Result<engine::ModelConfig> make_config(const Make& mk) {
  KVTIER_ASSIGN_OR_RETURN(engine::ModelConfig cfg, engine::model_preset(mk.preset));
  KVTIER_ASSIGN_OR_RETURN(cfg.arch, engine::parse_arch(mk.arch));
  if (mk.rope_scaling == "llama3") {
    KVTIER_RETURN_IF_ERROR(cfg.apply_llama3_rope_scaling({}));
  } else if (mk.rope_scaling != "none") {
    return Status::InvalidArgument("--rope-scaling must be none or llama3, not '" + mk.rope_scaling + "'");
  }
  return cfg;
}

// Streaming options: `threads` quantising, and a line on stderr per tensor once the
// work has taken more than a second or for a tensor of 16 Mi values or more (an 8B
// model takes minutes, its embedding alone one or two).
engine::GgufStreamOptions stream_options(unsigned threads) {
  const auto start = std::chrono::steady_clock::now();
  engine::GgufStreamOptions o{.threads = threads};
  o.on_tensor = [start](size_t i, size_t n, const engine::GgufTensorSpec& t) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < 1.0 && t.shape[0] * t.rows() < (1u << 24)) return;
    std::string shape;
    for (uint64_t d : t.shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    std::fprintf(stderr, "[%4zu/%zu] %6.0f s  %-28s %-14s %s\n", i + 1, n, s, t.name.c_str(), shape.c_str(),
                 std::string(engine::quant::info(t.type).name).c_str());
  };
  return o;
}

// "12.3 MiB" for a regular file; what else it is for a pipe or a device (`--out /dev/stdout`).
std::string size_of(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "not a regular file";
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) return "size unknown";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1 << 20));
  return text;
}

Status make_model(const Make& mk) {
  KVTIER_ASSIGN_OR_RETURN(engine::ModelConfig cfg, make_config(mk));
  KVTIER_ASSIGN_OR_RETURN(engine::WeightFormat format, engine::parse_weight_format(mk.dtype));
  text::Vocab vocab;
  if (mk.vocab.empty()) {
    KVTIER_ASSIGN_OR_RETURN(vocab, text::Vocab::synthetic(cfg.vocab_size));
  } else {
    KVTIER_ASSIGN_OR_RETURN(vocab, engine::load_gguf_vocab(mk.vocab));
  }
  if (!mk.chat_template.empty()) {
    KVTIER_ASSIGN_OR_RETURN(vocab.chat_template, read_text(mk.chat_template));
  }
  cfg.vocab_size = uint32_t(vocab.tokens.size());
  KVTIER_RETURN_IF_ERROR(
      engine::write_synthetic_gguf(cfg, mk.seed, vocab, mk.out, {.weight_type = format}, stream_options(mk.threads)));
  // On stderr, as the progress lines: the file itself may be stdout.
  std::fprintf(stderr, "wrote %s (%s %s, RoPE scaling %s, %s weights, seed %llu, vocabulary %u tokens (%s), %s; "
               "`kvtier model info` prints its fingerprint)\n",
               mk.out.c_str(), mk.arch.c_str(), mk.preset.c_str(), mk.rope_scaling.c_str(), format.name().c_str(),
               static_cast<unsigned long long>(mk.seed), cfg.vocab_size, vocab.model.c_str(), size_of(mk.out).c_str());
  return Status::Ok();
}

Status quantize_model(const Quantize& q) {
  KVTIER_ASSIGN_OR_RETURN(engine::WeightFormat format, engine::parse_weight_format(q.dtype));
  KVTIER_RETURN_IF_ERROR(engine::quantize_gguf(q.in, q.out, format, stream_options(q.threads)));
  std::fprintf(stderr, "wrote %s (%s weights from %s: %s -> %s)\n", q.out.c_str(), format.name().c_str(), q.in.c_str(),
               size_of(q.in).c_str(), size_of(q.out).c_str());
  return Status::Ok();
}

Status tokenize_text(const Tokenize& tk) {
  std::string input = tk.text;
  if (!tk.file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(input, read_text(tk.file));
  }
  KVTIER_ASSIGN_OR_RETURN(text::Vocab vocab, vocab_of(tk.model));
  KVTIER_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::create(vocab));
  const auto ids = tok.encode(input, {.add_bos = tk.bos, .parse_special = !tk.no_special});
  if (tk.json) {
    std::printf("%s\n", nlohmann::json{{"ids", ids}}.dump().c_str());
  } else {
    std::string line;
    for (TokenId id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
    std::printf("%s\n", line.c_str());
  }
  return Status::Ok();
}

struct ChatTemplateFlags {
  std::string model, template_file, messages, tools, kwargs;
  bool add_generation_prompt = false, tokens = false, json = false;
};

// Renders an OpenAI-style messages file with the model's (or the given) chat template.
Status render_chat(const ChatTemplateFlags& f) {
  KVTIER_ASSIGN_OR_RETURN(text::Vocab vocab, vocab_of(f.model));
  std::string source = vocab.chat_template;
  if (!f.template_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(source, read_text(f.template_file));
  }
  if (source.empty()) return Status::InvalidArgument(f.model + " has no tokenizer.chat_template; pass --template FILE");
  KVTIER_ASSIGN_OR_RETURN(text::ChatTemplate tmpl, text::ChatTemplate::parse(source));
  // The body of a chat request, read by the server's own reader (server/chat_api.h).
  nlohmann::ordered_json body = nlohmann::ordered_json::object();
  KVTIER_ASSIGN_OR_RETURN(std::string messages_text, read_text(f.messages));
  body["messages"] = nlohmann::ordered_json::parse(messages_text, nullptr, false);
  if (!body["messages"].is_array()) return Status::InvalidArgument(f.messages + ": expected a JSON array of messages");
  if (!f.tools.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::string tools_text, read_text(f.tools));
    body["tools"] = nlohmann::ordered_json::parse(tools_text, nullptr, false);
    if (!body["tools"].is_array()) return Status::InvalidArgument(f.tools + ": expected a JSON array of tools");
  }
  if (!f.kwargs.empty()) {
    body["chat_template_kwargs"] = nlohmann::ordered_json::parse(f.kwargs, nullptr, false);
    if (!body["chat_template_kwargs"].is_object()) return Status::InvalidArgument("--kwargs: expected a JSON object");
  }
  std::vector<std::string> cacheable;
  auto chat = server::read_chat_input(body, cacheable);
  if (auto* err = std::get_if<server::ApiError>(&chat)) return Status::InvalidArgument(err->message);
  text::ChatInput& input = std::get<text::ChatInput>(chat);
  input.add_generation_prompt = f.add_generation_prompt;
  KVTIER_ASSIGN_OR_RETURN(std::string prompt, tmpl.render_chat(input, vocab.tokens[size_t(vocab.bos)],
                                                               vocab.tokens[size_t(vocab.eos)]));
  std::vector<TokenId> ids;
  if (f.tokens) {
    KVTIER_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::create(vocab));
    ids = tok.encode(prompt, {.add_bos = true, .parse_special = true});
  }
  if (f.json) {
    nlohmann::json out = {{"prompt", prompt}};
    if (f.tokens) out["tokens"] = ids;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (f.tokens) {
    std::string line;
    for (TokenId id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
    std::printf("%s\n", line.c_str());
  } else {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  }
  return Status::Ok();
}

constexpr const char* kDtypeHelp =
    "matrix type: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k (ggml's reference "
    "quantisation, bit-identical to llama-quantize without an importance matrix), or q4_k_m (llama.cpp's Q4_K_M mix)";

CommandRegistration reg("model", [](CLI::App& root, int& exit_code) {
  CLI::App* cmd = root.add_subcommand("model", "Make or inspect model files");
  cmd->require_subcommand(1);

  auto mk = std::make_shared<Make>();
  CLI::App* make = cmd->add_subcommand("make", "Write a synthetic model as a GGUF file");
  make->add_option("--preset", mk->preset, "tiny, small, 1b or 8b")->capture_default_str();
  make->add_option("--out", mk->out, "output .gguf path")->required();
  make->add_option("--seed", mk->seed, "weight seed")->capture_default_str();
  make->add_option("--arch", mk->arch, "llama or qwen2 (rotate-half RoPE, QKV biases)")->capture_default_str();
  make->add_option("--rope-scaling", mk->rope_scaling,
                   "none or llama3 (Llama 3.1's factors: 8, low 1, high 4, original context 8192; "
                   "stored as rope_freqs.weight)")->capture_default_str();
  make->add_option("--dtype", mk->dtype, kDtypeHelp)->capture_default_str();
  make->add_option("--threads", mk->threads, "threads generating and quantising (0: all cores)")->capture_default_str();
  make->add_option("--vocab", mk->vocab, "take the tokenizer (and chat template) of this GGUF file; the vocabulary size follows it");
  make->add_option("--chat-template", mk->chat_template, "a Jinja chat template file to store as tokenizer.chat_template");
  make->callback([mk, &exit_code] { exit_code = report(make_model(*mk)); });

  auto qz = std::make_shared<Quantize>();
  CLI::App* quantize = cmd->add_subcommand(
      "quantize", "Convert a GGUF file with f32/f16/bf16 matrices to another weight type, metadata carried over");
  quantize->add_option("input", qz->in, "the .gguf file to convert")->required();
  quantize->add_option("output", qz->out, "the .gguf file to write")->required();
  quantize->add_option("--dtype", qz->dtype, kDtypeHelp)->required();
  quantize->add_option("--threads", qz->threads, "threads quantising (0: all cores)")->capture_default_str();
  quantize->callback([qz, &exit_code] { exit_code = report(quantize_model(*qz)); });

  auto tk = std::make_shared<Tokenize>();
  CLI::App* tokenize = cmd->add_subcommand("tokenize", "Print the token ids of a text with a model's tokenizer");
  tokenize->add_option("--model", tk->model, "a GGUF file (only its tokenizer keys are read) or a preset")->required();
  auto* text_opt = tokenize->add_option("--text", tk->text, "the text");
  auto* file_opt = tokenize->add_option("--file", tk->file, "read the text from this file");
  text_opt->excludes(file_opt);
  tokenize->add_flag("--no-special", tk->no_special, "treat special-token text (<|im_start|>, <s>...) as plain text");
  tokenize->add_flag("--bos", tk->bos, "add BOS when the vocabulary asks for it");
  tokenize->add_flag("--json", tk->json, "print {\"ids\": [...]}");
  tokenize->callback([tk, &exit_code] { exit_code = report(tokenize_text(*tk)); });

  auto ct = std::make_shared<ChatTemplateFlags>();
  CLI::App* chat = cmd->add_subcommand("chat-template", "Render a messages file with a model's chat template");
  chat->add_option("--model", ct->model, "a GGUF file (only its tokenizer keys are read) or a preset")->required();
  chat->add_option("--template", ct->template_file, "a Jinja template file instead of the model's tokenizer.chat_template");
  chat->add_option("--messages", ct->messages, "a JSON file: an OpenAI-style messages array")->required();
  chat->add_option("--tools", ct->tools, "a JSON file: an array of OpenAI function tools (the template sees `tools`; "
                                         "without it, None as transformers passes it)");
  chat->add_option("--kwargs", ct->kwargs, "an inline JSON object: chat_template_kwargs, e.g. '{\"enable_thinking\": false}'");
  chat->add_flag("--add-generation-prompt", ct->add_generation_prompt, "end with the assistant turn's header");
  chat->add_flag("--tokens", ct->tokens, "print the prompt's token ids (with --json: both)");
  chat->add_flag("--json", ct->json, "print {\"prompt\": ...} (and \"tokens\" with --tokens)");
  chat->callback([ct, &exit_code] { exit_code = report(render_chat(*ct)); });

  auto path = std::make_shared<std::string>();
  CLI::App* info = cmd->add_subcommand("info", "Load a GGUF file, check that kvtier can run it, and print its shape "
                                                "and fingerprint");
  info->add_option("file", *path, "a .gguf file")->required();
  info->callback([path, &exit_code] {
    auto model = engine::load_gguf(*path);
    if (!model.ok()) return void(exit_code = report(model.status()));
    // What `kvtier serve` would refuse at start, refused here too: the engine's shapes, the tokenizer.
    if (Status st = engine::check_engine_supports((*model)->config()); !st.ok()) return void(exit_code = report(st));
    if (auto tok = text::Tokenizer::create((*model)->vocab()); !tok.ok()) return void(exit_code = report(tok.status()));
    print_model(**model);
    auto tensors = engine::load_gguf_tensors(*path, /*dequantize=*/false);
    if (!tensors.ok()) return void(exit_code = report(tensors.status()));
    print_tensor_types(*tensors, (*model)->weights().bytes());
    exit_code = 0;
  });
});

}  // namespace
}  // namespace kvtier::cli
