// Constrained generation on a random-weight model: whatever the weights
// say, every completion must be valid. 200+ generated schemas (nested
// objects, arrays, enums, anyOf/oneOf, $ref and recursive $defs, formats,
// patterns, integer ranges) at temperature 0 and 1, each output parsed as
// JSON and checked by the independent validator in schema_check.cc; and
// GBNF grammars (arithmetic, CSV, a small language) checked by hand-written
// parsers below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <span>

#include <fmt/format.h>

#include "engine/api.h"
#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "grammar/schema.h"
#include "schema_check.h"
#include "spec/proposer.h"
#include "test_util.h"
#include "tools/presets.h"
#include "tools/synth.h"

namespace sustain::grammar {
namespace {

using json = nlohmann::ordered_json;

// tiny-qwen3: a BPE vocabulary of 2048 tokens (byte tokens, words, code
// fragments), two layers, random weights.
engine::EngineConfig engine_config() {
  static const std::string path = [] {
    const std::string p = sustain::test::tmp_path("grammar_tiny_qwen3.gguf");
    ThreadPool pool(2);
    tools::SynthOptions opt;
    auto r = tools::synth_model(*tools::find_preset("tiny-qwen3"), p, opt, pool);
    EXPECT_TRUE(r.has_value()) << r.status().message();
    return p;
  }();
  engine::EngineConfig c;
  c.model_path = path;
  c.n_threads = 2;
  c.n_ctx = 2048;
  c.n_parallel = 8;
  c.max_queue = 1024;
  return c;
}

std::unique_ptr<engine::Engine> make_engine(const engine::EngineConfig& c) {
  auto eng = engine::Engine::create(c);
  EXPECT_TRUE(eng.has_value()) << eng.status().message();
  return eng ? std::move(*eng) : nullptr;
}

engine::Engine& shared_engine() {
  static std::unique_ptr<engine::Engine> e = make_engine(engine_config());
  return *e;
}

std::shared_ptr<const TokenVocab> vocab() {
  static auto v = TokenVocab::from_tokenizer(shared_engine().tokenizer());
  return v;
}

struct Output {
  std::string text;
  std::vector<int32_t> ids;
  engine::Finish finish = engine::Finish::kNone;
  engine::Usage usage;
  std::string error;
};

// A short prompt of ordinary tokens (ids 300..1999 of the 2048) that differs
// per request.
std::vector<int32_t> prompt_of(size_t i) {
  std::vector<int32_t> p;
  for (size_t k = 0; k < 4; ++k) p.push_back(static_cast<int32_t>(300 + (i * 7 + k * 13) % 1700));
  return p;
}

// Runs one request per grammar and temperature, all queued at once so the
// engine batches them.
std::vector<Output> generate(const std::vector<std::shared_ptr<const Grammar>>& grammars,
                             float temperature, int max_tokens,
                             engine::Engine& e = shared_engine()) {
  std::vector<engine::Stream> streams;
  for (size_t i = 0; i < grammars.size(); ++i) {
    engine::Request r;
    r.prompt = prompt_of(i);
    r.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.seed = 1000 + i;
    r.sampling.constraint = std::make_shared<GrammarConstraint>(grammars[i], vocab());
    auto s = e.submit(std::move(r));
    EXPECT_TRUE(s.has_value()) << s.status().message();
    if (s) streams.push_back(std::move(*s));
  }
  std::vector<Output> out;
  for (auto& s : streams) {
    engine::Event ev = s.wait();
    Output o;
    for (const auto& t : ev.tokens) {
      o.text += e.tokenizer().token_to_piece(t.id, false);
      o.ids.push_back(t.id);
    }
    o.finish = ev.finish;
    o.usage = ev.usage;
    o.error = ev.error.message();
    out.push_back(std::move(o));
  }
  return out;
}

// ---- random schemas ------------------------------------------------------------------------

class SchemaGen {
 public:
  explicit SchemaGen(uint32_t seed) : rng_(seed) {}

  json make() {
    defs_ = json::object();
    json s = node(0);
    if (!defs_.empty()) s["$defs"] = defs_;
    return s;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }

  json leaf() {
    switch (pick(12)) {
      case 0: {
        const int lo = pick(2);
        return {{"type", "string"}, {"minLength", lo}, {"maxLength", lo + pick(6)}};
      }
      case 1: {
        static const char* kFormats[] = {"date", "date-time", "time", "uuid", "email"};
        return {{"type", "string"}, {"format", kFormats[pick(5)]}};
      }
      case 2: {
        static const char* kPatterns[] = {"^[a-z]{1,4}$",    "^[A-Z][0-9]{2}$", "^(ab|cd){1,3}x?$",
                                          "^\\d{3}-\\d{2}$", "^[a-f0-9]{2,6}$", "^(yes|no|maybe)$"};
        return {{"type", "string"}, {"pattern", kPatterns[pick(6)]}};
      }
      case 3: {
        const int lo = pick(200) - 100;
        return {{"type", "integer"}, {"minimum", lo}, {"maximum", lo + pick(500)}};
      }
      case 4:
        return {{"type", "integer"}, {"exclusiveMinimum", pick(10)}, {"maximum", 50}};
      case 5:
        return {{"type", "boolean"}};
      case 6:
        return {{"type", "null"}};
      case 7:
        return {{"enum", json::array({"red", "green", 3, nullptr, json::array({1, 2})})}};
      case 8:
        return {{"const", pick(2) ? json("fixed") : json(42)}};
      case 9:
        return {{"type", json::array({"integer", "null"})}, {"minimum", 0}, {"maximum", 9}};
      case 11: {
        const double lo = (pick(41) - 20) / 4.0;
        json n = {{"type", "number"}, {pick(2) ? "minimum" : "exclusiveMinimum", lo}};
        if (pick(3) != 0) n[pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 1.5 + pick(40) / 4.0;
        return n;
      }
      default:
        return {{"type", "string"}, {"enum", json::array({"a", "b c", "é😀"})}};
    }
  }

  json node(int depth) {
    const int k = pick(depth >= 3 ? 3 : 12);
    if (k == 10) {
      // A tuple, with more items after it or none.
      json t = {{"type", "array"},
                {"prefixItems", json::array({leaf(), node(depth + 1)})}};
      if (pick(2)) {
        t["items"] = leaf_of("integer");
        t["maxItems"] = 2 + pick(3);
      } else {
        t["items"] = false;
      }
      return t;
    }
    if (k == 11) {
      // An object extended by allOf: one more required property, and a
      // tighter bound on one it may already have.
      json a = object(depth + 1);
      a.erase("additionalProperties");
      a.erase("maxProperties");
      return {{"allOf", json::array({a, {{"properties", {{"n", leaf_of("integer")},
                                                         {"id", {{"minimum", 0}}}}},
                                         {"required", json::array({"n"})}}})}};
    }
    if (k < 3) return leaf();
    if (k < 6) return object(depth);
    if (k == 6) {
      json a = {{"type", "array"}, {"items", node(depth + 1)}, {"maxItems", 1 + pick(3)}};
      if (pick(2)) a["minItems"] = 1;
      return a;
    }
    if (k == 7) {
      // Alternatives of different types, so oneOf holds as well as anyOf.
      const char* key = pick(2) ? "anyOf" : "oneOf";
      return {
          {key, json::array({leaf_of("integer"), pick(2) ? object(depth + 1) : leaf_of("null")})}};
    }
    if (k == 8) {
      const std::string name = fmt::format("d{}", defs_.size());
      defs_[name] = nullptr;  // taken before the nested schema can take it
      json target = node(depth + 1);
      defs_[name] = std::move(target);
      return {{"$ref", "#/$defs/" + name}};
    }
    // A recursive definition: a tree of small integers.
    if (!defs_.contains("tree")) {
      defs_["tree"] = {
          {"type", "object"},
          {"properties",
           {{"v", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}},
            {"kids", {{"type", "array"}, {"items", {{"$ref", "#/$defs/tree"}}}, {"maxItems", 2}}}}},
          {"required", json::array({"v"})},
          {"additionalProperties", false}};
    }
    return {{"$ref", "#/$defs/tree"}};
  }

  json leaf_of(const char* type) {
    if (std::string(type) == "integer")
      return {{"type", "integer"}, {"minimum", -5}, {"maximum", 5}};
    return {{"type", type}};
  }

  json object(int depth) {
    static const char* kNames[] = {"id", "name", "tags", "x-y", "é", "value", "kind", "a"};
    json props = json::object();
    json required = json::array();
    const int n = 1 + pick(4);
    for (int i = 0; i < n; ++i) {
      const std::string name = kNames[pick(8)];
      if (props.contains(name)) continue;
      props[name] = node(depth + 1);
      if (pick(2)) required.push_back(name);
    }
    json o = {{"type", "object"}, {"properties", props}, {"required", required}};
    const int declared = static_cast<int>(props.size()), needed = static_cast<int>(required.size());
    if (pick(6) == 0) o["minProperties"] = pick(declared + 1);
    if (pick(6) == 0) {
      const int lo = std::max(needed, o.value("minProperties", 0));
      o["maxProperties"] = lo + pick(declared - lo + 1);
    }
    const int extra = pick(10);
    if (extra == 0)
      o["additionalProperties"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}};
    if (extra == 1) o["additionalProperties"] = false;
    return o;
  }

  std::mt19937 rng_;
  json defs_;
};

TEST(ConstrainedGeneration, EveryOutputValidatesAgainstItsSchema) {
  constexpr int kSchemas = 210;
  SchemaGen gen(2024);
  std::vector<json> schemas;
  std::vector<std::shared_ptr<const Grammar>> grammars;
  for (int i = 0; i < kSchemas; ++i) {
    schemas.push_back(gen.make());
    auto g = compile_json_schema(schemas.back());
    ASSERT_TRUE(g.has_value()) << g.status().message() << "\n" << schemas.back().dump();
    grammars.push_back(std::make_shared<const Grammar>(std::move(*g)));
  }
  int checked = 0, cut_off = 0;
  for (float temp : {0.0f, 1.0f}) {
    const auto outs = generate(grammars, temp, 1500);
    ASSERT_EQ(outs.size(), schemas.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string ctx = fmt::format("temperature {} schema {}:\n{}\noutput:\n{}", temp, i,
                                          schemas[i].dump(), outs[i].text);
      // Stopped at the grammar's end, never cut off by the length limit —
      // except where the schema allows unbounded structure (a recursive
      // $ref, any number of extra properties) and decoding is greedy: greedy
      // decoding repeats its choices, so it can go on without end whatever
      // the constraint does. Such an output must still be a prefix the
      // grammar allows.
      const std::string dump = schemas[i].dump();
      const bool unbounded = dump.find("#/$defs/tree") != std::string::npos ||
                             dump.find("\"additionalProperties\":{") != std::string::npos;
      if (unbounded && temp == 0.0f && outs[i].finish == engine::Finish::kLength) {
        Matcher m(grammars[i]);
        ASSERT_TRUE(m.advance(outs[i].text)) << ctx;
        ++cut_off;
        continue;
      }
      ASSERT_EQ(outs[i].finish, engine::Finish::kStop) << ctx;
      json v;
      try {
        v = json::parse(outs[i].text);
      } catch (const json::exception& ex) {
        FAIL() << "not JSON (" << ex.what() << ") " << ctx;
      }
      const std::string why = test::validate(v, schemas[i], schemas[i]);
      ASSERT_EQ(why, "") << ctx;
      ++checked;
    }
  }
  EXPECT_EQ(checked + cut_off, 2 * kSchemas);
  EXPECT_LT(cut_off, kSchemas / 10);
  std::printf("validated %d outputs; %d greedy outputs of unbounded schemas ran to the limit\n",
              checked, cut_off);
}

// Drafts a known continuation with every `wrong`-th token replaced by a
// random one (which the grammar mostly forbids): verification must sample
// each row under the constraint, so rejected drafts never reach the output.
class Oracle final : public spec::Proposer {
 public:
  Oracle(std::vector<std::vector<int32_t>> full, int wrong)
      : full_(std::move(full)), wrong_(wrong) {}
  const char* name() const override { return "oracle (test)"; }
  void propose(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out) override {
    for (const auto& f : full_) {
      if (f.size() <= tokens.size() || !std::equal(tokens.begin(), tokens.end(), f.begin()))
        continue;
      for (size_t i = tokens.size(); i < f.size() && static_cast<int>(out.size()) < k; ++i)
        out.push_back(++n_ % wrong_ == 0 ? static_cast<int32_t>(rng_() % 2048) : f[i]);
      return;
    }
  }

 private:
  std::vector<std::vector<int32_t>> full_;
  int wrong_;
  int64_t n_ = 0;
  std::mt19937 rng_{17};
};

TEST(ConstrainedGeneration, SpeculativeDraftsAreCheckedByTheGrammar) {
  SchemaGen gen(77);
  std::vector<json> schemas;
  std::vector<std::shared_ptr<const Grammar>> grammars;
  for (int i = 0; i < 40; ++i) {
    schemas.push_back(gen.make());
    auto g = compile_json_schema(schemas.back());
    ASSERT_TRUE(g.has_value()) << g.status().message();
    grammars.push_back(std::make_shared<const Grammar>(std::move(*g)));
  }
  // The plain greedy outputs are what the oracle drafts (a few tokens wrong).
  const auto plain = generate(grammars, 0.0f, 400);
  std::vector<std::vector<int32_t>> full;
  for (size_t i = 0; i < plain.size(); ++i) {
    auto f = prompt_of(i);
    f.insert(f.end(), plain[i].ids.begin(), plain[i].ids.end());
    full.push_back(std::move(f));
  }
  engine::EngineConfig c = engine_config();
  c.extra_proposer = std::make_shared<Oracle>(full, 3);
  c.spec.draft_max = 6;
  auto spec_engine = make_engine(c);
  ASSERT_TRUE(spec_engine);
  int64_t drafted = 0, accepted = 0;
  for (float temp : {0.0f, 1.0f}) {
    const auto outs = generate(grammars, temp, 400, *spec_engine);
    for (size_t i = 0; i < outs.size(); ++i) {
      drafted += outs[i].usage.spec_drafted;
      accepted += outs[i].usage.spec_accepted;
      const std::string ctx = fmt::format("temperature {} schema {}:\n{}\noutput:\n{}\nerror: {}",
                                          temp, i, schemas[i].dump(), outs[i].text, outs[i].error);
      Matcher m(grammars[i]);
      ASSERT_TRUE(m.advance(outs[i].text)) << ctx;
      if (outs[i].finish == engine::Finish::kLength) continue;  // greedy on an unbounded schema
      ASSERT_EQ(outs[i].finish, engine::Finish::kStop) << ctx;
      json v;
      ASSERT_NO_THROW(v = json::parse(outs[i].text)) << ctx;
      ASSERT_EQ(test::validate(v, schemas[i], schemas[i]), "") << ctx;
    }
  }
  // Drafts were verified, most accepted, the corrupted ones not.
  EXPECT_GT(accepted, 100);
  EXPECT_LT(accepted, drafted);
  std::printf("speculative: %lld tokens drafted, %lld accepted\n", static_cast<long long>(drafted),
              static_cast<long long>(accepted));
}

TEST(ConstrainedGeneration, JsonObjectMode) {
  auto g = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(g.has_value());
  auto shared = std::make_shared<const Grammar>(std::move(*g));
  std::vector<std::shared_ptr<const Grammar>> grammars(8, shared);
  for (const auto& o : generate(grammars, 0.0f, 1500)) {
    if (o.finish != engine::Finish::kStop) {
      // Greedy on random weights may nest without end; what it wrote so
      // far must still be the start of an object.
      Matcher m(shared);
      EXPECT_TRUE(m.advance(o.text)) << o.text;
      continue;
    }
    json v;
    EXPECT_NO_THROW(v = json::parse(o.text)) << o.text;
    EXPECT_TRUE(v.is_object()) << o.text;
  }
}

// ---- GBNF grammars with their own checkers --------------------------------------------------

// Recursive descent over "expr" of the arithmetic grammar.
struct Arith {
  const std::string& s;
  size_t i = 0;
  bool number() {
    const size_t start = i;
    while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i > start && i - start <= 3;
  }
  bool factor() {
    if (i < s.size() && s[i] == '(') {
      ++i;
      if (!expr() || i >= s.size() || s[i] != ')') return false;
      ++i;
      return true;
    }
    return number();
  }
  bool term() {
    if (!factor()) return false;
    while (i < s.size() && (s[i] == '*' || s[i] == '/')) {
      ++i;
      if (!factor()) return false;
    }
    return true;
  }
  bool expr() {
    if (!term()) return false;
    while (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      ++i;
      if (!term()) return false;
    }
    return true;
  }
  bool whole() { return expr() && i == s.size(); }
};

bool csv_ok(const std::string& s) {
  // Rows end with \n; fields are bare [a-z0-9]{0,5} or quoted with up to
  // five characters that are neither quote nor newline; 1-4 fields, 1-4 rows.
  size_t i = 0;
  int rows = 0;
  while (i < s.size()) {
    int fields = 0;
    while (true) {
      ++fields;
      if (i < s.size() && s[i] == '"') {
        const size_t close = s.find('"', i + 1);
        if (close == std::string::npos) return false;
        const std::string body = s.substr(i + 1, close - i - 1);
        size_t cps = 0;
        for (unsigned char c : body) {
          if (c == '\n') return false;
          cps += (c & 0xC0) != 0x80;
        }
        if (cps > 5) return false;
        i = close + 1;
      } else {
        size_t n = 0;
        while (i < s.size() && (islower(static_cast<unsigned char>(s[i])) ||
                                isdigit(static_cast<unsigned char>(s[i])))) {
          ++i;
          ++n;
        }
        if (n > 5) return false;
      }
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      break;
    }
    if (fields > 4 || i >= s.size() || s[i] != '\n') return false;
    ++i;
    ++rows;
  }
  return rows >= 1 && rows <= 4;
}

// The small language: statements `let NAME = EXPR;` and `print(EXPR);`,
// each on its own line, where EXPR is NAME, a number or EXPR op EXPR in
// parentheses, and a name must be assigned before it is read... by the
// grammar only syntactically, so the checker parses the syntax.
bool lang_ok(const std::string& s) {
  size_t i = 0;
  auto ident = [&] {
    const size_t start = i;
    while (i < s.size() && islower(static_cast<unsigned char>(s[i]))) ++i;
    return i > start && i - start <= 4;
  };
  std::function<bool()> expr = [&]() -> bool {
    if (i < s.size() && s[i] == '(') {
      ++i;
      if (!expr()) return false;
      if (i + 3 > s.size() || s[i] != ' ' ||
          std::string("+-*").find(s[i + 1]) == std::string::npos || s[i + 2] != ' ')
        return false;
      i += 3;
      if (!expr() || i >= s.size() || s[i] != ')') return false;
      ++i;
      return true;
    }
    if (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) {
      const size_t start = i;
      while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) ++i;
      return i - start <= 3;
    }
    return ident();
  };
  int n = 0;
  while (i < s.size()) {
    if (s.compare(i, 4, "let ") == 0) {
      i += 4;
      if (!ident() || s.compare(i, 3, " = ") != 0) return false;
      i += 3;
      if (!expr()) return false;
    } else if (s.compare(i, 6, "print(") == 0) {
      i += 6;
      if (!expr() || i >= s.size() || s[i] != ')') return false;
      ++i;
    } else {
      return false;
    }
    if (s.compare(i, 2, ";\n") != 0) return false;
    i += 2;
    ++n;
  }
  return n >= 1 && n <= 4;
}

TEST(ConstrainedGeneration, GbnfGrammarsCheckedByTheirOwnParsers) {
  struct Case {
    const char* name;
    const char* gbnf;
    std::function<bool(const std::string&)> check;
  };
  const std::vector<Case> cases = {
      {"arithmetic", R"g(root ::= expr
expr ::= term ( [+-] term ){0,3}
term ::= factor ( [*/] factor ){0,2}
factor ::= [0-9]{1,3} | "(" expr ")")g",
       [](const std::string& s) { return Arith{s}.whole(); }},
      {"csv", R"g(root ::= row{1,4}
row ::= field ( "," field ){0,3} "\n"
field ::= [a-z0-9]{0,5} | "\"" [^"\n]{0,5} "\"")g",
       csv_ok},
      {"language", R"g(root ::= stmt{1,4}
stmt ::= ( "let " name " = " expr | "print(" expr ")" ) ";\n"
name ::= [a-z]{1,4}
expr ::= name | [0-9]{1,3} | "(" expr " " [+*-] " " expr ")")g",
       lang_ok},
  };
  for (const auto& c : cases) {
    auto g = parse_gbnf(c.gbnf);
    ASSERT_TRUE(g.has_value()) << c.name << ": " << g.status().message();
    auto shared = std::make_shared<const Grammar>(std::move(*g));
    std::vector<std::shared_ptr<const Grammar>> grammars(12, shared);
    for (float temp : {0.0f, 1.0f}) {
      for (const auto& o : generate(grammars, temp, 1500)) {
        ASSERT_EQ(o.finish, engine::Finish::kStop) << c.name << ": " << o.text;
        EXPECT_TRUE(c.check(o.text)) << c.name << " at temperature " << temp << ":\n" << o.text;
      }
    }
  }
}

}  // namespace
}  // namespace sustain::grammar
