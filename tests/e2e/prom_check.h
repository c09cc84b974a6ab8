// A strict checker for the Prometheus text exposition format (0.0.4), used by
// the server tests on GET /metrics. It parses every line and checks: metric
// and label name syntax, quoted label values with valid escapes, numeric
// values (incl. +Inf/-Inf/NaN), at most one HELP and one TYPE per family,
// TYPE before the family's first sample, families not interleaved, and for
// histograms cumulative buckets with an le="+Inf" bucket equal to _count.
// Header-only; no state.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace kvtier::testing {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromParse {
  std::vector<std::string> errors;
  std::vector<PromSample> samples;
  std::map<std::string, std::string> types;  // family -> type

  bool ok() const { return errors.empty(); }
  // The value of the first sample with this name and (a subset of) labels; NaN when absent.
  double value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        match &= it != s.labels.end() && it->second == v;
      }
      if (match) return s.value;
    }
    return std::nan("");
  }
};

namespace prom_detail {

inline bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
inline bool name_char(char c) { return name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }
inline bool valid_metric_name(const std::string& n) {
  if (n.empty() || !name_start(n[0])) return false;
  for (char c : n)
    if (!name_char(c)) return false;
  return true;
}
inline bool valid_label_name(const std::string& n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}
inline bool parse_value(const std::string& s, double& out) {
  if (s == "+Inf" || s == "Inf") return out = INFINITY, true;
  if (s == "-Inf") return out = -INFINITY, true;
  if (s == "NaN") return out = NAN, true;
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}
// The family a sample belongs to (histogram/summary suffixes stripped when typed so).
inline std::string family_of(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suf : {"_bucket", "_sum", "_count"}) {
    const std::string sfx(suf);
    if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      const std::string base = name.substr(0, name.size() - sfx.size());
      auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || it->second == "summary")) return base;
    }
  }
  return name;
}

}  // namespace prom_detail

inline PromParse parse_prometheus_text(const std::string& text) {
  using namespace prom_detail;
  PromParse out;
  std::set<std::string> helped, finished_families;
  std::string current_family;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  auto err = [&](const std::string& m) { out.errors.push_back("line " + std::to_string(lineno) + ": " + m + ": '" + line + "'"); };
  if (!text.empty() && text.back() != '\n') out.errors.push_back("text does not end with a newline");
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream ls(line.substr(1));
      std::string kw, name;
      ls >> kw >> name;
      if (kw != "HELP" && kw != "TYPE") continue;  // a plain comment
      if (!valid_metric_name(name)) err("bad metric name in " + kw);
      if (kw == "HELP") {
        if (!helped.insert(name).second) err("second HELP for " + name);
      } else {
        std::string type, extra;
        ls >> type >> extra;
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary", "untyped"};
        if (!kTypes.count(type) || !extra.empty()) err("bad TYPE");
        if (out.types.count(name)) err("second TYPE for " + name);
        for (const auto& s : out.samples)
          if (family_of(s.name, out.types) == name || s.name == name) {
            err("TYPE after samples of " + name);
            break;
          }
        out.types[name] = type;
      }
      continue;
    }
    PromSample s;
    size_t i = 0;
    while (i < line.size() && name_char(line[i])) ++i;
    s.name = line.substr(0, i);
    if (!valid_metric_name(s.name)) {
      err("bad metric name");
      continue;
    }
    if (i < line.size() && line[i] == '{') {
      ++i;
      bool bad = false;
      while (i < line.size() && line[i] != '}') {
        size_t j = i;
        while (j < line.size() && line[j] != '=') ++j;
        const std::string lname = line.substr(i, j - i);
        if (!valid_label_name(lname) || j + 1 >= line.size() || line[j + 1] != '"') {
          bad = true;
          break;
        }
        std::string lval;
        size_t k = j + 2;
        bool closed = false;
        for (; k < line.size(); ++k) {
          if (line[k] == '\\') {
            if (k + 1 >= line.size() || (line[k + 1] != '\\' && line[k + 1] != '"' && line[k + 1] != 'n')) {
              bad = true;
              break;
            }
            lval += line[k + 1] == 'n' ? '\n' : line[k + 1];
            ++k;
          } else if (line[k] == '"') {
            closed = true;
            break;
          } else {
            lval += line[k];
          }
        }
        if (bad || !closed) {
          bad = true;
          break;
        }
        if (s.labels.count(lname)) bad = true;
        s.labels[lname] = lval;
        i = k + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (bad || i >= line.size()) {
        err("bad label set");
        continue;
      }
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') {
      err("missing space before the value");
      continue;
    }
    std::istringstream rest(line.substr(i + 1));
    std::string value, ts, extra;
    rest >> value >> ts >> extra;
    if (!parse_value(value, s.value)) err("bad value");
    if (!ts.empty()) {
      char* end = nullptr;
      std::strtoll(ts.c_str(), &end, 10);
      if (end != ts.c_str() + ts.size()) err("bad timestamp");
    }
    if (!extra.empty()) err("trailing text");
    const std::string fam = family_of(s.name, out.types);
    if (fam != current_family) {
      if (finished_families.count(fam)) err("samples of " + fam + " are not contiguous");
      if (!current_family.empty()) finished_families.insert(current_family);
      current_family = fam;
    }
    out.samples.push_back(std::move(s));
  }
  // Histogram consistency.
  for (const auto& [fam, type] : out.types) {
    if (type != "histogram") continue;
    double last = -1, inf = std::nan(""), count = std::nan("");
    bool any = false;
    for (const auto& s : out.samples) {
      if (s.name == fam + "_bucket") {
        any = true;
        auto le = s.labels.find("le");
        if (le == s.labels.end()) {
          out.errors.push_back(fam + ": bucket without le");
          continue;
        }
        if (s.value < last) out.errors.push_back(fam + ": buckets not cumulative");
        last = s.value;
        if (le->second == "+Inf") inf = s.value;
      } else if (s.name == fam + "_count") {
        count = s.value;
      }
    }
    if (!any) continue;
    if (std::isnan(inf)) out.errors.push_back(fam + ": no le=\"+Inf\" bucket");
    else if (std::isnan(count) || count != inf) out.errors.push_back(fam + ": +Inf bucket differs from _count");
  }
  return out;
}

}  // namespace kvtier::testing
