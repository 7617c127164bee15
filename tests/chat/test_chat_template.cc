// Chat templates: the 60 renders llama.cpp's server produced from 14 real
// templates (byte for byte), hand-computed renders of each construct, the
// errors and limits, and a mutation loop that must never crash or hang.
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "chat/template.h"

namespace sustain::chat {
namespace {

using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string today(const char* fmt) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  return std::string(buf, std::strftime(buf, sizeof(buf), fmt, &tm));
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

// Renders `src` with `ctx`; the error message on failure.
std::string render(const std::string& src, const json& ctx = json::object(),
                   ChatTemplateLimits limits = {}) {
  auto t = ChatTemplate::parse(src, limits);
  if (!t) return "PARSE ERROR: " + t.status().message();
  auto out = t->render(ctx);
  if (!out) return "RENDER ERROR: " + out.status().message();
  return *out;
}

Status render_status(const std::string& src, const json& ctx = json::object(),
                     ChatTemplateLimits limits = {}) {
  auto t = ChatTemplate::parse(src, limits);
  if (!t) return t.status();
  return t->render(ctx).status();
}

// ---- constructs, on small templates ----

struct Case {
  const char* name;
  const char* tmpl;
  const char* context;
  const char* expected;
};

// Each expected text was worked out by hand from Jinja2's rules (and agrees
// with Python's Jinja2 3.1 in the environment Hugging Face renders with:
// trim_blocks, lstrip_blocks, json.dumps-based tojson).
const Case kCases[] = {
    {"arithmetic",
     "{{ 1 + 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ 1.5 * 2 "
     "}}|{{ 2 + 3 * 4 }}|{{ -2 ** 2 }}|{{ 1 - 2 - 3 }}",
     R"({})", "3|3|-4|2|3.5|1024|3.0|14|4|-4"},
    {"str_of_values",
     "{{ 'a' ~ 1 ~ none ~ true }}|{{ [1, 'x', none, true, 1.5] }}|{{ {'a': 1, 'b': [2]} }}|{{ none "
     "}}|{{ undefined_thing }}|{{ (1, 2) }}",
     R"({})", "a1NoneTrue|[1, 'x', None, True, 1.5]|{'a': 1, 'b': [2]}|None||(1, 2)"},
    {"repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'a\\nb\\\\c'] }}", R"({})",
     "[\"it's\", 'say \"hi\"', 'a\\nb\\\\c']"},
    {"floats",
     "{{ 1e-7 }}|{{ 123456789.0 }}|{{ 1e16 }}|{{ 0.1 + 0.2 }}|{{ 10 / 5 }}|{{ 7.5 // 2 }}|{{ 2.5 | "
     "round }}|{{ 2.567 | round(2) }}",
     R"({})", "1e-07|123456789.0|1e+16|0.30000000000000004|2.0|3.0|2.0|2.57"},
    {"loop_variables",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ "
     "loop.length }}{{ loop.revindex }}|{% endfor %}",
     R"({})", "10TrueFalse33|21FalseFalse32|32FalseTrue31|"},
    {"loop_else_and_filter",
     "{% for x in [] %}x{% else %}empty{% endfor %};{% for x in [1,2,3,4,5] if x is odd %}{{ "
     "loop.index }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
     R"({})", "empty;1:1,2:3,3:5"},
    {"loop_break_continue",
     "{% for x in range(10) %}{% if x == 5 %}{% break %}{% endif %}{% if x is even %}{% continue "
     "%}{% endif %}{{ x }}{% endfor %}",
     R"({})", "13"},
    {"loop_previtem_nextitem",
     "{% for m in ms %}{{ loop.previtem is defined }}{{ loop.nextitem }};{% endfor %}",
     R"({"ms": [1, 2, 3]})", "False2;True3;True;"},
    {"nested_loops",
     "{% for a in [[1, 2], [3, 4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}|{{ "
     "loop.index }}{% endfor %}",
     R"({})", "1122|11324|2"},
    {"loop_scoping",
     "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = i + 10 %}{{ x }}{% endfor %}{{ x }}",
     R"({})", "1111121"},
    {"namespace",
     "{% set ns = namespace(n=0, s='') %}{% for x in range(4) %}{% set ns.n = ns.n + x %}{% set "
     "ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}",
     R"({})", "6 0123 False"},
    {"unpacking",
     "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% set a, b = [1, 2] "
     "%}{{ a }}{{ b }}",
     R"({})", "b=1;a=2;12"},
    {"set_block", "{% set x %}captured {{ 1 + 1 }}{% endset %}[{{ x }}]", R"({})", "[captured 2]"},
    {"macros",
     "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ "
     "greet('Bob') }} {{ greet('Al', greeting='Hi') }} {{ greet(greeting='Yo', name='Z') }}",
     R"({})", "Hello, Bob! Hi, Al! Yo, Z!"},
    {"macro_recursion_and_globals",
     "{% set t = \"x\" %}{%- macro fact(n) -%}{%- if n <= 1 -%}1{%- else -%}{{ n * (fact(n - 1) | "
     "int) }}{%- endif -%}{%- endmacro -%}{% macro f() %}{{ t }}{% endmacro %}{% set t = \"y\" "
     "%}{{ fact(6) }} {{ f() }}",
     R"({})", "720 y"},
    {"trim_and_lstrip_blocks",
     "line1\n    {% if true %}\n    inner\n    {% endif %}\n  {# comment #}\n  {{ 'v' }}\ntail",
     R"({})", "line1\n    inner\n  v\ntail"},
    {"dash_whitespace_control",
     "a  {%- if true -%}  b  {%- endif -%}  c|{%- for x in [1, 2] -%}\n    {{ x }}\n{%- endfor "
     "%}\ndone",
     R"({})", "abc|12done"},
    {"plus_disables_trimming", "a {%+ if true +%}\nb{% endif %}", R"({})", "a \nb"},
    {"string_filters",
     "{{ '  x y  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello' | upper }}{{ 'Hello' | lower "
     "}}|{{ 'hello world' | capitalize }}|{{ 'hello world' | title }}|{{ 'a,b' | replace(',', ';') "
     "}}|{{ 42 | string }}",
     R"({})", "x y|hi|HELLOhello|Hello world|Hello World|a;b|42"},
    {"length",
     "{{ [3,1,2] | length }}{{ 'héllo' | length }}{{ {'a':1} | length }}{{ x | length }}{{ 'ab' | "
     "count }}",
     R"({})", "35102"},
    {"sequence_filters",
     "{{ [1,2,3] | join(', ') }}|{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ 'abc' | list }}|{{ "
     "[1,2] | reverse | list }}|{{ 'abc' | reverse }}|{{ [3,1,2] | sort }}|{{ [1,2,2,3,1] | unique "
     "| list }}|{{ [1,5,3] | max }}{{ [1,5,3] | min }}{{ [1,2,3] | sum }}",
     R"({})", "1, 2, 3|13|['a', 'b', 'c']|[2, 1]|cba|[1, 2, 3]|[1, 2, 3]|516"},
    {"default",
     "{{ x | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ none | "
     "default('d') }}|{{ x | d('e') }}",
     R"({})", "d||d|None|e"},
    {"map_select",
     "{{ [{'n': 'a', 'k': 1}, {'n': 'b', 'k': 2}, {'n': 'c'}] | selectattr('k') | "
     "map(attribute='n') | join }}|{{ [{'n': 'a', 'k': 1}, {'n': 'b', 'k': 2}] | rejectattr('k', "
     "'equalto', 1) | map(attribute='n') | list }}|{{ ['a','B'] | map('upper') | list }}|{{ "
     "[1,2,3,4] | select('even') | list }}{{ [1,2,3,4] | reject('odd') | list }}{{ [1,2,3] | "
     "select('gt', 1) | list }}",
     R"({})", "ab|['b']|['A', 'B']|[2, 4][2, 4][2, 3]"},
    {"items_dictsort",
     "{{ {'b': 1, 'A': 2, 'a': 3} | dictsort }}|{{ {'b': 1, 'a': 2} | items | list }}", R"({})",
     "[('A', 2), ('a', 3), ('b', 1)]|[('b', 1), ('a', 2)]"},
    {"tojson",
     "{{ {'a': [1, 'x'], 'b': {'c': none, 'd': true}, 'e': 1.5, 'f': 'é\"\\n<&>'} | tojson }}|{{ "
     "[] | tojson }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 'é' | "
     "tojson(ensure_ascii=true) }}",
     R"({})",
     "{\"a\": [1, \"x\"], \"b\": {\"c\": null, \"d\": true}, \"e\": 1.5, \"f\": "
     "\"é\\\"\\n<&>\"}|[]|{\"a\": 2, \"b\": 1}|\"\\u00e9\""},
    {"tojson_indent", "{{ {'a': {}, 'b': [1, {'c': 2}]} | tojson(indent=2) }}", R"({})",
     "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"c\": 2\n    }\n  ]\n}"},
    {"indent",
     "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(4, first=true) }}|{{ 'a\\n\\nb' | "
     "indent(2, blank=true) }}",
     R"({})", "a\n  b\n\n  c|    a\n    b|a\n  \n  b"},
    {"int_float",
     "{{ '42' | int }}{{ '4.7' | int }}{{ 'x' | int }}{{ 'x' | int(7) }}{{ 3.9 | int }}|{{ '2.5' | "
     "float }}|{{ 2 | float }}|{{ -3 | abs }}",
     R"({})", "424073|2.5|2.0|3"},
    {"string_methods",
     "{{ 'a-b-c'.split('-') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ "
     "'a-b-c'.rsplit('-', 1) }}|{{ 'xhix'.strip('x') }}|{{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ '  hi "
     " '.rstrip() }}|{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}{{ "
     "'hello'.startswith(('x', 'h')) }}|{{ 'a.b'.replace('.', '-') }}|{{ 'x'.upper() }}{{ 'A "
     "b'.lower() }}{{ 'ab cd'.title() }}",
     R"({})",
     "['a', 'b', 'c']|['a', 'b']|['a', 'b-c']|['a-b', 'c']|hi|hi\n|  hi|TrueTrueTrue|a-b|Xa bAb "
     "Cd"},
    {"dict_methods",
     "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 2) }}{{ d.keys() | list }}{{ d.values() | list "
     "}}{{ d['items'] }}{{ d.items() | list }}",
     R"({"d": {"a": 1, "items": "it"}})",
     "1None2['a', 'items'][1, 'it']it[('a', 1), ('items', 'it')]"},
    {"slicing_indexing",
     "{{ [1,2,3,4,5][1:3] }}{{ [1,2,3,4,5][::-1] }}{{ [1,2,3,4,5][-2:] }}{{ 'héllo'[1:3] }}{{ "
     "'hello'[-1] }}{{ [1,2,3][::2] }}{{ [1,2,3,4,5][4:1:-2] }}{{ 'abc'[5] is defined }}{{ [1][3] "
     "is defined }}{{ [[1, 2]][0][1] }}",
     R"({})", "[2, 3][5, 4, 3, 2, 1][4, 5]élo[1, 3][5, 3]FalseFalse2"},
    {"ternary_and_logic",
     "{{ 1 if true else 2 }}{{ 1 if false else 2 }}{{ (1 if false) is defined }}|{{ true and false "
     "}}{{ true or false }}{{ not true }}{{ 0 or 'x' }}{{ 1 and 'y' }}{{ not none }}|{{ 'x' if "
     "true else 'y' | upper }}{{ ('x' if false else 'y') | upper }}",
     R"({})", "12False|FalseTrueFalsexyTrue|xY"},
    {"membership_comparison",
     "{{ 1 in [1,2] }}{{ 3 not in [1,2] }}{{ 'a' in 'cat' }}{{ 'k' in {'k': 1} }}{{ 'z' in x }}|{{ "
     "1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ {'a': [1]} == {'a': [1]} }}{{ "
     "none == none }}",
     R"({})", "TrueTrueTrueTrueFalse|TrueFalseTrueTrueTrueTrue"},
    {"tests",
     "{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping "
     "}}{{ [] is iterable }}{{ 'a' is iterable }}{{ {} is sequence }}{{ 1 is number }}{{ 1 is "
     "integer }}{{ 1.0 is float }}{{ true is boolean }}{{ false is false }}{{ 3 is divisibleby 3 "
     "}}{{ 'a' is equalto 'a' }}{{ x is iterable }}{{ none is iterable }}{{ 1 is not string }}",
     R"({})", "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrue"},
    {"attribute_vs_item",
     "{{ messages[0].role }}|{{ messages[0]['content'] }}|{{ messages[1] is defined }}|{{ "
     "messages[0].nope is defined }}|{{ none.y is defined }}|{{ messages | length }}",
     R"({"messages": [{"role": "user", "content": "hi"}]})", "user|hi|False|False|False|1"},
    {"string_literals",
     "{{ \"\\u00e9\\x41\\101\" }}|{{ 'a' 'b' }}|{{ 'unknown \\q escape' }}|{{ \"a\\tb\" }}",
     R"({})", "éAA|ab|unknown \\q escape|a\tb"},
    {"raw_block", "{% raw %}{{ x }}{% endraw %}", R"({})", "{{ x }}"},
    {"qwen3_think_split",
     "{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ "
     "c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     R"({"c": "<think>\nreason\n</think>\n\nanswer"}
)",
     "answer|reason"},
    {"case_mapping",
     "{{ 'é' | upper }}|{{ 'naïve café' | title }}|{{ 'ÀÉÎ Ωμέγα Привет' | lower }}|{{ 'straße ÿ' "
     "| upper }}|{{ \"it's a-b (c) x_y\" | title }}|{{ \"it's a-b\".title() }}|{{ 'hELLO wORLD' | "
     "capitalize }}",
     R"({})", "É|Naïve Café|àéî ωμέγα привет|STRASSE Ÿ|It's A-B (C) X_y|It'S A-B|Hello world"},
    {"case_tests",
     "{{ '123' is lower }}{{ 'abc1' is lower }}{{ 'ABC' is upper }}{{ 'Ab' is upper }}{{ "
     "'é'.islower() }}{{ 'É'.isupper() }}",
     R"({})", "FalseTrueTrueFalseTrueTrue"},
    {"macro_sees_toplevel_not_loop_vars",
     "{% macro m() %}{{ x is defined }}{{ top }}{% endmacro %}{% set top = 'T' %}{% for x in [1] "
     "%}{{ m() }}{% endfor %}",
     R"({})", "FalseT"},
    {"dict_literal_in_tag",
     "{{ {'a': {'b': 1}} }}{% set d = {'k': {'n': [1, {'m': 2}]}} %}{{ d.k.n[1].m }}\n", R"({})",
     "{'a': {'b': 1}}2"},
};

TEST(ChatTemplate, Constructs) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(render(c.tmpl, json::parse(c.context)), c.expected) << c.tmpl;
  }
}

TEST(ChatTemplate, KeyOrderKeptWithOrderedJson) {
  auto t = ChatTemplate::parse("{{ d | tojson }}|{% for k, v in d | items %}{{ k }}{% endfor %}");
  ASSERT_TRUE(t);
  auto ordered = nlohmann::ordered_json::parse(R"({"d": {"zeta": 1, "alpha": {"y": 2, "x": 3}}})");
  auto out = t->render_ordered(ordered);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(*out, R"({"zeta": 1, "alpha": {"y": 2, "x": 3}}|zetaalpha)");
  auto sorted = t->render(json::parse(R"({"d": {"zeta": 1, "alpha": {"y": 2, "x": 3}}})"));
  ASSERT_TRUE(sorted);
  EXPECT_EQ(*sorted, R"({"alpha": {"x": 3, "y": 2}, "zeta": 1}|alphazeta)");
}

TEST(ChatTemplate, StrftimeNowUsesToday) {
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now is defined }}"),
            today("%Y-%m-%d") + "|True");
}

TEST(ChatTemplate, NewlinesNormalizedAndTrailingNewlineDropped) {
  EXPECT_EQ(render("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(render("a\n\n"), "a\n");
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% macro sq(x) %}{{ x * x }}{% endmacro %}"
      "{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ sq(ns.n) }}:{{ m.content }};"
      "{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->supports_system_role());  // every message's content is printed
  json ctx = {{"messages", json::array()}};
  for (int i = 0; i < 20; ++i) ctx["messages"].push_back({{"role", "user"}, {"content", i}});
  auto expected = t->render(ctx);
  ASSERT_TRUE(expected);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto out = t->render(ctx);
        if (!out || *out != *expected) ++mismatches;
        (void)t->supports_system_role();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(expected->substr(0, 12), "1:0;4:1;9:2;");
}

// ---- render_chat: what llama.cpp's server adds around the template ----

TEST(ChatTemplate, RenderChatGlobalsAndBos) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{{ tools is defined }}{{ enable_thinking }}{{ add_generation_prompt }}{{ eos_token }}"
      "{{ date_string == strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->supports_system_role());
  ChatRenderOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  json msgs =
      json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  auto out = render_chat(*t, msgs, o);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(*out, "[system:S][user:U]FalseTrueTrue</s>True");  // leading <s> stripped
  o.tools = json::array({{{"type", "function"}}});
  o.kwargs = {{"enable_thinking", false}, {"date_string", "x"}};
  o.add_generation_prompt = false;
  out = render_chat(*t, msgs, o);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(*out, "[system:S][user:U]TrueFalseFalse</s>False");
  o.kwargs = json::array();
  EXPECT_FALSE(render_chat(*t, msgs, o));
  // Bytes that are not UTF-8 (possible in a json built in C++) pass through
  // instead of throwing, as nlohmann's dump() would.
  o.kwargs = nullptr;
  o.tools = nullptr;
  json bad = json::array({{{"role", "user"}, {"content", "a\xff\xc3" "b"}}});
  out = render_chat(*t, bad, o);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->substr(0, 11), "[user:a\xff\xc3" "b]");
  EXPECT_FALSE(render_chat(*t, json::object(), ChatRenderOptions{}));
}

TEST(ChatTemplate, RenderChatMergesSystemWhenRejected) {
  auto t = ChatTemplate::parse(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}"
      "{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->supports_system_role());
  json msgs = json::parse(
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
          {"role": "assistant", "content": "A"}])");
  auto out = render_chat(*t, msgs, ChatRenderOptions{});
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(*out, "<user>S\nU<assistant>A");
  // A system message with no user message after it becomes a user message.
  out =
      render_chat(*t, json::parse(R"([{"role": "system", "content": "S"}])"), ChatRenderOptions{});
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(*out, "<user>S");
}

// ---- errors: named, located, never a crash ----

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  struct E {
    const char* tmpl;
    const char* needle;
  } errors[] = {
      {"ab\n{% if x %}abc", "line 2, column 1: unclosed '{% if %}'"},
      {"{% for x in y %}", "unclosed '{% for %}'"},
      {"{% endif %}", "unexpected '{% endif %}'"},
      {"{{ 1 }", "line 1, column 6: unmatched '}'"},
      {"{{ 1 ", "line 1, column 1: unclosed '{{' (no '}}' before the end)"},
      {"{# never closed", "line 1, column 1: unclosed comment"},
      {"{% if %}{% endif %}", "line 1, column 7: expected an expression"},
      {"{% include 'x' %}", "unsupported tag 'include'"},
      {"{% break %}", "'break' outside a for loop"},
      {"{{ 'abc }}", "unterminated string literal"},
      {"{{ a ? b }}", "unexpected character '?'"},
      {"{{ (1 }}", "line 1, column 7: expected ')' before '}'"},
      {"{{ x | }}", "expected a filter name"},
      {"{% raw %}abc", "unclosed '{% raw %}'"},
      {"{% macro m( %}{% endmacro %}", "line 1, column 14: expected ')' before '}'"},
      {"{{ f(1, ", "line 1, column 5: '(' is never closed"},
      {"{% macro m(1) %}{% endmacro %}", "expected a parameter name"},
  };
  for (const auto& e : errors) {
    Status st = render_status(e.tmpl);
    ASSERT_FALSE(st.is_ok()) << e.tmpl;
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find(e.needle), std::string::npos) << e.tmpl << " -> " << st.message();
  }
}

TEST(ChatTemplate, RenderErrorsNameTheProblem) {
  struct E {
    const char* tmpl;
    const char* needle;
  } errors[] = {
      {"{{ 'abc' | nofilter }}", "line 1, column 10: unknown filter 'nofilter'"},
      {"{{ 1 is nosuchtest }}", "unknown test 'nosuchtest'"},
      {"\n\n  {{ x.y }}", "line 3, column 7: 'x' is undefined"},
      {"{{ 1 + 'a' }}", "unsupported operand type(s) for +: 'int' and 'str'"},
      {"{{ undefined_fn() }}", "'undefined_fn' is undefined"},
      {"{% for x in 1 %}{% endfor %}", "'int' object is not iterable"},
      {"{% set x = 1 %}{% set x.y = 1 %}", "only namespace() objects"},
      {"{{ [1].append(2) }}", "sandbox is immutable"},
      {"{{ 1 < 'a' }}", "'<' not supported between instances of 'int' and 'str'"},
      {"{{ 1 // 0 }}", "division or modulo by zero"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes not more than 1 argument"},
      {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "no parameter named 'b'"},
      {"{{ x | tojson }}", "Undefined is not JSON serializable"},
  };
  for (const auto& e : errors) {
    Status st = render_status(e.tmpl);
    ASSERT_FALSE(st.is_ok()) << e.tmpl;
    EXPECT_NE(st.message().find(e.needle), std::string::npos) << e.tmpl << " -> " << st.message();
  }
}

TEST(ChatTemplate, RaiseExceptionMessageSurfaces) {
  Status st = render_status("{% if x %}{{ raise_exception('Roles must alternate!') }}{% endif %}",
                            {{"x", true}});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("Roles must alternate!"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("line 1, column 14"), std::string::npos) << st.message();
  EXPECT_TRUE(render_status("{% if x %}{{ raise_exception('no') }}{% endif %}").is_ok());
}

// ---- limits ----

TEST(ChatTemplate, StepLimitStopsRunawayLoops) {
  ChatTemplateLimits lim;
  lim.max_steps = 200'000;
  const std::string loops =
      "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}"
      "{% endfor %}{% endfor %}{% endfor %}";
  Status st = render_status(loops, json::object(), lim);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("step limit of 200000"), std::string::npos) << st.message();
  // Copying big strings costs steps too: doubling below the output limit
  // runs out of steps instead.
  lim.max_steps = 5000;
  st = render_status(
      "{% set ns = namespace(s='x' * 100000) %}{% for i in range(100) %}"
      "{% set ns.s = ns.s[:100000] ~ ns.s[:100000] %}{% endfor %}",
      json::object(), lim);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("step limit of 5000"), std::string::npos) << st.message();
  st = render_status("{{ range(1000000000) | length }}", json::object(), lim);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("range()"), std::string::npos) << st.message();
}

TEST(ChatTemplate, DepthLimits) {
  ChatTemplateLimits lim;
  lim.max_depth = 16;
  Status st = render_status("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("macro calls nested deeper than the limit of 64"), std::string::npos)
      << st.message();
  std::string parens = "{{ " + std::string(100, '(') + "1" + std::string(100, ')') + " }}";
  st = render_status(parens, json::object(), lim);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("nested deeper than the limit of 16"), std::string::npos)
      << st.message();
  std::string blocks;
  for (int i = 0; i < 40; ++i) blocks += "{% if true %}";
  for (int i = 0; i < 40; ++i) blocks += "{% endif %}";
  st = render_status(blocks, json::object(), lim);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("blocks nested deeper than the limit of 16"), std::string::npos)
      << st.message();
  // A long flat chain is as deep as it is long: refused at parse time, not
  // by overflowing the stack while rendering or freeing it.
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  st = render_status(chain + " }}");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("nested deeper"), std::string::npos) << st.message();
  // The deepest native recursion a template can reach: macros nested to the
  // macro limit, each inside blocks nested almost to the block limit. The
  // evaluator's own recursion cap stops it, with the stack to spare.
  std::string body;
  for (int i = 0; i < 60; ++i) body += "{% if true %}";
  body += "{{ f(n + 1) }}";
  for (int i = 0; i < 60; ++i) body += "{% endif %}";
  st = render_status("{% macro f(n) %}" + body + "{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("recursion deeper than"), std::string::npos) << st.message();
  ChatTemplateLimits bad;
  bad.max_depth = 100000;
  EXPECT_FALSE(ChatTemplate::parse("x", bad));
  bad.max_depth = 0;
  EXPECT_FALSE(ChatTemplate::parse("x", bad));
  // Within the limit, the same shapes render.
  EXPECT_EQ(render("{{ ((((1)))) + 1 + 1 }}", json::object(), lim), "3");
}

TEST(ChatTemplate, OutputLimit) {
  ChatTemplateLimits lim;
  lim.max_output_bytes = 500;
  Status st = render_status("{% for i in range(100) %}0123456789{% endfor %}", json::object(), lim);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("output limit of 500 bytes"), std::string::npos) << st.message();
  // Doubling a string in a loop hits the limit long before memory runs out.
  st = render_status(
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("output limit"), std::string::npos) << st.message();
  st = render_status("{{ 'x' * 100000000000 }}");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("output limit"), std::string::npos) << st.message();
  EXPECT_EQ(render("{% for i in range(50) %}0123456789{% endfor %}", json::object(), lim).size(),
            500u);
}

TEST(ChatTemplate, DeepContextIsRefused) {
  json deep = json::array();
  for (int i = 0; i < 1000; ++i) deep = json::array({deep});
  Status st = render_status("{{ x | length }}", {{"x", deep}});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("nested deeper than 256"), std::string::npos) << st.message();
  st = render_status(
      "{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}"
      "{% endfor %}{{ ns.v }}");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("nested deeper than 256"), std::string::npos) << st.message();
}

// ---- the reference renders ----

TEST(ChatTemplateRef, AllRecordsByteIdentical) {
  SUSTAIN_REQUIRE_REF();
  json records = json::parse(read_file(test::ref_path("templates/templates.json")));
  ASSERT_EQ(records.size(), 60u);
  // The records were rendered on 2026-11-29; templates print today's date.
  const std::string day_long = today("%d %b %Y"), day_iso = today("%Y-%m-%d");
  int matched = 0;
  for (const auto& r : records) {
    std::string file = r["template_file"];
    SCOPED_TRACE(file + " " + r["variant"].get<std::string>() + " case " +
                 r["messages_case"].get<std::string>());
    auto t = ChatTemplate::parse(read_file(test::ref_path("templates/" + file)));
    ASSERT_TRUE(t) << t.status().message();
    ChatRenderOptions o;
    o.add_generation_prompt = true;
    o.bos_token = "<s>";
    o.eos_token = "</s>";
    if (!r["chat_template_kwargs"].is_null()) o.kwargs = r["chat_template_kwargs"];
    auto out = render_chat(*t, r["messages"], o);
    ASSERT_TRUE(out) << out.status().message();
    std::string expected = r["rendered"];
    replace_all(expected, "29 Nov 2026", day_long);
    replace_all(expected, "2026-11-29", day_iso);
    EXPECT_EQ(*out, expected);
    if (*out == expected) ++matched;
  }
  EXPECT_EQ(matched, 60);
  std::printf("chat templates: %d of %zu records byte-identical\n", matched, records.size());
}

TEST(ChatTemplateRef, SystemRoleProbe) {
  SUSTAIN_REQUIRE_REF();
  auto gemma2 =
      ChatTemplate::parse(read_file(test::ref_path("templates/google-gemma-2-2b-it.jinja")));
  ASSERT_TRUE(gemma2);
  EXPECT_FALSE(gemma2->supports_system_role());
  auto qwen = ChatTemplate::parse(read_file(test::ref_path("templates/Qwen-Qwen3-0.6B.jinja")));
  ASSERT_TRUE(qwen);
  EXPECT_TRUE(qwen->supports_system_role());
}

}  // namespace
}  // namespace sustain::chat

namespace sustain::chat {
namespace {

// Truncations, byte flips, inserted tag fragments and spliced ranges of the
// real templates: parse and render must return (a value or an error), never
// crash or hang. Kept small so that it also runs quickly under ASan.
TEST(ChatTemplateRef, MutatedTemplatesNeverCrash) {
  SUSTAIN_REQUIRE_REF();
  json records = json::parse(read_file(test::ref_path("templates/templates.json")));
  json messages = records[2]["messages"];  // case (c): three turns, non-ASCII text
  messages.push_back(json::parse(
      R"({"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type":
          "function", "function": {"name": "f", "arguments": {"a": 1}}}]})"));
  messages.push_back(
      json::parse(R"({"role": "tool", "tool_call_id": "call12345", "content": "42"})"));
  ChatRenderOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.tools = json::parse(
      R"([{"type": "function", "function": {"name": "f", "description": "d", "parameters":
          {"type": "object", "properties": {"a": {"type": "integer", "description": "x"}},
           "required": ["a"]}}}])");
  ChatTemplateLimits lim;
  lim.max_steps = 100'000;
  lim.max_output_bytes = 1 << 20;
  static const char* kFragments[] = {"{%",
                                     "%}",
                                     "{{",
                                     "}}",
                                     "{#",
                                     "#}",
                                     "-",
                                     "(",
                                     ")",
                                     "[",
                                     "]",
                                     "{% for x in messages %}",
                                     "{% endfor %}",
                                     "{% if",
                                     "endif",
                                     "loop.",
                                     "|",
                                     "'",
                                     "\"",
                                     "\\",
                                     "macro",
                                     "ns.",
                                     "\xff",
                                     "\xc3"};
  std::mt19937 rng(20261129);
  const auto t0 = std::chrono::steady_clock::now();
  int tried = 0, parsed = 0, rendered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::ref_path("templates"))) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string src = read_file(entry.path().string());
    std::vector<std::string> mutants;
    for (int k = 1; k <= 30; ++k) mutants.push_back(src.substr(0, src.size() * k / 31));
    for (int k = 0; k < 90; ++k) {
      std::string m = src;
      int edits = k < 45 ? 1 : 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        size_t pos = rng() % (m.size() + 1);
        switch (rng() % 4) {
          case 0:
            if (pos < m.size()) m[pos] = static_cast<char>(rng() % 256);
            break;
          case 1:
            m.insert(pos, kFragments[rng() % std::size(kFragments)]);
            break;
          case 2:
            m.erase(pos, rng() % 40);
            break;
          default: {
            size_t from = rng() % (m.size() + 1);
            m.insert(pos, m.substr(from, rng() % 80));
          }
        }
      }
      mutants.push_back(std::move(m));
    }
    for (const auto& m : mutants) {
      ++tried;
      auto t = ChatTemplate::parse(m, lim);
      if (!t) {
        EXPECT_FALSE(t.status().message().empty());
        continue;
      }
      ++parsed;
      auto out = render_chat(*t, messages, o);
      if (out) ++rendered;
      auto plain = t->render(json::object());
      (void)plain;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("mutants: %d tried, %d parsed, %d rendered, %.2f s\n", tried, parsed, rendered, secs);
  EXPECT_EQ(tried, 14 * 120);
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rendered, 0);
}

}  // namespace
}  // namespace sustain::chat
