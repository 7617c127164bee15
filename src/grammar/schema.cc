#include "grammar/schema.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "grammar/gbnf.h"
#include "grammar/regex.h"

namespace sustain::grammar {
namespace {

// Ordered: properties are generated in the order the schema lists them.
using json = nlohmann::ordered_json;

// Rules every schema grammar may use, each defined once, on first use.
// Whitespace is bounded and numbers have bounded digits so a model cannot
// wander forever inside one token class (the grammar stays a subset of JSON).
struct Primitive {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};
const std::vector<Primitive>& primitives() {
  static const std::vector<Primitive> p = {
      {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", {}},
      // One character of a JSON string, raw or escaped; \u escapes never
      // name a surrogate (a lone one is not valid JSON text for most parsers).
      {"json-char",
       R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))",
       {}},
      {"plain-char", R"([^"\\\x00-\x1F])", {}},
      {"string", R"("\"" json-char* "\"")", {"json-char"}},
      {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", {}},
      {"number",
       R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)",
       {}},
      {"boolean", R"("true" | "false")", {}},
      {"null", R"("null")", {}},
      {"value",
       R"(object | array | string | number | boolean | null)",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"object",
       R"("{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}")",
       {"ws", "string", "value"}},
      {"array", R"("[" ws ( value ws ( "," ws value ws )* )? "]")", {"ws", "value"}},
      // RFC 3339 full-date with every day that exists in every year (29
      // February is left out: it needs the year to decide).
      {"date",
       R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))",
       {}},
      {"time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"date-time", R"(date "T" time)", {"date", "time"}},
      {"uuid",
       R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
       {}},
      {"email-atom", R"([a-zA-Z0-9_%+-]{1,16})", {}},
      {"email-label", R"([a-zA-Z0-9] ( [a-zA-Z0-9-]{0,20} [a-zA-Z0-9] )?)", {}},
      {"email",
       R"(email-atom ( "." email-atom ){0,3} "@" email-label ( "." email-label ){1,3})",
       {"email-atom", "email-label"}},
  };
  return p;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly"};
  return a;
}

const std::set<std::string>& handled() {
  static const std::set<std::string> h = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "enum",
                                          "const",
                                          "items",
                                          "minItems",
                                          "maxItems",
                                          "anyOf",
                                          "oneOf",
                                          "$ref",
                                          "$defs",
                                          "definitions",
                                          "pattern",
                                          "format",
                                          "minLength",
                                          "maxLength",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum"};
  return h;
}

// Integers stay within what the "integer" primitive writes (16 digits), so
// range arithmetic below cannot overflow.
constexpr int64_t kMaxBound = 9'999'999'999'999'999;

std::string digits_class(char lo, char hi) {
  return lo == hi ? fmt::format("\"{}\"", lo) : fmt::format("[{}-{}]", lo, hi);
}

// Every digit string of a's length between a and b (a <= b, same length).
std::string same_length_range(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a[0] == b[0]) {
    const std::string rest = same_length_range(a.substr(1), b.substr(1));
    return digits_class(a[0], a[0]) + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = a.size() - 1;
  const std::string ar = a.substr(1), br = b.substr(1);
  const bool a_floor = ar.find_first_not_of('0') == std::string::npos;
  const bool b_ceil = br.find_first_not_of('9') == std::string::npos;
  std::vector<std::string> alts;
  char lo = a[0], hi = b[0];
  if (!a_floor) {
    alts.push_back(digits_class(a[0], a[0]) + " " + same_length_range(ar, std::string(n, '9')));
    ++lo;
  }
  std::string last;
  if (!b_ceil) {
    last = digits_class(b[0], b[0]) + " " + same_length_range(std::string(n, '0'), br);
    --hi;
  }
  if (lo <= hi)
    alts.push_back(digits_class(lo, hi) + (n > 0 ? fmt::format(" [0-9]{{{}}}", n) : ""));
  if (!last.empty()) alts.push_back(last);
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return alts.size() == 1 ? out : "( " + out + " )";
}

// Non-negative integers in [lo, hi] (hi < 0: no upper bound, up to 16 digits).
std::string nonneg_range(int64_t lo, int64_t hi) {
  const std::string slo = std::to_string(lo);
  const size_t max_len = hi < 0 ? 16 : std::to_string(hi).size();
  std::vector<std::string> alts;
  int64_t p = 1;
  for (size_t len = 1; len <= max_len; ++len, p *= 10) {
    if (len < slo.size()) continue;
    const int64_t from = len == slo.size() ? lo : p;
    const int64_t to = hi >= 0 && len == max_len ? hi : p * 10 - 1;
    if (from > to) continue;
    alts.push_back(same_length_range(std::to_string(from), std::to_string(to)));
  }
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return "( " + out + " )";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {
    for (const auto& p : primitives()) taken_.insert(p.name);
    taken_.insert("root");
  }

  Expected<std::string> run() {
    std::string top;
    SUSTAIN_ASSIGN_OR_RETURN(top, visit(root_, "value", ""));
    std::string out = "root ::= " + top + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  static Status fail(const std::string& path, const std::string& what) {
    return Status(Code::kInvalidArgument,
                  fmt::format("JSON schema: at {}: {}", path.empty() ? "the root" : path, what));
  }

  std::string use(const std::string& name) {
    if (used_.insert(name).second) {
      for (const auto& p : primitives()) {
        if (p.name != name) continue;
        for (const char* d : p.deps) use(d);
        rules_.push_back({name, p.body});
      }
    }
    return name;
  }

  // A new rule name from a hint (its place in the schema).
  std::string reserve(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const bool ok = std::isalnum(static_cast<unsigned char>(c)) != 0;
      if (ok) {
        base += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else if (!base.empty() && base.back() != '-') {
        base += '-';
      }
      if (base.size() >= 32) break;
    }
    while (!base.empty() && base.back() == '-') base.pop_back();
    if (base.empty()) base = "s";
    std::string name = base;
    for (int k = 2; taken_.count(name) != 0; ++k) name = fmt::format("{}-{}", base, k);
    taken_.insert(name);
    return name;
  }

  Expected<std::string> define(const std::string& hint, std::string body) {
    if (rules_.size() > kMaxRules)
      return fail("", fmt::format("the schema needs more than {} grammar rules", kMaxRules));
    const std::string name = reserve(hint);
    rules_.push_back({name, std::move(body)});
    return name;
  }

  Expected<std::string> visit(const json& s, const std::string& hint, const std::string& path) {
    if (++depth_ > kMaxDepth) return fail(path, "the schema nests too deeply");
    auto r = visit_inner(s, hint, path);
    --depth_;
    return r;
  }

  Expected<std::string> visit_inner(const json& s, const std::string& hint,
                                    const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return use("value");
      return fail(path, "the schema 'false' allows no value");
    }
    if (!s.is_object()) return fail(path, fmt::format("a schema must be an object or a boolean"));
    std::vector<std::string> constraining;
    for (const auto& [k, v] : s.items()) {
      if (annotations().count(k) != 0) continue;
      if (handled().count(k) == 0)
        return fail(path, fmt::format("keyword '{}' is not supported", k));
      if (k != "$defs" && k != "definitions") constraining.push_back(k);
    }
    auto only = [&](const char* key, std::initializer_list<const char*> also) -> Status {
      for (const auto& k : constraining) {
        bool ok = k == key;
        for (const char* a : also) ok = ok || k == a;
        if (!ok) return fail(path, fmt::format("'{}' beside '{}' is not supported", key, k));
      }
      return Status::ok();
    };
    if (s.contains("$ref")) {
      SUSTAIN_TRY(only("$ref", {}));
      return ref(s["$ref"], path);
    }
    if (s.contains("const")) {
      SUSTAIN_TRY(only("const", {"type"}));
      if (s.contains("type") && !matches_type(s["const"], s["type"]))
        return fail(path, "'const' does not have the schema's 'type'");
      return define(hint, gbnf_literal(s["const"].dump()));
    }
    if (s.contains("enum")) {
      SUSTAIN_TRY(only("enum", {"type"}));
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return fail(path + "/enum", "must be a non-empty array");
      std::string body;
      for (const auto& v : e) {
        if (s.contains("type") && !matches_type(v, s["type"])) continue;
        body += (body.empty() ? "" : " | ") + gbnf_literal(v.dump());
      }
      if (body.empty()) return fail(path, "no value of 'enum' has the schema's 'type'");
      return define(hint, body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      SUSTAIN_TRY(only(key, {}));
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty())
        return fail(path + "/" + key, "must be a non-empty array of schemas");
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i) {
        std::string alt;
        SUSTAIN_ASSIGN_OR_RETURN(alt, visit(alts[i], hint + "-" + std::to_string(i),
                                            fmt::format("{}/{}/{}", path, key, i)));
        body += (i ? " | " : "") + alt;
      }
      return define(hint, body);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) return fail(path + "/type", "must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return fail(path + "/type", "must be a type name or a non-empty array of them");
      }
    } else {
      types.push_back(infer_type(s));
    }
    std::string body;
    for (const auto& t : types) {
      std::string e;
      SUSTAIN_ASSIGN_OR_RETURN(e, typed(s, t, types.size() > 1 ? hint + "-" + t : hint, path));
      body += (body.empty() ? "" : " | ") + e;
    }
    if (types.size() == 1) return body;
    return define(hint, body);
  }

  static bool matches_type(const json& v, const json& type) {
    auto one = [&](const std::string& t) {
      if (t == "string") return v.is_string();
      if (t == "integer")
        return v.is_number_integer() ||
               (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
      if (t == "number") return v.is_number();
      if (t == "boolean") return v.is_boolean();
      if (t == "null") return v.is_null();
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      return false;
    };
    if (type.is_string()) return one(type.get<std::string>());
    if (type.is_array())
      for (const auto& t : type)
        if (t.is_string() && one(t.get<std::string>())) return true;
    return false;
  }

  // A schema without "type" that uses one type's keywords gets that type (a
  // narrower grammar, still sound); one with none allows any value.
  static std::string infer_type(const json& s) {
    for (const char* k : {"properties", "required", "additionalProperties"})
      if (s.contains(k)) return "object";
    for (const char* k : {"items", "minItems", "maxItems"})
      if (s.contains(k)) return "array";
    for (const char* k : {"pattern", "format", "minLength", "maxLength"})
      if (s.contains(k)) return "string";
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return "number";
    return "any";
  }

  Expected<std::string> typed(const json& s, const std::string& t, const std::string& hint,
                              const std::string& path) {
    if (t == "any") return use("value");
    if (t == "string") return string_rule(s, hint, path);
    if (t == "integer") return integer_rule(s, hint, path);
    if (t == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(k))
          return fail(path, fmt::format("'{}' on type 'number' is not supported (it is on "
                                        "'integer')",
                                        k));
      return use("number");
    }
    if (t == "boolean") return use("boolean");
    if (t == "null") return use("null");
    if (t == "object") return object_rule(s, hint, path);
    if (t == "array") return array_rule(s, hint, path);
    return fail(path + "/type", fmt::format("unknown type '{}'", t));
  }

  Expected<int64_t> count(const json& s, const char* key, const std::string& path) {
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return fail(path + "/" + key, "must be a non-negative integer");
    if (v.get<int64_t>() > static_cast<int64_t>(kMaxRepetition))
      return fail(path + "/" + key,
                  fmt::format("{} is over the supported limit of {}", v.dump(), kMaxRepetition));
    return v.get<int64_t>();
  }

  // "{m,n}" (n < 0: unbounded), or "" for {1,1}.
  static std::string reps(int64_t m, int64_t n) {
    if (n < 0) return m == 0 ? "*" : m == 1 ? "+" : fmt::format("{{{},}}", m);
    if (m == 1 && n == 1) return "";
    if (m == 0 && n == 1) return "?";
    return m == n ? fmt::format("{{{}}}", m) : fmt::format("{{{},{}}}", m, n);
  }

  Expected<std::string> string_rule(const json& s, const std::string& hint,
                                    const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (has_len || s.contains("format"))
        return fail(path,
                    "'pattern' together with 'minLength', 'maxLength' or 'format' is not "
                    "supported");
      if (!s["pattern"].is_string()) return fail(path + "/pattern", "must be a string");
      auto re = regex_to_gbnf(s["pattern"].get<std::string>(), use("json-char"));
      if (!re) return fail(path + "/pattern", re.status().message());
      return define(hint, "\"\\\"\" " + *re + " \"\\\"\"");
    }
    if (s.contains("format")) {
      if (has_len)
        return fail(path, "'format' together with 'minLength'/'maxLength' is not supported");
      if (!s["format"].is_string()) return fail(path + "/format", "must be a string");
      const std::string f = s["format"].get<std::string>();
      if (f != "date-time" && f != "date" && f != "time" && f != "uuid" && f != "email")
        return fail(path + "/format",
                    fmt::format("format '{}' is not supported (date-time, date, time, uuid and "
                                "email are)",
                                f));
      return define(hint, "\"\\\"\" " + use(f) + " \"\\\"\"");
    }
    if (!has_len) return use("string");
    int64_t lo = 0, hi = -1;
    if (s.contains("minLength")) {
      SUSTAIN_ASSIGN_OR_RETURN(lo, count(s, "minLength", path));
    }
    if (s.contains("maxLength")) {
      SUSTAIN_ASSIGN_OR_RETURN(hi, count(s, "maxLength", path));
    }
    if (hi >= 0 && hi < lo) return fail(path, "'maxLength' is below 'minLength'");
    if (hi == 0) return define(hint, "\"\\\"\\\"\"");
    return define(hint, "\"\\\"\" " + use("json-char") + reps(lo, hi) + " \"\\\"\"");
  }

  Expected<std::string> integer_rule(const json& s, const std::string& hint,
                                     const std::string& path) {
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      const json& v = s[k];
      if (!v.is_number())
        return fail(path + "/" + k, "must be a number (the draft-4 boolean form is not supported)");
      const double x = v.get<double>();
      if (!(std::fabs(x) <= static_cast<double>(kMaxBound)))
        return fail(path + "/" + k,
                    fmt::format("{} is outside the supported range ±{}", v.dump(), kMaxBound));
      const std::string key = k;
      if (key == "minimum" || key == "exclusiveMinimum") {
        const auto b = static_cast<int64_t>(key == "minimum" ? std::ceil(x) : std::floor(x) + 1);
        lo = has_lo ? std::max(lo, b) : b;
        has_lo = true;
      } else {
        const auto b = static_cast<int64_t>(key == "maximum" ? std::floor(x) : std::ceil(x) - 1);
        hi = has_hi ? std::min(hi, b) : b;
        has_hi = true;
      }
    }
    if (!has_lo && !has_hi) return use("integer");
    if (has_lo && has_hi && lo > hi) return fail(path, "no integer lies within the bounds");
    std::vector<std::string> alts;
    // Non-negative part: [max(lo, 0), hi].
    if (!has_hi || hi >= 0)
      alts.push_back(nonneg_range(has_lo ? std::max<int64_t>(lo, 0) : 0, has_hi ? hi : -1));
    // Negative part: -[max(1, -hi), -lo].
    if (!has_lo || lo < 0) {
      const int64_t from = has_hi ? std::max<int64_t>(1, -std::min<int64_t>(hi, -1)) : 1;
      alts.push_back("\"-\" " + nonneg_range(from, has_lo ? -lo : -1));
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return define(hint, body);
  }

  Expected<std::string> array_rule(const json& s, const std::string& hint,
                                   const std::string& path) {
    std::string item;
    if (!s.contains("items")) {
      item = use("value");
    } else {
      if (s["items"].is_array())
        return fail(path + "/items", "'items' as an array (a tuple) is not supported");
      SUSTAIN_ASSIGN_OR_RETURN(item, visit(s["items"], hint + "-item", path + "/items"));
    }
    int64_t lo = 0, hi = -1;
    if (s.contains("minItems")) {
      SUSTAIN_ASSIGN_OR_RETURN(lo, count(s, "minItems", path));
    }
    if (s.contains("maxItems")) {
      SUSTAIN_ASSIGN_OR_RETURN(hi, count(s, "maxItems", path));
    }
    if (hi >= 0 && hi < lo) return fail(path, "'maxItems' is below 'minItems'");
    const std::string ws = use("ws");
    if (hi == 0) return define(hint, "\"[\" " + ws + " \"]\"");
    const std::string more = fmt::format("( \",\" {} {} {} )", ws, item, ws);
    const int64_t rest_hi = hi < 0 ? -1 : hi - 1;
    if (lo == 0)
      return define(hint, fmt::format("\"[\" {} ( {} {} {}{} )? \"]\"", ws, item, ws, more,
                                      reps(0, rest_hi)));
    return define(
        hint, fmt::format("\"[\" {} {} {} {}{} \"]\"", ws, item, ws, more, reps(lo - 1, rest_hi)));
  }

  // The content of a JSON string (unescaped characters only) that is none
  // of `names`: a trie of the names where each node may end (unless it is a
  // name), take a child, or take any other character and then up to 31 more
  // (extra keys are bounded, so a model cannot write one key forever).
  Expected<std::string> key_not_in(const std::vector<std::string>& names, const std::string& hint) {
    struct Node {
      std::map<uint32_t, size_t> next;
      bool name = false;
    };
    std::vector<Node> trie(1);
    for (const auto& n : names) {
      size_t at = 0;
      bool plain = true;
      std::vector<uint32_t> cps;
      for (size_t i = 0; i < n.size();) {
        const auto c = static_cast<unsigned char>(n[i]);
        const int len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        uint32_t v = len == 1 ? c : c & (0x7F >> len);
        for (int k = 1; k < len && i + k < n.size(); ++k)
          v = (v << 6) | (static_cast<unsigned char>(n[i + k]) & 0x3F);
        i += static_cast<size_t>(len);
        if (v < 0x20 || v == '"' || v == '\\') plain = false;
        cps.push_back(v);
      }
      if (!plain) continue;  // the key grammar cannot write it anyway
      for (uint32_t c : cps) {
        auto it = trie[at].next.find(c);
        if (it == trie[at].next.end()) {
          trie.emplace_back();
          it = trie[at].next.emplace(c, trie.size() - 1).first;
        }
        at = it->second;
      }
      trie[at].name = true;
    }
    const std::string any = use("plain-char");
    std::vector<std::string> rule_names(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) rule_names[i] = reserve(hint + "-key");
    for (size_t i = 0; i < trie.size(); ++i) {
      std::vector<std::string> alts;
      if (!trie[i].name) alts.push_back("\"\"");
      std::string other = "[^\"\\\\\\x00-\\x1F";
      for (const auto& [c, child] : trie[i].next) {
        alts.push_back(fmt::format("[{}] {}", gbnf_class_char(c), rule_names[child]));
        other += gbnf_class_char(c);
      }
      alts.push_back(other + "] " + any + "{0,31}");
      std::string body;
      for (size_t k = 0; k < alts.size(); ++k) body += (k ? " | " : "") + alts[k];
      rules_.push_back({rule_names[i], body});
    }
    return rule_names[0];
  }

  Expected<std::string> object_rule(const json& s, const std::string& hint,
                                    const std::string& path) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props != nullptr && !props->is_object())
      return fail(path + "/properties", "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail(path + "/required", "must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return fail(path + "/required", "must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    const json* addl = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    const bool addl_false = addl != nullptr && addl->is_boolean() && !addl->get<bool>();
    if (props == nullptr && required.empty() && (addl == nullptr || *addl == json(true)))
      return use("object");
    const std::string ws = use("ws");
    struct Prop {
      std::string name, kv;
      bool required;
    };
    std::vector<Prop> list;
    std::vector<std::string> names;
    std::string extra_value;
    if (addl != nullptr && !addl_false) {
      SUSTAIN_ASSIGN_OR_RETURN(extra_value,
                               visit(*addl, hint + "-extra", path + "/additionalProperties"));
    }
    auto add_prop = [&](const std::string& name, const std::string& value) -> Status {
      std::string kv;
      SUSTAIN_ASSIGN_OR_RETURN(
          kv,
          define(hint + "-" + name + "-kv",
                 fmt::format("{} {} \":\" {} {}", gbnf_literal(json(name).dump()), ws, ws, value)));
      list.push_back({name, kv, required.count(name) != 0});
      names.push_back(name);
      return Status::ok();
    };
    if (props != nullptr) {
      for (const auto& [name, sub] : props->items()) {
        std::string value;
        SUSTAIN_ASSIGN_OR_RETURN(value,
                                 visit(sub, hint + "-" + name, path + "/properties/" + name));
        SUSTAIN_TRY(add_prop(name, value));
      }
    }
    for (const auto& r : required) {
      if (props != nullptr && props->contains(r)) continue;
      if (addl_false)
        return fail(path, fmt::format("property '{}' is required, but 'additionalProperties' is "
                                      "false and 'properties' does not list it",
                                      r));
      SUSTAIN_TRY(add_prop(r, extra_value.empty() ? use("value") : extra_value));
    }
    // rest_i: the properties from i on after something was written (each
    // preceded by a comma); first_i: the same with nothing written yet.
    const size_t n = list.size();
    std::string rest_next, first_next;
    if (!extra_value.empty()) {
      std::string key;
      SUSTAIN_ASSIGN_OR_RETURN(key, key_not_in(names, hint));
      std::string extra_kv;
      SUSTAIN_ASSIGN_OR_RETURN(
          extra_kv, define(hint + "-extra-kv", fmt::format("\"\\\"\" {} \"\\\"\" {} \":\" {} {}",
                                                           key, ws, ws, extra_value)));
      SUSTAIN_ASSIGN_OR_RETURN(
          rest_next, define(hint + "-rest", fmt::format("( \",\" {} {} {} )*", ws, extra_kv, ws)));
      SUSTAIN_ASSIGN_OR_RETURN(
          first_next,
          define(hint + "-first", fmt::format("( {} {} {} )?", extra_kv, ws, rest_next)));
    }
    for (size_t i = n; i-- > 0;) {
      const Prop& p = list[i];
      const std::string tail = rest_next.empty() ? "" : " " + rest_next;
      const std::string item = fmt::format("\",\" {} {} {}", ws, p.kv, ws);
      std::string rest_body = p.required ? item + tail : "( " + item + " )?" + tail;
      std::string first_body = p.kv + " " + ws + tail;
      if (!p.required) first_body += " | " + (first_next.empty() ? "\"\"" : first_next);
      std::string rest_i, first_i;
      SUSTAIN_ASSIGN_OR_RETURN(rest_i, define(hint + "-rest", rest_body));
      SUSTAIN_ASSIGN_OR_RETURN(first_i, define(hint + "-first", first_body));
      rest_next = rest_i;
      first_next = first_i;
    }
    return define(hint,
                  fmt::format("\"{{\" {} {} \"}}\"", ws, first_next.empty() ? "" : first_next));
  }

  Expected<std::string> ref(const json& r, const std::string& path) {
    if (!r.is_string()) return fail(path + "/$ref", "must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.empty() || target[0] != '#')
      return fail(
          path + "/$ref",
          fmt::format("'{}' is not a local reference; only '#...' ones are supported", target));
    std::string pointer = target.substr(1);
    const json* at = &root_;
    std::string last = "ref";
    if (!pointer.empty()) {
      json::json_pointer jp;
      try {
        jp = json::json_pointer(pointer);
      } catch (const json::exception&) {
        return fail(path + "/$ref", fmt::format("'{}' is not a valid JSON pointer", target));
      }
      if (!root_.contains(jp))
        return fail(path + "/$ref", fmt::format("'{}' does not resolve", target));
      at = &root_.at(jp);
      last = jp.back();
    }
    // Named before it is visited, so a schema that refers to itself becomes
    // a recursive rule.
    const std::string name = reserve(last);
    refs_[target] = name;
    std::string body;
    SUSTAIN_ASSIGN_OR_RETURN(body, visit(*at, name + "-body", target));
    rules_.push_back({name, body});
    return name;
  }

  static constexpr size_t kMaxRules = 20000;
  static constexpr int kMaxDepth = 64;
  const json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_, taken_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

// "root ::= <name>" and the primitives it needs.
std::string primitive_grammar(const std::string& root) {
  std::string out = "root ::= " + root + "\n";
  std::set<std::string> seen;
  std::function<void(const std::string&)> add = [&](const std::string& name) {
    if (!seen.insert(name).second) return;
    for (const auto& p : primitives())
      if (p.name == name) {
        for (const char* d : p.deps) add(d);
        out += name + " ::= " + p.body + "\n";
      }
  };
  add(root);
  return out;
}

}  // namespace

Expected<std::string> schema_to_gbnf(const json& schema) {
  Converter c(schema);
  return c.run();
}

Expected<Grammar> compile_json_schema(const json& schema) {
  std::string text;
  SUSTAIN_ASSIGN_OR_RETURN(text, schema_to_gbnf(schema));
  auto g = parse_gbnf(text);
  if (!g)
    return Status(Code::kInvalidArgument, "JSON schema: it cannot be turned into a grammar (" +
                                              g.status().message() +
                                              "); a '$ref' that refers to itself before any text?");
  return g;
}

const std::string& json_object_gbnf() {
  static const std::string text = primitive_grammar("object");
  return text;
}

const std::string& json_value_gbnf() {
  static const std::string text = primitive_grammar("value");
  return text;
}

}  // namespace sustain::grammar
