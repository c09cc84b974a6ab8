// ChatTemplate / Jinja interpreter: language features with hand-written
// expectations, then the real chat templates of tests/data/chat-templates
// rendered byte for byte as Python's jinja2 renders them (run at test time).
#include "text/chat_template.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace kvtier::text {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int64_t kFixedNow = 1721995200;  // 2024-07-26 12:00:00 UTC

std::string render_or_error(std::string_view source, const ojson& context = ojson::object()) {
  auto parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) return "PARSE ERROR: " + parsed.status().message();
  RenderOptions options;
  options.now_unix_seconds = kFixedNow;
  auto rendered = parsed->render(context, options);
  if (!rendered.ok()) return "ERROR: " + rendered.status().message();
  return *rendered;
}

TEST(JinjaTest, TextExpressionsAndLiterals) {
  EXPECT_EQ(render_or_error("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
  EXPECT_EQ(render_or_error("{{ 'a\\tb\\n' }}|{{ \"x\\\"y\" }}|{{ 'é\\u00e9\\x41' }}"), "a\tb\n|x\"y|ééA");
  EXPECT_EQ(render_or_error("{{ 'a' 'b' }}{{ none }}{{ true }}{{ False }}{{ undefined_name }}"), "abNoneTrueFalse");
  EXPECT_EQ(render_or_error("{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }}"),
            "[1, 'a', None, True, 1.5, {'k': \"it's\"}]");
  EXPECT_EQ(render_or_error("{{ (1, 2) }}{{ (1,) }}{{ 1.0 }}{{ 1e16 }}{{ 0.00001 }}{{ 2.5e-3 }}"),
            "(1, 2)(1,)1.01e+161e-050.0025");
  EXPECT_EQ(render_or_error("{# comment #}a{#- trimmed -#}  b"), "ab");
}

TEST(JinjaTest, Arithmetic) {
  EXPECT_EQ(render_or_error("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 4 / 2 }} {{ 2 ** 10 }}"),
            "3 -4 3.5 2 2.0 1024");
  EXPECT_EQ(render_or_error("{{ 1.5 * 2 }} {{ 'ab' * 3 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 1 ~ 'x' ~ none }}"),
            "3.0 ababab 7 9 1xNone");
  EXPECT_EQ(render_or_error("{{ [1] + [2] }} {{ -(3) }} {{ 10 - 2 - 3 }}"), "[1, 2] -3 5");
  EXPECT_EQ(render_or_error("{{ 1 / 0 }}").rfind("ERROR:", 0), 0u);
  EXPECT_EQ(render_or_error("{{ 9223372036854775807 + 1 }}").rfind("ERROR:", 0), 0u);
  EXPECT_EQ(render_or_error("{{ 'a' + 1 }}"), "ERROR: jinja: line 1: can only concatenate str (not \"int\") to str");
}

TEST(JinjaTest, LogicComparisonAndPrecedence) {
  EXPECT_EQ(render_or_error("{{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} {{ 'a' < 'b' }} {{ true == 1 }} {{ 2 >= 3 }}"),
            "True True True True False");
  EXPECT_EQ(render_or_error("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 1 in nothing }}"),
            "True False True False");
  EXPECT_EQ(render_or_error("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 1 }} {{ not x is defined }}"), "x y False True");
  EXPECT_EQ(render_or_error("{{ 'yes' if 1 > 0 else 'no' }}|{{ 'x' if false }}|{{ -2 | abs }}"), "yes||2");
  EXPECT_EQ(render_or_error("{{ 'a' + 'b' | upper }}{{ [3, 1] | length - 1 }}"), "aB1");
}

TEST(JinjaTest, AccessAndSlices) {
  const ojson context = {{"d", {{"a", 1}, {"b", {1, 2}}}}, {"l", {3, 1, 2}}, {"s", "héllo"}};
  EXPECT_EQ(render_or_error("{{ d.a }}{{ d['b'][1] }}{{ l[-1] }}{{ l.0 }}|{{ l[5] }}|{{ d.zz }}", context), "1223||");
  EXPECT_EQ(render_or_error("{{ l[1:] }}{{ l[::-1] }}{{ l[::-2] }}{{ s[::-1] }}{{ s[1:3] }}{{ s[-1] }}", context),
            "[1, 2][2, 1, 3][2, 3]olléhélo");
  EXPECT_EQ(render_or_error("{{ d.zz.foo }}", context), "ERROR: jinja: line 1: 'dict object' has no attribute 'zz'");
  EXPECT_EQ(render_or_error("{{ nothing.foo }}"), "ERROR: jinja: line 1: 'nothing' is undefined");
  EXPECT_EQ(render_or_error("{{ none.foo }}|{{ d.get('a') }}{{ d.get('z', 5) }}{{ d.get('z') }}", context), "|15None");
}

TEST(JinjaTest, StringMethods) {
  EXPECT_EQ(render_or_error("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|"
                            "{{ 'a\\n'.rstrip() }}"),
            "a b|a|a\n|a");
  EXPECT_EQ(render_or_error("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a</think>b'.split('</think>')[-1] }}"),
            "['a', 'b', '', 'c']['a', 'b']b");
  EXPECT_EQ(render_or_error("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'aXb'.upper() }}"
                            "{{ 'AbC'.lower() }}{{ 'hello world'.title() }}{{ 'a-a'.replace('a', 'b') }}"),
            "TrueTrueAXBabcHello Worldb-b");
}

TEST(JinjaTest, Filters) {
  const ojson context = {{"l", {3, 1, 2}}, {"msgs", {{{"role", "user"}}, {{"role", "bot"}}, {{"role", "user"}}}}};
  EXPECT_EQ(render_or_error("{{ '  x  ' | trim }}|{{ 'xyx' | trim('x') }}|{{ l | length }}|{{ 'héllo' | length }}", context),
            "x|y|3|5");
  EXPECT_EQ(render_or_error("{{ l | sort | list }}{{ l | join(',') }}{{ l | first }}{{ l | last }}{{ l | max }}"
                            "{{ l | sum }}{{ l | reverse | list }}", context),
            "[1, 2, 3]3,1,23236[2, 1, 3]");
  EXPECT_EQ(render_or_error("{{ x | default('d') }}{{ '' | d('e', true) }}{{ 'v' | default('z') }}"), "dev");
  EXPECT_EQ(render_or_error("{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}"
                            "{{ msgs | rejectattr('role', 'eq', 'user') | map(attribute='role') | join }}"
                            "{{ [1, 2, 3] | reject('equalto', 2) | list }}", context),
            "2bot[1, 3]");
  EXPECT_EQ(render_or_error("{{ '4.7' | int }}{{ 'x' | int }}{{ 3.9 | int }}{{ '2' | float }}{{ 5 | string }}"),
            "4032.05");
  EXPECT_EQ(render_or_error("{{ 'ab\\ncd\\n\\nef' | indent(2) }}|{{ 'hello WORLD' | capitalize }}"),
            "ab\n  cd\n\n  ef|Hello world");
  EXPECT_EQ(render_or_error("{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}={{ v }};{% endfor %}"), "b=1;a=2;");
}

// tojson is transformers' override (what every HF/vLLM server renders with), not jinja2's:
// keys in insertion order, non-ASCII kept, nothing HTML-escaped, a plain string.
TEST(JinjaTest, ToJsonMatchesTransformers) {
  EXPECT_EQ(render_or_error("{{ {'b': [1, 2.0, 1e20], 'a': '<&>\\'é😀'} | tojson }}"),
            "{\"b\": [1, 2.0, 1e+20], \"a\": \"<&>'é😀\"}");
  EXPECT_EQ(render_or_error("{{ {'z': 1, 'a': {'y': [], 'x': {}}} | tojson(indent=2) }}"),
            "{\n  \"z\": 1,\n  \"a\": {\n    \"y\": [],\n    \"x\": {}\n  }\n}");
  EXPECT_EQ(render_or_error("{{ {'z': 1, 'a': 'é'} | tojson(sort_keys=true, ensure_ascii=true) }}"),
            "{\"a\": \"\\u00e9\", \"z\": 1}");
  EXPECT_EQ(render_or_error("{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}|{{ [1] | tojson(indent='\\t') }}"),
            "[1,{\"a\":2}]|[\n\t1\n]");
  EXPECT_EQ(render_or_error("{{ none | tojson }}{{ true | tojson }}{{ 'a\\u0001\"\\u007f' | tojson }}"),
            "nulltrue\"a\\u0001\\\"\x7f\"");
  // A plain string: `+` with another string escapes nothing.
  EXPECT_EQ(render_or_error("{{ '\"k\": ' + {'a': 1} | tojson }}|{{ ({'a': 1} | tojson)[:-1] }}"),
            "\"k\": {\"a\": 1}|{\"a\": 1");
  EXPECT_EQ(render_or_error("{{ nothing | tojson }}"),
            "ERROR: jinja: line 1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(render_or_error("{{ 1 | tojson(separators=1) }}"), "ERROR: jinja: line 1: tojson: separators must be a pair of strings");
}

// transformers' {% generation %} marks assistant spans; the text is the body's.
TEST(JinjaTest, GenerationBlocksRenderTheirBody) {
  EXPECT_EQ(render_or_error("a{% for i in [1, 2] %}{% generation %}<{{ i * 2 }}>{% endgeneration %}{% endfor %}c"),
            "a<2><4>c");
  EXPECT_NE(render_or_error("{% generation %}x").find("ERROR"), std::string::npos);
  EXPECT_NE(render_or_error("x{% endgeneration %}").find("unexpected 'endgeneration'"), std::string::npos);
}

TEST(JinjaTest, Tests) {
  EXPECT_EQ(render_or_error("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}"
                            "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is number }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render_or_error("{{ true is boolean }}{{ false is false }}{{ 1 is true }}{{ 2 is equalto 2 }}"
                            "{{ 3 is divisibleby 3 }}{{ 1 is in [1] }}{{ 1 is not none }}{{ x is iterable }}"),
            "TrueTrueFalseTrueTrueTrueTrueTrue");
}

TEST(JinjaTest, WhitespaceControl) {
  // trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render_or_error("  {% if true %}\nX\n  {# c #}\nY\n{% endif %}\n"), "X\nY\n");
  EXPECT_EQ(render_or_error("a  {%+ if true %}x{% endif %}"), "a  x");
  EXPECT_EQ(render_or_error("a {{- ' b ' -}} c\n{{ 'd' }}\n"), "a b c\nd");
  EXPECT_EQ(render_or_error("line\n    {%- if true -%}\n   x\n{%- endif %}"), "linex");
  EXPECT_EQ(render_or_error("{{ 1 }}\n{{ 2 }}\r\n\n"), "1\n2\n");
}

TEST(JinjaTest, ForLoops) {
  const ojson context = {{"l", {"a", "b", "c"}}};
  EXPECT_EQ(render_or_error("{% for x in l %}{{ loop.index }}{{ x }}{{ loop.revindex0 }}"
                            "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %},{% endfor %}", context),
            "1a2F,2b1,3c0L,");
  EXPECT_EQ(render_or_error("{% for x in l %}{{ loop.previtem }}>{{ loop.nextitem }}{{ loop.cycle(0, 1) }} "
                            "{% endfor %}", context),
            ">b0 a>c1 b>0 ");
  EXPECT_EQ(render_or_error("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render_or_error("{% for x in range(10) if x % 2 %}{{ x }}{{ '.' if loop.last }}{% endfor %}"), "13579.");
  EXPECT_EQ(render_or_error("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
                            "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(render_or_error("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  // loop.changed, and a break or continue inside a block set: what jinja2 3.1 renders.
  EXPECT_EQ(render_or_error("{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}"),
            "121");
  EXPECT_EQ(render_or_error("{% for x in [1, 2] %}{{ loop.changed(x, 1) }}{{ loop.changed(x, 1) }}{% endfor %}"),
            "TrueFalseTrueFalse");
  EXPECT_EQ(render_or_error("{% for x in [1, 2, 3] %}{% set s %}a{{ x }}{% if x == 2 %}{% break %}{% endif %}"
                            "{% endset %}{{ s }}{% endfor %}"),
            "a1");
  EXPECT_EQ(render_or_error("{% for x in [1, 2, 3] %}{% set s %}a{{ x }}{% if x == 2 %}{% continue %}{% endif %}b"
                            "{% endset %}{{ s }}{% endfor %}"),
            "a1ba3b");
  // Each iteration has its own scope: a set inside does not leak out or into the next iteration.
  EXPECT_EQ(render_or_error("{% set x = 1 %}{% for i in [5, 6] %}{{ x }}{% set x = i %}{% endfor %}{{ x }}"), "111");
}

TEST(JinjaTest, SetNamespaceAndMacros) {
  EXPECT_EQ(render_or_error("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}x{{ a }}{% endset %}{{ c }}"), "12x1");
  EXPECT_EQ(render_or_error("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
                            "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render_or_error("{% macro f(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=3) }}{{ f(a=5) }}"),
            "[12][13][52]");
  EXPECT_EQ(render_or_error("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}"
                            "{% endmacro %}{{ fact(5) }}"),
            "120");
  EXPECT_EQ(render_or_error("{{ strftime_now('%d %b %Y') }}"), "26 Jul 2024");
  EXPECT_EQ(render_or_error("{{ raise_exception('No system role') }}"), "ERROR: No system role");
}

// Python's chained comparisons: each operand evaluated once, the first false comparison ends it.
TEST(JinjaTest, ChainedComparisons) {
  EXPECT_EQ(render_or_error("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 0 <= x < 10 }} {{ 'a' in 'ab' in 'xab' }} "
                            "{{ 1 == 1 != 2 }} {{ 3 > 2 > 2 }}",
                            {{"x", 5}}),
            "True False True True True False");
  EXPECT_EQ(render_or_error("{% if 0 < loop_max < 3 %}yes{% else %}no{% endif %}", {{"loop_max", 7}}), "no");
}

// A macro sees the scopes it is defined in, as jinja2's closures do: a loop's variable, an outer
// macro's arguments (both read as empty before); the template's top level as it is when called.
TEST(JinjaTest, MacrosSeeTheScopesTheyAreDefinedIn) {
  EXPECT_EQ(render_or_error("{% for i in range(2) %}{% macro g() %}{{ i }}{% endmacro %}{{ g() }}{% endfor %}"), "01");
  EXPECT_EQ(render_or_error("{% macro outer(a) %}{% macro inner(b) %}{{ a }}{{ b }}{% endmacro %}{{ inner(2) }}"
                            "{% endmacro %}{{ outer(5) }}"),
            "52");
  EXPECT_EQ(render_or_error("{% macro f() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ f() }}"), "1");
  EXPECT_EQ(render_or_error("{% for i in range(1) %}{% macro g(i) %}{{ i }}{% endmacro %}{{ g(7) }}{% endfor %}"), "7");
}

TEST(JinjaTest, UnsupportedConstructsFailAtParse) {
  EXPECT_EQ(render_or_error("{% include 'x' %}"), "PARSE ERROR: jinja: line 1: unsupported statement 'include'");
  EXPECT_EQ(render_or_error("{{ x | frobnicate }}"), "PARSE ERROR: jinja: line 1: unsupported filter 'frobnicate'");
  EXPECT_EQ(render_or_error("{{ x is frob }}"), "PARSE ERROR: jinja: line 1: unsupported test 'frob'");
  EXPECT_EQ(render_or_error("{{ l.append(1) }}"),
            "PARSE ERROR: jinja: line 1: method 'append' is not supported (values are immutable)");
  EXPECT_EQ(render_or_error("{% if x %}"), "PARSE ERROR: jinja: line 1: missing {% endif %} at end of template");
  EXPECT_EQ(render_or_error("{% break %}"), "PARSE ERROR: jinja: line 1: 'break' outside of a for loop");
  EXPECT_EQ(render_or_error("{{ 'abc }}").rfind("PARSE ERROR", 0), 0u);
}

TEST(JinjaTest, HostileTemplatesHitLimits) {
  EXPECT_EQ(render_or_error("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}"),
            "PARSE ERROR: jinja: line 1: expression nested too deeply");
  EXPECT_EQ(render_or_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
            "ERROR: jinja: line 1: expression nested too deeply");
  EXPECT_NE(render_or_error("{% for i in range(100000000) %}{% endfor %}").find("list longer than"), std::string::npos);
  EXPECT_NE(render_or_error("{{ 'x' * 100000000 }}").find("larger than"), std::string::npos);
  EXPECT_NE(render_or_error("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}")
                .find("ERROR"),
            std::string::npos);
  EXPECT_NE(render_or_error("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
                            "{% endfor %}")
                .find("nested too deeply"),
            std::string::npos);
}

// Found by a review of hostile templates: each crashed, read outside a buffer or answered wrong.
TEST(JinjaTest, HostileArithmeticSlicesAndChains) {
  // A slice step near 2^63 overflowed `i += step` and read outside the list or string.
  EXPECT_EQ(render_or_error("{{ [1, 2, 3][1::9223372036854775807] }}|{{ 'abc'[1::9223372036854775807] }}|"
                            "{{ range(100000)[99999::9223372036854675809] }}|{{ [1, 2, 3][::-9223372036854775807] }}"),
            "[2]|b|[99999]|[3]");
  EXPECT_EQ(render_or_error("{{ [1, 2, 3, 4, 5][4:0:-2] }}{{ 'abcde'[::3] }}{{ [1][5:] }}"), "[5, 3]ad[]");
  // INT64_MIN % -1 trapped (SIGFPE).
  EXPECT_EQ(render_or_error("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}{{ 7 is divisibleby(-1) }}"), "TrueTrue");
  // The early exit at a result of 1 fired for base -1.
  EXPECT_EQ(render_or_error("{{ (-1) ** 3 }} {{ (-1) ** 4 }} {{ 0 ** 0 }} {{ 0 ** 5 }} {{ 1 ** 99 }} {{ (-2) ** 3 }}"),
            "-1 1 1 0 1 -8");
  // Operator and filter chains are built in loops: 300,000 links overflowed the stack when the tree
  // was freed (at parse, a hostile model's template took the server down as it loaded).
  auto repeated = [](const char* piece, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += piece;
    return out;
  };
  for (const std::string& chain : {"{{ 1" + repeated(" + 1", 300000) + " }}", "{{ x" + repeated("|string", 300000) + " }}"}) {
    const std::string got = render_or_error(chain);
    EXPECT_EQ(got.rfind("PARSE ERROR: jinja: line 1: expression nested too deeply", 0), 0u) << got.substr(0, 80);
  }
  std::string fine = "{{ 1";
  for (int i = 0; i < 200; ++i) fine += " + 1";
  EXPECT_EQ(render_or_error(fine + " }}"), "201");
  // Values kept by `set` or namespace() nest at most kMaxValueNesting deep (a namespace held a
  // list nested 300,000 deep, and freeing it overflowed the stack).
  EXPECT_NE(render_or_error("{% set ns = namespace(b=namespace(a=0)) %}{% for i in range(300000) %}"
                            "{% set ns.b = namespace(a=[ns.b.a]) %}{% endfor %}")
                .find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(render_or_error("{% set a = 0 %}" + repeated("{% set a = [a] %}", 300)).find("nested too deeply"), std::string::npos);
  // Work on long lists counts against the budget: `x in big` over a million items, 700,000 times
  // (20 minutes), and a sum of lists (quadratic); map's strings count against the output cap (200
  // copies of an 8 MB string took 3 GB).
  EXPECT_NE(render_or_error("{% set big = range(1000000) %}{% for i in range(700000) %}{% if -1 in big %}{% endif %}"
                            "{% endfor %}")
                .find("steps"),
            std::string::npos);
  EXPECT_NE(render_or_error("{{ ([[1]] * 100000) | sum(start=[]) | length }}").find("steps"), std::string::npos);
  EXPECT_EQ(render_or_error("{{ ([[1]] * 1000) | sum(start=[]) | length }}"), "1000");
  EXPECT_NE(render_or_error("{% set l = ['a' * 8000000] %}{{ ([l] * 200) | map('first') | list | length }}").find("larger than"),
            std::string::npos);
  EXPECT_EQ(render_or_error("{% set a = 0 %}" + repeated("{% set a = [a] %}", 150) + "{{ a | length }}"), "1");
}

// Work on long strings counts against the budget, size limits are checked before a result is
// built, and substring search is linear (found by a review: one `in` ran for minutes, a list
// repeat of long strings allocated gigabytes before its size was checked).
TEST(JinjaTest, LongStringWorkIsBoundedBeforeItIsDone) {
  // A needle of 4 MB that almost matches everywhere in 8 MB: quadratic search took about 400 s.
  EXPECT_EQ(render_or_error("{% set h = 'a' * 8000000 %}{% set n = 'a' * 4000000 ~ 'b' %}{{ n in h }}|"
                            "{{ h.find(n) }}|{{ h.count('a' * 100) }}|{{ (h ~ 'b').split(n) | length }}"),
            "False|-1|80000|2");
  // Results past the 8 MiB limit are refused before they are built.
  EXPECT_NE(render_or_error("{% set s = 'a' * 5000000 %}{{ ([s] * 2) | length }}").find("larger than"), std::string::npos);
  EXPECT_NE(render_or_error("{% set s = 'a' * 5000000 %}{{ ([s] + [s]) | length }}").find("larger than"), std::string::npos);
  EXPECT_NE(render_or_error("{{ ['a'] * 4611686018427387904 }}").find("ERROR"), std::string::npos);  // 2^62: no wrap
  EXPECT_NE(render_or_error("{{ ('a' * 2000000).replace('', 'b' * 1000) }}").find("larger than"), std::string::npos);
  EXPECT_NE(render_or_error("{{ ('x\n' * 4000000) | indent(1000, true, true) }}").find("larger than"), std::string::npos);
  // A statement over 8 MB strings, a million times: about 4.5 hours unbudgeted; now out of steps.
  EXPECT_NE(render_or_error("{% set s = 'a' * 8000000 %}{% for i in range(1000000) %}{% if s.upper() == s %}{% endif %}"
                            "{% endfor %}")
                .find("steps"),
            std::string::npos);
}

// ---- exactness against Python's jinja2 ----

std::filesystem::path source_dir() {
  const char* dir = std::getenv("KVTIER_SOURCE_DIR");
  return std::filesystem::path(dir != nullptr ? dir : ".");
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct PythonResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs tests/text/render_jinja2.py under /usr/bin/python3 (Debian's, with python3-jinja2).
PythonResult run_jinja2(const std::filesystem::path& template_path, const ojson& context) {
  const auto temp = std::filesystem::temp_directory_path();
  const std::string stem = "kvtier_jinja_" + std::to_string(::getpid());
  const auto context_path = temp / (stem + ".json");
  const auto err_path = temp / (stem + ".err");
  std::ofstream(context_path, std::ios::binary) << context.dump();
  const std::string command = "/usr/bin/python3 '" + (source_dir() / "tests/text/render_jinja2.py").string() + "' '" +
                              template_path.string() + "' '" + context_path.string() + "' " +
                              std::to_string(kFixedNow) + " 2>'" + err_path.string() + "'";
  PythonResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t count = 0;
  while ((count = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), count);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = read_file(err_path);
  std::filesystem::remove(context_path);
  std::filesystem::remove(err_path);
  return result;
}

ojson msg(const std::string& role, const std::string& content) { return ojson{{"role", role}, {"content", content}}; }

ojson weather_tools() {
  return ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "The city, e.g. Paris"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
      "days": {"type": ["integer", "null"], "description": "Forecast days"},
      "hours": {"type": "array", "items": {"type": "integer"}, "description": "Hours"}},
    "required": ["location"]}}}])");
}

std::vector<std::pair<std::string, ojson>> conversations() {
  const ojson system_user = {msg("system", "You are a helpful assistant."), msg("user", "What is 2+2?")};
  const ojson multi_turn = {msg("system", "Be brief."), msg("user", "Hi!"), msg("assistant", "Hello! How can I help?"),
                            msg("user", "Tell me a joke.")};
  const ojson no_system = {msg("user", "First question"), msg("assistant", "First answer"),
                           msg("user", "Second question"), msg("assistant", "Second answer")};
  const ojson unicode = {msg("user", "Héllo 世界 😀\nline two\n  indented line\n"),
                         msg("assistant", "Réponse :\n- un\n- deux"),
                         msg("user", "  ok <tag> & 'single' \"double\" \\ back\\slash\t tab  ")};
  const ojson thinking = {msg("user", "Solve x+1=2"),
                          msg("assistant", "<think>\nx = 2 - 1\n</think>\n\nx = 1"), msg("user", "Thanks")};
  ojson tool_call = msg("assistant", "");
  tool_call["tool_calls"] = ojson::parse(
      R"([{"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}])");
  ojson tool_result = msg("tool", "{\"temperature\": 21}");
  tool_result["tool_call_id"] = "call12345";
  const ojson tools_conversation = {msg("user", "Weather in Paris?"), tool_call, tool_result};
  // Parallel calls whose arguments, results and descriptions hold <>&' and non-ASCII text
  // (transformers' tojson keeps them as they are), then the assistant's answer.
  ojson parallel = msg("assistant", "");
  parallel["tool_calls"] = ojson::parse(R"([
    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Zürich <CH> & 'Genève'", "unit": "celsius"}}},
    {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "東京", "days": 2, "hours": [9, 18]}}}])");
  ojson result_a = msg("tool", "{\"temperature\": 18, \"note\": \"<light rain> & wind 'ouest' ☂\"}");
  result_a["tool_call_id"] = "call_a";
  ojson result_b = msg("tool", "晴れ, 24°C");
  result_b["tool_call_id"] = "call_b";
  const ojson parallel_conversation = {msg("system", "Use tools <when> needed & say 'why'."),
                                       msg("user", "Weather in Zürich and 東京?"), parallel, result_a, result_b,
                                       msg("assistant", "Zürich: 18°C <rain>; 東京: 24°C."), msg("user", "Thanks & bye")};
  ojson hostile_tools = weather_tools();
  hostile_tools[0]["function"]["description"] = "Météo <actuelle> & 'prévision' — 天気 😀";
  hostile_tools.push_back(ojson::parse(R"({"type": "function", "function": {"name": "get_time",
    "description": "Time in a zone", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}})"));

  std::vector<std::pair<std::string, ojson>> cases;
  for (bool prompt : {true, false}) {
    const std::string suffix = prompt ? "+prompt" : "";
    cases.push_back({"system_user" + suffix, {{"messages", system_user}, {"add_generation_prompt", prompt}}});
    cases.push_back({"multi_turn" + suffix, {{"messages", multi_turn}, {"add_generation_prompt", prompt}}});
    cases.push_back({"user_only" + suffix, {{"messages", {msg("user", "Hello")}}, {"add_generation_prompt", prompt}}});
    cases.push_back({"no_system" + suffix, {{"messages", no_system}, {"add_generation_prompt", prompt}}});
    cases.push_back({"unicode_multiline" + suffix, {{"messages", unicode}, {"add_generation_prompt", prompt}}});
    cases.push_back({"thinking" + suffix, {{"messages", thinking}, {"add_generation_prompt", prompt}}});
  }
  cases.push_back({"no_thinking", {{"messages", thinking}, {"add_generation_prompt", true}, {"enable_thinking", false}}});
  cases.push_back({"roles_not_alternating", {{"messages", {msg("user", "a"), msg("user", "b")}}}});
  cases.push_back({"unknown_role", {{"messages", {msg("user", "a"), msg("narrator", "b")}}}});
  cases.push_back({"tools", {{"messages", tools_conversation}, {"tools", weather_tools()}, {"add_generation_prompt", true}}});
  cases.push_back({"tools_no_calls", {{"messages", system_user}, {"tools", weather_tools()}}});
  cases.push_back({"tools_parallel", {{"messages", parallel_conversation}, {"tools", hostile_tools}, {"add_generation_prompt", true}}});
  cases.push_back({"tools_parallel_open", {{"messages", {msg("user", "Weather in Zürich and 東京?"), parallel, result_a, result_b}},
                                           {"tools", hostile_tools},
                                           {"add_generation_prompt", true},
                                           {"enable_thinking", false}}});
  cases.push_back({"tools_none", {{"messages", system_user}, {"tools", nullptr}, {"add_generation_prompt", true}}});
  return cases;
}

// bos/eos of each model family.
std::pair<std::string, std::string> special_tokens(const std::string& template_name) {
  if (template_name.find("Llama-3") != std::string::npos || template_name.find("Hermes") != std::string::npos) {
    return {"<|begin_of_text|>", "<|eot_id|>"};
  }
  if (template_name.find("Qwen") != std::string::npos) return {"", "<|endoftext|>"};
  if (template_name.find("DeepSeek") != std::string::npos) return {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"};
  if (template_name.find("gemma") != std::string::npos) return {"<bos>", "<eos>"};
  return {"<s>", "</s>"};
}

TEST(ChatTemplateTest, RealTemplatesMatchPythonJinja2) {
  const std::string probe = "/usr/bin/python3 -c 'import jinja2' 2>/dev/null";
  ASSERT_EQ(std::system(probe.c_str()), 0)
      << "/usr/bin/python3 cannot import jinja2: install Debian's python3-jinja2 (make deps)";
  const auto dir = source_dir() / "tests/data/chat-templates";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int templates = 0;
  int identical = 0;
  int same_error = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    ++templates;
    const std::string name = entry.path().filename().string();
    auto parsed = ChatTemplate::parse(read_file(entry.path()));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().message();
    const auto [bos, eos] = special_tokens(name);
    for (auto [case_name, context] : conversations()) {
      context["bos_token"] = bos;
      context["eos_token"] = eos;
      SCOPED_TRACE(name + " / " + case_name);
      const PythonResult expected = run_jinja2(entry.path(), context);
      ASSERT_NE(expected.exit_code, -1) << "could not run /usr/bin/python3";
      RenderOptions options;
      options.now_unix_seconds = kFixedNow;
      auto rendered = parsed->render(context, options);
      if (expected.exit_code == 0) {
        ASSERT_TRUE(rendered.ok()) << rendered.status().message();
        EXPECT_EQ(*rendered, expected.out);
        identical += *rendered == expected.out;
      } else if (expected.exit_code == 3) {
        ASSERT_FALSE(rendered.ok()) << "jinja2 raised " << expected.err;
        EXPECT_EQ("RAISE:" + rendered.status().message(), expected.err);
        EXPECT_EQ(rendered.status().code(), StatusCode::kFailedPrecondition);
        same_error += "RAISE:" + rendered.status().message() == expected.err;
      } else {
        ASSERT_EQ(expected.exit_code, 2) << expected.err;
        EXPECT_FALSE(rendered.ok()) << "jinja2 failed with " << expected.err << " but kvtier rendered";
        same_error += !rendered.ok();
      }
    }
  }
  EXPECT_EQ(templates, 8);
  std::printf("chat templates: %d, renderings identical to jinja2: %d, same failures: %d\n", templates, identical,
              same_error);
}

}  // namespace
}  // namespace kvtier::text
