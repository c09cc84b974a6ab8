#include "tokenize_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/stats.h"
#include "engine/gguf.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"

namespace kvtier::bench {
namespace {

namespace fs = std::filesystem;

// Prose in several scripts, written for this benchmark, so that non-Latin
// paths (multi-byte UTF-8, CJK, Cyrillic, Arabic, emoji) weigh in the figure.
constexpr const char* kMultilingual[] = {
    "Der Cache behält die Schlüssel und Werte eines Präfixes, nachdem die Anfrage beendet ist; die nächste Anfrage "
    "mit demselben Anfang lädt sie zurück, statt sie neu zu berechnen. Größere Blöcke, weniger Zugriffe.",
    "Le cache conserve les clés et les valeurs d'un préfixe après la fin de la requête : la suivante, qui commence "
    "de la même façon, les recharge au lieu de les recalculer. « Charger plutôt que recalculer », c'est tout.",
    "El caché guarda las claves y los valores de un prefijo cuando termina la petición; la siguiente, que empieza "
    "igual, los vuelve a cargar en lugar de calcularlos otra vez. ¿Cuánto cuesta? Menos que recomputar.",
    "Кэш сохраняет ключи и значения префикса после завершения запроса; следующий запрос с тем же началом "
    "загружает их обратно, а не вычисляет заново. Чем длиннее общий префикс, тем больше выигрыш.",
    "缓存在请求结束后保留前缀的键和值；下一个以相同内容开头的请求会把它们加载回来，而不是重新计算。"
    "共享的前缀越长，节省的时间就越多。多轮对话、智能体和检索增强生成都有很长的共享前缀。",
    "キャッシュはリクエストの終了後もプレフィックスのキーと値を保持し、同じ始まりを持つ次のリクエストは"
    "それを再計算せずに読み込みます。共有部分が長いほど、最初のトークンまでの時間が短くなります。",
    "캐시는 요청이 끝난 뒤에도 접두사의 키와 값을 보관하고, 같은 내용으로 시작하는 다음 요청은 다시 계산하지 "
    "않고 그것을 불러옵니다. 공유하는 접두사가 길수록 첫 토큰까지의 시간이 줄어듭니다.",
    "تحتفظ الذاكرة المؤقتة بالمفاتيح والقيم الخاصة ببادئة الطلب بعد انتهائه، فيعيد الطلب التالي الذي يبدأ بالنص "
    "نفسه تحميلها بدلاً من حسابها من جديد. كلما طالت البادئة المشتركة زاد التوفير.",
    "कैश अनुरोध समाप्त होने के बाद भी उपसर्ग की कुंजियाँ और मान रखता है; उसी शुरुआत वाला अगला अनुरोध उन्हें "
    "दोबारा गणना करने के बजाय वापस लोड करता है।",
    "Ο κρυφός χώρος κρατά τα κλειδιά και τις τιμές ενός προθέματος μετά το τέλος του αιτήματος· το επόμενο τα "
    "φορτώνει ξανά αντί να τα υπολογίσει. 🚀 Γρήγορα, ακριβώς, απλά. 🦙 1234.5678 — 42%!",
};

bool corpus_file(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".md" || ext == ".cc" || ext == ".h" || ext == ".py" || ext == ".txt";
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Documents separated by a form feed in the corpus file.
constexpr char kDocumentSeparator = '\f';

Result<std::string> build_default_corpus(const TokenizeBenchOptions& o) {
  std::vector<fs::path> files;
  for (const char* dir : {"docs", "src", "README.md"}) {
    const fs::path root = fs::path(o.source_dir) / dir;
    std::error_code ec;
    if (fs::is_regular_file(root, ec)) files.push_back(root);
    else if (fs::is_directory(root, ec))
      for (const auto& e : fs::recursive_directory_iterator(root, ec))
        if (e.is_regular_file() && corpus_file(e.path())) files.push_back(e.path());
  }
  if (files.empty())
    return Status::NotFound("no docs/ or src/ under '" + o.source_dir + "' to build the corpus from (pass --corpus FILE)");
  std::sort(files.begin(), files.end());
  std::string corpus;
  for (const auto& f : files) corpus += read_all(f) + kDocumentSeparator;
  for (int copy = 0; copy < 20; ++copy)
    for (const char* text : kMultilingual) corpus += std::string(text) + kDocumentSeparator;
  std::error_code ec;
  if (fs::path(o.corpus_out).has_parent_path()) fs::create_directories(fs::path(o.corpus_out).parent_path(), ec);
  std::ofstream out(o.corpus_out, std::ios::binary | std::ios::trunc);
  out << corpus;
  if (!out) return Status::IOError("cannot write the corpus to " + o.corpus_out);
  return corpus;
}

std::vector<std::string_view> documents(std::string_view corpus) {
  std::vector<std::string_view> docs;
  for (size_t at = 0; at < corpus.size();) {
    size_t end = corpus.find(kDocumentSeparator, at);
    if (end == std::string_view::npos) end = corpus.size();
    if (end > at) docs.push_back(corpus.substr(at, end - at));
    at = end + 1;
  }
  return docs;
}

}  // namespace

Status TokenizeBenchOptions::validate() const {
  if (model.empty()) return Status::InvalidArgument("bench tokenize: --model FILE.gguf is required");
  if (rounds == 0) return Status::InvalidArgument("bench tokenize: --rounds must be > 0");
  return Status::Ok();
}

Result<TokenizeBenchReport> run_tokenize_bench(const TokenizeBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  KVTIER_ASSIGN_OR_RETURN(text::Vocab vocab, engine::load_gguf_vocab(o.model));
  KVTIER_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::create(vocab));
  TokenizeBenchReport r;
  r.model = o.model;
  r.tokenizer = vocab.model == "gpt2" ? "gpt2/" + (vocab.pre.empty() ? std::string("default") : vocab.pre) : vocab.model;
  std::string corpus;
  if (o.corpus.empty()) {
    KVTIER_ASSIGN_OR_RETURN(corpus, build_default_corpus(o));
    r.corpus = o.corpus_out;
  } else {
    if (!fs::is_regular_file(o.corpus)) return Status::NotFound("corpus file '" + o.corpus + "' not found");
    corpus = read_all(o.corpus);
    r.corpus = o.corpus;
  }
  const auto docs = documents(corpus);
  for (auto d : docs) r.corpus_bytes += d.size();
  r.documents = docs.size();
  if (r.corpus_bytes == 0) return Status::InvalidArgument("the corpus is empty");
  for (uint32_t round = 0; round < o.rounds; ++round) {
    uint64_t tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto d : docs) tokens += tok.encode(d, {.add_bos = true, .parse_special = o.parse_special}).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokens = tokens;
    r.round_mb_per_s.push_back(double(r.corpus_bytes) / 1e6 / s);
  }
  r.mb_per_s = median(r.round_mb_per_s);
  r.cold_mb_per_s = r.round_mb_per_s.front();
  if (vocab.model == "gpt2") {  // the splitting alone: what the merges add on top of it
    KVTIER_ASSIGN_OR_RETURN(text::PreTokenizer pre, text::pre_tokenizer_from_name(vocab.pre));
    std::vector<double> rounds;
    std::vector<std::string_view> words;
    for (uint32_t round = 0; round < o.rounds; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      for (auto d : docs) words.clear(), text::pre_tokenize(pre, d, words);
      rounds.push_back(double(r.corpus_bytes) / 1e6 / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    r.pretokenize_mb_per_s = median(rounds);
  }
  return r;
}

std::string format_json(const TokenizeBenchReport& r) {
  nlohmann::json j = {{"model", r.model},         {"tokenizer", r.tokenizer},   {"corpus", r.corpus},
                      {"corpus_bytes", r.corpus_bytes}, {"documents", r.documents}, {"tokens", r.tokens},
                      {"bytes_per_token", r.tokens ? double(r.corpus_bytes) / double(r.tokens) : 0.0},
                      {"mb_per_s", r.mb_per_s},   {"round_mb_per_s", r.round_mb_per_s}, {"threads", 1},
                      {"cold_mb_per_s", r.cold_mb_per_s}, {"pretokenize_mb_per_s", r.pretokenize_mb_per_s},
                      {"encode_vs_pretokenize", r.pretokenize_mb_per_s > 0 ? r.mb_per_s / r.pretokenize_mb_per_s : 0.0}};
  return j.dump();
}

std::string format_table(const TokenizeBenchReport& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "tokenizer %s (%s)\ncorpus %s: %llu bytes in %llu documents -> %llu tokens (%.2f bytes/token)\n"
                "encode on one core: %.1f MB/s (median of %zu rounds; first round, cold word cache: %.1f MB/s)\n"
                "pre-tokenizer alone: %.1f MB/s (0: no pre-tokenizer)\n",
                r.tokenizer.c_str(), r.model.c_str(), r.corpus.c_str(), (unsigned long long)r.corpus_bytes,
                (unsigned long long)r.documents, (unsigned long long)r.tokens,
                r.tokens ? double(r.corpus_bytes) / double(r.tokens) : 0.0, r.mb_per_s, r.round_mb_per_s.size(),
                r.cold_mb_per_s, r.pretokenize_mb_per_s);
  return buf;
}

}  // namespace kvtier::bench
